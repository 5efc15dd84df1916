#include "request_key.h"

#include <algorithm>

#include "../hot_pages.h"
#include "../prefix_index.h"
#include "../xxh3.h"

namespace pr {

KeyPlan key_plan(const StrategyTraits& traits, const RoutingParams& p) {
  KeyPlan plan;
  plan.prefix = p.prefix_length;
  // A strategy matching blocks matches further into the prompt than the key reaches.
  plan.span = traits.blocks && p.match_length > p.prefix_length ? p.match_length : p.prefix_length;
  plan.block_bytes = traits.blocks ? p.block_bytes : 0;
  return plan;
}

PR_HOT RequestKey hash_request(const uint8_t* text, size_t len, size_t key_bytes, bool anchor, size_t anchor_bytes, const KeyPlan& plan,
                               uint64_t seed, uint64_t* chain) {
  RequestKey r;
  // The anchor bounds the key of a strategy matching blocks only: then a conversation's later
  // turns, which all begin with its opening, keep its home. The others hash the whole key.
  const bool anchored = anchor && plan.block_bytes != 0;
  size_t key_len = std::min(key_bytes, len);
  if (anchored) key_len = std::min(key_len, anchor_bytes);
  r.key = xxh3_64(text, key_len, seed);
  if (plan.block_bytes == 0) return r;
  r.blocks = chain_hashes(text, len, plan.block_bytes, seed, chain);
  // The opening's blocks that lie wholly inside it. The block it ends in also holds the start
  // of the next message, so the instance that served the first turn (whose prompt ended
  // there) never indexed it: holding the whole blocks is holding the opening.
  if (anchored && r.blocks != 0) r.anchor_blocks = std::min(r.blocks, std::max<size_t>(1, key_len / plan.block_bytes));
  return r;
}

}  // namespace pr
