// longest_prefix: send a request where the prefill it needs, plus the prefill already queued
// there, costs least, among the instances with a claim on it; never let a claim pile the fleet
// onto one instance.
//
// Per request, with the prefix index's longest match per instance (blocks of this prompt the
// instance was recently sent):
//   common     the leading blocks sent with at least 1/n of recent requests (n instances), such as
//              a system prompt every request opens with: more traffic than one instance's fair
//              share, so they are to be cached everywhere, and holding them owns nothing.
//   owners     instances holding the request's OWN text: with a chat anchor, all of the opening
//              up to the first user message (a shared system prompt is not enough); without
//              one, at least a fifth of what is left after the common blocks (or after what the
//              instance holding least has, if more).
//   claimants  the key's home on the consistent-hash ring and every owner; with balanced
//              placement (placement_choices > 1) also the next members clockwise and the least
//              queued member.
//   cost       prefill_weight × (blocks the instance would compute: only an owner's match counts
//              as saved) + (blocks queued for prefill there: routed, first token not back yet).
//              vLLM prefills in arrival order, so the queue is what a new request waits behind;
//              a weight above 1 charges the extra work a miss adds for everyone behind it.
//   full       at the operator's threshold; above load_factor × the fleet's mean in flight per
//              unit of weight, plus 2 (consistent hashing with bounded loads); or sent more
//              than 1.5 × its fair share of recent requests (decayed over ~4,000), plus 8.
//   joining    the home, when another instance owns the prompt and the home has had under half
//              its fair share of recent requests (it joined lately): it takes the keys the ring
//              gives it, if not full.
//   choice     the cheapest claimant that is not full; on equal cost the one given the least new
//              content lately (blocks it had to compute, decayed over ~8,000 requests), then the
//              earliest in claim order;
//              none: the cheapest member that is not full, in ring order from the home; all
//              full: the fewest in flight.
// A block every request shares is cached by whichever instances computed it, so holding it
// neither attracts requests (no saving for non-owners) nor keeps any away, and its first
// holder cannot collect the fleet's traffic: the queue and the bound spread it.
// `overflow` marks a request that load sent away from where affinity alone would put it: the
// owner holding most of it, or, when nobody owns it, the placement candidates.
//
// The exact view (exact_index.h): for an instance whose engine reports its KV events, and
// whose view is fresh, the router knows what it holds rather than guessing from where prompts
// went. When the request brings its token ids, such an instance's match is what its engine
// holds of the prompt's leading engine blocks: saved tokens = (GPU + pending + cpu_block_weight
// × offloaded blocks of the lead) × exact_block_size, in the approximate units as
//   match_equiv = floor(nblocks × min(1, saved / prompt tokens)).
// Ownership follows the rule above over these real holdings: the base is what every
// instance holds (fresh ones by their events; or the common blocks, if more), and an owner holds at least a fifth of what
// is left beyond it. An owner's cost counts its match_equiv as saved; a fresh non-owner saves
// only the base, so a shared opening (a system prompt) that the first instances to serve it
// hold does not draw every later prompt to them. Instances without a fresh view keep the
// rules above. The chosen instance's blocks it does not hold become pending there, so the
// next request for the same prompt follows before the engine's events arrive. Without token
// ids, or with no fresh view, the pick is the approximate one alone.
#include <algorithm>
#include <cmath>
#include <mutex>

#include "common.h"

