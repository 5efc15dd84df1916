// What one publication of the router holds: the ring, each member's counter slot, the groups
// and the routing parameters. A pick reads exactly one snapshot from start to end, so a
// concurrent configure() or set_instances() never shows it half of one change: parameters
// are swapped with the membership, never written under a reader.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ring.h"

namespace pr {

class RoutingStrategy;

// Built-in strategies, in the order of the registry (strategy/registry.cc). A strategy added
// later needs no entry here: it is found by name.
enum class Strategy : uint32_t { Random = 0, LeastOutstanding = 1, PrefixAware = 2, LongestPrefix = 3 };

struct RoutingParams {
  Strategy strategy = Strategy::PrefixAware;
  uint32_t prefix_length = 4096;  // bytes or code points of the key the consistent hash places
  uint32_t threshold = 10;        // the operator's hard cap: in flight at which an instance is full
  // longest_prefix only.
  uint32_t block_bytes = 64;            // bytes of routing text per indexed block
  uint32_t match_length = 65536;        // code points (bytes of raw input) of the prompt it matches
  uint32_t index_default = 65536;       // blocks remembered per instance unless it says otherwise
  uint32_t placement_choices = 3;       // ring candidates for a prompt no instance holds (1: home only)
  double load_factor = 3.0;             // bounded loads: full above this × the fleet's mean in flight (+2)
  double prefill_weight = 6.0;          // a block to prefill here, against one already queued here
  // longest_prefix's exact view (exact_index.h), for instances whose KV events arrive.
  uint32_t exact_block_size = 16;       // tokens per engine block: the router hashes requests in these
  uint32_t exact_capacity = 2097152;    // entries the exact index holds across all instances
  double cpu_block_weight = 0.5;        // prefill an offloaded block saves, against a GPU block
  double pending_ms = 10000;            // how long a routed prompt's blocks count as held before events
  // The engines' reported load (Slot::ext_in_flight) in least_outstanding_requests and
  // prefix_aware's threshold too; longest_prefix always counts it.
  bool engine_load_all = false;
};

struct Snapshot {
  std::shared_ptr<const Ring> ring;
  std::vector<uint32_t> slot_of;   // member index -> counter slot
  std::vector<double> cum_weight;  // running sum of weights, for weighted random
  std::unordered_map<std::string, std::vector<uint64_t>> groups;  // group -> bitset over members
  // The same groups by the router's id for their name (RouterState::group_id), for picks
  // that name their group by id: an index read instead of copying and hashing the name.
  // group_at[id] is an offset into group_bits (words of (members + 63) / 64), or -1.
  std::vector<int32_t> group_at;
  std::vector<uint64_t> group_bits;
  RoutingParams params;
  // params.strategy's implementation, resolved when the snapshot is published, so a pick
  // reads it here rather than from the registry's table on a page of its own.
  const RoutingStrategy* strategy = nullptr;
  // The region's version and members_version this snapshot was built from (shared_region.h).
  uint64_t version = 0;
  uint64_t members_version = 0;
  // The region's record of a newer membership could not be read (torn by a creator that died
  // while writing it): this snapshot's slots may have changed hands, so no pick leases on it.
  bool torn = false;
};

}  // namespace pr
