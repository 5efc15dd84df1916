#include "router.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <unordered_map>

#include "strategy/strategy.h"

namespace pr {

namespace {

// The membership record in the region: count, then per ring member (in ring order) its slot,
// weight, index capacity, id and groups. Only the creator writes it, under meta.
void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void put_str(std::string& out, const std::string& v) {
  put_u32(out, static_cast<uint32_t>(v.size()));
  out.append(v);
}

std::string serialize(const Snapshot& s) {
  std::string out;
  const Ring& ring = *s.ring;
  put_u32(out, static_cast<uint32_t>(ring.member_count()));
  for (size_t i = 0; i < ring.member_count(); i++) {
    const RingMember& m = ring.member(i);
    put_u32(out, s.slot_of[i]);
    out.append(reinterpret_cast<const char*>(&m.weight), 8);
    put_u32(out, m.index_blocks);
    put_str(out, m.id);
    put_u32(out, static_cast<uint32_t>(m.groups.size()));
    for (const std::string& g : m.groups) put_str(out, g);
  }
  return out;
}

struct Reader {
  const char* p;
  const char* end;
  bool ok = true;
  bool take(void* dst, size_t n) {
    if (!ok || static_cast<size_t>(end - p) < n) return ok = false;
    std::memcpy(dst, p, n);
    p += n;
    return true;
  }
  uint32_t u32() { uint32_t v = 0; take(&v, 4); return v; }
  std::string str() {
    const uint32_t n = u32();
    if (!ok || static_cast<size_t>(end - p) < n) { ok = false; return {}; }
    std::string v(p, n);
    p += n;
    return v;
  }
};

// The most ring points a record read from the region may make (src/core/options.ts holds
// the creator's memberships to the same): past it, a weight in a torn record would have the
// reader build a ring of billions of points.
constexpr double kMaxRecordPoints = 1 << 24;

// False when the record is malformed (it never is unless the region was written by another
// build or torn by a creator that died mid-write): besides its lengths, every field is held to
// what set_instances accepts, since the reader builds its ring and strategies on them.
bool deserialize(const std::string& blob, uint32_t slot_capacity, uint32_t vnodes, std::vector<RingMember>* members,
                 std::vector<uint32_t>* slots) {
  Reader r{blob.data(), blob.data() + blob.size()};
  const uint32_t n = r.u32();
  if (!r.ok || n > kMaxMembers) return false;
  double points = 0;
  std::unordered_map<std::string, int> seen;
  for (uint32_t i = 0; i < n && r.ok; i++) {
    RingMember m;
    const uint32_t slot = r.u32();
    r.take(&m.weight, 8);
    m.index_blocks = r.u32();
    m.id = r.str();
    const uint32_t ng = r.u32();
    for (uint32_t j = 0; j < ng && r.ok; j++) m.groups.push_back(r.str());
    if (!r.ok || slot >= slot_capacity || !(m.weight > 0 && m.weight <= 1e6) || m.index_blocks > (1u << 28) || m.id.size() > kMaxIdBytes ||
        seen[m.id]++ > 0)
      return false;
    points += std::max(1.0, std::round(m.weight * vnodes));
    if (points > kMaxRecordPoints) return false;
    slots->push_back(slot);
    members->push_back(std::move(m));
  }
  return r.ok;
}

const RoutingStrategy* strategy_of(Strategy s) {
  const auto& registry = strategy_registry();
  const uint32_t id = static_cast<uint32_t>(s);
  return &(id < registry.size() ? registry[id] : registry[static_cast<size_t>(Strategy::PrefixAware)]).impl;
}

std::unique_ptr<Region> private_region(uint32_t vnodes, uint32_t slot_capacity) {
  std::string err;
  auto r = Region::create_private(slot_capacity, vnodes, PrefixIndex::kDefaultNodes,
                                  PrefixIndex::area_bytes(slot_capacity, PrefixIndex::kDefaultNodes), &err);
  if (!r) std::abort();  // anonymous memory the size of the slot array: out of address space
  return r;
}

}  // namespace

// Weights and group bitsets, from the ring and slot_of.
void RouterState::fill_derived(Snapshot* snap) {
  const Ring& ring = *snap->ring;
  snap->cum_weight.resize(ring.member_count());
  double sum = 0;
  for (size_t i = 0; i < ring.member_count(); i++) {
    const RingMember& m = ring.member(i);
    sum += m.weight;
    snap->cum_weight[i] = sum;
    for (const std::string& g : m.groups) {
      auto& bits = snap->groups[g];
      bits.resize((ring.member_count() + 63) / 64);
      bits[i / 64] |= uint64_t{1} << (i % 64);
    }
  }
  const size_t words = (ring.member_count() + 63) / 64;
  std::lock_guard<std::mutex> lock(names_);
  snap->group_at.assign(group_ids_.size() + snap->groups.size(), -1);
  snap->group_bits.clear();
  snap->group_bits.reserve(words * snap->groups.size());
  for (const auto& [name, bits] : snap->groups) {
    const uint32_t id = group_ids_.emplace(name, static_cast<uint32_t>(group_ids_.size())).first->second;
    snap->group_at[id] = static_cast<int32_t>(snap->group_bits.size());
    snap->group_bits.insert(snap->group_bits.end(), bits.begin(), bits.end());
  }
}

int64_t RouterState::group_id(const std::string& name) {
  std::lock_guard<std::mutex> lock(names_);
  auto it = group_ids_.find(name);
  return it == group_ids_.end() ? int64_t{-1} : static_cast<int64_t>(it->second);
}

PR_HOT SnapshotGuard::SnapshotGuard(RouterState& st, int reader) : st_(st), reader_(reader), snap_(st.enter(reader)) {}
PR_HOT SnapshotGuard::~SnapshotGuard() { st_.leave(reader_); }
void SnapshotGuard::renew() const {
  st_.leave(reader_);
  snap_ = st_.enter(reader_);
}

RouterState::RouterState(uint32_t vnodes_per_weight, uint32_t slot_capacity)
    : RouterState(private_region(vnodes_per_weight, slot_capacity)) {}

RouterState::RouterState(std::unique_ptr<Region> region)
    : region_(std::move(region)),
      header_(region_->header()),
      vnodes_(header_->vnodes),
      slots_(region_->slots(), region_->ids(), header_->slot_capacity),
      index_(region_->index_area(), header_->slot_capacity, header_->index_nodes, region_->owner()),
      exact_(header_->slot_capacity) {
  auto* s = new Snapshot();
  s->ring = std::make_shared<const Ring>(std::vector<RingMember>{}, vnodes_);
  s->strategy = strategy_of(s->params.strategy);
  current_.store(s, std::memory_order_release);
}

std::unique_ptr<RouterState> RouterState::create_shared(const std::string& dir, bool anonymous, uint32_t vnodes_per_weight,
                                                        uint32_t slot_capacity, std::string* err) {
  auto region = Region::create_shared(dir, anonymous, slot_capacity, vnodes_per_weight, PrefixIndex::kDefaultNodes,
                                      PrefixIndex::area_bytes(slot_capacity, PrefixIndex::kDefaultNodes), err);
  if (!region) return nullptr;
  std::unique_ptr<RouterState> st(new RouterState(std::move(region)));
  if (!st->claim_row(err)) return nullptr;
  return st;
}

std::unique_ptr<RouterState> RouterState::attach(const std::string& path, std::string* err) {
  auto region = Region::attach(path, err);
  if (!region) return nullptr;
  const RegionHeader* h = region->header();
  if (h->index_bytes != PrefixIndex::area_bytes(h->slot_capacity, h->index_nodes)) {
    *err = "'" + path + "' was made by another version of prefix-router";
    return nullptr;
  }
  std::unique_ptr<RouterState> st(new RouterState(std::move(region)));
  if (!st->claim_row(err)) return nullptr;
  return st;
}

bool RouterState::claim_row(std::string* err) {
  const int32_t pid = static_cast<int32_t>(::getpid());
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t row = 0; row < header_->processes; row++) {
      int32_t expected = 0;
      if (header_->pids[row].compare_exchange_strong(expected, pid, std::memory_order_acq_rel)) {
        row_ = static_cast<int32_t>(row);
        held_ = region_->held(row);
        return true;
      }
    }
    // Full: rows of processes that are gone (and nobody released) are taken back first.
    for (uint32_t row = 0; row < header_->processes; row++) {
      const int32_t p = header_->pids[row].load(std::memory_order_acquire);
      if (p != 0 && ::kill(p, 0) != 0 && errno == ESRCH) release_row(row, p);
    }
  }
  *err = "at most " + std::to_string(header_->processes) + " processes can open one shared router";
  return false;
}

