// Router state shared by every thread that opens it: snapshots (membership, groups and routing
// parameters, published together by one atomic pointer), per-instance counters, and the
// longest_prefix index. The counters, parameters and membership live in a Region
// (shared_region.h), which several processes may map: each keeps its own snapshot, rebuilt
// from the region's membership record when the region's version moves.
//
// Why a snapshot that is out of date never leases the wrong instance: the writer rewrites a
// slot (generation, id, index) only while its word is zero, i.e. unpinned by every
// publication and with no lease; it unpins a removed member's slot only after bumping
// members_version. A pick takes its lease (a CAS on the word, acq_rel) and then reads
// members_version: if the CAS came after the unpin it synchronises with it and sees the new
// version, so it gives the lease back and picks again on a fresh snapshot; if it came before,
// the slot still belonged to the instance the snapshot names, and the lease keeps it so.
//
// Locking: pick() reads its snapshot under a hazard pointer and updates counters with atomics;
// for random, least_outstanding_requests and prefix_aware it takes no lock. longest_prefix
// does take one: the prefix index's mutex, for the match and the insert of each pick (its
// hash table and LRU lists are not lock-free), and, when the request brings token ids, the
// exact index's mutex inside it. Publication (configure, set_instances) and the freeing of a
// drained slot serialise on a writer mutex.
//
// The exact index (exact_index.h) is this process's own, outside the region: KV events arrive
// per process. A membership change forgets the views of slots that changed hands after
// members_version moves, under the exact index's mutex, and every write to a view checks
// members_version under that mutex, so events never land on a slot another instance took.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "exact_index.h"
#include "load.h"
#include "prefix_index.h"
#include "ring.h"
#include "shared_region.h"
#include "snapshot.h"
#include "strategy/strategy.h"

namespace pr {

constexpr uint32_t kMaxMembers = 4096;  // ring owners are 16-bit; slots hold members plus draining ones
constexpr uint32_t kMaxReaders = 128;   // handles (one per thread that opened the router) at once

struct PickResult {
  int32_t slot = -1;  // -1: no eligible instance (see no_group)
  uint32_t generation = 0;
  bool overflow = false;
  bool no_group = false;  // the group asked for is served by no instance
  uint32_t prefill = 0;   // blocks added to the slot's queued prefill: give them back by first_token or release
  // What the strategy saw of the chosen instance: the prompt's blocks (the routing key's), how
  // many of them it counted as held there, and whether that came from the instance's KV events.
  uint32_t blocks = 0;
  uint32_t held = 0;
  bool exact = false;
  // The members it would choose next, as slots and their generations (asked for with
  // Alternates::want; no lease is taken on them).
  uint32_t nalternates = 0;
  uint32_t alternate_slot[kMaxAlternates] = {};
  uint32_t alternate_generation[kMaxAlternates] = {};
};

// A request's token ids for the exact view (longest_prefix): the pick hashes them itself, in
// blocks of the snapshot's exact_block_size, from `seed` (the LoRA adapter's and salt's).
struct ExactRequest {
  const uint32_t* tokens = nullptr;
  size_t ntokens = 0;
  uint64_t seed = 0;
  double now = 0;  // ms: pending blocks expire against it
};

// exact_match's answer for one member.
struct ExactMatchRow {
  std::string id;
  ExactSlotInfo info;
  ExactLead lead;
};

struct InstanceInfo {
  std::string id; double weight; uint32_t in_flight; std::vector<std::string> groups; uint64_t prefill;
  uint32_t ext_in_flight; uint64_t ext_prefill;
};

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
  // Moves to the current snapshot: a pick whose snapshot lost the race with a membership
  // change retries on the new one (RouterState::pick); the guard is otherwise read-only.
  void renew() const;

 private:
  RouterState& st_;
  int reader_;
  mutable const Snapshot* snap_;
};

class RouterState {
 public:
  // Process-private state.
  RouterState(uint32_t vnodes_per_weight, uint32_t slot_capacity);
  // Creates a region other processes attach to (Region::create_shared: a memfd when
  // `anonymous` allows one, else a file in `dir`). Null with *err on failure.
  static std::unique_ptr<RouterState> create_shared(const std::string& dir, bool anonymous, uint32_t vnodes_per_weight,
                                                    uint32_t slot_capacity, std::string* err);
  // Opens a region another process created; read-only for membership and parameters.
  static std::unique_ptr<RouterState> attach(const std::string& path, std::string* err);
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

