// The strategies the router knows, by name. The order of the first four is the Strategy enum's.
#include <cstring>

#include "strategy.h"

namespace pr {

const RoutingStrategy& random_strategy();
const RoutingStrategy& least_outstanding_strategy();
const RoutingStrategy& prefix_aware_strategy();
const RoutingStrategy& longest_prefix_strategy();

const std::vector<StrategyEntry>& strategy_registry() {
  static const std::vector<StrategyEntry> list = {
      {"random", random_strategy()},
      {"least_outstanding_requests", least_outstanding_strategy()},
      {"prefix_aware", prefix_aware_strategy()},
      {"longest_prefix", longest_prefix_strategy()},
  };
  return list;
}

int strategy_index(const char* name) {
  const auto& list = strategy_registry();
  for (size_t i = 0; i < list.size(); i++)
    if (std::strcmp(list[i].name, name) == 0) return static_cast<int>(i);
  return -1;
}

}  // namespace pr