namespace pr {
namespace {

// equiv[] of a member without a fresh exact view.
constexpr uint32_t kNoView = UINT32_MAX;

class LongestPrefixStrategy final : public RoutingStrategy {
 public:
  const StrategyTraits& traits() const override {
    static const StrategyTraits t = [] {
      StrategyTraits t;
      t.targeted = true;
      t.blocks = true;
      t.exact_view = true;
      t.engine_load = true;
      t.placement = true;
      t.default_threshold = kNoThreshold;
      return t;
    }();
    return t;
  }
  PR_HOT Choice pick(const PickContext& ctx) const override {
    const PickInput& in = ctx.in;
    const Ring& ring = *ctx.snap.ring;
    const RoutingParams& p = ctx.snap.params;
    if (in.nblocks == 0) return place_with_overflow(ctx, home_position(ring, in.key, ctx.eligible), true);

    std::lock_guard<IndexMutex> lock(ctx.index.mutex());
    // Per-thread scratch indexed by slot, reset after use through `touched`.
    thread_local std::vector<uint32_t> match;
    thread_local std::vector<uint32_t> touched;
    if (match.size() < ctx.slots.capacity()) match.assign(ctx.slots.capacity(), 0);
    touched.clear();
    // Blocks sent with a fair share of recent requests or more (1/n of them on n instances)
    // are common, like a system prompt every request opens with: one holder could not serve
    // all their requests, so they must be cached everywhere, and holding them owns nothing.
    const size_t common = ctx.index.match(in.blocks, in.nblocks, match, touched, 1.0 / static_cast<double>(ctx.eligible.count));

    const size_t n = ring.member_count();
    const size_t home_pos = home_position(ring, in.key, ctx.eligible);
    const uint32_t home = ring.owner(home_pos);
    uint64_t total_in_flight = 0;
    double total_weight = 0;
    uint32_t least = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
      if (!ctx.eligible(i)) continue;
      total_in_flight += ctx.counter(i).load();
      total_weight += ring.member(i).weight;
      least = std::min(least, match[ctx.slot(i)]);
    }
    const size_t base = std::max<size_t>(least, common);
    auto owns_approx = [&](uint32_t m) {
      const uint32_t held = match[ctx.slot(m)];
      if (in.anchor_blocks > 0) return held >= in.anchor_blocks && in.anchor_blocks > common;
      return held > base && 5 * (held - base) >= in.nblocks - base;
    };

    // The exact view: equiv[slot] is a fresh member's match in approximate blocks, kNoView for
    // the others (which keep the approximate rules).
    thread_local std::vector<uint32_t> equiv, lead;
    if (equiv.size() < ctx.slots.capacity()) {
      equiv.assign(ctx.slots.capacity(), kNoView);
      lead.assign(ctx.slots.capacity(), 0);
    }
    bool exact = false;
    if (in.nexact > 0 && in.prompt_tokens > 0) {
      thread_local ExactMatch em;
      std::lock_guard<std::mutex> exact_lock(ctx.exact.mutex());
      if (ctx.exact.any_fresh()) {
        em.ensure(ctx.slots.capacity());
        ctx.exact.match(in.exact, in.nexact, in.now, em);
        const double bs = static_cast<double>(p.exact_block_size);
        for (uint32_t i = 0; i < n; i++) {
          const uint32_t s = ctx.slot(i);
          if (!ctx.eligible(i) || !ctx.exact.fresh(s)) continue;
          const ExactLead& l = em.by_slot[s];
          const double saved = (static_cast<double>(l.gpu) + static_cast<double>(l.pending) + p.cpu_block_weight * static_cast<double>(l.offloaded)) * bs;
          const double share = std::min(1.0, saved / static_cast<double>(in.prompt_tokens));
          equiv[s] = static_cast<uint32_t>(std::floor(static_cast<double>(in.nblocks) * share));
          lead[s] = l.lead;
          exact = true;
        }
        em.reset();
      }
    }
    auto fresh = [&](uint32_t m) { return exact && equiv[ctx.slot(m)] != kNoView; };
    // Ownership under the exact view is what the approximate rule says of its estimate, over
    // the engines' real holdings: blocks every member holds (a fresh one by its events, the
    // others by the estimate), or that are common to recent requests (a system prompt), own
    // nothing. Without this, the first instances to serve a shared opening would own every
    // later prompt and the others never be claimants (measured on the chat traces: two of
    // eight instances at 0% of requests).
    uint32_t least_e = UINT32_MAX;
    if (exact) {
      for (uint32_t i = 0; i < n; i++)
        if (ctx.eligible(i)) least_e = std::min(least_e, fresh(i) ? equiv[ctx.slot(i)] : match[ctx.slot(i)]);
    }
    const size_t base_e = std::max<size_t>(least_e == UINT32_MAX ? 0 : least_e, common);
    auto owns_exact = [&](uint32_t m) {
      const uint32_t h = equiv[ctx.slot(m)];
      return h > base_e && 5 * (h - base_e) >= in.nblocks - base_e;
    };
    auto owns = [&](uint32_t m) { return fresh(m) ? owns_exact(m) : owns_approx(m); };
    auto held = [&](uint32_t m) { return fresh(m) ? equiv[ctx.slot(m)] : match[ctx.slot(m)]; };
    auto full = [&](uint32_t m) {
      const uint32_t busy = ctx.counter(m).load();
      if (busy >= p.threshold) return true;
      // Over 1.5 × its fair share of recent requests (by weight), by more than a few: at low
      // concurrency the bound below never bites, yet ties broken by churn could still send one
      // instance a popular prompt's whole traffic.
      const double fair = ring.member(m).weight / total_weight;
      if (ctx.index.sent(ctx.slot(m)) > 1.5 * fair * ctx.index.sent_all() + 8) return true;
      if (p.load_factor <= 0) return false;
      // Two more than the fair bound: at low load (or in one of several router replicas, which
      // each count only their own requests) a couple of requests are no imbalance.
      const double cap = std::ceil(p.load_factor * static_cast<double>(total_in_flight + 1) * ring.member(m).weight / total_weight) + 2;
      return busy + 1 > cap;
    };
    // Only an owner's match counts as saved work: a prefix many prompts share (a system
    // prompt) is soon cached wherever requests go, so it must neither attract traffic to the
    // instances that hold it nor keep it from one that does not yet.
    auto cost = [&](uint32_t m) {
      const double compute = static_cast<double>(in.nblocks - (fresh(m) ? (owns_exact(m) ? equiv[ctx.slot(m)] : std::min<size_t>(equiv[ctx.slot(m)], base_e)) : owns_approx(m) ? match[ctx.slot(m)] : least));
      return p.prefill_weight * compute + static_cast<double>(ctx.counter(m).queued());
    };