  // The fleet record: text the creator publishes beside the membership, in the region (the
  // one channel attached processes read the instances from). set_fleet returns an empty
  // string or an error; fleet() is false when the record's version is still `since`.
  std::string set_fleet(const std::string& text);
  bool fleet(uint64_t since, uint64_t* version, std::string* text);

  // False for a router attached to another process's region: set_instances and configure
  // belong to the creator.
  bool writable() const { return region_->owner(); }
  const std::string& shared_path() const { return region_->path(); }
  // Takes off the slots' counters every lease and queued prefill that process `pid` holds
  // (it died, or closed without releasing) and frees its row. Returns the leases released.
  uint64_t release_process(int32_t pid);
  // A lease the embedder dropped without releasing, ended by the garbage collector.
  void count_collected() { region_->header()->leases_collected.fetch_add(1, std::memory_order_relaxed); }
  uint64_t leases_collected() const { return region_->header()->leases_collected.load(std::memory_order_relaxed); }

  // key: XXH3 of the prefix, already seeded by the tenant. With a group, only members listing
  // it are candidates: the ring walk skips the others, which is consistent hashing over that
  // subset, while counters stay per instance across groups. For longest_prefix, `blocks` are
  // the key's chained block hashes (chain_hashes) and `anchor_blocks` as in PickInput.
  // `avoid` lists slots the pick must not choose (a retry's earlier tries): the strategy then
  // gives its next choice, as if those members were not in the group.
  // `exact`: the request's token ids, for members with a fresh exact view (exact_index.h).
  // `alternates` (want > 0) asks for the strategy's next choices, ranked without side effects.
  PickResult pick(const SnapshotGuard& g, uint64_t key, const std::string* group = nullptr, const uint64_t* blocks = nullptr,
                  size_t nblocks = 0, size_t anchor_blocks = 0, const uint32_t* avoid = nullptr, size_t navoid = 0,
                  const ExactRequest* exact = nullptr, size_t alternates = 0);
  // The same, with the group named by its id (group_id), or kNoGroup for every member.
  static constexpr uint32_t kNoGroup = UINT32_MAX;
  PickResult pick_by_id(const SnapshotGuard& g, uint64_t key, uint32_t group, const uint64_t* blocks, size_t nblocks,
                        size_t anchor_blocks, const uint32_t* avoid, size_t navoid, const ExactRequest* exact = nullptr,
                        size_t alternates = 0);
  // The id of a group name some membership of this router listed; -1 for a name none did.
  // Ids last as long as the state, so a caller may keep them across membership changes.
  int64_t group_id(const std::string& name);
  PickResult pick(int reader, uint64_t key, const std::string* group = nullptr, const uint64_t* blocks = nullptr,
                  size_t nblocks = 0, size_t anchor_blocks = 0);
  // The lease's prefill is over (its first token came back): its blocks leave the queue.
  void first_token(uint32_t slot, uint32_t prefill);
  // Ends a lease; `prefill` is what the pick added and first_token has not given back.
  bool release(uint32_t slot, uint32_t prefill = 0);

  // In-flight count of an instance, including one removed but still draining; -1 if unknown.
  int64_t in_flight(int reader, const std::string& id);
  // The load at member `id` beyond this router's leases, as its engine reports it (see
  // Slot::ext_in_flight); false if the current membership does not list it. Any process may
  // write it (the slots are shared); the last write wins.
  bool set_engine_load(int reader, const std::string& id, uint32_t in_flight, uint64_t prefill);
  std::string slot_id(uint32_t slot);
  std::vector<InstanceInfo> instances(int reader);
  uint32_t slots_in_use();
  size_t ring_memory_bytes(int reader);
  size_t ring_points(int reader);
  size_t index_entries() { std::lock_guard<IndexMutex> l(index_.mutex()); return index_.entries(); }
  size_t index_memory_bytes() { std::lock_guard<IndexMutex> l(index_.mutex()); return index_.memory_bytes(); }

