// Which instance has recently been sent which prefix blocks: for each slot, an LRU set of
// chained block hashes, bounded by a per-slot capacity. One hash table maps a block to the
// slots holding it, so matching a request costs one lookup per block whatever the fleet
// size. Used by the longest_prefix strategy; guarded by its own mutex (only that strategy
// takes it).
//
// Everything lives in one fixed-size area of plain data (the router's region, which other
// processes may map): node references are 1-based so that zeroed memory is an empty index,
// the node pool has a fixed capacity, and the hash table grows by rehashing into the other
// of two tables. Pages are committed as they are first touched, so the capacity costs
// address space rather than memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "shared_region.h"

namespace pr {

// Chained hashes of the full blocks of data: h_i = XXH3(block_i, seed = h_{i-1}), h_{-1} = seed.
// Returns the number of full blocks (written to out, which must hold len / block entries).
size_t chain_hashes(const uint8_t* data, size_t len, size_t block, uint64_t seed, uint64_t* out);

class PrefixIndex;

// The index's process-shared mutex. A holder that died may have left the structure torn:
// the next lock clears the index (it is a cache of where prompts went; routing goes on).
class IndexMutex {
 public:
  void lock();
  void unlock();

 private:
  friend class PrefixIndex;
  PrefixIndex* owner_ = nullptr;
};

class PrefixIndex {
 public:
  // Blocks the pool holds across all slots by default (about 40 bytes each, plus the table).
  static constexpr uint32_t kDefaultNodes = (uint32_t{1} << 22) - 1;  // a table of 2^23 buckets
  // Bytes of area an index of this size needs.
  static uint64_t area_bytes(uint32_t slot_capacity, uint32_t node_capacity);
  // Over `area` (zeroed, area_bytes long); `init`: the caller created it (else it attaches).
  PrefixIndex(void* area, uint32_t slot_capacity, uint32_t node_capacity, bool init);
  // Over a private area of its own (tests).
  explicit PrefixIndex(uint32_t slot_capacity, uint32_t node_capacity = kDefaultNodes);
  ~PrefixIndex();
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  // Longest match per slot: for each i with hashes[i] held by slot s, match[s] = i + 1
  // (chained hashes make block i imply blocks 0..i). `touched` lists the slots set; the
  // caller resets match[s] = 0 for them afterwards. Returns how many leading blocks are
  // common: sent with at least `common_share` of recent requests (decayed by half every
  // kCommonHalfLife requests) and with at least kCommonMin of them, such as a system prompt
  // every request starts with (a conversation's few turns, one after another, are not).
  size_t match(const uint64_t* hashes, size_t n, std::vector<uint32_t>& match, std::vector<uint32_t>& touched,
               double common_share = 2);
  // Records that a request's blocks went to slot (most recent first for block 0, so eviction
  // takes a prefix's tail before its head), evicting the slot's least recent blocks over
  // capacity, and counts the request towards the statistics below.
  void insert(uint32_t slot, const uint64_t* hashes, size_t n);
  void set_capacity(uint32_t slot, uint32_t blocks);
  void clear_slot(uint32_t slot);

  static constexpr double kCommonHalfLife = 256;
  static constexpr double kCommonMin = 16;
  // Blocks newly recorded for a slot, decayed by half every kChurnHalfLife requests: how much
  // new content (prefill, and pressure on its cache) the slot has been given lately.
  double churn(uint32_t slot) const;
  static constexpr double kChurnHalfLife = 8192;
  // Requests recorded for a slot, and for all slots, decayed by half every kSentHalfLife
  // requests: each slot's share of recent traffic.
  double sent(uint32_t slot) const;
  double sent_all() const { return h_->sent_all; }
  static constexpr double kSentHalfLife = 4096;

  size_t entries();
  size_t memory_bytes();
  size_t node_capacity() const { return node_cap_; }

 private:
  friend class IndexMutex;
  static constexpr uint32_t kNil = 0;  // node references are 1-based
  // `sent`: requests with this block routed to this slot, decayed, as of request number `at`.
  // `same`: the next node holding the same block (another slot's), kNil at the end.
  struct Node { uint64_t hash; uint32_t slot; uint32_t prev, next; uint32_t same; double sent; uint64_t at; };
  double decayed(double value, uint64_t since) const;
  struct Lru {
    uint32_t head = kNil, tail = kNil, size = 0, capacity = 0;
    double churn = 0;  // see churn()
    uint64_t churn_at = 0;
    double sent = 0;  // see sent()
    uint64_t sent_at = 0;
  };

  void unlink(uint32_t n);
  void push_front(uint32_t n);
  void evict_one(uint32_t slot);
  void drop_from_table(uint32_t n);
  // Open addressing (linear probing, backward-shift deletion) from block hash to the first
  // node holding it: no allocation per block, which the unordered_map of vectors it replaced
  // did (a 64 KiB prompt that misses is a thousand inserts and a thousand evictions).
  size_t find_bucket(uint64_t h) const;  // bucket holding h, or SIZE_MAX
  size_t claim_bucket(uint64_t h);       // bucket holding h, made if need be
  void erase_bucket(size_t b);
  void grow();

  // The area's header: every field the index changes besides its arrays.
  struct Header {
    RobustMutex mu;
    uint64_t requests;   // insert() calls
    double recent;       // insert() calls, decayed like Node::sent (as of requests)
    double sent_all;     // insert() calls, decayed like Lru::sent
    uint32_t node_count; // nodes ever taken from the pool (node 0 is never used)
    uint32_t free_head;  // free nodes, linked through Node::next
    uint64_t table_size; // buckets in the current table (a power of two), 0 before the first
    uint32_t table;      // which of the two tables is current
    uint64_t used;       // buckets in use
  };
  static uint64_t max_table(uint32_t node_capacity);
  void lay_out(void* area);
  void clear_all();  // the lock found the structure torn
  uint32_t new_node();
  bool lru_ok(uint32_t slot) const { return slot < slot_cap_; }

  void* own_area_ = nullptr;  // the private area of a standalone index
  size_t own_bytes_ = 0;
  Header* h_ = nullptr;
  uint32_t slot_cap_ = 0;
  uint32_t node_cap_ = 0;
  Lru* lru_ = nullptr;
  Node* nodes_ = nullptr;       // node_cap_ + 1 entries
  uint64_t* keys_[2] = {};      // bucket -> block hash, per table
  uint32_t* heads_[2] = {};     // bucket -> first node, kNil when the bucket is empty
  IndexMutex mutex_;
  uint64_t* keys() const { return keys_[h_->table]; }
  uint32_t* heads() const { return heads_[h_->table]; }

 public:
  IndexMutex& mutex() { return mutex_; }
};

}  // namespace pr