RouterState::~RouterState() {
  // Leases this process still holds end with it: nobody could release them later.
  if (row_ >= 0) release_row(static_cast<uint32_t>(row_), static_cast<int32_t>(::getpid()));
  delete current_.load();
}

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

PR_HOT const Snapshot* RouterState::enter(int reader) {
  for (;;) {
    const Snapshot* s = current_.load(std::memory_order_acquire);
    hazards_[reader].ptr.store(s, std::memory_order_seq_cst);
    if (current_.load(std::memory_order_seq_cst) != s) continue;
    // One load per pick: has any process published since this snapshot was built?
    if (s->version == header_->version.load(std::memory_order_acquire)) return s;
    leave(reader);  // refresh() waits out readers of the old snapshot: not this one
    refresh();
  }
}

void RouterState::refresh() {
  std::lock_guard<std::mutex> lock(writer_);
  const Snapshot* cur = current_.load(std::memory_order_acquire);
  // The creator publishes only under writer_, so by now its snapshot is current.
  if (writable() || cur->version == header_->version.load(std::memory_order_acquire)) return;
  RoutingParams params;
  std::string blob;
  uint64_t version, members_version;
  header_->meta.lock_repairing();
  version = header_->version.load(std::memory_order_acquire);
  members_version = header_->members_version.load(std::memory_order_acquire);
  params = header_->params;
  if (members_version != cur->members_version) blob.assign(region_->blob(), std::min(header_->blob_len, kBlobCapacity));
  header_->meta.unlock();

  Snapshot* next;
  std::vector<RingMember> members;
  std::vector<uint32_t> slots;
  const bool torn = members_version != cur->members_version && !deserialize(blob, slots_.capacity(), vnodes_, &members, &slots);
  if (members_version == cur->members_version || torn) {
    next = new Snapshot(*cur);  // parameters only (or an unreadable record: keep the last membership)
    // Under the version it was built from: the stale-lease check then sees that it is out of
    // date, and no pick leases on it (its slots may be other instances' by now) until a
    // record that reads arrives.
    if (torn) members_version = cur->members_version;
    next->torn = torn || cur->torn;
  } else {
    next = new Snapshot();
    next->ring = std::make_shared<const Ring>(members, vnodes_);
    std::unordered_map<std::string, uint32_t> slot_by_id;
    for (size_t i = 0; i < members.size(); i++) slot_by_id.emplace(members[i].id, slots[i]);
    next->slot_of.resize(next->ring->member_count());
    for (size_t i = 0; i < next->ring->member_count(); i++) next->slot_of[i] = slot_by_id[next->ring->member(i).id];
    fill_derived(next);
  }
  next->params = params;
  next->version = version;
  next->members_version = members_version;
  if (members_version != cur->members_version) {
    next->torn = false;
    forget_exact(*cur, *next);
  }
  swap_locked(next);
}

