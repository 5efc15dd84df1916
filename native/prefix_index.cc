#include "prefix_index.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "xxh3.h"

namespace pr {

size_t chain_hashes(const uint8_t* data, size_t len, size_t block, uint64_t seed, uint64_t* out) {
  const size_t n = block == 0 ? 0 : len / block;
  uint64_t h = seed;
  for (size_t i = 0; i < n; i++) out[i] = h = xxh3_64(data + i * block, block, h);
  return n;
}

namespace {
uint64_t align64(uint64_t v) { return (v + 63) / 64 * 64; }
}  // namespace

void IndexMutex::lock() {
  if (owner_->h_->mu.lock_repairing()) owner_->clear_all();
}
void IndexMutex::unlock() { owner_->h_->mu.unlock(); }

uint64_t PrefixIndex::max_table(uint32_t node_capacity) {
  uint64_t t = 1024;
  while (t < 2 * (uint64_t{node_capacity} + 1)) t *= 2;  // load at most 1/2 with every node in use
  return t;
}

uint64_t PrefixIndex::area_bytes(uint32_t slot_capacity, uint32_t node_capacity) {
  const uint64_t table = max_table(node_capacity);
  return align64(sizeof(Header)) + align64(uint64_t{slot_capacity} * sizeof(Lru)) +
         align64((uint64_t{node_capacity} + 1) * sizeof(Node)) + 2 * (align64(table * 8) + align64(table * 4));
}

void PrefixIndex::lay_out(void* area) {
  char* p = static_cast<char*>(area);
  const uint64_t table = max_table(node_cap_);
  h_ = reinterpret_cast<Header*>(p);
  p += align64(sizeof(Header));
  lru_ = reinterpret_cast<Lru*>(p);
  p += align64(uint64_t{slot_cap_} * sizeof(Lru));
  nodes_ = reinterpret_cast<Node*>(p);
  p += align64((uint64_t{node_cap_} + 1) * sizeof(Node));
  for (int t = 0; t < 2; t++) {
    keys_[t] = reinterpret_cast<uint64_t*>(p);
    p += align64(table * 8);
    heads_[t] = reinterpret_cast<uint32_t*>(p);
    p += align64(table * 4);
  }
  mutex_.owner_ = this;
}

PrefixIndex::PrefixIndex(void* area, uint32_t slot_capacity, uint32_t node_capacity, bool init)
    : slot_cap_(slot_capacity), node_cap_(node_capacity) {
  lay_out(area);
  // Zeroed memory is an empty index: only the mutex needs setting up.
  if (init) h_->mu.init();
}

PrefixIndex::PrefixIndex(uint32_t slot_capacity, uint32_t node_capacity) : slot_cap_(slot_capacity), node_cap_(node_capacity) {
  own_bytes_ = area_bytes(slot_capacity, node_capacity);
  own_area_ = ::mmap(nullptr, own_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (own_area_ == MAP_FAILED) std::abort();
  lay_out(own_area_);
  h_->mu.init();
}

PrefixIndex::~PrefixIndex() {
  if (own_area_ != nullptr) ::munmap(own_area_, own_bytes_);
}

void PrefixIndex::clear_all() {
  h_->requests = 0;
  h_->recent = 0;
  h_->sent_all = 0;
  h_->node_count = 0;
  h_->free_head = kNil;
  h_->table_size = 0;
  h_->table = 0;
  h_->used = 0;
  for (uint32_t s = 0; s < slot_cap_; s++) {
    const uint32_t capacity = lru_[s].capacity;
    lru_[s] = Lru();
    lru_[s].capacity = capacity;
  }
}

uint32_t PrefixIndex::new_node() {
  if (h_->free_head != kNil) {
    const uint32_t n = h_->free_head;
    h_->free_head = nodes_[n].next;
    return n;
  }
  if (h_->node_count >= node_cap_) return kNil;
  return ++h_->node_count;
}

double PrefixIndex::decayed(double value, uint64_t since) const {
  return since == h_->requests ? value : value * std::exp2(-static_cast<double>(h_->requests - since) / kCommonHalfLife);
}

size_t PrefixIndex::find_bucket(uint64_t h) const {
  if (h_->table_size == 0) return SIZE_MAX;
  const size_t mask = h_->table_size - 1;
  const uint64_t* keys = this->keys();
  const uint32_t* heads = this->heads();
  for (size_t b = static_cast<size_t>(h * 0x9E3779B97F4A7C15ULL >> 20) & mask;; b = (b + 1) & mask) {
    if (heads[b] == kNil) return SIZE_MAX;
    if (keys[b] == h) return b;
  }
}

// Rehashes into the other table, twice the size (the first table: 1024 buckets).
void PrefixIndex::grow() {
  const uint64_t* old_keys = keys();
  const uint32_t* old_heads = heads();
  const size_t old_size = h_->table_size;
  const size_t size = old_size == 0 ? 1024 : old_size * 2;
  if (size > max_table(node_cap_)) return;  // cannot happen: the node pool bounds the buckets in use
  const uint32_t next = old_size == 0 ? h_->table : 1 - h_->table;
  std::memset(keys_[next], 0, size * 8);
  std::memset(heads_[next], 0, size * 4);
  h_->table = next;
  h_->table_size = size;
  h_->used = 0;
  for (size_t i = 0; i < old_size; i++) {
    if (old_heads[i] == kNil) continue;
    const size_t b = claim_bucket(old_keys[i]);
    heads()[b] = old_heads[i];
  }
}

size_t PrefixIndex::claim_bucket(uint64_t h) {
  if (2 * (h_->used + 1) > h_->table_size) grow();  // load at most 1/2
  const size_t mask = h_->table_size - 1;
  uint64_t* keys = this->keys();
  uint32_t* heads = this->heads();
  for (size_t b = static_cast<size_t>(h * 0x9E3779B97F4A7C15ULL >> 20) & mask;; b = (b + 1) & mask) {
    if (heads[b] == kNil) {
      keys[b] = h;
      h_->used++;
      return b;  // the caller links a node in
    }
    if (keys[b] == h) return b;
  }
}

void PrefixIndex::erase_bucket(size_t b) {
  const size_t mask = h_->table_size - 1;
  uint64_t* keys_ = this->keys();
  uint32_t* heads_ = this->heads();
  heads_[b] = kNil;
  h_->used--;
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
  bool counting = h_->recent > 0;
  const uint32_t* heads_ = this->heads();
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
    if (counting && sent >= kCommonMin && sent >= common_share * h_->recent) common = i + 1;
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
  uint32_t* heads_ = this->heads();
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
  nodes_[n].next = h_->free_head;
  h_->free_head = n;
}

double PrefixIndex::sent(uint32_t slot) const {
  if (!lru_ok(slot)) return 0;
  return lru_[slot].sent * std::exp2(-static_cast<double>(h_->requests - lru_[slot].sent_at) / kSentHalfLife);
}

double PrefixIndex::churn(uint32_t slot) const {
  if (!lru_ok(slot)) return 0;
  const Lru& l = lru_[slot];
  return l.churn * std::exp2(-static_cast<double>(h_->requests - l.churn_at) / kChurnHalfLife);
}

void PrefixIndex::insert(uint32_t slot, const uint64_t* hashes, size_t n) {
  if (!lru_ok(slot) || lru_[slot].capacity == 0) return;
  size_t fresh = 0;
  h_->requests++;
  h_->recent = h_->recent * std::exp2(-1.0 / kCommonHalfLife) + 1;
  h_->sent_all = h_->sent_all * std::exp2(-1.0 / kSentHalfLife) + 1;
  for (size_t k = n; k-- > 0;) {  // last block first: block 0 ends up most recent
    const uint64_t h = hashes[k];
    uint32_t found = kNil;
    const size_t at = find_bucket(h);
    if (at != SIZE_MAX)
      for (uint32_t node = heads()[at]; node != kNil; node = nodes_[node].same)
        if (nodes_[node].slot == slot) { found = node; break; }
    if (found != kNil) {
      Node& x = nodes_[found];
      x.sent = decayed(x.sent, x.at) + 1;
      x.at = h_->requests;
      unlink(found);
      push_front(found);
      continue;
    }
    // The pool bounds the whole index: when it is empty this slot makes room from its own
    // least recent blocks; a slot with none leaves the block out.
    uint32_t node = new_node();
    if (node == kNil && lru_[slot].size > 0) {
      evict_one(slot);
      node = new_node();
    }
    if (node == kNil) continue;
    const size_t bucket = claim_bucket(h);  // after any eviction, which moves buckets
    uint32_t* heads = this->heads();
    nodes_[node] = {h, slot, kNil, kNil, heads[bucket], 1, h_->requests};
    heads[bucket] = node;
    push_front(node);
    fresh++;
    if (++lru_[slot].size > lru_[slot].capacity) evict_one(slot);
  }
  Lru& l = lru_[slot];
  l.churn = churn(slot) + static_cast<double>(fresh);
  l.sent = sent(slot) + 1;
  l.sent_at = h_->requests;
  l.churn_at = h_->requests;
}

void PrefixIndex::set_capacity(uint32_t slot, uint32_t blocks) {
  if (!lru_ok(slot)) return;
  lru_[slot].capacity = blocks;
  while (lru_[slot].size > blocks) evict_one(slot);
}

void PrefixIndex::clear_slot(uint32_t slot) {
  if (!lru_ok(slot)) return;
  while (lru_[slot].size > 0) evict_one(slot);
  lru_[slot].capacity = 0;
  lru_[slot].churn = 0;
  lru_[slot].sent = 0;
}

size_t PrefixIndex::entries() {
  size_t n = 0;
  for (uint32_t s = 0; s < slot_cap_; s++) n += lru_[s].size;
  return n;
}

size_t PrefixIndex::memory_bytes() {
  // What is in use: nodes taken from the pool, LRU heads, and the current table's two arrays.
  return h_->node_count * sizeof(Node) + slot_cap_ * sizeof(Lru) + h_->table_size * (sizeof(uint64_t) + sizeof(uint32_t));
}

}  // namespace pr
