#include "exact_index.h"

#include <algorithm>
#include <cstring>

#include "hot_pages.h"
#include "prefix_index.h"

namespace pr {

namespace {

// How well a tier serves a block, for the split of a lead: a GPU block is reused as is, a
// pending one will be by the time the request runs, an offloaded one must be loaded back.
uint8_t rank(ExactTier t) { return t == ExactTier::Gpu ? 3 : t == ExactTier::Pending ? 2 : 1; }

// Bytes malloc gives a request of n bytes (glibc: 8 bytes of header, 16-byte multiples, at
// least 32): what a node of a std container really costs.
size_t chunk(size_t n) { return std::max<size_t>(32, (n + 8 + 15) / 16 * 16); }

}  // namespace

size_t exact_hashes(const uint32_t* tokens, size_t ntokens, uint32_t block_size, uint64_t seed, uint64_t* out) {
  if (block_size == 0) return 0;
  const size_t bytes = ntokens / block_size * block_size * 4;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  // The hash is over little-endian ids: a big-endian host swaps them into a copy.
  thread_local std::vector<uint32_t> le;
  le.resize(bytes / 4);
  for (size_t i = 0; i < le.size(); i++) le[i] = __builtin_bswap32(tokens[i]);
  return chain_hashes(reinterpret_cast<const uint8_t*>(le.data()), bytes, size_t{block_size} * 4, seed, out);
#else
  return chain_hashes(reinterpret_cast<const uint8_t*>(tokens), bytes, size_t{block_size} * 4, seed, out);
#endif
}

ExactIndex::View& ExactIndex::view(uint32_t slot) {
  auto& v = views_[slot];
  if (!v) v = std::make_unique<View>();
  return *v;
}

size_t ExactIndex::find(uint64_t h) const {
  if (buckets_.empty()) return kNone;
  const size_t mask = buckets_.size() - 1;
  for (size_t b = home(h);; b = (b + 1) & mask) {
    if (!buckets_[b].used) return kNone;
    if (buckets_[b].hash == h) return b;
  }
}

void ExactIndex::grow() {
  std::vector<Bucket> old;
  old.swap(buckets_);
  buckets_.assign(old.empty() ? 1024 : old.size() * 2, Bucket{});
  const size_t mask = buckets_.size() - 1;
  for (const Bucket& b : old) {
    if (!b.used) continue;
    size_t i = home(b.hash);
    while (buckets_[i].used) i = (i + 1) & mask;
    buckets_[i] = b;
  }
}

void ExactIndex::insert(uint64_t h, const Holder& first) {
  if ((used_ + 1) * 4 > buckets_.size() * 3) grow();
  const size_t mask = buckets_.size() - 1;
  size_t b = home(h);
  while (buckets_[b].used) b = (b + 1) & mask;
  buckets_[b] = Bucket{h, first, 0, 1};
  used_++;
}

// Backward-shift deletion: the buckets after b that probed past it move back, so a lookup's
// probe never meets a hole before its key.
void ExactIndex::erase_bucket(size_t b) {
  const size_t mask = buckets_.size() - 1;
  size_t hole = b;
  for (size_t j = (b + 1) & mask; buckets_[j].used; j = (j + 1) & mask) {
    const size_t k = home(buckets_[j].hash);
    // j may fill the hole when its home is not in (hole, j] (cyclically).
    const bool stays = hole <= j ? (hole < k && k <= j) : (hole < k || k <= j);
    if (stays) continue;
    buckets_[hole] = buckets_[j];
    hole = j;
  }
  buckets_[hole].used = 0;
  used_--;
}

ExactIndex::Holder* ExactIndex::holder_of(size_t b, uint32_t slot, ExactTier tier) {
  Bucket& bk = buckets_[b];
  if (bk.first.slot == slot && bk.first.kind() == tier) return &bk.first;
  for (uint32_t m = bk.more; m != 0; m = extras_[m - 1].next)
    if (extras_[m - 1].h.slot == slot && extras_[m - 1].h.kind() == tier) return &extras_[m - 1].h;
  return nullptr;
}

void ExactIndex::push_holder(uint64_t h, const Holder& x) {
  const size_t b = find(h);
  if (b == kNone) {
    insert(h, x);
    return;
  }
  uint32_t e;
  if (free_extra_ != 0) {
    e = free_extra_;
    free_extra_ = extras_[e - 1].next;
  } else {
    extras_.push_back(Extra{});
    e = static_cast<uint32_t>(extras_.size());
  }
  extras_[e - 1] = Extra{x, buckets_[b].more};
  buckets_[b].more = e;
}

void ExactIndex::remove_holder(size_t b, uint32_t slot, ExactTier tier) {
  Bucket& bk = buckets_[b];
  auto release = [&](uint32_t e) {
    extras_[e - 1].next = free_extra_;
    free_extra_ = e;
  };
  if (bk.first.slot == slot && bk.first.kind() == tier) {
    if (bk.more == 0) {
      erase_bucket(b);
      return;
    }
    const uint32_t e = bk.more;
    bk.first = extras_[e - 1].h;
    bk.more = extras_[e - 1].next;
    release(e);
    return;
  }
  for (uint32_t* link = &bk.more; *link != 0; link = &extras_[*link - 1].next) {
    const uint32_t e = *link;
    if (extras_[e - 1].h.slot != slot || extras_[e - 1].h.kind() != tier) continue;
    *link = extras_[e - 1].next;
    release(e);
    return;
  }
}

void ExactIndex::add_ref(uint64_t r, uint32_t slot, ExactTier tier) {
  if (tier != ExactTier::Pending) drop_pending(r, slot, -1);
  const size_t b = find(r);
  if (b != kNone) {
    if (Holder* h = holder_of(b, slot, tier)) {
      h->refs++;
      return;
    }
  }
  Holder x{};
  x.slot = slot;
  x.refs = 1;
  x.tier = static_cast<uint32_t>(tier);
  push_holder(r, x);
}

void ExactIndex::drop_ref(uint64_t r, uint32_t slot, ExactTier tier) {
  const size_t b = find(r);
  if (b == kNone) return;
  Holder* h = holder_of(b, slot, tier);
  if (h == nullptr) return;
  if (--h->refs == 0) remove_holder(b, slot, tier);
}

bool ExactIndex::drop_pending(uint64_t r, uint32_t slot, double at) {
  const size_t b = find(r);
  if (b == kNone) return false;
  const Holder* h = holder_of(b, slot, ExactTier::Pending);
  if (h == nullptr || (at >= 0 && h->expiry != at)) return false;
  remove_holder(b, slot, ExactTier::Pending);
  entries_--;
  pending_--;
  views_[slot]->pending--;
  return true;
}

void ExactIndex::purge(double now) {
  last_now_ = std::max(last_now_, now);
  // Expiries are in creation order, which is expiry order while `now` moves forward and
  // pending_ms stays put; an entry out of order waits for those before it (match() ignores it
  // once expired all the same).
  while (!expiries_.empty() && expiries_.front().at <= now) {
    const Expiry e = expiries_.front();
    expiries_.pop_front();
    drop_pending(e.hash, e.slot, e.at);
  }
  // Entries turned real (or cleared) leave their record behind: drop them when they are most.
  if (expiries_.size() > 2 * pending_ + 1024) {
    std::deque<Expiry> keep;
    for (const Expiry& e : expiries_) {
      const size_t b = find(e.hash);
      const Holder* h = b == kNone ? nullptr : holder_of(b, e.slot, ExactTier::Pending);
      if (h != nullptr && h->expiry == e.at) keep.push_back(e);
    }
    expiries_.swap(keep);
  }
}

bool ExactIndex::evict_pending() {
  while (!expiries_.empty()) {
    const Expiry e = expiries_.front();
    expiries_.pop_front();
    if (drop_pending(e.hash, e.slot, e.at)) return true;
  }
  return false;
}

int64_t ExactIndex::store(uint32_t slot, const uint64_t* parent, const uint64_t* engine, size_t n, const uint32_t* tokens,
                          uint32_t block_size, uint64_t seed, ExactTier tier, size_t capacity) {
  if (slot >= views_.size() || tier == ExactTier::Pending || block_size == 0) return 0;
  View& v = view(slot);
  const int t = static_cast<int>(tier);
  if (parent != nullptr) {
    // The parent may have been reported in the other tier (an offloaded copy's parent still
    // on the GPU, or the reverse).
    auto it = v.engine[t].find(*parent);
    if (it == v.engine[t].end()) {
      it = v.engine[1 - t].find(*parent);
      if (it == v.engine[1 - t].end()) {
        orphans_++;
        return kOrphan;
      }
    }
    seed = it->second;
  }
  if (scratch_.size() < n) scratch_.resize(n);
  const size_t hashed = exact_hashes(tokens, n * block_size, block_size, seed, scratch_.data());
  int64_t recorded = 0;
  bool dropped = false;
  auto& map = v.engine[t];
  for (size_t i = 0; i < hashed; i++) {
    const uint64_t r = scratch_[i];
    auto [it, inserted] = map.try_emplace(engine[i], r);
    if (!inserted) {
      // Stored again: with the same tokens nothing changes; with others (the engine reused
      // the hash) the entry follows the latest report.
      if (it->second != r) {
        drop_ref(it->second, slot, tier);
        it->second = r;
        add_ref(r, slot, tier);
      }
      recorded++;
      continue;
    }
    // The block may turn one of this slot's own pending entries real: no room needed then.
    const bool replaces = drop_pending(r, slot, -1);
    if (!replaces && entries_ >= capacity && !evict_pending()) {
      map.erase(it);
      dropped_++;
      dropped = true;
      continue;
    }
    entries_++;
    add_ref(r, slot, tier);
    recorded++;
  }
  return dropped ? kCapacity : recorded;
}

size_t ExactIndex::remove(uint32_t slot, const uint64_t* engine, size_t n, ExactTier tier) {
  if (slot >= views_.size() || !views_[slot] || tier == ExactTier::Pending) return 0;
  auto& map = views_[slot]->engine[static_cast<int>(tier)];
  size_t removed = 0;
  for (size_t i = 0; i < n; i++) {
    auto it = map.find(engine[i]);
    if (it == map.end()) continue;
    drop_ref(it->second, slot, tier);
    map.erase(it);
    entries_--;
    removed++;
  }
  return removed;
}

void ExactIndex::empty_slot(uint32_t slot) {
  View& v = *views_[slot];
  for (int t = 0; t < 2; t++) {
    for (const auto& [engine, r] : v.engine[t]) drop_ref(r, slot, static_cast<ExactTier>(t));
    entries_ -= v.engine[t].size();
    std::unordered_map<uint64_t, uint64_t>().swap(v.engine[t]);  // gives the buckets back too
  }
  if (v.pending > 0)
    for (const Expiry& e : expiries_)
      if (e.slot == slot) drop_pending(e.hash, slot, -1);
}

void ExactIndex::clear(uint32_t slot) {
  if (slot < views_.size() && views_[slot]) empty_slot(slot);
}

void ExactIndex::set_view(uint32_t slot, ExactView next) {
  if (slot >= views_.size()) return;
  View& v = view(slot);
  if (v.view == ExactView::Fresh) fresh_views_--;
  if (next == ExactView::Fresh) fresh_views_++;
  v.view = next;
  if (next == ExactView::None) empty_slot(slot);
}

void ExactIndex::forget(uint32_t slot) {
  if (slot >= views_.size() || !views_[slot]) return;
  set_view(slot, ExactView::None);
  views_[slot].reset();
}

PR_HOT void ExactIndex::match(const uint64_t* hashes, size_t n, double now, ExactMatch& out) {
  purge(now);
  if (buckets_.empty()) return;
  // The blocks' buckets are known up front: asking for those a few blocks ahead overlaps
  // their cache misses with the work on this one.
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < std::min(n, kAhead); i++) __builtin_prefetch(&buckets_[home(hashes[i])]);
  for (size_t i = 0; i < n; i++) {
    if (i + kAhead < n) __builtin_prefetch(&buckets_[home(hashes[i + kAhead])]);
    const size_t b = find(hashes[i]);
    if (b == kNone) return;
    bool advanced = false;
    for_each_holder(buckets_[b], [&](const Holder& h) {
      if (h.kind() == ExactTier::Pending && h.expiry <= now) return;
      ExactLead& l = out.by_slot[h.slot];
      const uint8_t r = rank(h.kind());
      auto count = [&](uint8_t k) -> uint32_t& { return k == 3 ? l.gpu : k == 2 ? l.pending : l.offloaded; };
      if (l.lead == i) {
        // Chained hashes: block i held means the prefix up to it is the same, but the engine
        // may have evicted an earlier block, so the run must be contiguous from block 0.
        if (i == 0) out.touched.push_back(h.slot);
        l.lead = static_cast<uint32_t>(i + 1);
        l.best = r;
        count(r)++;
        advanced = true;
      } else if (l.lead == i + 1 && r > l.best) {
        count(l.best)--;
        count(r)++;
        l.best = r;
      }
    });
    if (!advanced) return;
  }
}

