// The hashes a pick routes a request by, from its routing text: the key the consistent hash
// places, the chain of block hashes and how many of them are the chat's anchored opening.
// One computation for the pick (bind_pick.cc) and for the record key_extract writes ahead of it
// (bind_key.cc), so the two cannot disagree; what a strategy needs of it is its traits.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../snapshot.h"
#include "strategy.h"

namespace pr {

// What the hashes depend on besides the text and the tenant's seed.
struct KeyPlan {
  size_t prefix = 0;       // code points (bytes of raw input) the key is cut at
  size_t span = 0;         // code points of text read: the key, and for a chain up to match_length
  size_t block_bytes = 0;  // bytes per chained block; 0: no chain (nor anchor)
};

KeyPlan key_plan(const StrategyTraits& traits, const RoutingParams& p);

struct RequestKey {
  uint64_t key = 0;
  size_t blocks = 0;         // chained hashes written
  size_t anchor_blocks = 0;  // > 0: the key hashes only this many blocks' worth of the opening
};

// Chained hashes `text` of `len` bytes needs room for with this plan.
inline size_t chain_capacity(const KeyPlan& plan, size_t len) { return plan.block_bytes == 0 ? 0 : len / plan.block_bytes; }

// key_bytes: where the key (plan.prefix code points) ends in the text; anchor: whether the
// text is a chat's, and anchor_bytes where its first user message ends (SIZE_MAX: at or past
// the text's end, which still marks it as a chat's opening, a first turn). `chain` has room
// for chain_capacity(plan, len) hashes.
RequestKey hash_request(const uint8_t* text, size_t len, size_t key_bytes, bool anchor, size_t anchor_bytes, const KeyPlan& plan,
                        uint64_t seed, uint64_t* chain);

}  // namespace pr
