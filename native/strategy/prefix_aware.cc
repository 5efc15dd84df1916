// prefix_aware: SageMaker's PREFIX_AWARE semantics, kept exactly. The key's owner on the
// consistent-hash ring, unless it has `threshold` requests in flight: then the next distinct
// instance clockwise below the threshold; all at the threshold: the fewest in flight. With
// engine_load_all, "in flight" is at the instance from every client, as the engines report it.
#include "common.h"

namespace pr {
namespace {

class PrefixAwareStrategy final : public RoutingStrategy {
 public:
  const StrategyTraits& traits() const override {
    static const StrategyTraits t = [] {
      StrategyTraits t;
      t.targeted = true;
      return t;
    }();
    return t;
  }
  PR_HOT Choice pick(const PickContext& ctx) const override {
    return place_with_overflow(ctx, home_position(*ctx.snap.ring, ctx.in.key, ctx.eligible), ctx.snap.params.engine_load_all);
  }
};

}  // namespace

const RoutingStrategy& prefix_aware_strategy() {
  static const PrefixAwareStrategy s;
  return s;
}

}  // namespace pr