  // The exact view, by member id; -2 (kNotMember) for an id the current membership does not
  // list. Allowed on attached routers: each process keeps its own exact index.
  static constexpr int64_t kNotMember = -2;
  static constexpr int64_t kBlockSize = -3;  // the event's block size is not exact_block_size
  // A BlockStored (ExactIndex::store); its result, or kNotMember / kBlockSize.
  int64_t exact_store(int reader, const std::string& id, const uint64_t* parent, const uint64_t* engine, size_t n,
                      const uint32_t* tokens, uint32_t block_size, uint64_t seed, ExactTier tier);
  int64_t exact_remove(int reader, const std::string& id, const uint64_t* engine, size_t n, ExactTier tier);
  bool exact_clear(int reader, const std::string& id);
  bool exact_set_view(int reader, const std::string& id, ExactView v);
  bool exact_info(int reader, const std::string& id, ExactSlotInfo* out);
  // A dry run: each member's leading blocks for these tokens, in ring order.
  std::vector<ExactMatchRow> exact_match(int reader, const ExactRequest& req);
  ExactStats exact_stats() {
    std::lock_guard<std::mutex> l(exact_.mutex());
    return exact_.stats();
  }

 private:
  friend class SnapshotGuard;
  RouterState(std::unique_ptr<Region> region);
  const Snapshot* enter(int reader);
  void leave(int reader) { hazards_[reader].ptr.store(nullptr, std::memory_order_release); }
  // Rebuilds this process's snapshot from the region when another process published.
  void refresh();
  // Publishes `next` (writer_ held): pins its slots (when the membership changed), bumps the
  // region's versions, swaps, waits out readers of the old one, unpins the old slots.
  void publish_locked(Snapshot* next, bool members_changed);
  void swap_locked(Snapshot* next);
  // Group bitsets of `snap` (ring and slot_of set), indexed by name and by id; assigns ids to
  // names new to this router (writer_ held).
  void fill_derived(Snapshot* snap);
  // pick and pick_by_id: the group by name (non-null) or by id (kNoGroup: none).
  PickResult pick_among(const SnapshotGuard& g, uint64_t key, const std::string* name, uint32_t id, size_t alternates, const uint64_t* blocks,
                        size_t nblocks, size_t anchor_blocks, const uint32_t* avoid, size_t navoid, const ExactRequest* exact);
  // Runs f(slot) on the exact index, under its mutex, for member `id` of a snapshot that is
  // still current: a membership change clears the views of slots that changed hands (after
  // members_version moves, under the same mutex), so a stale slot is never written.
  template <typename F>
  int64_t with_member(int reader, const std::string& id, F f);
  // After a membership change: slots whose member left, or that another instance took, start
  // with no exact view.
  void forget_exact(const Snapshot& old, const Snapshot& next);
  // The slot's word reached zero: its index entries go (unless the writer took it again).
  void drained(uint32_t slot);
  // Claims a row of the process table for this process (shared regions).
  bool claim_row(std::string* err);
  // Takes everything row `row` (owned by pid) holds off the slots; frees the row.
  uint64_t release_row(uint32_t row, int32_t pid);

  struct alignas(64) Hazard {
    std::atomic<const Snapshot*> ptr{nullptr};
    std::atomic<bool> claimed{false};
  };

  std::unique_ptr<Region> region_;
  RegionHeader* header_;
  uint32_t vnodes_;
  SlotTable slots_;
  HeldCount* held_ = nullptr;  // this process's row of the process table (shared regions only)
  int32_t row_ = -1;
  std::atomic<const Snapshot*> current_;
  Hazard hazards_[kMaxReaders];
  PrefixIndex index_;  // longest_prefix only; its own mutex, taken after writer_ when both are
  ExactIndex exact_;   // process-private; its mutex is taken last (after index_'s in a pick)

  std::mutex writer_;  // this process's publication (creator) or snapshot rebuild (attached)
  std::string fleet_;  // the creator's last set_fleet, rewritten after each membership record (writer_)
  // Group name -> id, append-only: names come from memberships only (never from a pick), so
  // the table holds at most the groups this router has ever served.
  std::mutex names_;
  std::unordered_map<std::string, uint32_t> group_ids_;
};

}  // namespace pr
