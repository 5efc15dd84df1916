#include "router.h"

#include <algorithm>
#include <random>
#include <thread>
#include <unordered_map>

namespace pr {

struct Snapshot {
  Ring ring;
  std::vector<uint32_t> slot_of;    // member index -> slot
  std::vector<double> cum_weight;   // running sum of weights, for weighted random
  // group name -> bitset over member indices
  std::unordered_map<std::string, std::vector<uint64_t>> groups;
  Snapshot(std::vector<RingMember> m, uint32_t vnodes) : ring(std::move(m), vnodes) {}
};

namespace {

// Per-thread generator: random and tie-breaking need speed, not cryptographic quality.
uint64_t next_random() {
  thread_local uint64_t s = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ std::hash<std::thread::id>{}(std::this_thread::get_id());
  }();
  uint64_t z = (s += 0x9E3779B97F4A7C15ULL);  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Calls visit(member, position) for each distinct eligible member met walking the ring
// clockwise from `from` (whose owner counts as already met), until `wanted` members have been
// met or visit returns true.
template <typename Eligible, typename Visit>
void walk_distinct(const Ring& ring, size_t from, size_t wanted, Eligible eligible, Visit visit) {
  uint64_t seen_bits[kMaxMembers / 64] = {};
  const uint32_t first = ring.owner(from);
  seen_bits[first / 64] |= uint64_t{1} << (first % 64);
  size_t seen = 1, pos = from;
  for (size_t step = 0; step < ring.point_count() && seen < wanted; step++) {
    pos = ring.next(pos);
    const uint32_t m = ring.owner(pos);
    uint64_t& word = seen_bits[m / 64];
    const uint64_t bit = uint64_t{1} << (m % 64);
    if ((word & bit) || !eligible(m)) continue;
    word |= bit;
    seen++;
    if (visit(m, pos)) return;
  }
}

}  // namespace

RouterState::RouterState(uint32_t vnodes_per_weight, uint32_t slot_capacity)
    : vnodes_(vnodes_per_weight), slots_(slot_capacity), index_(slot_capacity), slot_used_(slot_capacity, false) {
  current_.store(new Snapshot({}, vnodes_), std::memory_order_release);
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

void RouterState::configure_index(uint32_t block_bytes, uint32_t default_blocks, uint32_t placement_choices) {
  block_bytes_.store(block_bytes, std::memory_order_relaxed);
  index_default_.store(default_blocks, std::memory_order_relaxed);
  placement_choices_.store(placement_choices < 1 ? 1 : placement_choices, std::memory_order_relaxed);
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

  auto* snap = new Snapshot(members, vnodes_);
  snap->slot_of.resize(snap->ring.member_count());
  snap->cum_weight.resize(snap->ring.member_count());
  double sum = 0;
  for (size_t i = 0; i < snap->ring.member_count(); i++) {
    const RingMember& m = snap->ring.member(i);
    uint32_t slot;
    auto it = live.find(m.id);
    if (it != live.end()) {
      slot = it->second;
    } else {
      slot = free_slots_.back();
      free_slots_.pop_back();
      slot_used_[slot] = true;
      slots_[slot].id = m.id;
      slots_[slot].generation.fetch_add(1, std::memory_order_relaxed);
    }
    slots_[slot].word.fetch_add(kPin, std::memory_order_acq_rel);
    snap->slot_of[i] = slot;
    sum += m.weight;
    snap->cum_weight[i] = sum;
    for (const std::string& g : m.groups) {
      auto& bits = snap->groups[g];
      bits.resize((snap->ring.member_count() + 63) / 64);
      bits[i / 64] |= uint64_t{1} << (i % 64);
    }
  }
  {
    std::lock_guard<std::mutex> l(index_.mutex());
    const uint32_t def = index_default_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < snap->ring.member_count(); i++) {
      const uint32_t b = snap->ring.member(i).index_blocks;
      index_.set_capacity(snap->slot_of[i], b == 0 ? def : b);
    }
  }
  const Snapshot* old = current_.exchange(snap, std::memory_order_seq_cst);
  // Readers hold a snapshot for the length of one pick (well under a microsecond), so
  // waiting them out here is cheap and lets the old table go right away.
  for (uint32_t i = 0; i < kMaxReaders; i++)
    while (hazards_[i].ptr.load(std::memory_order_seq_cst) == old) std::this_thread::yield();
  unpin_and_free(old);
  delete old;
  return {};
}

PickResult RouterState::pick(int reader, uint64_t key, const std::string* group, const uint64_t* blocks, size_t nblocks,
                              size_t anchor_blocks) {
  PickResult r;
  const Snapshot* s = enter(reader);
  const size_t n = s->ring.member_count();
  const uint64_t* allowed = nullptr;  // null: every member is a candidate
  size_t candidates = n;
  if (group != nullptr) {
    auto it = s->groups.find(*group);
    if (it == s->groups.end()) {
      r.no_group = true;
      leave(reader);
      return r;
    }
    allowed = it->second.data();
    candidates = 0;
    for (uint64_t w : it->second) candidates += static_cast<size_t>(__builtin_popcountll(w));
  }
  if (candidates == 0) { leave(reader); return r; }
  auto eligible = [allowed](uint32_t m) { return allowed == nullptr || ((allowed[m / 64] >> (m % 64)) & 1) != 0; };
  const auto strategy = static_cast<Strategy>(strategy_.load(std::memory_order_relaxed));
  uint32_t chosen = 0;

  if (strategy == Strategy::Random) {
    if (allowed == nullptr) {
      const double x = (next_random() >> 11) * 0x1.0p-53 * s->cum_weight[n - 1];
      size_t lo = 0, hi = n - 1;
      while (lo < hi) { size_t mid = (lo + hi) / 2; if (s->cum_weight[mid] > x) hi = mid; else lo = mid + 1; }
      chosen = static_cast<uint32_t>(lo);
    } else {
      // Weighted reservoir over the group's members (groups are usually small).
      double total = 0;
      for (uint32_t i = 0; i < n; i++) {
        if (!eligible(i)) continue;
        const double w = s->ring.member(i).weight;
        total += w;
        if ((next_random() >> 11) * 0x1.0p-53 * total < w) chosen = i;
      }
    }
    slots_[s->slot_of[chosen]].acquire();
  } else if (strategy == Strategy::LeastOutstanding) {
    // Fewest in flight per unit of weight; ties broken at random (reservoir of one).
    double best = 0;
    uint32_t ties = 0;
    for (uint32_t i = 0; i < n; i++) {
      if (!eligible(i)) continue;
      const double load = slots_[s->slot_of[i]].in_flight() / s->ring.member(i).weight;
      if (ties == 0 || load < best) { best = load; chosen = i; ties = 1; }
      else if (load == best && next_random() % ++ties == 0) chosen = i;
    }
    slots_[s->slot_of[chosen]].acquire();
  } else {
    const uint32_t limit = threshold_.load(std::memory_order_relaxed);
    std::unique_lock<std::mutex> index_lock;
    size_t home = 0;
    if (strategy == Strategy::LongestPrefix && nblocks > 0) {
      index_lock = std::unique_lock<std::mutex>(index_.mutex());
      const LongestChoice m = longest_match(s, key, blocks, nblocks, allowed, limit, anchor_blocks);
      home = m.home;
      if (m.member >= 0) {
        chosen = static_cast<uint32_t>(m.member);
        r.overflow = m.overflow;
        index_.insert(s->slot_of[chosen], blocks, nblocks);
        const uint32_t slot = s->slot_of[chosen];
        r.slot = static_cast<int32_t>(slot);
        r.generation = slots_[slot].generation.load(std::memory_order_relaxed);
        index_lock.unlock();
        leave(reader);
        return r;
      }
    }
    // The target is the first candidate clockwise from the key (longest_prefix: its home).
    size_t pos = home;
    if (!index_lock.owns_lock()) {
      pos = s->ring.find(key);
      while (!eligible(s->ring.owner(pos))) pos = s->ring.next(pos);
    }
    const uint32_t target = s->ring.owner(pos);
    bool placed = slots_[s->slot_of[target]].try_acquire(limit);
    chosen = target;
    if (!placed && candidates > 1) {
      // Walk clockwise to the next distinct candidate below the threshold, so a hot prefix
      // spills to the same second home every time rather than anywhere.
      walk_distinct(s->ring, pos, candidates, eligible, [&](uint32_t m, size_t) {
        if (!slots_[s->slot_of[m]].try_acquire(limit)) return false;
        chosen = m;
        placed = true;
        return true;
      });
    }
    if (!placed) {
      // Every candidate is at the threshold: the fewest in flight, the ring's target on a tie.
      uint32_t best = slots_[s->slot_of[target]].in_flight();
      for (uint32_t i = 0; i < n; i++) {
        if (!eligible(i)) continue;
        const uint32_t c = slots_[s->slot_of[i]].in_flight();
        if (c < best) { best = c; chosen = i; }
      }
      slots_[s->slot_of[chosen]].acquire();
    }
    r.overflow = chosen != target;
    if (index_lock.owns_lock()) index_.insert(s->slot_of[chosen], blocks, nblocks);
  }
  const uint32_t slot = s->slot_of[chosen];
  r.slot = static_cast<int32_t>(slot);
  r.generation = slots_[slot].generation.load(std::memory_order_relaxed);
  leave(reader);
  return r;
}

RouterState::LongestChoice RouterState::longest_match(const Snapshot* s, uint64_t key, const uint64_t* blocks,
                                                      size_t nblocks, const uint64_t* allowed, uint32_t limit,
                                                      size_t anchor_blocks) {
  // Per-thread scratch, indexed by slot: match lengths, reset after use via `touched`.
  thread_local std::vector<uint32_t> match;
  thread_local std::vector<uint32_t> touched;
  if (match.size() < slots_.capacity()) match.assign(slots_.capacity(), 0);
  touched.clear();
  index_.match(blocks, nblocks, match, touched);
  const size_t n = s->ring.member_count();
  auto eligible = [allowed](size_t m) { return allowed == nullptr || ((allowed[m / 64] >> (m % 64)) & 1) != 0; };
  // The consistent hash's choice, as prefix_aware would make it (threshold aside).
  size_t tpos = s->ring.find(key);
  while (!eligible(s->ring.owner(tpos))) tpos = s->ring.next(tpos);
  const uint32_t target = s->ring.owner(tpos);
  const uint32_t at_target = match[s->slot_of[target]];
  uint32_t best = 0;
  for (size_t i = 0; i < n; i++)
    if (eligible(i) && match[s->slot_of[i]] > best) best = match[s->slot_of[i]];
  LongestChoice result;
  // Leave the hash's choice only for a match that tells more than the hash does. With an
  // anchor (the key hashes a chat's opening, which identifies the conversation), only an
  // instance holding at least the whole opening has this conversation's own text; a shorter
  // match is something shared with other conversations, such as a system prompt. Without
  // one, the match must save at least a fifth of what the hash's target would compute. A prefix every instance holds, or a short common one (a system
  // prompt) held by a few, then never pulls traffic away from the hash: replicas with their
  // own indexes agree, new instances get their keys, and one popular prompt does not make a
  // hot spot; a conversation's next turn, or a document asked about again, still goes home.
  const size_t remaining = nblocks - at_target;
  const bool follow = anchor_blocks > 0 ? best > at_target && best >= anchor_blocks
                                        : best > at_target && 5 * static_cast<size_t>(best - at_target) >= remaining;
  if (follow) {
    // Candidates matching more than the target, longest first; among equal matches, the
    // order in which the ring meets them clockwise from the key. The first below the
    // threshold takes the request.
    thread_local std::vector<uint32_t> rank;
    if (rank.size() < kMaxMembers) rank.assign(kMaxMembers, UINT32_MAX);
    thread_local std::vector<std::pair<uint64_t, uint32_t>> order;
    order.clear();
    size_t better = 0;
    for (size_t i = 0; i < n; i++)
      if (eligible(i) && match[s->slot_of[i]] > at_target) better++;
    size_t pos = tpos, ranked = 0;
    for (size_t step = 0; step < s->ring.point_count() && ranked < better; step++, pos = s->ring.next(pos)) {
      const uint32_t m = s->ring.owner(pos);
      if (rank[m] != UINT32_MAX || !eligible(m) || match[s->slot_of[m]] <= at_target) continue;
      rank[m] = static_cast<uint32_t>(ranked++);
      order.emplace_back((static_cast<uint64_t>(UINT32_MAX - match[s->slot_of[m]]) << 32) | rank[m], m);
    }
    for (const auto& o : order) rank[o.second] = UINT32_MAX;
    std::sort(order.begin(), order.end());
    for (size_t k = 0; k < order.size(); k++) {
      if (slots_[s->slot_of[order[k].second]].try_acquire(limit)) {
        result.member = static_cast<int32_t>(order[k].second);
        result.overflow = k > 0;
        break;
      }
    }
  }
  result.home = tpos;
  const uint32_t choices = placement_choices_.load(std::memory_order_relaxed);
  if (result.member < 0 && choices > 1) {
    // Balanced placement, among the key's first `choices` candidates clockwise. If the
    // target holds the prompt (judged as above, against the least any candidate holds), it
    // keeps it. Otherwise the candidate with the fewest requests in flight per unit of weight
    // takes it, counting those that hold the most of it (a system prompt, say) one request
    // less busy, the first on a tie. Consistent hashing gives every instance a fair share of
    // keys, but keys carry unequal traffic (a popular document, a long chat); the index keeps
    // each prompt where it was first placed, so placing new ones by load evens out the
    // instances' shares and keeps homes below the threshold, without moving any cached
    // prefix. Load comes first: if holding a shared prefix outranked it, an instance that
    // missed the first requests would never be given any. The price: router replicas, each
    // seeing its own in-flight counts, no longer agree.
    uint32_t low = at_target, most = at_target;
    walk_distinct(s->ring, tpos, choices, eligible, [&](uint32_t m, size_t) {
      low = std::min(low, match[s->slot_of[m]]);
      most = std::max(most, match[s->slot_of[m]]);
      return false;
    });
    const size_t rest = nblocks - low;
    const bool target_holds = anchor_blocks > 0 ? at_target > low && at_target >= anchor_blocks
                                                : at_target > low && 5 * static_cast<size_t>(at_target - low) >= rest;
    if (!target_holds) {
      auto busy = [&](uint32_t m) {
        const double load = slots_[s->slot_of[m]].in_flight() / s->ring.member(m).weight;
        return most > low && match[s->slot_of[m]] == most ? load - 1 : load;
      };
      double home_busy = busy(target);
      walk_distinct(s->ring, tpos, choices, eligible, [&](uint32_t m, size_t pos) {
        const double b = busy(m);
        if (b < home_busy) {
          home_busy = b;
          result.home = pos;
        }
        return false;
      });
    }
  }
  for (uint32_t slot : touched) match[slot] = 0;
  return result;
}

bool RouterState::release(uint32_t slot) {
  if (slot >= slots_.capacity()) return false;
  uint64_t after = 0;
  if (!slots_[slot].release(&after)) return false;
  if (after == 0) {  // last lease of a removed instance: its slot can be reused
    std::lock_guard<std::mutex> lock(writer_);
    if (slots_[slot].word.load(std::memory_order_acquire) == 0) free_slot_locked(slot);
  }
  return true;
}

int64_t RouterState::in_flight(int reader, const std::string& id) {
  const Snapshot* s = enter(reader);
  const int idx = s->ring.index_of(id);
  const int64_t result = idx >= 0 ? static_cast<int64_t>(slots_[s->slot_of[idx]].in_flight()) : -1;
  leave(reader);
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
  const Snapshot* s = enter(reader);
  for (size_t i = 0; i < s->ring.member_count(); i++) {
    const RingMember& m = s->ring.member(i);
    out.push_back({m.id, m.weight, slots_[s->slot_of[i]].in_flight(), m.groups});
  }
  leave(reader);
  return out;
}

uint32_t RouterState::slots_in_use() {
  std::lock_guard<std::mutex> lock(writer_);
  return static_cast<uint32_t>(slots_.capacity() - free_slots_.size());
}

size_t RouterState::ring_memory_bytes(int reader) {
  const Snapshot* s = enter(reader);
  size_t b = s->ring.memory_bytes() + s->slot_of.capacity() * 4 + s->cum_weight.capacity() * 8;
  leave(reader);
  return b;
}

size_t RouterState::ring_points(int reader) {
  const Snapshot* s = enter(reader);
  size_t p = s->ring.point_count();
  leave(reader);
  return p;
}

}  // namespace pr