    // Claimants in a fixed order: the home, its ring successors and the least queued member
    // (balanced placement), then owners by member index.
    thread_local std::vector<uint32_t> claim;
    claim.clear();
    claim.push_back(home);
    if (p.placement_choices > 1)
      walk_distinct(ring, home_pos, p.placement_choices, ctx.eligible, [&](uint32_t m, size_t) {
        claim.push_back(m);
        return false;
      });
    if (p.placement_choices > 1) {
      // Balanced placement: the least queued member too, so that an idle instance is always in
      // the running. (Not with hash placement: replicas, each seeing its own queues, would pick
      // different ones and scatter what the hash keeps together.)
      int64_t idle = -1;
      uint64_t idle_queue = 0;
      for (uint32_t i = 0; i < n; i++) {
        if (!ctx.eligible(i)) continue;
        const uint64_t q = ctx.counter(i).queued();
        if (idle < 0 || q < idle_queue) { idle = i; idle_queue = q; }
      }
      if (std::find(claim.begin(), claim.end(), static_cast<uint32_t>(idle)) == claim.end()) claim.push_back(static_cast<uint32_t>(idle));
    }
    const size_t placements = claim.size();
    int64_t affinity = -1;  // the owner holding most (the first in claim order on a tie)
    for (uint32_t m : claim)
      if (owns(m) && (affinity < 0 || held(m) > held(static_cast<uint32_t>(affinity)))) affinity = m;
    for (uint32_t i = 0; i < n; i++) {
      if (!ctx.eligible(i) || !owns(i) || std::find(claim.begin(), claim.end(), i) != claim.end()) continue;
      claim.push_back(i);
      if (affinity < 0 || held(i) > held(static_cast<uint32_t>(affinity))) affinity = i;
    }

