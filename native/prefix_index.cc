#include "prefix_index.h"

#include <algorithm>
#include <cmath>

#include "xxh3.h"

namespace pr {

size_t chain_hashes(const uint8_t* data, size_t len, size_t block, uint64_t seed, uint64_t* out) {
  const size_t n = block == 0 ? 0 : len / block;
  uint64_t h = seed;
  for (size_t i = 0; i < n; i++) out[i] = h = xxh3_64(data + i * block, block, h);
  return n;
}

PrefixIndex::PrefixIndex(uint32_t slot_capacity) : lru_(slot_capacity) {}

double PrefixIndex::decayed(double value, uint64_t since) const {
  return since == requests_ ? value : value * std::exp2(-static_cast<double>(requests_ - since) / kCommonHalfLife);
}

size_t PrefixIndex::find_bucket(uint64_t h) const {
  if (keys_.empty()) return SIZE_MAX;
  const size_t mask = keys_.size() - 1;
  for (size_t b = static_cast<size_t>(h * 0x9E3779B97F4A7C15ULL >> 20) & mask;; b = (b + 1) & mask) {
    if (heads_[b] == kNil) return SIZE_MAX;
    if (keys_[b] == h) return b;
  }
}

void PrefixIndex::grow() {
  std::vector<uint64_t> keys = std::move(keys_);
  std::vector<uint32_t> heads = std::move(heads_);
  const size_t size = keys.empty() ? 1024 : keys.size() * 2;
  keys_.assign(size, 0);
  heads_.assign(size, kNil);
  used_ = 0;
  for (size_t i = 0; i < keys.size(); i++) {
    if (heads[i] == kNil) continue;
    const size_t b = claim_bucket(keys[i]);
    heads_[b] = heads[i];
  }
}

size_t PrefixIndex::claim_bucket(uint64_t h) {
  if (2 * (used_ + 1) > keys_.size()) grow();  // load at most 1/2
  const size_t mask = keys_.size() - 1;
  for (size_t b = static_cast<size_t>(h * 0x9E3779B97F4A7C15ULL >> 20) & mask;; b = (b + 1) & mask) {
    if (heads_[b] == kNil) {
      keys_[b] = h;
      used_++;
      return b;  // the caller links a node in
    }
    if (keys_[b] == h) return b;
  }
}

void PrefixIndex::erase_bucket(size_t b) {
  const size_t mask = keys_.size() - 1;
  heads_[b] = kNil;
  used_--;
  // Backward shift: move later entries of the probe run into the gap when their home is at
  // or before it, so lookups never stop early at a hole.
  size_t gap = b;
  for (size_t j = (b + 1) & mask; heads_[j] != kNil; j = (j + 1) & mask) {
    const size_t home = static_cast<size_t>(keys_[j] * 0x9E3779B97F4A7C15ULL >> 20) & mask;
    if (((j - home) & mask) >= ((j - gap) & mask)) {
      keys_[gap] = keys_[j];
      heads_[gap] = heads_[j];
      heads_[j] = kNil;
      gap = j;
    }
  }
}

size_t PrefixIndex::match(const uint64_t* hashes, size_t n, std::vector<uint32_t>& match, std::vector<uint32_t>& touched,
                          double common_share) {
  size_t common = 0;
  bool counting = recent_ > 0;
  for (size_t i = 0; i < n; i++) {
    const size_t b = find_bucket(hashes[i]);
    if (b == SIZE_MAX) { counting = false; continue; }
    double sent = 0;
    for (uint32_t node = heads_[b]; node != kNil; node = nodes_[node].same) {
      const uint32_t s = nodes_[node].slot;
      if (match[s] == 0) touched.push_back(s);
      match[s] = static_cast<uint32_t>(i + 1);
      if (counting) sent += decayed(nodes_[node].sent, nodes_[node].at);
    }
    if (counting && sent >= kCommonMin && sent >= common_share * recent_) common = i + 1;
    else counting = false;
  }
  return common;
}

void PrefixIndex::unlink(uint32_t n) {
  Node& x = nodes_[n];
  Lru& l = lru_[x.slot];
  if (x.prev != kNil) nodes_[x.prev].next = x.next; else l.head = x.next;
  if (x.next != kNil) nodes_[x.next].prev = x.prev; else l.tail = x.prev;
  x.prev = x.next = kNil;
}

void PrefixIndex::push_front(uint32_t n) {
  Node& x = nodes_[n];
  Lru& l = lru_[x.slot];
  x.prev = kNil;
  x.next = l.head;
  if (l.head != kNil) nodes_[l.head].prev = n;
  l.head = n;
  if (l.tail == kNil) l.tail = n;
}

void PrefixIndex::drop_from_table(uint32_t n) {
  const size_t b = find_bucket(nodes_[n].hash);
  if (b == SIZE_MAX) return;
  if (heads_[b] == n) {
    heads_[b] = nodes_[n].same;
    if (heads_[b] == kNil) erase_bucket(b);
    return;
  }
  for (uint32_t prev = heads_[b]; prev != kNil; prev = nodes_[prev].same) {
    if (nodes_[prev].same == n) {
      nodes_[prev].same = nodes_[n].same;
      return;
    }
  }
}

void PrefixIndex::evict_one(uint32_t slot) {
  const uint32_t n = lru_[slot].tail;
  if (n == kNil) return;
  unlink(n);
  drop_from_table(n);
  lru_[slot].size--;
  free_nodes_.push_back(n);
}

double PrefixIndex::sent(uint32_t slot) const {
  if (slot >= lru_.size()) return 0;
  return lru_[slot].sent * std::exp2(-static_cast<double>(requests_ - lru_[slot].sent_at) / kSentHalfLife);
}

double PrefixIndex::churn(uint32_t slot) const {
  if (slot >= lru_.size()) return 0;
  const Lru& l = lru_[slot];
  return l.churn * std::exp2(-static_cast<double>(requests_ - l.churn_at) / kChurnHalfLife);
}

void PrefixIndex::insert(uint32_t slot, const uint64_t* hashes, size_t n) {
  if (slot >= lru_.size() || lru_[slot].capacity == 0) return;
  size_t fresh = 0;
  requests_++;
  recent_ = recent_ * std::exp2(-1.0 / kCommonHalfLife) + 1;
  sent_all_ = sent_all_ * std::exp2(-1.0 / kSentHalfLife) + 1;
  for (size_t k = n; k-- > 0;) {  // last block first: block 0 ends up most recent
    const uint64_t h = hashes[k];
    const size_t bucket = claim_bucket(h);
    uint32_t found = kNil;
    for (uint32_t node = heads_[bucket]; node != kNil; node = nodes_[node].same)
      if (nodes_[node].slot == slot) { found = node; break; }
    if (found != kNil) {
      Node& x = nodes_[found];
      x.sent = decayed(x.sent, x.at) + 1;
      x.at = requests_;
      unlink(found);
      push_front(found);
      continue;
    }
    uint32_t node;
    if (!free_nodes_.empty()) {
      node = free_nodes_.back();
      free_nodes_.pop_back();
      nodes_[node] = {h, slot, kNil, kNil, heads_[bucket], 1, requests_};
    } else {
      node = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back({h, slot, kNil, kNil, heads_[bucket], 1, requests_});
    }
    heads_[bucket] = node;
    push_front(node);
    fresh++;
    if (++lru_[slot].size > lru_[slot].capacity) evict_one(slot);
  }
  Lru& l = lru_[slot];
  l.churn = churn(slot) + static_cast<double>(fresh);
  l.sent = sent(slot) + 1;
  l.sent_at = requests_;
  l.churn_at = requests_;
}

void PrefixIndex::set_capacity(uint32_t slot, uint32_t blocks) {
  if (slot >= lru_.size()) return;
  lru_[slot].capacity = blocks;
  while (lru_[slot].size > blocks) evict_one(slot);
}

void PrefixIndex::clear_slot(uint32_t slot) {
  if (slot >= lru_.size()) return;
  while (lru_[slot].size > 0) evict_one(slot);
  lru_[slot].capacity = 0;
  lru_[slot].churn = 0;
  lru_[slot].sent = 0;
}

size_t PrefixIndex::entries() {
  size_t n = 0;
  for (const Lru& l : lru_) n += l.size;
  return n;
}

size_t PrefixIndex::memory_bytes() {
  // Nodes, free list, LRU heads, and the hash table's two arrays.
  const size_t table = keys_.capacity() * sizeof(uint64_t) + heads_.capacity() * sizeof(uint32_t);
  return nodes_.capacity() * sizeof(Node) + free_nodes_.capacity() * sizeof(uint32_t) + lru_.capacity() * sizeof(Lru) + table;
}

}  // namespace pr
