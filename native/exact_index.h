// Which blocks each instance's engine really holds, as its vLLM KV-cache events report them
// (BlockStored, BlockRemoved, AllBlocksCleared), keyed by the router's own chained hash over
// token ids so a request and an engine's events meet on one chain whatever hash the engine
// uses. The approximate prefix index (prefix_index.h) guesses from where prompts were sent;
// this one knows, for the instances whose events arrive.
//
// Per slot: the engine's hashes per tier (GPU, offloaded) mapped to router hashes, so a
// BlockRemoved, which names only engine hashes, can be applied. One table maps a router hash
// to the (slot, tier) pairs holding it, each with a reference count (two engine hashes may
// stand for one router hash: the same tokens stored twice), so matching a request costs one
// lookup per block whatever the fleet size. That table is on the pick's path: open addressing
// with the first holder in the bucket, so a block most often costs one cache miss, and the
// buckets of blocks ahead can be prefetched (a std::unordered_map of vectors took three).
//
// Pending: blocks of a prompt routed to a slot that its engine has not reported yet. They
// count as held until they expire or the engine's BlockStored of the same router hash turns
// them real, so a second identical prompt follows the first in the time before any event.
//
// Process-private (events arrive per process, and a std container cannot live in the shared
// region). Not thread-safe by itself: every method expects mutex() held, so that a pick can
// match and then record its pending blocks under one discipline.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace pr {

// The router's hashes of the full blocks of `ntokens` token ids: each id as 4 little-endian
// bytes, blocks of block_size ids, XXH3-64 chained from `seed` (chain_hashes). `out` holds
// ntokens / block_size entries; returns how many were written.
size_t exact_hashes(const uint32_t* tokens, size_t ntokens, uint32_t block_size, uint64_t seed, uint64_t* out);

enum class ExactTier : uint8_t { Gpu = 0, Offloaded = 1, Pending = 2 };

// Per slot, what a match found: the leading run of blocks held in any tier, split by the tier
// that holds each block best (GPU, then pending, then offloaded).
struct ExactLead {
  uint32_t lead = 0;
  uint32_t gpu = 0;
  uint32_t pending = 0;
  uint32_t offloaded = 0;
  uint8_t best = 0;  // rank of the last lead block's best holder (see exact_index.cc)
};

// Scratch for match(), indexed by slot; reset() zeroes only the slots a match touched.
struct ExactMatch {
  std::vector<ExactLead> by_slot;
  std::vector<uint32_t> touched;
  void ensure(size_t slots) {
    if (by_slot.size() < slots) by_slot.resize(slots);
  }
  void reset() {
    for (uint32_t s : touched) by_slot[s] = ExactLead();
    touched.clear();
  }
};

enum class ExactView : uint8_t { None = 0, Fresh = 1, Stale = 2 };

struct ExactSlotInfo {
  ExactView view = ExactView::None;
  size_t gpu = 0, offloaded = 0, pending = 0;
};

struct ExactStats {
  size_t entries = 0, memory_bytes = 0;
  uint64_t dropped = 0, orphans = 0;
};

class ExactIndex {
  struct Holder;

 public:
  static constexpr uint32_t kDefaultCapacity = 2097152;
  // Store results below zero (the TS layer names them).
  static constexpr int64_t kOrphan = -1;        // the parent's engine hash is unknown: nothing stored
  static constexpr int64_t kCapacity = -4;      // the index is full: some or all blocks were dropped
  // The engine block sizes the index takes (exact_block_size, and every event's block size).
  static constexpr uint32_t kMinBlockSize = 1, kMaxBlockSize = 1024;

  explicit ExactIndex(uint32_t slot_capacity) : views_(slot_capacity) {}
  ExactIndex(const ExactIndex&) = delete;
  ExactIndex& operator=(const ExactIndex&) = delete;

  std::mutex& mutex() { return mu_; }

  // A BlockStored: blocks with engine hashes `engine[0..n)` and tokens `tokens[0..n*block_size)`
  // go to `slot` in `tier` (Gpu or Offloaded). The chain starts at the parent's router hash
  // when `parent` is non-null (the parent must be known in either tier, else kOrphan), else at
  // `seed`. `capacity` bounds the total entries. Returns the blocks recorded, or kOrphan /
  // kCapacity (the blocks that fit are recorded all the same).
  int64_t store(uint32_t slot, const uint64_t* parent, const uint64_t* engine, size_t n, const uint32_t* tokens, uint32_t block_size,
                uint64_t seed, ExactTier tier, size_t capacity);
  // A BlockRemoved: returns how many of the engine hashes the slot held in that tier.
  size_t remove(uint32_t slot, const uint64_t* engine, size_t n, ExactTier tier);
  // AllBlocksCleared: every block of the slot, pending ones too; its view flags stay.
  void clear(uint32_t slot);
  // Whether events are configured for the slot (has_view) and whether they can be trusted
  // (not stale). None also empties the slot: it has no view to keep.
  void set_view(uint32_t slot, ExactView v);
  // The slot's member left, or the slot now names another instance: it starts empty, no view.
  void forget(uint32_t slot);

