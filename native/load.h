// Per-instance in-flight counters in stable slots. A slot's 64-bit word packs
// (pins << 32) | in_flight: pins count the published ring snapshots that list the slot,
// in_flight the leases taken on it. The slot is free again exactly when the word drops
// to zero, whichever of "last lease released" or "last snapshot retired" comes second,
// so a lease taken before a membership change always releases the counter it raised.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace pr {

constexpr uint64_t kPin = uint64_t{1} << 32;
constexpr uint64_t kCountMask = kPin - 1;

struct alignas(64) Slot {  // one cache line each: counters of different instances never share one
  std::atomic<uint64_t> word{0};
  std::atomic<uint32_t> generation{0};  // bumped on each reuse, so callers can cache id by (slot, generation)
  // longest_prefix: blocks of prompt routed here whose prefill has not finished (the first
  // token has not come back): the queue a new request would wait behind.
  std::atomic<uint64_t> prefill{0};
  std::string id;                       // written only while the slot is free, under the router's writer lock

  uint32_t in_flight() const { return static_cast<uint32_t>(word.load(std::memory_order_relaxed) & kCountMask); }

  // Take a lease only while in_flight < limit; false if the slot is at the limit.
  bool try_acquire(uint32_t limit) {
    uint64_t w = word.load(std::memory_order_relaxed);
    while ((w & kCountMask) < limit)
      if (word.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) return true;
    return false;
  }
  void acquire() { word.fetch_add(1, std::memory_order_acq_rel); }

  // False when there is no lease to release (a backstop: the TypeScript lease already
  // guarantees one release per pick). On success *after is the word after the decrement.
  bool release(uint64_t* after) {
    uint64_t w = word.load(std::memory_order_relaxed);
    do {
      if ((w & kCountMask) == 0) return false;
    } while (!word.compare_exchange_weak(w, w - 1, std::memory_order_acq_rel, std::memory_order_relaxed));
    *after = w - 1;
    return true;
  }

  void add_prefill(uint64_t blocks) { if (blocks != 0) prefill.fetch_add(blocks, std::memory_order_relaxed); }
  // Saturates at zero: a caller that returns more than it added cannot wrap the counter.
  void sub_prefill(uint64_t blocks) {
    if (blocks == 0) return;
    uint64_t p = prefill.load(std::memory_order_relaxed);
    while (!prefill.compare_exchange_weak(p, p > blocks ? p - blocks : 0, std::memory_order_relaxed)) {
    }
  }
};

class SlotTable {
 public:
  explicit SlotTable(uint32_t capacity) : capacity_(capacity), slots_(new Slot[capacity]) {}
  uint32_t capacity() const { return capacity_; }
  Slot& operator[](uint32_t i) { return slots_[i]; }
  const Slot& operator[](uint32_t i) const { return slots_[i]; }

 private:
  uint32_t capacity_;
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace pr
