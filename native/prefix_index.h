// Which instance has recently been sent which prefix blocks: for each slot, an LRU set of
// chained block hashes, bounded by a per-slot capacity. One hash table maps a block to the
// slots holding it, so matching a request costs one lookup per block whatever the fleet
// size. Used by the longest_prefix strategy; guarded by its own mutex (only that strategy
// takes it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace pr {

// Chained hashes of the full blocks of data: h_i = XXH3(block_i, seed = h_{i-1}), h_{-1} = seed.
// Returns the number of full blocks (written to out, which must hold len / block entries).
size_t chain_hashes(const uint8_t* data, size_t len, size_t block, uint64_t seed, uint64_t* out);

class PrefixIndex {
 public:
  explicit PrefixIndex(uint32_t slot_capacity);

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
  double sent_all() const { return sent_all_; }
  static constexpr double kSentHalfLife = 4096;

  size_t entries();
  size_t memory_bytes();

 private:
  static constexpr uint32_t kNil = 0xFFFFFFFFu;
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

  std::mutex mu_;
  uint64_t requests_ = 0;  // insert() calls
  double recent_ = 0;      // insert() calls, decayed like Node::sent (as of requests_)
  double sent_all_ = 0;    // insert() calls, decayed like Lru::sent
  std::vector<Node> nodes_;
  std::vector<uint32_t> free_nodes_;
  std::vector<Lru> lru_;
  std::vector<uint64_t> keys_;   // bucket -> block hash
  std::vector<uint32_t> heads_;  // bucket -> first node, kNil when the bucket is empty
  size_t used_ = 0;

 public:
  std::mutex& mutex() { return mu_; }
};

}  // namespace pr