void ExactIndex::add_pending(uint32_t slot, const uint64_t* hashes, size_t n, double now, double pending_ms, size_t capacity) {
  if (slot >= views_.size() || pending_ms <= 0) return;
  purge(now);
  View& v = view(slot);
  const double at = now + pending_ms;
  for (size_t i = 0; i < n; i++) {
    const size_t b = find(hashes[i]);
    bool held = false;
    if (b != kNone)
      for_each_holder(buckets_[b], [&](const Holder& h) {
        if (h.slot == slot && (h.kind() != ExactTier::Pending || h.expiry > now)) held = true;
      });
    if (held) continue;
    if (entries_ >= capacity) {
      // Guesses never push out what the engine reported.
      dropped_ += n - i;
      return;
    }
    Holder x{};
    x.expiry = at;
    x.slot = slot;
    x.refs = 1;
    x.tier = static_cast<uint32_t>(ExactTier::Pending);
    push_holder(hashes[i], x);
    expiries_.push_back(Expiry{at, slot, hashes[i]});
    entries_++;
    pending_++;
    v.pending++;
  }
}

ExactSlotInfo ExactIndex::info(uint32_t slot) {
  ExactSlotInfo out;
  if (slot >= views_.size() || !views_[slot]) return out;
  purge(last_now_);
  const View& v = *views_[slot];
  out.view = v.view;
  out.gpu = v.engine[0].size();
  out.offloaded = v.engine[1].size();
  out.pending = v.pending;
  return out;
}

ExactStats ExactIndex::stats() const {
  ExactStats s;
  s.entries = entries_;
  s.dropped = dropped_;
  s.orphans = orphans_;
  // The table's arrays; the engine maps' bucket arrays (a pointer each) and nodes (a next
  // pointer and the value, as malloc rounds them).
  size_t bytes = views_.capacity() * sizeof(views_[0]);
  bytes += buckets_.capacity() * sizeof(Bucket) + extras_.capacity() * sizeof(Extra);
  for (const auto& v : views_) {
    if (!v) continue;
    bytes += chunk(sizeof(View));
    for (const auto& m : v->engine)
      bytes += m.bucket_count() * sizeof(void*) + m.size() * chunk(sizeof(void*) + sizeof(std::pair<const uint64_t, uint64_t>));
  }
  bytes += expiries_.size() * sizeof(Expiry);
  s.memory_bytes = bytes;
  return s;
}

}  // namespace pr
