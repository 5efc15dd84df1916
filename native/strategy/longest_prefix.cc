// longest_prefix: send a request where the prefill it needs, plus the prefill already queued
// there, costs least, among the instances with a claim on it; never let a claim pile the fleet
// onto one instance.
//
// Per request, with the prefix index's longest match per instance (blocks of this prompt the
// instance was recently sent):
//   owners     instances holding the request's OWN text: with a chat anchor, all of the opening
//              up to the first user message (a shared system prompt is not enough); without
//              one, at least a fifth of what the instance holding least would compute.
//   claimants  the key's home on the consistent-hash ring (with placement_choices > 1, also the
//              next members clockwise), the least queued member, and every owner.
//   cost       prefill_weight × (blocks the instance would compute: only an owner's match counts
//              as saved) + (blocks queued for prefill there: routed, first token not back yet).
//              vLLM prefills in arrival order, so the queue is what a new request waits behind;
//              a weight above 1 charges the extra work a miss adds for everyone behind it.
//   full       at the operator's threshold, or above load_factor × the fleet's mean in flight
//              per unit of weight (consistent hashing with bounded loads).
//   choice     the cheapest claimant that is not full, the earliest in claim order on a tie;
//              none: the cheapest member that is not full, in ring order from the home; all
//              full: the fewest in flight.
// A block every request shares is cached by whichever instances computed it, so holding it
// neither attracts requests (no saving for non-owners) nor keeps any away, and its first
// holder cannot collect the fleet's traffic: the queue and the bound spread it.
// `overflow` marks a request that load sent away from where affinity alone would put it: the
// owner holding most of it, or, when nobody owns it, the placement candidates.
#include <algorithm>
#include <cmath>
#include <mutex>

#include "common.h"

namespace pr {
namespace {

class LongestPrefixStrategy final : public RoutingStrategy {
 public:
  Choice pick(const PickContext& ctx) const override {
    const PickInput& in = ctx.in;
    const Ring& ring = *ctx.snap.ring;
    const RoutingParams& p = ctx.snap.params;
    if (in.nblocks == 0) return place_with_overflow(ctx, home_position(ring, in.key, ctx.eligible));

    std::lock_guard<std::mutex> lock(ctx.index.mutex());
    // Per-thread scratch indexed by slot, reset after use through `touched`.
    thread_local std::vector<uint32_t> match;
    thread_local std::vector<uint32_t> touched;
    if (match.size() < ctx.slots.capacity()) match.assign(ctx.slots.capacity(), 0);
    touched.clear();
    ctx.index.match(in.blocks, in.nblocks, match, touched);

    const size_t n = ring.member_count();
    const size_t home_pos = home_position(ring, in.key, ctx.eligible);
    const uint32_t home = ring.owner(home_pos);
    uint64_t total_in_flight = 0;
    double total_weight = 0;
    uint32_t least = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
      if (!ctx.eligible(i)) continue;
      total_in_flight += ctx.counter(i).in_flight();
      total_weight += ring.member(i).weight;
      least = std::min(least, match[ctx.slot(i)]);
    }
    const size_t rest = in.nblocks - least;
    auto owns = [&](uint32_t m) {
      const uint32_t held = match[ctx.slot(m)];
      if (in.anchor_blocks > 0) return held >= in.anchor_blocks;
      return held > least && 5 * static_cast<size_t>(held - least) >= rest;
    };
    auto full = [&](uint32_t m) {
      const uint32_t busy = ctx.counter(m).in_flight();
      if (busy >= p.threshold) return true;
      if (p.load_factor <= 0) return false;
      const double cap = std::ceil(p.load_factor * static_cast<double>(total_in_flight + 1) * ring.member(m).weight / total_weight);
      return busy + 1 > cap;
    };
    // Only an owner's match counts as saved work: a prefix many prompts share (a system
    // prompt) is soon cached wherever requests go, so it must neither attract traffic to the
    // instances that hold it nor keep it from one that does not yet.
    auto cost = [&](uint32_t m) {
      const double compute = static_cast<double>(in.nblocks - (owns(m) ? match[ctx.slot(m)] : least));
      return p.prefill_weight * compute + static_cast<double>(ctx.counter(m).prefill.load(std::memory_order_relaxed));
    };

