#include "common.h"

#include <functional>
#include <random>
#include <thread>

namespace pr {

uint64_t next_random() {
  thread_local uint64_t s = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ std::hash<std::thread::id>{}(std::this_thread::get_id());
  }();
  uint64_t z = (s += 0x9E3779B97F4A7C15ULL);  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

PR_HOT size_t home_position(const Ring& ring, uint64_t key, const Eligible& eligible) {
  size_t pos = ring.find(key);
  while (!eligible(ring.owner(pos))) pos = ring.next(pos);
  return pos;
}

PR_HOT Choice place_with_overflow(const PickContext& ctx, size_t pos, bool engine) {
  const Ring& ring = *ctx.snap.ring;
  const uint32_t limit = ctx.snap.params.threshold;
  const uint32_t target = ring.owner(pos);
  Choice c;
  c.member = target;
  bool placed = try_take(ctx.counter(target), limit, engine);
  if (!placed && ctx.eligible.count > 1) {
    // The next distinct member below the threshold, so a hot prefix spills to the same
    // second home every time rather than anywhere.
    walk_distinct(ring, pos, ctx.eligible.count, ctx.eligible, [&](uint32_t m, size_t) {
      if (!try_take(ctx.counter(m), limit, engine)) return false;
      c.member = m;
      placed = true;
      return true;
    });
  }
  if (!placed) c.member = acquire_fewest(ctx, target, engine);
  c.overflow = c.member != target;
  return c;
}

void rank_by_ring(const PickContext& ctx, size_t pos, uint32_t chosen, uint32_t limit, bool engine, Alternates& out) {
  const Ring& ring = *ctx.snap.ring;
  // Two passes over the same order: members with room, then the ones at their limit.
  for (int pass = 0; pass < 2 && !out.full(); pass++) {
    const auto visit = [&](uint32_t m) {
      if (m == chosen || !ctx.eligible(m)) return;
      const bool room = busy(ctx.counter(m), engine) < limit;
      if (room == (pass == 0)) out.add(m);
    };
    visit(ring.owner(pos));
    walk_distinct(ring, pos, ctx.eligible.count, ctx.eligible, [&](uint32_t m, size_t) {
      visit(m);
      return out.full();
    });
  }
}

void RoutingStrategy::rank(const PickContext& ctx, uint32_t chosen, Alternates& out) const {
  const Ring& ring = *ctx.snap.ring;
  rank_by_ring(ctx, home_position(ring, ctx.in.key, ctx.eligible), chosen, ctx.snap.params.threshold, ctx.snap.params.engine_load_all, out);
}

PR_HOT uint32_t acquire_fewest(const PickContext& ctx, uint32_t first, bool engine) {
  uint32_t chosen = first;
  uint32_t best = busy(ctx.counter(first), engine);
  for (uint32_t i = 0; i < ctx.snap.ring->member_count(); i++) {
    if (!ctx.eligible(i)) continue;
    const uint32_t n = busy(ctx.counter(i), engine);
    if (n < best) { best = n; chosen = i; }
  }
  ctx.counter(chosen).acquire();
  return chosen;
}

}  // namespace pr
