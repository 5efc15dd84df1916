#include "router.h"

#include <algorithm>

#include <thread>
#include <unordered_map>

#include "strategy/strategy.h"

namespace pr {

SnapshotGuard::SnapshotGuard(RouterState& st, int reader) : st_(st), reader_(reader), snap_(st.enter(reader)) {}
SnapshotGuard::~SnapshotGuard() { st_.leave(reader_); }

RouterState::RouterState(uint32_t vnodes_per_weight, uint32_t slot_capacity)
    : vnodes_(vnodes_per_weight), slots_(slot_capacity), index_(slot_capacity), slot_used_(slot_capacity, false) {
  auto* s = new Snapshot();
  s->ring = std::make_shared<const Ring>(std::vector<RingMember>{}, vnodes_);
  current_.store(s, std::memory_order_release);
  free_slots_.reserve(slot_capacity);
  for (uint32_t i = slot_capacity; i > 0; i--) free_slots_.push_back(i - 1);
}

RouterState::~RouterState() { delete current_.load(); }

int RouterState::acquire_reader() {
  for (uint32_t i = 0; i < kMaxReaders; i++) {
    bool expected = false;
    if (hazards_[i].claimed.compare_exchange_strong(expected, true)) return static_cast<int>(i);
  }
  return -1;
}

void RouterState::release_reader(int reader) {
  hazards_[reader].ptr.store(nullptr, std::memory_order_release);
  hazards_[reader].claimed.store(false, std::memory_order_release);
}

const Snapshot* RouterState::enter(int reader) {
  const Snapshot* s = current_.load(std::memory_order_acquire);
  for (;;) {
    hazards_[reader].ptr.store(s, std::memory_order_seq_cst);
    const Snapshot* again = current_.load(std::memory_order_seq_cst);
    if (again == s) return s;
    s = again;
  }
}

RoutingParams RouterState::params() {
  std::lock_guard<std::mutex> lock(writer_);
  return current_.load(std::memory_order_acquire)->params;
}

void RouterState::configure(const RoutingParams& p) {
  std::lock_guard<std::mutex> lock(writer_);
  const Snapshot* cur = current_.load(std::memory_order_acquire);
  auto* next = new Snapshot(*cur);  // shares the ring; copies slots, weights and groups
  next->params = p;
  if (next->params.placement_choices < 1) next->params.placement_choices = 1;
  publish_locked(next);
}

void RouterState::configure(Strategy s, uint32_t prefix_length, uint32_t threshold) {
  RoutingParams p = params();
  p.strategy = s;
  p.prefix_length = prefix_length;
  p.threshold = threshold;
  configure(p);
}

void RouterState::configure_index(uint32_t block_bytes, uint32_t default_blocks, uint32_t placement_choices) {
  RoutingParams p = params();
  p.block_bytes = block_bytes;
  p.index_default = default_blocks;
  p.placement_choices = placement_choices;
  configure(p);
}

void RouterState::free_slot_locked(uint32_t slot) {
  if (!slot_used_[slot]) return;
  {
    std::lock_guard<std::mutex> l(index_.mutex());
    index_.clear_slot(slot);
  }
  slot_used_[slot] = false;
  slots_[slot].id.clear();
  free_slots_.push_back(slot);
}

void RouterState::unpin_and_free(const Snapshot* s) {
  for (uint32_t slot : s->slot_of) {
    uint64_t after = slots_[slot].word.fetch_sub(kPin, std::memory_order_acq_rel) - kPin;
    if (after == 0) free_slot_locked(slot);
  }
}

void RouterState::publish_locked(Snapshot* next) {
  for (uint32_t slot : next->slot_of) slots_[slot].word.fetch_add(kPin, std::memory_order_acq_rel);
  {
    std::lock_guard<std::mutex> l(index_.mutex());
    for (size_t i = 0; i < next->slot_of.size(); i++) {
      const uint32_t b = next->ring->member(i).index_blocks;
      index_.set_capacity(next->slot_of[i], b == 0 ? next->params.index_default : b);
    }
  }
  const Snapshot* old = current_.exchange(next, std::memory_order_seq_cst);
  // Readers hold a snapshot for the length of one pick (microseconds), so waiting them out
  // here is cheap and lets the old one go right away.
  for (uint32_t i = 0; i < kMaxReaders; i++)
    while (hazards_[i].ptr.load(std::memory_order_seq_cst) == old) std::this_thread::yield();
  unpin_and_free(old);
  delete old;
}

std::string RouterState::set_instances(const std::vector<RingMember>& members) {
  if (members.size() > kMaxMembers) return "at most 4096 instances";
  {
    std::unordered_map<std::string, int> seen;
    for (const auto& m : members)
      if (seen[m.id]++) return "duplicate instance id '" + m.id + "'";
  }
  std::lock_guard<std::mutex> lock(writer_);
  // Live slots by id, members and draining alike: an instance removed and re-added while
  // its leases drain gets its old counter back.
  std::unordered_map<std::string, uint32_t> live;
  for (uint32_t i = 0; i < slots_.capacity(); i++)
    if (slot_used_[i]) live.emplace(slots_[i].id, i);
  size_t needed = 0;
  for (const auto& m : members) needed += live.count(m.id) ? 0 : 1;
  if (needed > free_slots_.size()) return "no free instance slots (too many instances draining)";

  auto* snap = new Snapshot();
  snap->ring = std::make_shared<const Ring>(members, vnodes_);
  snap->params = current_.load(std::memory_order_acquire)->params;
  const Ring& ring = *snap->ring;
  snap->slot_of.resize(ring.member_count());
  snap->cum_weight.resize(ring.member_count());
  double sum = 0;
  for (size_t i = 0; i < ring.member_count(); i++) {
    const RingMember& m = ring.member(i);
    uint32_t slot;
    auto it = live.find(m.id);
    if (it != live.end()) {
      slot = it->second;
    } else {
      slot = free_slots_.back();
      free_slots_.pop_back();
      slot_used_[slot] = true;
      slots_[slot].id = m.id;
      slots_[slot].prefill.store(0, std::memory_order_relaxed);
      slots_[slot].generation.fetch_add(1, std::memory_order_relaxed);
    }
    snap->slot_of[i] = slot;
    sum += m.weight;
    snap->cum_weight[i] = sum;
    for (const std::string& g : m.groups) {
      auto& bits = snap->groups[g];
      bits.resize((ring.member_count() + 63) / 64);
      bits[i / 64] |= uint64_t{1} << (i % 64);
    }
  }
  publish_locked(snap);
  return {};
}

PickResult RouterState::pick(int reader, uint64_t key, const std::string* group, const uint64_t* blocks, size_t nblocks,
                              size_t anchor_blocks) {
  SnapshotGuard g(*this, reader);
  return pick(g, key, group, blocks, nblocks, anchor_blocks);
}

PickResult RouterState::pick(const SnapshotGuard& g, uint64_t key, const std::string* group, const uint64_t* blocks,
                              size_t nblocks, size_t anchor_blocks, const uint32_t* avoid, size_t navoid) {
  PickResult r;
  const Snapshot& s = g.snap();
  Eligible eligible;
  eligible.count = s.ring->member_count();
  if (group != nullptr) {
    auto it = s.groups.find(*group);
    if (it == s.groups.end()) {
      r.no_group = true;
      return r;
    }
    eligible.bits = it->second.data();
    eligible.count = 0;
    for (uint64_t w : it->second) eligible.count += static_cast<size_t>(__builtin_popcountll(w));
  }
  // Avoiding members narrows the eligible set: a copy of the group's bits (or all members)
  // without them. Only retries pass an avoid list, so the common pick allocates nothing.
  std::vector<uint64_t> narrowed;
  if (navoid > 0 && eligible.count > 0) {
    const size_t members = s.ring->member_count();
    narrowed.assign((members + 63) / 64, 0);
    for (size_t m = 0; m < members; m++) {
      if (!eligible(static_cast<uint32_t>(m))) continue;
      const uint32_t slot = s.slot_of[m];
      if (std::find(avoid, avoid + navoid, slot) != avoid + navoid) continue;
      narrowed[m / 64] |= uint64_t{1} << (m % 64);
    }
    eligible.bits = narrowed.data();
    eligible.count = 0;
    for (uint64_t w : narrowed) eligible.count += static_cast<size_t>(__builtin_popcountll(w));
  }
  if (eligible.count == 0) return r;
  const auto& registry = strategy_registry();
  const uint32_t id = static_cast<uint32_t>(s.params.strategy);
  const RoutingStrategy& impl = (id < registry.size() ? registry[id] : registry[static_cast<size_t>(Strategy::PrefixAware)]).impl;
  PickInput in;
  in.key = key;
  in.blocks = blocks;
  in.nblocks = blocks == nullptr ? 0 : nblocks;
  in.anchor_blocks = anchor_blocks;
  const PickContext ctx{s, slots_, index_, eligible, in};
  const Choice c = impl.pick(ctx);
  const uint32_t slot = s.slot_of[c.member];
  slots_[slot].add_prefill(c.prefill);
  r.slot = static_cast<int32_t>(slot);
  r.generation = slots_[slot].generation.load(std::memory_order_relaxed);
  r.overflow = c.overflow;
  r.prefill = c.prefill;
  return r;
}

void RouterState::first_token(uint32_t slot, uint32_t prefill) {
  if (slot >= slots_.capacity()) return;
  slots_[slot].sub_prefill(prefill);
}

bool RouterState::release(uint32_t slot, uint32_t prefill) {
  if (slot >= slots_.capacity()) return false;
  if (slots_[slot].in_flight() == 0) return false;  // nothing to end: leave the queue alone too
  slots_[slot].sub_prefill(prefill);
  uint64_t after = 0;
  if (!slots_[slot].release(&after)) return false;
  if (after == 0) {  // last lease of a removed instance: its slot can be reused
    std::lock_guard<std::mutex> lock(writer_);
    if (slots_[slot].word.load(std::memory_order_acquire) == 0) free_slot_locked(slot);
  }
  return true;
}

int64_t RouterState::in_flight(int reader, const std::string& id) {
  int64_t result;
  {
    SnapshotGuard g(*this, reader);
    const int idx = g.snap().ring->index_of(id);
    result = idx >= 0 ? static_cast<int64_t>(slots_[g.snap().slot_of[idx]].in_flight()) : -1;
  }
  if (result >= 0) return result;
  std::lock_guard<std::mutex> lock(writer_);
  for (uint32_t i = 0; i < slots_.capacity(); i++)
    if (slot_used_[i] && slots_[i].id == id) return slots_[i].in_flight();
  return -1;
}

std::string RouterState::slot_id(uint32_t slot) {
  std::lock_guard<std::mutex> lock(writer_);
  return slot < slots_.capacity() && slot_used_[slot] ? slots_[slot].id : std::string();
}

std::vector<InstanceInfo> RouterState::instances(int reader) {
  std::vector<InstanceInfo> out;
  SnapshotGuard g(*this, reader);
  const Snapshot& s = g.snap();
  for (size_t i = 0; i < s.ring->member_count(); i++) {
    const RingMember& m = s.ring->member(i);
    const Slot& slot = slots_[s.slot_of[i]];
    out.push_back({m.id, m.weight, slot.in_flight(), m.groups, slot.prefill.load(std::memory_order_relaxed)});
  }
  return out;
}

uint32_t RouterState::slots_in_use() {
  std::lock_guard<std::mutex> lock(writer_);
  return static_cast<uint32_t>(slots_.capacity() - free_slots_.size());
}

size_t RouterState::ring_memory_bytes(int reader) {
  SnapshotGuard g(*this, reader);
  const Snapshot& s = g.snap();
  return s.ring->memory_bytes() + s.slot_of.capacity() * 4 + s.cum_weight.capacity() * 8;
}

size_t RouterState::ring_points(int reader) {
  SnapshotGuard g(*this, reader);
  return g.snap().ring->point_count();
}

}  // namespace pr