RoutingParams RouterState::params() {
  refresh();  // an attached router reports what its creator last published
  std::lock_guard<std::mutex> lock(writer_);
  return current_.load(std::memory_order_acquire)->params;
}

void RouterState::configure(const RoutingParams& p) {
  if (!writable()) return;
  std::lock_guard<std::mutex> lock(writer_);
  const Snapshot* cur = current_.load(std::memory_order_acquire);
  auto* next = new Snapshot(*cur);  // shares the ring; copies slots, weights and groups
  next->params = p;
  if (next->params.placement_choices < 1) next->params.placement_choices = 1;
  publish_locked(next, false);
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

void RouterState::forget_exact(const Snapshot& old, const Snapshot& next) {
  std::unordered_map<uint32_t, const std::string*> next_ids, old_ids;
  for (size_t i = 0; i < next.slot_of.size(); i++) next_ids.emplace(next.slot_of[i], &next.ring->member(i).id);
  for (size_t i = 0; i < old.slot_of.size(); i++) old_ids.emplace(old.slot_of[i], &old.ring->member(i).id);
  std::lock_guard<std::mutex> l(exact_.mutex());
  for (const auto& [slot, id] : old_ids) {
    auto it = next_ids.find(slot);
    if (it == next_ids.end() || *it->second != *id) exact_.forget(slot);
  }
  // New to the membership: a slot reused, or an instance back after draining. Events for it
  // were refused while it was away (not a member), so it starts empty either way.
  for (const auto& [slot, id] : next_ids)
    if (old_ids.count(slot) == 0) exact_.forget(slot);
}

template <typename F>
int64_t RouterState::with_member(int reader, const std::string& id, F f) {
  SnapshotGuard g(*this, reader);
  for (;;) {
    const Snapshot& s = g.snap();
    const int idx = s.ring->index_of(id);
    if (idx < 0) return kNotMember;
    {
      std::lock_guard<std::mutex> l(exact_.mutex());
      if (header_->members_version.load(std::memory_order_acquire) == s.members_version) return f(s.slot_of[idx], s.params);
    }
    g.renew();
  }
}

int64_t RouterState::exact_store(int reader, const std::string& id, const uint64_t* parent, const uint64_t* engine, size_t n,
                                 const uint32_t* tokens, uint32_t block_size, uint64_t seed, ExactTier tier) {
  return with_member(reader, id, [&](uint32_t slot, const RoutingParams& p) -> int64_t {
    if (block_size != p.exact_block_size) return kBlockSize;
    return exact_.store(slot, parent, engine, n, tokens, block_size, seed, tier, p.exact_capacity);
  });
}

int64_t RouterState::exact_remove(int reader, const std::string& id, const uint64_t* engine, size_t n, ExactTier tier) {
  return with_member(reader, id, [&](uint32_t slot, const RoutingParams&) {
    return static_cast<int64_t>(exact_.remove(slot, engine, n, tier));
  });
}

bool RouterState::exact_clear(int reader, const std::string& id) {
  return with_member(reader, id, [&](uint32_t slot, const RoutingParams&) {
    exact_.clear(slot);
    return int64_t{0};
  }) == 0;
}

bool RouterState::exact_set_view(int reader, const std::string& id, ExactView v) {
  return with_member(reader, id, [&](uint32_t slot, const RoutingParams&) {
    exact_.set_view(slot, v);
    return int64_t{0};
  }) == 0;
}

bool RouterState::exact_info(int reader, const std::string& id, ExactSlotInfo* out) {
  return with_member(reader, id, [&](uint32_t slot, const RoutingParams&) {
    *out = exact_.info(slot);
    return int64_t{0};
  }) == 0;
}

std::vector<ExactMatchRow> RouterState::exact_match(int reader, const ExactRequest& req) {
  SnapshotGuard g(*this, reader);
  const Snapshot& s = g.snap();
  std::vector<uint64_t> hashes(req.ntokens / std::max<uint32_t>(1, s.params.exact_block_size));
  const size_t n = exact_hashes(req.tokens, req.ntokens, s.params.exact_block_size, req.seed, hashes.data());
  ExactMatch m;
  m.ensure(slots_.capacity());
  std::vector<ExactMatchRow> out;
  std::lock_guard<std::mutex> l(exact_.mutex());
  exact_.match(hashes.data(), n, req.now, m);
  for (size_t i = 0; i < s.ring->member_count(); i++) {
    const uint32_t slot = s.slot_of[i];
    out.push_back({s.ring->member(i).id, exact_.info(slot), m.by_slot[slot]});
  }
  return out;
}

void RouterState::drained(uint32_t slot) {
  std::lock_guard<IndexMutex> l(index_.mutex());
  if (slots_[slot].word.load(std::memory_order_acquire) == 0) index_.clear_slot(slot);
}

void RouterState::swap_locked(Snapshot* next) {
  next->strategy = strategy_of(next->params.strategy);
  const Snapshot* old = current_.exchange(next, std::memory_order_seq_cst);
  // Readers hold a snapshot for the length of one pick (microseconds), so waiting them out
  // here is cheap and lets the old one go right away.
  for (uint32_t i = 0; i < kMaxReaders; i++)
    while (hazards_[i].ptr.load(std::memory_order_seq_cst) == old) std::this_thread::yield();
  delete old;
}

void RouterState::publish_locked(Snapshot* next, bool members_changed) {
  if (members_changed)
    for (uint32_t slot : next->slot_of) slots_[slot].word.fetch_add(kPin, std::memory_order_acq_rel);
  {
    std::lock_guard<IndexMutex> l(index_.mutex());
    for (size_t i = 0; i < next->slot_of.size(); i++) {
      const uint32_t b = next->ring->member(i).index_blocks;
      index_.set_capacity(next->slot_of[i], b == 0 ? next->params.index_default : b);
    }
  }
  std::string blob;
  if (members_changed && region_->shared()) blob = serialize(*next);
  header_->meta.lock_repairing();
  header_->params = next->params;
  if (members_changed && region_->shared()) {
    std::memcpy(region_->blob(), blob.data(), blob.size());
    header_->blob_len = blob.size();
    // The fleet record follows the membership record: moved with it, unchanged.
    std::memcpy(region_->blob() + blob.size(), fleet_.data(), fleet_.size());
  }
  const uint64_t mv = header_->members_version.load(std::memory_order_relaxed) + (members_changed ? 1 : 0);
  const uint64_t v = header_->version.load(std::memory_order_relaxed) + 1;
  header_->members_version.store(mv, std::memory_order_seq_cst);
  header_->version.store(v, std::memory_order_seq_cst);
  header_->meta.unlock();
  next->version = v;
  next->members_version = mv;
  const Snapshot* old = current_.load(std::memory_order_acquire);
  std::vector<uint32_t> old_slots = members_changed ? old->slot_of : std::vector<uint32_t>{};
  if (members_changed) forget_exact(*old, *next);
  swap_locked(next);
  // After members_version moved: a pick that leases one of these slots from now on sees the
  // new version and gives the lease back (see router.h).
  for (uint32_t slot : old_slots) {
    const uint64_t after = slots_[slot].word.fetch_sub(kPin, std::memory_order_acq_rel) - kPin;
    if (after == 0) drained(slot);
  }
}

std::string RouterState::set_instances(const std::vector<RingMember>& members) {
  if (!writable()) return "this router is attached to another process's state: only its creator changes the membership";
  if (members.size() > kMaxMembers) return "at most 4096 instances";
  {
    std::unordered_map<std::string, int> seen;
    double points = 0;
    for (const auto& m : members) {
      if (seen[m.id]++) return "duplicate instance id '" + m.id + "'";
      if (region_->shared() && !(m.weight > 0 && m.weight <= 1e6)) return "weight of '" + m.id + "' out of range for a shared router";
      points += std::max(1.0, std::round(m.weight * vnodes_));
    }
    // A shared router's record must be one its attached processes accept (deserialize); a
    // private one only clamps what it is given (Ring).
    if (region_->shared() && points > kMaxRecordPoints) return "at most 16777216 ring points (instances x weight x vnodes) in a shared router";
  }
  std::lock_guard<std::mutex> lock(writer_);
  // Live slots by id, members and draining alike: an instance removed and re-added while
  // its leases drain gets its old counter back. A slot whose word is zero is free.
  std::unordered_map<std::string, uint32_t> live;
  std::vector<uint32_t> free_slots;
  for (uint32_t i = slots_.capacity(); i-- > 0;) {
    if (slots_[i].word.load(std::memory_order_acquire) != 0) live.emplace(slots_.id(i), i);
    else free_slots.push_back(i);
  }
  size_t needed = 0;
  for (const auto& m : members) needed += live.count(m.id) ? 0 : 1;
  if (needed > free_slots.size()) return "no free instance slots (too many instances draining)";
  if (region_->shared()) {
    size_t bytes = 4;
    for (const auto& m : members) {
      bytes += 24 + m.id.size();
      for (const auto& g : m.groups) bytes += 4 + g.size();
    }
    if (bytes + fleet_.size() > kBlobCapacity) return "the membership is too large for a shared router (over 16 MiB of ids, groups and fleet record)";
  }

  auto* snap = new Snapshot();
  snap->ring = std::make_shared<const Ring>(members, vnodes_);
  snap->params = current_.load(std::memory_order_acquire)->params;
  const Ring& ring = *snap->ring;
  snap->slot_of.resize(ring.member_count());
  for (size_t i = 0; i < ring.member_count(); i++) {
    const RingMember& m = ring.member(i);
    uint32_t slot;
    auto it = live.find(m.id);
    if (it != live.end()) {
      slot = it->second;
    } else {
      // Rewritten while unpinned and unleased: no published snapshot lists it (router.h).
      slot = free_slots.back();
      free_slots.pop_back();
      {
        std::lock_guard<IndexMutex> l(index_.mutex());
        index_.clear_slot(slot);
      }
      slots_.set_id(slot, m.id);
      slots_[slot].prefill.store(0, std::memory_order_relaxed);
      slots_[slot].ext_in_flight.store(0, std::memory_order_relaxed);
      slots_[slot].ext_prefill.store(0, std::memory_order_relaxed);
      slots_[slot].generation.fetch_add(1, std::memory_order_relaxed);
    }
    snap->slot_of[i] = slot;
  }
  fill_derived(snap);
  publish_locked(snap, true);
  return {};
}

std::string RouterState::set_fleet(const std::string& text) {
  if (!writable()) return "this router is attached to another process's state: only its creator publishes the fleet record";
  std::lock_guard<std::mutex> lock(writer_);
  header_->meta.lock_repairing();
  const uint64_t at = header_->blob_len;
  if (at + text.size() > kBlobCapacity) {
    header_->meta.unlock();
    return "the fleet record is too large for a shared router (over 16 MiB with the membership)";
  }
  std::memcpy(region_->blob() + at, text.data(), text.size());
  header_->fleet_len = text.size();
  header_->fleet_version.store(header_->fleet_version.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  header_->meta.unlock();
  fleet_ = text;
  return {};
}

bool RouterState::fleet(uint64_t since, uint64_t* version, std::string* text) {
  if (header_->fleet_version.load(std::memory_order_acquire) == since) return false;
  header_->meta.lock_repairing();
  *version = header_->fleet_version.load(std::memory_order_acquire);
  // Bounded by the blob whatever the header says: another process wrote it.
  const uint64_t at = std::min(header_->blob_len, kBlobCapacity);
  text->assign(region_->blob() + at, std::min(header_->fleet_len, kBlobCapacity - at));
  header_->meta.unlock();
  return *version != since;
}

PickResult RouterState::pick(int reader, uint64_t key, const std::string* group, const uint64_t* blocks, size_t nblocks,
                              size_t anchor_blocks) {
  SnapshotGuard g(*this, reader);
  return pick(g, key, group, blocks, nblocks, anchor_blocks);
}

PR_HOT PickResult RouterState::pick(const SnapshotGuard& g, uint64_t key, const std::string* group, const uint64_t* blocks,
                              size_t nblocks, size_t anchor_blocks, const uint32_t* avoid, size_t navoid, const ExactRequest* exact,
                              size_t alternates) {
  return pick_among(g, key, group, kNoGroup, alternates, blocks, nblocks, anchor_blocks, avoid, navoid, exact);
}

PR_HOT PickResult RouterState::pick_by_id(const SnapshotGuard& g, uint64_t key, uint32_t group, const uint64_t* blocks, size_t nblocks,
                                   size_t anchor_blocks, const uint32_t* avoid, size_t navoid, const ExactRequest* exact,
                                   size_t alternates) {
  return pick_among(g, key, nullptr, group, alternates, blocks, nblocks, anchor_blocks, avoid, navoid, exact);
}

PR_HOT PickResult RouterState::pick_among(const SnapshotGuard& g, uint64_t key, const std::string* name, uint32_t id, size_t alternates, const uint64_t* blocks,
                                   size_t nblocks, size_t anchor_blocks, const uint32_t* avoid, size_t navoid,
                                   const ExactRequest* exact) {
  for (;;) {
    PickResult r;
    const Snapshot& s = g.snap();
    if (s.torn) return r;  // the region's membership record could not be read (refresh)
    Eligible eligible;
    eligible.count = s.ring->member_count();
    if (name != nullptr || id != kNoGroup) {
      // Resolved on each snapshot the pick tries: a retry's snapshot has bitsets of its own.
      if (name != nullptr) {
        auto it = s.groups.find(*name);
        eligible.bits = it == s.groups.end() ? nullptr : it->second.data();
      } else if (id < s.group_at.size() && s.group_at[id] >= 0) {
        eligible.bits = s.group_bits.data() + s.group_at[id];
      }
      if (eligible.bits == nullptr) {
        r.no_group = true;
        return r;
      }
      eligible.count = 0;
      for (size_t w = 0, n = (s.ring->member_count() + 63) / 64; w < n; w++)
        eligible.count += static_cast<size_t>(__builtin_popcountll(eligible.bits[w]));
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
    const RoutingStrategy& impl = *s.strategy;  // every snapshot with members was published by swap_locked
    PickInput in;
    in.key = key;
    in.blocks = blocks;
    in.nblocks = blocks == nullptr ? 0 : nblocks;
    in.anchor_blocks = anchor_blocks;
    if (exact != nullptr && exact->ntokens > 0 && in.nblocks > 0 && impl.traits().exact_view) {
      // Hashed here, once per snapshot tried: the block size is the snapshot's.
      thread_local std::vector<uint64_t> chain;
      const uint32_t bs = std::max<uint32_t>(1, s.params.exact_block_size);
      if (chain.size() < exact->ntokens / bs + 1) chain.resize(exact->ntokens / bs + 1);
      in.nexact = exact_hashes(exact->tokens, exact->ntokens, bs, exact->seed, chain.data());
      in.exact = chain.data();
      in.prompt_tokens = static_cast<uint32_t>(std::min<size_t>(exact->ntokens, UINT32_MAX));
      in.now = exact->now;
    }
    Alternates alt;
    alt.want = std::min(alternates, kMaxAlternates);
    const PickContext ctx{s, slots_, index_, exact_, eligible, in, &header_->members_version, &alt};
    const Choice c = impl.pick(ctx);
    // Ranked before the membership check below, from the same snapshot as the choice.
    if (alt.want > 0 && alt.count == 0) impl.rank(ctx, c.member, alt);
    const uint32_t slot = s.slot_of[c.member];
    if (header_->members_version.load(std::memory_order_acquire) != s.members_version) {
      // The membership changed under this pick: the lease may sit on a slot that no longer
      // (or no longer only) names this member. Give it back and pick on the new snapshot.
      uint64_t after = 0;
      if (slots_[slot].release(&after) && after == 0) drained(slot);
      g.renew();
      continue;
    }
    slots_[slot].add_prefill(c.prefill);
    if (held_ != nullptr) {
      held_[slot].leases.fetch_add(1, std::memory_order_relaxed);
      if (c.prefill != 0) held_[slot].prefill.fetch_add(c.prefill, std::memory_order_relaxed);
    }
    r.slot = static_cast<int32_t>(slot);
    r.generation = slots_[slot].generation.load(std::memory_order_relaxed);
    r.overflow = c.overflow;
    r.prefill = c.prefill;
    r.blocks = static_cast<uint32_t>(std::min<size_t>(in.nblocks, UINT32_MAX));
    r.held = c.held;
    r.exact = c.exact;
    r.nalternates = static_cast<uint32_t>(alt.count);
    for (size_t i = 0; i < alt.count; i++) {
      const uint32_t as = s.slot_of[alt.member[i]];
      r.alternate_slot[i] = as;
      r.alternate_generation[i] = slots_[as].generation.load(std::memory_order_relaxed);
    }
    return r;
  }
}

void RouterState::first_token(uint32_t slot, uint32_t prefill) {
  if (slot >= slots_.capacity()) return;
  slots_[slot].sub_prefill(prefill);
  if (held_ != nullptr) held_[slot].sub(held_[slot].prefill, prefill);
}

bool RouterState::release(uint32_t slot, uint32_t prefill) {
  if (slot >= slots_.capacity()) return false;
  if (slots_[slot].in_flight() == 0) return false;  // nothing to end: leave the queue alone too
  slots_[slot].sub_prefill(prefill);
  uint64_t after = 0;
  if (!slots_[slot].release(&after)) return false;
  if (held_ != nullptr) {
    held_[slot].sub(held_[slot].leases, 1);
    held_[slot].sub(held_[slot].prefill, prefill);
  }
  if (after == 0) drained(slot);  // last lease of a removed instance: its slot can be reused
  return true;
}

uint64_t RouterState::release_row(uint32_t row, int32_t pid) {
  HeldCount* held = region_->held(row);
  uint64_t total = 0;
  for (uint32_t slot = 0; slot < slots_.capacity(); slot++) {
    const uint64_t n = held[slot].leases.exchange(0, std::memory_order_relaxed);
    const uint64_t p = held[slot].prefill.exchange(0, std::memory_order_relaxed);
    if (p != 0) slots_[slot].sub_prefill(p);
    uint64_t after = 1;
    if (n != 0) total += slots_[slot].release_n(n, &after);
    if (after == 0) drained(slot);
  }
  int32_t expected = pid;
  header_->pids[row].compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
  return total;
}

uint64_t RouterState::release_process(int32_t pid) {
  if (pid <= 0) return 0;
  uint64_t total = 0;
  for (uint32_t row = 0; row < header_->processes; row++)
    if (static_cast<int32_t>(row) != row_ && header_->pids[row].load(std::memory_order_acquire) == pid) total += release_row(row, pid);
  return total;
}

int64_t RouterState::in_flight(int reader, const std::string& id) {
  {
    SnapshotGuard g(*this, reader);
    const int idx = g.snap().ring->index_of(id);
    if (idx >= 0) return static_cast<int64_t>(slots_[g.snap().slot_of[idx]].in_flight());
  }
  // Not a member: a removed instance whose leases are draining keeps its slot (and id) until
  // its word drops to zero.
  for (uint32_t i = 0; i < slots_.capacity(); i++)
    if (slots_[i].word.load(std::memory_order_acquire) != 0 && slots_.id(i) == id) return slots_[i].in_flight();
  return -1;
}

bool RouterState::set_engine_load(int reader, const std::string& id, uint32_t in_flight, uint64_t prefill) {
  SnapshotGuard g(*this, reader);
  const int idx = g.snap().ring->index_of(id);
  if (idx < 0) return false;
  // The pinned slot stays this member's while the guard holds the snapshot.
  Slot& slot = slots_[g.snap().slot_of[idx]];
  slot.ext_in_flight.store(in_flight, std::memory_order_relaxed);
  slot.ext_prefill.store(prefill, std::memory_order_relaxed);
  return true;
}

std::string RouterState::slot_id(uint32_t slot) {
  return slot < slots_.capacity() && slots_[slot].word.load(std::memory_order_acquire) != 0 ? slots_.id(slot) : std::string();
}

std::vector<InstanceInfo> RouterState::instances(int reader) {
  std::vector<InstanceInfo> out;
  SnapshotGuard g(*this, reader);
  const Snapshot& s = g.snap();
  for (size_t i = 0; i < s.ring->member_count(); i++) {
    const RingMember& m = s.ring->member(i);
    const Slot& slot = slots_[s.slot_of[i]];
    out.push_back({m.id, m.weight, slot.in_flight(), m.groups, slot.prefill.load(std::memory_order_relaxed), slot.external(),
                   slot.ext_prefill.load(std::memory_order_relaxed)});
  }
  return out;
}

uint32_t RouterState::slots_in_use() {
  uint32_t n = 0;
  for (uint32_t i = 0; i < slots_.capacity(); i++) n += slots_[i].word.load(std::memory_order_relaxed) != 0;
  return n;
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
