#include "ring.h"

#include <algorithm>
#include <cmath>

#include "xxh3.h"

namespace pr {

uint64_t Ring::point_hash(const std::string& id, uint32_t n) {
  // Seeding by n (plus a constant so vnode 0 differs from a plain hash of the id) keeps
  // every point a pure function of (id, n): the table is the same in every process.
  return xxh3_64(id.data(), id.size(), 0x70726566u + static_cast<uint64_t>(n) * 0x9E3779B97F4A7C15ULL);
}

Ring::Ring(std::vector<RingMember> members, uint32_t vnodes_per_weight) : members_(std::move(members)) {
  std::sort(members_.begin(), members_.end(),
            [](const RingMember& a, const RingMember& b) { return a.id < b.id; });
  struct Point { uint64_t hash; uint32_t owner; };
  std::vector<Point> pts;
  size_t total = 0;
  std::vector<uint32_t> counts(members_.size());
  for (size_t m = 0; m < members_.size(); m++) {
    // Clamped so that no weight, however large, overflows the conversion; the TypeScript
    // layer keeps the whole table under 2^24 points anyway.
    double v = std::round(members_[m].weight * vnodes_per_weight);
    counts[m] = !(v >= 1) ? 1 : v > 16777216.0 ? 16777216u : static_cast<uint32_t>(v);
    total += counts[m];
  }
  pts.reserve(total);
  for (size_t m = 0; m < members_.size(); m++)
    for (uint32_t n = 0; n < counts[m]; n++) pts.push_back({point_hash(members_[m].id, n), static_cast<uint32_t>(m)});
  // Ties (astronomically rare) break by member index, itself ordered by id: still order-free.
  std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) {
    return a.hash != b.hash ? a.hash < b.hash : a.owner < b.owner;
  });
  npoints_ = pts.size();
  if (npoints_ == 0) return;  // find() answers 0 without the tables
  bucket_bits_ = 1;
  while (bucket_bits_ < 20 && (size_t{1} << bucket_bits_) < npoints_) bucket_bits_++;
  const size_t nb = size_t{1} << bucket_bits_;
  // Buckets first (a lookup reads one, then the points it names), then points, then owners.
  const size_t bucket_bytes = (nb + 1) * sizeof(uint32_t);
  const size_t point_at = (bucket_bytes + 63) / 64 * 64;
  const size_t owner_at = point_at + npoints_ * sizeof(uint64_t);
  table_bytes_ = owner_at + npoints_ * sizeof(uint16_t);
  pages_ = HotPages(table_bytes_);
  buckets_ = reinterpret_cast<uint32_t*>(pages_.data());
  points_ = reinterpret_cast<uint64_t*>(pages_.data() + point_at);
  owners_ = reinterpret_cast<uint16_t*>(pages_.data() + owner_at);
  for (size_t i = 0; i < npoints_; i++) { points_[i] = pts[i].hash; owners_[i] = static_cast<uint16_t>(pts[i].owner); }
  size_t pos = 0;
  for (size_t b = 0; b < nb; b++) {
    const uint64_t lo = static_cast<uint64_t>(b) << (64 - bucket_bits_);
    while (pos < npoints_ && points_[pos] < lo) pos++;
    buckets_[b] = static_cast<uint32_t>(pos);
  }
  buckets_[nb] = static_cast<uint32_t>(npoints_);
}

PR_HOT size_t Ring::find(uint64_t key) const {
  if (npoints_ == 0) return 0;
  const size_t b = static_cast<size_t>(key >> (64 - bucket_bits_));
  size_t pos = buckets_[b];
  const size_t end = buckets_[b + 1];
  while (pos < end && points_[pos] < key) pos++;
  return pos == npoints_ ? 0 : pos;
}

int Ring::index_of(const std::string& id) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), id,
                             [](const RingMember& m, const std::string& v) { return m.id < v; });
  return it != members_.end() && it->id == id ? static_cast<int>(it - members_.begin()) : -1;
}

size_t Ring::memory_bytes() const {
  size_t ids = 0;
  for (const auto& m : members_) ids += sizeof(RingMember) + m.id.capacity();
  return sizeof(*this) + ids + table_bytes_;
}

}  // namespace pr
