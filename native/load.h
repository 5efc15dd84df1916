// Per-instance in-flight counters in stable slots. A slot's 64-bit word packs
// (pins << 32) | in_flight: pins count the published ring snapshots that list the slot,
// in_flight the leases taken on it. The slot is free again exactly when the word drops
// to zero, whichever of "last lease released" or "last snapshot retired" comes second,
// so a lease taken before a membership change always releases the counter it raised.
//
// Slots are plain data with lock-free atomics so that they can live in memory mapped by
// several processes (shared_region.h): no pointers, no heap-owned members.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

namespace pr {

constexpr uint64_t kPin = uint64_t{1} << 32;
constexpr uint64_t kCountMask = kPin - 1;
// Instance ids are at most 1024 UTF-16 units (src/core/options.ts): at most 3 bytes of UTF-8 each.
constexpr uint32_t kMaxIdBytes = 3072;

struct alignas(64) Slot {  // one cache line each: counters of different instances never share one
  std::atomic<uint64_t> word{0};
  std::atomic<uint32_t> generation{0};  // bumped on each reuse, so callers can cache id by (slot, generation)
  // longest_prefix: blocks of prompt routed here whose prefill has not finished (the first
  // token has not come back): the queue a new request would wait behind.
  std::atomic<uint64_t> prefill{0};
  // What the engine reports beyond this router's own leases (requests in flight there from
  // other clients: router replicas, direct traffic), and their queued prefill in blocks, as
  // the last scrape of its metrics put it. Written off the request path; zero without one.
  std::atomic<uint32_t> ext_in_flight{0};
  std::atomic<uint64_t> ext_prefill{0};

  uint32_t in_flight() const { return static_cast<uint32_t>(word.load(std::memory_order_relaxed) & kCountMask); }
  uint32_t external() const { return ext_in_flight.load(std::memory_order_relaxed); }
  // In flight at the instance from every client: own leases plus the engine's excess.
  uint32_t load() const {
    const uint64_t v = uint64_t{in_flight()} + external();
    return v > kCountMask ? static_cast<uint32_t>(kCountMask) : static_cast<uint32_t>(v);
  }
  // Queued prefill at the instance: own routed blocks plus the shared or reported excess.
  uint64_t queued() const { return prefill.load(std::memory_order_relaxed) + ext_prefill.load(std::memory_order_relaxed); }

  // Take a lease only while in_flight < limit; false if the slot is at the limit.
  bool try_acquire(uint32_t limit) {
    uint64_t w = word.load(std::memory_order_relaxed);
    while ((w & kCountMask) < limit)
      if (word.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_relaxed)) return true;
    return false;
  }
  // try_acquire with the limit counting the engine's excess too.
  bool try_acquire_load(uint32_t limit) {
    const uint32_t e = external();
    return e < limit && try_acquire(limit - e);
  }
  void acquire() { word.fetch_add(1, std::memory_order_acq_rel); }

  // False when there is no lease to release (a backstop: the TypeScript lease already
  // guarantees one release per pick). On success *after is the word after the decrement.
  bool release(uint64_t* after) { return release_n(1, after) == 1; }
  // Ends up to n leases (fewer if fewer are counted); returns how many.
  uint64_t release_n(uint64_t n, uint64_t* after) {
    uint64_t w = word.load(std::memory_order_relaxed);
    uint64_t take;
    do {
      take = (w & kCountMask) < n ? (w & kCountMask) : n;
      if (take == 0) return 0;
    } while (!word.compare_exchange_weak(w, w - take, std::memory_order_acq_rel, std::memory_order_relaxed));
    *after = w - take;
    return take;
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

static_assert(std::atomic<uint64_t>::is_always_lock_free, "slot counters must be lock-free to be shared between processes");

// A slot's instance id, kept apart from the counters so that scanning every slot's word
// touches one cache line per slot, not its id's pages. Written only by the router's writer,
// only while the slot's word is zero (no pin, no lease) and before it is pinned and published;
// read only through a published snapshot or a lease.
struct SlotId {
  uint32_t len;
  char bytes[kMaxIdBytes];
};

// A view of the slot and id arrays, which live in the router's region.
class SlotTable {
 public:
  SlotTable(Slot* slots, SlotId* ids, uint32_t capacity) : capacity_(capacity), slots_(slots), ids_(ids) {}
  uint32_t capacity() const { return capacity_; }
  Slot& operator[](uint32_t i) { return slots_[i]; }
  const Slot& operator[](uint32_t i) const { return slots_[i]; }
  std::string id(uint32_t i) const { return std::string(ids_[i].bytes, ids_[i].len); }
  void set_id(uint32_t i, const std::string& s) {
    ids_[i].len = static_cast<uint32_t>(s.size() < kMaxIdBytes ? s.size() : kMaxIdBytes);
    std::memcpy(ids_[i].bytes, s.data(), ids_[i].len);
  }

 private:
  uint32_t capacity_;
  Slot* slots_;
  SlotId* ids_;
};

// Leases and queued prefill one process holds on one slot, so that a process that dies can
// have its share taken off the slot's counters (RouterState::release_process).
struct HeldCount {
  std::atomic<uint64_t> leases{0};
  std::atomic<uint64_t> prefill{0};
  void sub(std::atomic<uint64_t>& c, uint64_t n) {  // saturating, like Slot::sub_prefill
    if (n == 0) return;
    uint64_t v = c.load(std::memory_order_relaxed);
    while (v != 0 && !c.compare_exchange_weak(v, v > n ? v - n : 0, std::memory_order_relaxed)) {
    }
  }
};

}  // namespace pr
