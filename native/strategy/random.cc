// random: weighted random over the eligible members.
#include "common.h"

namespace pr {
namespace {

class RandomStrategy final : public RoutingStrategy {
 public:
  // No target, no blocks: load alone decides, with SageMaker's threshold for a cap.
  const StrategyTraits& traits() const override {
    static const StrategyTraits t;
    return t;
  }
  PR_HOT Choice pick(const PickContext& ctx) const override {
    const Snapshot& s = ctx.snap;
    const size_t n = s.ring->member_count();
    Choice c;
    if (ctx.eligible.bits == nullptr) {
      const double x = (next_random() >> 11) * 0x1.0p-53 * s.cum_weight[n - 1];
      size_t lo = 0, hi = n - 1;
      while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        if (s.cum_weight[mid] > x) hi = mid; else lo = mid + 1;
      }
      c.member = static_cast<uint32_t>(lo);
    } else {
      // Weighted reservoir over the group's members (groups are usually small).
      double total = 0;
      for (uint32_t i = 0; i < n; i++) {
        if (!ctx.eligible(i)) continue;
        const double w = s.ring->member(i).weight;
        total += w;
        if ((next_random() >> 11) * 0x1.0p-53 * total < w) c.member = i;
      }
    }
    ctx.counter(c.member).acquire();
    return c;
  }
  // Next choices: ring order from a random point, which draws each member about as often as
  // its weight's share of the ring.
  void rank(const PickContext& ctx, uint32_t chosen, Alternates& out) const override {
    const Ring& ring = *ctx.snap.ring;
    rank_by_ring(ctx, home_position(ring, next_random(), ctx.eligible), chosen, ctx.snap.params.threshold, false, out);
  }
};

}  // namespace

const RoutingStrategy& random_strategy() {
  static const RandomStrategy s;
  return s;
}

}  // namespace pr
