// Router state shared by every thread that opens it: membership (ring snapshots
// published by atomic pointer), per-instance counters, and the routing parameters.
// pick() never takes a lock; membership changes serialise on a writer mutex.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "load.h"
#include "prefix_index.h"
#include "ring.h"

namespace pr {

enum class Strategy : uint32_t { Random = 0, LeastOutstanding = 1, PrefixAware = 2, LongestPrefix = 3 };

constexpr uint32_t kMaxMembers = 4096;  // ring owners are 16-bit; slots hold members plus draining ones
constexpr uint32_t kMaxReaders = 128;   // handles (one per thread that opened the router) at once

struct PickResult {
  int32_t slot = -1;  // -1: no eligible instance (see no_group)
  uint32_t generation = 0;
  bool overflow = false;
  bool no_group = false;  // the group asked for is served by no instance
};

struct InstanceInfo { std::string id; double weight; uint32_t in_flight; std::vector<std::string> groups; };

struct Snapshot;  // ring + the slot of each member

class RouterState {
 public:
  RouterState(uint32_t vnodes_per_weight, uint32_t slot_capacity);
  ~RouterState();
  RouterState(const RouterState&) = delete;
  RouterState& operator=(const RouterState&) = delete;

  void configure(Strategy s, uint32_t prefix_length, uint32_t threshold) {
    strategy_.store(static_cast<uint32_t>(s), std::memory_order_relaxed);
    prefix_length_.store(prefix_length, std::memory_order_relaxed);
    threshold_.store(threshold, std::memory_order_relaxed);
  }
  uint32_t prefix_length() const { return prefix_length_.load(std::memory_order_relaxed); }
  Strategy strategy() const { return static_cast<Strategy>(strategy_.load(std::memory_order_relaxed)); }
  // longest_prefix: bytes per block of the routing key, the index's default capacity, and how
  // many candidates clockwise from the key a prompt no instance holds may be placed among
  // (1: the consistent hash's target, as prefix_aware; more: the least busy of them).
  void configure_index(uint32_t block_bytes, uint32_t default_blocks, uint32_t placement_choices = 1);
  uint32_t block_bytes() const { return block_bytes_.load(std::memory_order_relaxed); }

  // A reader index protects snapshots while this thread reads them (hazard pointer).
  int acquire_reader();
  void release_reader(int reader);

  // Atomic swap of the membership. Returns an empty string or an error message.
  std::string set_instances(const std::vector<RingMember>& members);

  // key: XXH3 of the prefix, already seeded by the tenant. With a group, only members
  // listing it are candidates: the ring walk skips the others, which is consistent hashing
  // over that subset, while counters stay per instance across groups.
  // For longest_prefix, `blocks` are the key's chained block hashes (chain_hashes); the key
  // places the request as prefix_aware does unless another instance holds enough more of the
  // prompt. `anchor_blocks` > 0: the key hashes only that many blocks' worth of stable opening
  // (a chat up to its first user message), and only an instance holding all of it overrides it.
  PickResult pick(int reader, uint64_t key, const std::string* group = nullptr, const uint64_t* blocks = nullptr,
                  size_t nblocks = 0, size_t anchor_blocks = 0);
  bool release(uint32_t slot);

  // In-flight count of an instance, including one removed but still draining; -1 if unknown.
  int64_t in_flight(int reader, const std::string& id);
  std::string slot_id(uint32_t slot);
  std::vector<InstanceInfo> instances(int reader);
  uint32_t slots_in_use();
  size_t ring_memory_bytes(int reader);
  size_t ring_points(int reader);
  size_t index_entries() { std::lock_guard<std::mutex> l(index_.mutex()); return index_.entries(); }
  size_t index_memory_bytes() { std::lock_guard<std::mutex> l(index_.mutex()); return index_.memory_bytes(); }

 private:
  const Snapshot* enter(int reader);
  void leave(int reader) { hazards_[reader].ptr.store(nullptr, std::memory_order_release); }
  void unpin_and_free(const Snapshot* s);
  void free_slot_locked(uint32_t slot);
  // longest_prefix's choice under index_'s lock: a member (and whether that is an overflow
  // from a longer match), or member -1 to place the request at `home`, a ring position, as
  // prefix_aware places it at the key's (same threshold, same overflow walk).
  struct LongestChoice { int32_t member = -1; bool overflow = false; size_t home = 0; };
  LongestChoice longest_match(const Snapshot* s, uint64_t key, const uint64_t* blocks, size_t nblocks,
                              const uint64_t* allowed, uint32_t limit, size_t anchor_blocks);

  struct alignas(64) Hazard {
    std::atomic<const Snapshot*> ptr{nullptr};
    std::atomic<bool> claimed{false};
  };

  uint32_t vnodes_;
  SlotTable slots_;
  std::atomic<const Snapshot*> current_;
  Hazard hazards_[kMaxReaders];
  std::atomic<uint32_t> strategy_{static_cast<uint32_t>(Strategy::PrefixAware)};
  std::atomic<uint32_t> prefix_length_{4096};
  std::atomic<uint32_t> threshold_{10};
  std::atomic<uint32_t> block_bytes_{64};
  std::atomic<uint32_t> index_default_{65536};
  std::atomic<uint32_t> placement_choices_{1};
  PrefixIndex index_;  // longest_prefix only; its own mutex, taken after writer_ when both are

  std::mutex writer_;                // set_instances, slot allocation and freeing
  std::vector<uint32_t> free_slots_;  // guarded by writer_
  std::vector<bool> slot_used_;       // guarded by writer_
};

}  // namespace pr
