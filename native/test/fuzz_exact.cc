// libFuzzer target: decodes the input into a program of operations on a pr::ExactIndex
// (5 bytes each: store with or without a parent, remove, clear, pending, match, as time moves
// forward) and
// checks it after every step against a model made of std::maps: per slot and tier, engine
// hash -> router hash; per slot, pending router hash -> expiry. The capacity is never reached,
// so every count is exact. Without libFuzzer (-DPR_FUZZ_MAIN), main() runs random programs.
#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <set>
#include <vector>

#include "../exact_index.h"

#include "require.h"

namespace {

// Few prompts make operations meet often; -DPR_EXACT_PROMPTS=64 -DPR_EXACT_BLOCKS=64 make
// thousands of blocks, so the table grows and deletes across collisions.
#ifndef PR_EXACT_PROMPTS
#define PR_EXACT_PROMPTS 4
#endif
#ifndef PR_EXACT_BLOCKS
#define PR_EXACT_BLOCKS 8
#endif
constexpr uint32_t kSlots = 4, kBs = 2, kBlocks = PR_EXACT_BLOCKS, kPrompts = PR_EXACT_PROMPTS;
constexpr double kPendingMs = 40;

// Prompts of two families whose first three blocks are the same.
struct Prompts {
  std::vector<uint32_t> tokens[kPrompts];
  std::vector<uint64_t> chain[kPrompts];  // router hashes of all kBlocks, from seed 0
  Prompts() {
    for (uint32_t p = 0; p < kPrompts; p++) {
      for (uint32_t i = 0; i < kBlocks * kBs; i++) tokens[p].push_back(i < 3 * kBs ? (p % 2) * 100 + i : p * 1000 + i);
      chain[p].resize(kBlocks);
      pr::exact_hashes(tokens[p].data(), tokens[p].size(), kBs, 0, chain[p].data());
    }
  }
};
size_t g_most_entries = 0;  // reported by the standalone run: did the table grow?

const Prompts& prompts() {
  static const Prompts p;
  return p;
}

uint64_t engine_hash(uint32_t p, uint32_t block, uint32_t variant) { return (uint64_t{p} * 2 + variant) * 4096 + block + 1; }

struct Model {
  std::map<uint64_t, uint64_t> engine[kSlots][2];
  std::map<uint64_t, uint32_t> copies[kSlots][2];  // copies beyond the first, stored again under one hash
  std::map<uint64_t, double> pending[kSlots];
  double last_now = 0;

