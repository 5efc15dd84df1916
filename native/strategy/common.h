// Pieces several strategies share: ring walks, the threshold overflow walk and a per-thread
// random generator.
#pragma once
#include <cstddef>
#include <cstdint>

#include "strategy.h"

namespace pr {

// Fast, per-thread, not cryptographic: random choice and tie-breaking only.
uint64_t next_random();

// Calls visit(member, position) for each distinct eligible member met walking the ring
// clockwise from `from` (whose owner counts as already met), until `wanted` members have been
// met or visit returns true.
template <typename Visit>
void walk_distinct(const Ring& ring, size_t from, size_t wanted, const Eligible& eligible, Visit visit) {
  uint64_t seen_bits[4096 / 64] = {};
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

// Position of the key's target: the first eligible member clockwise from the key.
size_t home_position(const Ring& ring, uint64_t key, const Eligible& eligible);

// In flight at a member's instance: this router's leases, and with `engine` also the excess
// its engine reports (other clients' requests), and a lease taken against a limit on that.
inline uint32_t busy(const Slot& s, bool engine) { return engine ? s.load() : s.in_flight(); }
inline bool try_take(Slot& s, uint32_t limit, bool engine) { return engine ? s.try_acquire_load(limit) : s.try_acquire(limit); }

// SageMaker's placement from a ring position: its owner if below the threshold, else the next
// distinct eligible member clockwise below it, else (all at the threshold) the fewest in flight,
// the position's owner on a tie. Takes the lease; overflow when the owner was passed over.
// `engine`: in flight counts the engines' reported load (RoutingParams::engine_load_all).
Choice place_with_overflow(const PickContext& ctx, size_t pos, bool engine);

// Ranks into `out` the eligible members other than `chosen`, in ring order clockwise from
// `pos` (its owner first), those below `limit` in flight before those at it.
void rank_by_ring(const PickContext& ctx, size_t pos, uint32_t chosen, uint32_t limit, bool engine, Alternates& out);

// Takes a lease on the eligible member with the fewest requests in flight, `first` on a tie
// (the all-full fallback: every candidate is at its limit, so the least loaded takes it).
uint32_t acquire_fewest(const PickContext& ctx, uint32_t first, bool engine);

}  // namespace pr
