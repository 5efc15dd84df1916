// least_outstanding_requests: fewest in flight per unit of weight, ties broken at random; with
// engine_load_all, in flight at the instance from every client (the engines' reported load).
#include "common.h"

namespace pr {
namespace {

class LeastOutstandingStrategy final : public RoutingStrategy {
 public:
  // No target, no blocks: load alone decides, with SageMaker's threshold for a cap.
  const StrategyTraits& traits() const override {
    static const StrategyTraits t;
    return t;
  }
  PR_HOT Choice pick(const PickContext& ctx) const override {
    const Ring& ring = *ctx.snap.ring;
    Choice c;
    const bool engine = ctx.snap.params.engine_load_all;
    double best = 0;
    uint32_t ties = 0;
    for (uint32_t i = 0; i < ring.member_count(); i++) {
      if (!ctx.eligible(i)) continue;
      const double load = busy(ctx.counter(i), engine) / ring.member(i).weight;
      if (ties == 0 || load < best) { best = load; c.member = i; ties = 1; }
      else if (load == best && next_random() % ++ties == 0) c.member = i;
    }
    ctx.counter(c.member).acquire();
    return c;
  }
  // Next choices: the fewest in flight per unit of weight, the member index breaking ties.
  void rank(const PickContext& ctx, uint32_t chosen, Alternates& out) const override {
    const Ring& ring = *ctx.snap.ring;
    const bool engine = ctx.snap.params.engine_load_all;
    while (!out.full()) {
      int64_t best_m = -1;
      double best = 0;
      for (uint32_t i = 0; i < ring.member_count(); i++) {
        if (i == chosen || !ctx.eligible(i) || out.has(i)) continue;
        const double load = busy(ctx.counter(i), engine) / ring.member(i).weight;
        if (best_m < 0 || load < best) { best = load; best_m = i; }
      }
      if (best_m < 0) return;
      out.add(static_cast<uint32_t>(best_m));
    }
  }
};

}  // namespace

const RoutingStrategy& least_outstanding_strategy() {
  static const LeastOutstandingStrategy s;
  return s;
}

}  // namespace pr