  bool holds_real(uint32_t s, uint64_t r, int tier) const {
    for (const auto& [e, h] : engine[s][tier])
      if (h == r) return true;
    return false;
  }
  void purge(double now) {
    last_now = std::max(last_now, now);
    for (auto& pm : pending)
      for (auto it = pm.begin(); it != pm.end();) it = it->second <= now ? pm.erase(it) : std::next(it);
  }
  size_t entries() const {
    size_t n = 0;
    for (uint32_t s = 0; s < kSlots; s++) n += engine[s][0].size() + engine[s][1].size() + pending[s].size();
    return n;
  }
};

void check_counts(pr::ExactIndex& x, Model& m) {
  for (uint32_t s = 0; s < kSlots; s++) {
    const pr::ExactSlotInfo info = x.info(s);
    REQUIRE(info.gpu == m.engine[s][0].size());
    REQUIRE(info.offloaded == m.engine[s][1].size());
    REQUIRE(info.pending == m.pending[s].size());
  }
  REQUIRE(x.stats().entries == m.entries());
}

void run(const uint8_t* data, size_t size) {
  pr::ExactIndex x(kSlots);
  Model m;
  double now = 0;
  const Prompts& P = prompts();
  for (size_t at = 0; at + 5 <= size; at += 5) {
    const uint8_t b0 = data[at], b1 = data[at + 1], b2 = data[at + 2], b3 = data[at + 3], b4 = data[at + 4];
    // Half the operations start at a prompt's first block, so chains grow rather than orphan.
    const uint32_t slot = b1 % kSlots, p = b2 % kPrompts, from = (b4 & 1) ? 0 : (b4 >> 1) % kBlocks;
    const uint32_t len = std::min<uint32_t>(1 + b3 % kBlocks, kBlocks - from);
    const int tier = (b3 >> 3) & 1;
    const uint32_t variant = (b3 >> 4) & 1, parent_variant = (b3 >> 5) & 1;
    now += b1 >> 4;  // forward only: expiries then come in creation order
    const uint32_t kind = b0 % 16;  // 8 in 16 store, 3 remove, 1 clear, 2 pending, 2 match
    switch (kind < 8 ? 0 : kind < 11 ? 2 : kind < 12 ? 3 : kind < 14 ? 4 : 5) {
      case 0: {  // store blocks [from, from + len) of prompt p
        std::vector<uint64_t> engine(len);
        for (uint32_t k = 0; k < len; k++) engine[k] = engine_hash(p, from + k, variant);
        const uint64_t parent = engine_hash(p, from - 1, parent_variant);
        const int64_t got = x.store(slot, from == 0 ? nullptr : &parent, engine.data(), len, P.tokens[p].data() + from * kBs, kBs, 0,
                                    tier == 0 ? pr::ExactTier::Gpu : pr::ExactTier::Offloaded, 1 << 20);
        uint64_t seed = 0;
        if (from > 0) {
          // The parent's router hash, from this tier or the other.
          const uint64_t* known = nullptr;
          for (int t : {tier, 1 - tier}) {
            auto it = m.engine[slot][t].find(parent);
            if (it != m.engine[slot][t].end()) {
              known = &it->second;
              break;
            }
          }
          if (known == nullptr) {
            REQUIRE(got == pr::ExactIndex::kOrphan);
            break;
          }
          seed = *known;
        }
        REQUIRE(got == static_cast<int64_t>(len));
        std::vector<uint64_t> r(len);
        pr::exact_hashes(P.tokens[p].data() + from * kBs, len * kBs, kBs, seed, r.data());
        for (uint32_t k = 0; k < len; k++) {
          auto it = m.engine[slot][tier].find(engine[k]);
          if (it != m.engine[slot][tier].end() && it->second == r[k]) m.copies[slot][tier][engine[k]]++;
          else m.copies[slot][tier].erase(engine[k]);
          m.engine[slot][tier][engine[k]] = r[k];
          m.pending[slot].erase(r[k]);
        }
        break;
      }
      case 2: {  // remove
        std::vector<uint64_t> engine(len);
        size_t expected = 0;
        for (uint32_t k = 0; k < len; k++) {
          engine[k] = engine_hash(p, from + k, variant);
          auto c = m.copies[slot][tier].find(engine[k]);
          if (c != m.copies[slot][tier].end() && m.engine[slot][tier].count(engine[k])) {
            if (--c->second == 0) m.copies[slot][tier].erase(c);
            continue;
          }
          expected += m.engine[slot][tier].erase(engine[k]);
        }
        REQUIRE(x.remove(slot, engine.data(), len, tier == 0 ? pr::ExactTier::Gpu : pr::ExactTier::Offloaded) == expected);
        break;
      }
      case 3:  // clear
        x.clear(slot);
        m.engine[slot][0].clear();
        m.engine[slot][1].clear();
        m.copies[slot][0].clear();
        m.copies[slot][1].clear();
        m.pending[slot].clear();
        break;
      case 4: {  // a pick sent prompt p to slot: pending where it holds nothing
        x.add_pending(slot, P.chain[p].data(), kBlocks, now, kPendingMs, 1 << 20);
        m.purge(now);
        for (uint32_t k = 0; k < kBlocks; k++) {
          const uint64_t r = P.chain[p][k];
          if (m.holds_real(slot, r, 0) || m.holds_real(slot, r, 1) || m.pending[slot].count(r)) continue;
          m.pending[slot][r] = now + kPendingMs;
        }
        break;
      }
      default: {  // match prompt p
        pr::ExactMatch out;
        out.ensure(kSlots);
        x.match(P.chain[p].data(), kBlocks, now, out);
        m.purge(now);
        for (uint32_t s = 0; s < kSlots; s++) {
          uint32_t lead = 0, gpu = 0, pend = 0, off = 0;
          for (uint32_t k = 0; k < kBlocks; k++) {
            const uint64_t r = P.chain[p][k];
            if (m.holds_real(s, r, 0)) gpu++;
            else if (m.pending[s].count(r)) pend++;
            else if (m.holds_real(s, r, 1)) off++;
            else break;
            lead++;
          }
          const pr::ExactLead& l = out.by_slot[s];
          REQUIRE(l.lead == lead && l.gpu == gpu && l.pending == pend && l.offloaded == off);
        }
        out.reset();
        for (uint32_t s = 0; s < kSlots; s++) REQUIRE(out.by_slot[s].lead == 0);
        break;
      }
    }
    m.purge(m.last_now);  // info() purges as of the latest time the index has seen
    check_counts(x, m);
    g_most_entries = std::max(g_most_entries, x.stats().entries);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  run(data, size);
  return 0;
}

#ifdef PR_FUZZ_MAIN
#include <random>
int main(int argc, char** argv) {
  const int programs = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int max_ops = argc > 2 ? std::atoi(argv[2]) : 400;
  std::mt19937 rng(12345);
  for (int i = 0; i < programs; i++) {
    std::vector<uint8_t> prog(5 * (1 + rng() % max_ops));
    for (auto& b : prog) b = static_cast<uint8_t>(rng());
    run(prog.data(), prog.size());
  }
  std::printf("%d programs passed (at most %zu entries at once)\n", programs, g_most_entries);
  return 0;
}
#endif
