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

size_t PrefixIndex::match(const uint64_t* hashes, size_t n, std::vector<uint32_t>& match, std::vector<uint32_t>& touched,
                          double common_share) {
  size_t common = 0;
  bool counting = recent_ > 0;
  for (size_t i = 0; i < n; i++) {
    auto it = table_.find(hashes[i]);
    if (it == table_.end()) { counting = false; continue; }
    double sent = 0;
    for (uint32_t node : it->second) {
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
  auto it = table_.find(nodes_[n].hash);
  if (it == table_.end()) return;
  auto& v = it->second;
  v.erase(std::remove(v.begin(), v.end(), n), v.end());
  if (v.empty()) table_.erase(it);
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
    auto& nodes_of = table_[h];
    uint32_t found = kNil;
    for (uint32_t node : nodes_of)
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
      nodes_[node] = {h, slot, kNil, kNil, 1, requests_};
    } else {
      node = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back({h, slot, kNil, kNil, 1, requests_});
    }
    nodes_of.push_back(node);  // (nodes_of stays valid: no rehash since table_[h])
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
  // Nodes, free list, LRU heads, and the hash table: its buckets, nodes and per-key vectors.
  const size_t table = table_.bucket_count() * sizeof(void*) +
                       table_.size() * (sizeof(std::pair<const uint64_t, std::vector<uint32_t>>) + 2 * sizeof(void*) + 2 * sizeof(uint32_t));
  return nodes_.capacity() * sizeof(Node) + free_nodes_.capacity() * sizeof(uint32_t) + lru_.capacity() * sizeof(Lru) + table;
}

}  // namespace pr