  // Leading blocks per slot for a request's router hashes (see ExactLead); fills `out`
  // (ensure()d by the caller, reset() by it afterwards). Pending blocks expired at `now` do not
  // count.
  void match(const uint64_t* hashes, size_t n, double now, ExactMatch& out);
  // Records, as pending on `slot` until now + pending_ms, the blocks of hashes it does not hold.
  void add_pending(uint32_t slot, const uint64_t* hashes, size_t n, double now, double pending_ms, size_t capacity);

  bool fresh(uint32_t slot) const {
    const View* v = slot < views_.size() ? views_[slot].get() : nullptr;
    return v != nullptr && v->view == ExactView::Fresh;
  }
  // Any fresh view at all: when none is, a pick skips the exact path altogether.
  bool any_fresh() const { return fresh_views_ > 0; }
  // Pending counts as of the latest `now` the index has seen.
  ExactSlotInfo info(uint32_t slot);
  ExactStats stats() const;

 private:
  struct Holder {
    double expiry;       // pending only
    uint32_t slot;
    uint32_t refs : 30;  // engine hashes of this slot and tier that map here (1 for pending)
    uint32_t tier : 2;   // an ExactTier
    ExactTier kind() const { return static_cast<ExactTier>(tier); }
  };
  // A router hash and its first holder; the others in extras_, linked from `more`.
  struct Bucket {
    uint64_t hash;
    Holder first;
    uint32_t more;  // 1 + index into extras_, 0: no more
    uint32_t used;
  };
  struct Extra {
    Holder h;
    uint32_t next;  // as Bucket::more; the free list links through it too
  };
  static constexpr size_t kNone = SIZE_MAX;
  struct View {
    ExactView view = ExactView::None;
    std::unordered_map<uint64_t, uint64_t> engine[2];  // per tier: engine hash -> router hash
    // Copies beyond the first of a block stored again under the same hash: vLLM keeps
    // duplicate blocks (two requests computing one prefix at once) and reports each copy's
    // store and each copy's removal, so the block is held until its last copy goes.
    std::unordered_map<uint64_t, uint32_t> copies[2];
    size_t pending = 0;
  };
  struct Expiry {
    double at;
    uint32_t slot;
    uint64_t hash;
  };

  View& view(uint32_t slot);
  // The table: the bucket of h or kNone; a new bucket with `first` (h must be absent).
  size_t home(uint64_t h) const { return static_cast<size_t>((h * 0x9E3779B97F4A7C15ULL) >> 32) & (buckets_.size() - 1); }
  size_t find(uint64_t h) const;
  void insert(uint64_t h, const Holder& first);
  void erase_bucket(size_t b);
  void grow();
  // The holder of (slot, tier) in bucket b, or null.
  Holder* holder_of(size_t b, uint32_t slot, ExactTier tier);
  void push_holder(uint64_t h, const Holder& x);
  // Removes the holder of (slot, tier) from h's bucket (the bucket goes with its last one).
  void remove_holder(size_t b, uint32_t slot, ExactTier tier);
  template <typename F>
  void for_each_holder(const Bucket& b, F f) const {
    f(b.first);
    for (uint32_t m = b.more; m != 0; m = extras_[m - 1].next) f(extras_[m - 1].h);
  }
  // One more (or one fewer) engine hash of slot/tier for router hash r. A real holder replaces
  // the slot's pending one.
  void add_ref(uint64_t r, uint32_t slot, ExactTier tier);
  void drop_ref(uint64_t r, uint32_t slot, ExactTier tier);
  // Removes the slot's pending holder of r, if any (with `at` >= 0: only one expiring then).
  bool drop_pending(uint64_t r, uint32_t slot, double at);
  // Expired pending entries leave, oldest first; the FIFO is rebuilt when most of it is stale.
  void purge(double now);
  // The index is full: the oldest pending entry (a guess) makes room for a reported block.
  bool evict_pending();
  void empty_slot(uint32_t slot);

  std::mutex mu_;
  std::vector<std::unique_ptr<View>> views_;  // by slot, made on first use
  std::vector<Bucket> buckets_;  // a power of two, at most 3/4 used; empty until the first
  size_t used_ = 0;
  std::vector<Extra> extras_;
  uint32_t free_extra_ = 0;  // 1 + index of a free Extra, 0: none
  std::deque<Expiry> expiries_;  // pending entries in the order they were made
  size_t entries_ = 0;           // engine hashes held, plus pending entries
  size_t pending_ = 0;
  size_t fresh_views_ = 0;
  uint64_t dropped_ = 0, orphans_ = 0;
  double last_now_ = 0;
  std::vector<uint64_t> scratch_;
};

}  // namespace pr