    Choice c;
    bool found = false;
    double best = 0;
    double best_churn = 0;
    // Scale-out: a member with under half its fair share of recent requests (one that just
    // joined, or came back empty) takes the prompts whose consistent-hash home it is, even
    // those another instance holds, while it is not full. Otherwise an instance added to a
    // fleet whose prompts all have owners would get only new ones (measured: 0% of requests
    // for its first minute on the shared-prefix workload), capacity bought and left idle. Only
    // the keys the ring gives it move, about 1/n of them, as consistent hashing would move them,
    // and once it holds them it is their owner. Not before the index has seen a few requests
    // per member, so that shares mean something.
    const double sent_all = ctx.index.sent_all();
    const bool joining = affinity >= 0 && static_cast<uint32_t>(affinity) != home && sent_all >= 16.0 * static_cast<double>(ctx.eligible.count) &&
                         ctx.index.sent(ctx.slot(home)) < 0.5 * (ring.member(home).weight / total_weight) * sent_all &&
                         static_cast<double>(ctx.counter(home).load()) < static_cast<double>(total_in_flight) * ring.member(home).weight / total_weight;
    if (joining && !full(home)) {
      c.member = home;
      found = true;
    }
    // On equal cost (idle queues, nothing owned) the one given the least new content lately
    // (its churn), then claim order: conversations placed there will find their history still
    // cached, and will queue behind fewer prefills of others.
    auto better = [&](uint32_t m, double k) {
      const double churn = ctx.index.churn(ctx.slot(m));
      if (found && (k > best || (k == best && churn >= best_churn))) return;
      best = k;
      best_churn = churn;
      c.member = m;
      found = true;
    };
    for (uint32_t m : claim) {
      if (found && joining) break;
      if (full(m)) continue;
      better(m, cost(m));
    }
    if (!found) {
      // Every claimant is full: the cheapest member that is not, in ring order from the home.
      if (!full(home)) better(home, cost(home));
      walk_distinct(ring, home_pos, ctx.eligible.count, ctx.eligible, [&](uint32_t m, size_t) {
        if (!full(m)) better(m, cost(m));
        return false;
      });
    }
    bool placed = found && ctx.counter(c.member).try_acquire_load(p.threshold);
    if (!placed) {
      // All full (or the chosen one filled up under another thread): the fewest in flight.
      c.member = acquire_fewest(ctx, home, true);
    }
    c.overflow = affinity >= 0 ? c.member != static_cast<uint32_t>(affinity)
                               : std::find(claim.begin(), claim.begin() + static_cast<long>(placements), c.member) == claim.begin() + static_cast<long>(placements);
    c.held = held(c.member);
    c.exact = fresh(c.member);
    c.prefill = static_cast<uint32_t>(in.nblocks - c.held);
    if (ctx.wants_alternates()) {
      // The claimants by the same measure the choice used (room first, then cost, then churn),
      // then the rest of the ring; read-only, before the scratch is reset.
      thread_local std::vector<uint32_t> ranked;
      ranked.clear();
      for (uint32_t m : claim)
        if (m != c.member) ranked.push_back(m);
      std::stable_sort(ranked.begin(), ranked.end(), [&](uint32_t a, uint32_t b) {
        const bool fa = full(a), fb = full(b);
        if (fa != fb) return !fa;
        const double ka = cost(a), kb = cost(b);
        if (ka != kb) return ka < kb;
        return ctx.index.churn(ctx.slot(a)) < ctx.index.churn(ctx.slot(b));
      });
      for (uint32_t m : ranked) ctx.alternates->add(m);
      if (!ctx.alternates->full()) rank_by_ring(ctx, home_pos, c.member, p.threshold, true, *ctx.alternates);
    }
    // Not from a snapshot the membership has moved past: its slot may since have been given
    // to another instance (router.h), whose index entries must not get this prompt. Checked
    // under the index's lock, which the writer takes to clear a slot it reuses.
    if (ctx.current())
      ctx.index.insert(ctx.slot(c.member), in.blocks, in.nblocks);
    if (fresh(c.member)) {
      // The same check under the exact index's lock, which the writer takes to forget a slot.
      std::lock_guard<std::mutex> exact_lock(ctx.exact.mutex());
      // The lead it holds needs no second look: only the blocks after it can be pending.
      const uint32_t from = lead[ctx.slot(c.member)];
      if (ctx.current())
        ctx.exact.add_pending(ctx.slot(c.member), in.exact + from, in.nexact - from, in.now, p.pending_ms, p.exact_capacity);
    }
    for (uint32_t s : touched) match[s] = 0;
    if (exact)
      for (uint32_t i = 0; i < n; i++) equiv[ctx.slot(i)] = kNoView;
    return c;
  }
};

}  // namespace

const RoutingStrategy& longest_prefix_strategy() {
  static const LongestPrefixStrategy s;
  return s;
}

}  // namespace pr
