// Router state shared by every thread that opens it: snapshots (membership, groups and routing
// parameters, published together by one atomic pointer), per-instance counters, and the
// longest_prefix index.
//
// Locking: pick() reads its snapshot under a hazard pointer and updates counters with atomics;
// for random, least_outstanding_requests and prefix_aware it takes no lock. longest_prefix
// does take one: the prefix index's mutex, for the match and the insert of each pick (its
// hash table and LRU lists are not lock-free). Publication (configure, set_instances) and the
// freeing of a drained slot serialise on a writer mutex.
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
#include "snapshot.h"

namespace pr {

constexpr uint32_t kMaxMembers = 4096;  // ring owners are 16-bit; slots hold members plus draining ones
constexpr uint32_t kMaxReaders = 128;   // handles (one per thread that opened the router) at once

struct PickResult {
  int32_t slot = -1;  // -1: no eligible instance (see no_group)
  uint32_t generation = 0;
  bool overflow = false;
  bool no_group = false;  // the group asked for is served by no instance
  uint32_t prefill = 0;   // blocks added to the slot's queued prefill: give them back by first_token or release
};

struct InstanceInfo { std::string id; double weight; uint32_t in_flight; std::vector<std::string> groups; uint64_t prefill; };

class RouterState;

// A snapshot held for the length of one pick, so that every parameter the caller reads to
// prepare the request (prefix length, block size) comes from the same publication as the pick.
class SnapshotGuard {
 public:
  SnapshotGuard(RouterState& st, int reader);
  ~SnapshotGuard();
  SnapshotGuard(const SnapshotGuard&) = delete;
  SnapshotGuard& operator=(const SnapshotGuard&) = delete;
  const Snapshot& snap() const { return *snap_; }
  const RoutingParams& params() const { return snap_->params; }

 private:
  RouterState& st_;
  int reader_;
  const Snapshot* snap_;
};

class RouterState {
 public:
  RouterState(uint32_t vnodes_per_weight, uint32_t slot_capacity);
  ~RouterState();
  RouterState(const RouterState&) = delete;
  RouterState& operator=(const RouterState&) = delete;

  // Publishes new routing parameters with the current membership.
  void configure(const RoutingParams& p);
  // Shorthands that change some parameters and keep the others.
  void configure(Strategy s, uint32_t prefix_length, uint32_t threshold);
  // longest_prefix: bytes per block of the routing key, the index's default capacity, and how
  // many ring members from the key a prompt no instance holds may be placed among.
  void configure_index(uint32_t block_bytes, uint32_t default_blocks, uint32_t placement_choices = 1);
  RoutingParams params();

  // A reader index protects snapshots while this thread reads them (hazard pointer).
  int acquire_reader();
  void release_reader(int reader);

  // Atomic swap of the membership. Returns an empty string or an error message.
  std::string set_instances(const std::vector<RingMember>& members);

  // key: XXH3 of the prefix, already seeded by the tenant. With a group, only members listing
  // it are candidates: the ring walk skips the others, which is consistent hashing over that
  // subset, while counters stay per instance across groups. For longest_prefix, `blocks` are
  // the key's chained block hashes (chain_hashes) and `anchor_blocks` as in PickInput.
  // `avoid` lists slots the pick must not choose (a retry's earlier tries): the strategy then
  // gives its next choice, as if those members were not in the group.
  PickResult pick(const SnapshotGuard& g, uint64_t key, const std::string* group = nullptr, const uint64_t* blocks = nullptr,
                  size_t nblocks = 0, size_t anchor_blocks = 0, const uint32_t* avoid = nullptr, size_t navoid = 0);
  PickResult pick(int reader, uint64_t key, const std::string* group = nullptr, const uint64_t* blocks = nullptr,
                  size_t nblocks = 0, size_t anchor_blocks = 0);
  // The lease's prefill is over (its first token came back): its blocks leave the queue.
  void first_token(uint32_t slot, uint32_t prefill);
  // Ends a lease; `prefill` is what the pick added and first_token has not given back.
  bool release(uint32_t slot, uint32_t prefill = 0);

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
  friend class SnapshotGuard;
  const Snapshot* enter(int reader);
  void leave(int reader) { hazards_[reader].ptr.store(nullptr, std::memory_order_release); }
  // Publishes `next` (writer_ held): pins its slots, swaps, waits out readers of the old one.
  void publish_locked(Snapshot* next);
  void unpin_and_free(const Snapshot* s);
  void free_slot_locked(uint32_t slot);

  struct alignas(64) Hazard {
    std::atomic<const Snapshot*> ptr{nullptr};
    std::atomic<bool> claimed{false};
  };

  uint32_t vnodes_;
  SlotTable slots_;
  std::atomic<const Snapshot*> current_;
  Hazard hazards_[kMaxReaders];
  PrefixIndex index_;  // longest_prefix only; its own mutex, taken after writer_ when both are

  std::mutex writer_;                // publication, slot allocation and freeing
  std::vector<uint32_t> free_slots_;  // guarded by writer_
  std::vector<bool> slot_used_;       // guarded by writer_
};

}  // namespace pr
