// The one interface every routing strategy implements: given the published snapshot, the
// live counters and (for strategies that want it) the prefix index, choose a member and take
// its lease; and say what it needs and does (StrategyTraits), which the rest of the router
// asks instead of comparing names. Adding a strategy is one file with a RoutingStrategy and
// one line in registry.cc (binding.gyp builds every file here); the TypeScript layer reads
// the names and traits from the registry (the `strategies` binding).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../exact_index.h"
#include "../load.h"
#include "../prefix_index.h"
#include "../snapshot.h"

namespace pr {

// What the request brings. `key` is XXH3 of the first prefix_length of the routing text
// (seeded by the tenant); `blocks` are the chained hashes of its full blocks (longest_prefix).
struct PickInput {
  uint64_t key = 0;
  const uint64_t* blocks = nullptr;
  size_t nblocks = 0;
  // > 0: the key hashes only this many blocks' worth of stable opening (a chat up to its first
  // user message); only an instance holding all of it has this conversation's own text.
  size_t anchor_blocks = 0;
  // The exact view's input (longest_prefix), when the caller has the prompt's token ids: the
  // router hashes of its full engine blocks, its token count, and the time in ms (virtual in
  // replays) that pending blocks expire against. nexact == 0: none.
  const uint64_t* exact = nullptr;
  size_t nexact = 0;
  uint32_t prompt_tokens = 0;
  double now = 0;
};

// The members a pick may choose: all of them, or those of one group (a bitset over members).
struct Eligible {
  const uint64_t* bits = nullptr;  // null: every member
  size_t count = 0;
  bool operator()(uint32_t m) const { return bits == nullptr || ((bits[m / 64] >> (m % 64)) & 1) != 0; }
};

// The members a pick would choose next, best first, named without taking their leases or
// touching the prefix index: a caller that names fallbacks (the endpoint picker's list) or
// tries a second instance asks for them. want == 0, the common pick: none are ranked.
constexpr size_t kMaxAlternates = 8;
struct Alternates {
  size_t want = 0;
  size_t count = 0;
  uint32_t member[kMaxAlternates] = {};
  bool full() const { return count >= want; }
  bool has(uint32_t m) const {
    for (size_t i = 0; i < count; i++)
      if (member[i] == m) return true;
    return false;
  }
  // Adds m unless it is there already or the list is full.
  void add(uint32_t m) {
    if (!full() && !has(m)) member[count++] = m;
  }
};

struct PickContext {
  const Snapshot& snap;
  SlotTable& slots;
  PrefixIndex& index;
  ExactIndex& exact;
  const Eligible& eligible;
  const PickInput& in;
  // The region's members_version: a snapshot whose value differs is out of date.
  const std::atomic<uint64_t>* members_version = nullptr;
  // Where the strategy ranks the members it did not choose, when the caller asks (want > 0).
  Alternates* alternates = nullptr;
  bool wants_alternates() const { return alternates != nullptr && alternates->want > 0; }
  bool current() const {
    return members_version == nullptr || members_version->load(std::memory_order_acquire) == snap.members_version;
  }
  uint32_t slot(uint32_t member) const { return snap.slot_of[member]; }
  Slot& counter(uint32_t member) const { return slots[snap.slot_of[member]]; }
};

struct Choice {
  uint32_t member = 0;
  bool overflow = false;   // load sent the request away from where the strategy would put it
  uint32_t prefill = 0;    // blocks added to the member's queued prefill (returned on first token)
  // Blocks of the prompt the strategy counted as already held by the member (its match, in the
  // routing key's blocks; 0 for strategies without blocks), and whether that figure came from
  // the member's own KV events (a fresh exact view) rather than from where prompts were sent.
  uint32_t held = 0;
  bool exact = false;
};

// Concurrency thresholds a strategy may default to: SageMaker's, and none (the highest an
// operator may set, LIMITS.concurrencyThreshold.max in src/core/options.ts) for a strategy
// that bounds load itself, so that a threshold is only an operator's cap.
constexpr uint32_t kSageMakerThreshold = 10;
constexpr uint32_t kNoThreshold = 1024;

// What a strategy needs from the request and the fleet, and what the router may say of its
// choices. Read by the pick's key computation (request_key.h), the exact view's hashing
// (router.cc) and, through the `strategies` binding, by every layer above.
struct StrategyTraits {
  // It has a target of its own (the key's home, or the instance holding the prompt), which
  // load may send a request away from: its picks are `target` or `overflow`.
  bool targeted = false;
  // It matches the prompt's chained block hashes (block_bytes each, up to match_length)
  // against the prefix index of what was sent where: the text is read that far, the key of a
  // chat ends at its anchor (the opening up to the first user message, whose blocks are the
  // conversation's own), and the blocks a pick must compute are queued on the instance until
  // its first token.
  bool blocks = false;
  // It routes by the engines' KV events (exact_index.h) when the request brings token ids.
  bool exact_view = false;
  // It weighs the engines' reported load (Slot::ext_in_flight) always, not only with
  // engine_load_all: reading the engines' /metrics is worth it by default.
  bool engine_load = false;
  // It reads placement_choices: where a prompt no instance holds goes.
  bool placement = false;
  // The concurrency threshold when the operator sets none.
  uint32_t default_threshold = kSageMakerThreshold;
};

class RoutingStrategy {
 public:
  virtual ~RoutingStrategy() = default;
  virtual const StrategyTraits& traits() const = 0;
  // Chooses a member among the eligible ones (at least one) and takes its lease: the chosen
  // slot's in-flight count is one higher on return. A strategy may rank the members it did not
  // choose into ctx.alternates while it has their scores at hand (longest_prefix does).
  virtual Choice pick(const PickContext& ctx) const = 0;
  // Ranks the eligible members other than `chosen`, best first, into `out` (up to out.want),
  // with no side effect: called after pick when it left `out` empty. The default is the
  // consistent hash's own order (clockwise from the key's home, members below the concurrency
  // threshold first), which is where prefix_aware would overflow next.
  virtual void rank(const PickContext& ctx, uint32_t chosen, Alternates& out) const;
};

struct StrategyEntry {
  const char* name;
  const RoutingStrategy& impl;
};
// Index = the value RoutingParams::strategy holds.
const std::vector<StrategyEntry>& strategy_registry();
// Index of a strategy by name, or -1.
int strategy_index(const char* name);

}  // namespace pr