    // Claimants in a fixed order: the home, its ring successors, the least queued member, then
    // owners by member index (the same order for every replica with the same view).
    thread_local std::vector<uint32_t> claim;
    claim.clear();
    claim.push_back(home);
    if (p.placement_choices > 1)
      walk_distinct(ring, home_pos, p.placement_choices, ctx.eligible, [&](uint32_t m, size_t) {
        claim.push_back(m);
        return false;
      });
    const size_t placements = claim.size();
    int64_t affinity = -1;  // the owner holding most (the first in claim order on a tie)
    for (uint32_t m : claim)
      if (owns(m) && (affinity < 0 || match[ctx.slot(m)] > match[ctx.slot(static_cast<uint32_t>(affinity))])) affinity = m;
    // The least queued member, so that an idle instance is always in the running.
    int64_t idle = -1;
    uint64_t idle_queue = 0;
    for (uint32_t i = 0; i < n; i++) {
      if (!ctx.eligible(i)) continue;
      const uint64_t q = ctx.counter(i).prefill.load(std::memory_order_relaxed);
      if (idle < 0 || q < idle_queue) { idle = i; idle_queue = q; }
    }
    if (std::find(claim.begin(), claim.end(), static_cast<uint32_t>(idle)) == claim.end()) claim.push_back(static_cast<uint32_t>(idle));
    for (uint32_t i = 0; i < n; i++) {
      if (!ctx.eligible(i) || !owns(i) || std::find(claim.begin(), claim.end(), i) != claim.end()) continue;
      claim.push_back(i);
      if (affinity < 0 || match[ctx.slot(i)] > match[ctx.slot(static_cast<uint32_t>(affinity))]) affinity = i;
    }

    Choice c;
    bool found = false;
    double best = 0;
    for (uint32_t m : claim) {
      if (full(m)) continue;
      const double k = cost(m);
      if (!found || k < best) { best = k; c.member = m; found = true; }
    }
    if (!found) {
      // Every claimant is full: the cheapest member that is not, in ring order from the home.
      if (!full(home)) { best = cost(home); c.member = home; found = true; }
      walk_distinct(ring, home_pos, ctx.eligible.count, ctx.eligible, [&](uint32_t m, size_t) {
        if (full(m)) return false;
        const double k = cost(m);
        if (!found || k < best) { best = k; c.member = m; found = true; }
        return false;
      });
    }
    bool placed = found && ctx.counter(c.member).try_acquire(p.threshold);
    if (!placed) {
      // All full (or the chosen one filled up under another thread): the fewest in flight.
      c.member = home;
      uint32_t fewest = ctx.counter(home).in_flight();
      for (uint32_t i = 0; i < n; i++) {
        if (!ctx.eligible(i)) continue;
        const uint32_t b = ctx.counter(i).in_flight();
        if (b < fewest) { fewest = b; c.member = i; }
      }
      ctx.counter(c.member).acquire();
    }
    c.overflow = affinity >= 0 ? c.member != static_cast<uint32_t>(affinity)
                               : std::find(claim.begin(), claim.begin() + static_cast<long>(placements), c.member) == claim.begin() + static_cast<long>(placements);
    c.prefill = static_cast<uint32_t>(in.nblocks - match[ctx.slot(c.member)]);
    ctx.index.insert(ctx.slot(c.member), in.blocks, in.nblocks);
    for (uint32_t s : touched) match[s] = 0;
    return c;
  }
};

}  // namespace

const RoutingStrategy& longest_prefix_strategy() {
  static const LongestPrefixStrategy s;
  return s;
}

}  // namespace pr
