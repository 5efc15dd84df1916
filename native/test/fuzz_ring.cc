// libFuzzer target: decodes the input into a small program of operations on a
// pr::RouterState (set_instances, configure, pick with or without prefix blocks, release,
// bogus release), keeps a model of the membership and of the leases held, and checks the
// router against it after every step. Single-threaded, so every count is exact.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../ring.h"
#include "../router.h"

#include "require.h"

namespace {

constexpr uint32_t kVnodes = 16;  // small rings keep each execution fast
constexpr int kPool = 10;         // ids come from a fixed pool so they recur and drain

std::string pool_id(int i) { return "inst-" + std::to_string(i); }

struct Model {
  std::vector<pr::RingMember> members;
  std::unique_ptr<pr::Ring> ring;                        // same table the router builds
  struct Lease { uint32_t first; std::string second; uint32_t prefill; };
  std::vector<Lease> leases;  // (slot, id, queued prefill not yet returned) of every lease held
  pr::Strategy strategy = pr::Strategy::PrefixAware;     // RouterState's defaults
  uint32_t threshold = 10;

  uint32_t held(const std::string& id) const {
    uint32_t n = 0;
    for (const auto& l : leases) n += l.second == id;
    return n;
  }
  bool is_member(const std::string& id) const {
    for (const auto& m : members) if (m.id == id) return true;
    return false;
  }
  std::set<std::string> live() const {  // members plus removed ids still draining
    std::set<std::string> s;
    for (const auto& m : members) s.insert(m.id);
    for (const auto& l : leases) s.insert(l.second);
    return s;
  }
};

void check(pr::RouterState& st, int reader, const Model& m) {
  size_t sum = 0;
  for (int i = 0; i < kPool; i++) {
    const std::string id = pool_id(i);
    const int64_t got = st.in_flight(reader, id);
    if (m.is_member(id) || m.held(id) > 0) REQUIRE(got == m.held(id));
    else REQUIRE(got == -1);
    sum += got > 0 ? static_cast<size_t>(got) : 0;
  }
  REQUIRE(sum == m.leases.size());
  REQUIRE(st.instances(reader).size() == m.members.size());
  // Queued prefill per member: what its leases added and have not given back.
  for (const auto& inst : st.instances(reader)) {
    uint64_t queued = 0;
    for (const auto& l : m.leases) queued += l.second == inst.id ? l.prefill : 0;
    REQUIRE(inst.prefill == queued);
  }
  // A slot is in use exactly while it is listed or has leases: never more than members + draining.
  REQUIRE(st.slots_in_use() == m.live().size());
  for (const auto& l : m.leases) REQUIRE(st.slot_id(l.first) == l.second);
}

void do_set_instances(FuzzedDataProvider& in, pr::RouterState& st, Model& m, uint32_t capacity) {
  std::vector<pr::RingMember> next;
  std::set<std::string> ids;
  const int n = in.ConsumeIntegralInRange<int>(0, 6);
  for (int i = 0; i < n; i++) {
    const std::string id = pool_id(in.ConsumeIntegralInRange<int>(0, kPool - 1));
    const double weight = 0.5 * in.ConsumeIntegralInRange<int>(1, 8);
    if (ids.insert(id).second) next.push_back({id, weight});  // ids are unique (TS layer enforces it)
  }
  // The swap fails exactly when the new ids need more slots than are free.
  const auto live = m.live();
  size_t needed = 0;
  for (const auto& x : next) needed += live.count(x.id) ? 0 : 1;
  const bool fits = needed <= capacity - live.size();
  const std::string err = st.set_instances(next);
  REQUIRE(err.empty() == fits);
  if (fits) {
    m.members = next;
    m.ring = std::make_unique<pr::Ring>(next, kVnodes);
  }
}

// The pick must match what the strategy prescribes, given the model's counts before it
// (random only has to land on a member; least-outstanding ties may go either way).
// longest_prefix with blocks follows its index, which the model does not keep: only
// membership and the counters (check) are verified; without blocks it places as prefix_aware.
void check_pick(const Model& m, uint64_t key, const pr::PickResult& r, const std::string& got, size_t nblocks) {
  REQUIRE(m.is_member(got));
  const bool hashed = m.strategy == pr::Strategy::PrefixAware || (m.strategy == pr::Strategy::LongestPrefix && nblocks == 0);
  if (m.strategy == pr::Strategy::LeastOutstanding) {
    double best = 1e300;
    for (const auto& x : m.members) best = std::min(best, m.held(x.id) / x.weight);
    for (const auto& x : m.members) if (x.id == got) REQUIRE(m.held(x.id) / x.weight == best);
  } else if (hashed) {
    const pr::Ring& ring = *m.ring;
    std::vector<uint32_t> held(ring.member_count());  // by ring member index
    for (size_t i = 0; i < held.size(); i++) held[i] = m.held(ring.member(i).id);
    size_t pos = ring.find(key);
    const uint32_t target_idx = ring.owner(pos);
    const std::string& target = ring.member(target_idx).id;
    // Clockwise walk: the first instance (target included) below the threshold.
    int expect = -1;
    for (size_t step = 0; step < ring.point_count() && expect < 0; step++, pos = ring.next(pos))
      if (held[ring.owner(pos)] < m.threshold) expect = static_cast<int>(ring.owner(pos));
    if (expect < 0) {  // all at the threshold: fewest in flight, the target on a tie
      const uint32_t fewest = *std::min_element(held.begin(), held.end());
      REQUIRE(m.held(got) == fewest);
      if (held[target_idx] == fewest) REQUIRE(got == target);
    } else {
      REQUIRE(got == ring.member(static_cast<size_t>(expect)).id);
    }
    REQUIRE(r.overflow == (got != target));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const uint32_t capacity = in.ConsumeIntegralInRange<uint32_t>(1, 16);  // small: exercises "no free slots"
  pr::RouterState st(kVnodes, capacity);
  const int reader = st.acquire_reader();
  REQUIRE(reader >= 0);
  Model m;
  m.ring = std::make_unique<pr::Ring>(std::vector<pr::RingMember>{}, kVnodes);

  for (int ops = 0; ops < 200 && in.remaining_bytes() > 0; ops++) {
    switch (in.ConsumeIntegralInRange<int>(0, 6)) {
      case 0:
        do_set_instances(in, st, m, capacity);
        break;
      case 1: {
        m.strategy = static_cast<pr::Strategy>(in.ConsumeIntegralInRange<uint32_t>(0, 3));
        m.threshold = in.ConsumeIntegralInRange<uint32_t>(1, 4);
        // longest_prefix: a tiny index (evictions), hash or balanced placement, bounded loads
        // from tight to off, and prefill weights from none to heavy.
        pr::RoutingParams p;
        p.strategy = m.strategy;
        p.prefix_length = 4096;
        p.threshold = m.threshold;
        p.block_bytes = 64;
        p.index_default = in.ConsumeIntegralInRange<uint32_t>(1, 8);
        p.placement_choices = in.ConsumeIntegralInRange<uint32_t>(1, 3);
        p.load_factor = 0.5 * in.ConsumeIntegralInRange<int>(0, 8);
        p.prefill_weight = 0.5 * in.ConsumeIntegralInRange<int>(0, 8);
        st.configure(p);
        break;
      }
      case 2:
      case 3: {
        const uint64_t key = in.ConsumeIntegral<uint64_t>();
        // Block chains from a three-letter alphabet, so that prompts share prefixes and match.
        uint64_t blocks[4];
        const size_t nblocks = m.strategy == pr::Strategy::LongestPrefix ? in.ConsumeIntegralInRange<size_t>(0, 4) : 0;
        for (size_t b = 0, h = 0; b < nblocks; b++) blocks[b] = h = h * 0x9E3779B97F4A7C15ULL + 1 + in.ConsumeIntegralInRange<uint32_t>(0, 2);
        const size_t anchor = nblocks == 0 ? 0 : in.ConsumeIntegralInRange<size_t>(0, nblocks + 1);
        const pr::PickResult r = st.pick(reader, key, nullptr, nblocks ? blocks : nullptr, nblocks, anchor);
        if (m.members.empty()) { REQUIRE(r.slot == -1); break; }
        REQUIRE(r.slot >= 0 && static_cast<uint32_t>(r.slot) < capacity);
        const std::string got = st.slot_id(static_cast<uint32_t>(r.slot));
        check_pick(m, key, r, got, nblocks);
        REQUIRE(r.prefill <= nblocks);
        m.leases.push_back({static_cast<uint32_t>(r.slot), got, r.prefill});
        break;
      }
      case 4: {  // a held lease's first token: its queued prefill goes back
        if (m.leases.empty()) break;
        const size_t i = in.ConsumeIntegralInRange<size_t>(0, m.leases.size() - 1);
        st.first_token(m.leases[i].first, m.leases[i].prefill);
        m.leases[i].prefill = 0;
        break;
      }
      case 5: {  // release a held lease, with what it still has queued
        if (m.leases.empty()) break;
        const size_t i = in.ConsumeIntegralInRange<size_t>(0, m.leases.size() - 1);
        REQUIRE(st.release(m.leases[i].first, m.leases[i].prefill));
        m.leases.erase(m.leases.begin() + static_cast<long>(i));
        break;
      }
      case 6: {  // release a slot we may hold nothing on (double release, free slot, out of range)
        const uint32_t slot = in.ConsumeBool() ? in.ConsumeIntegralInRange<uint32_t>(0, 20) : in.ConsumeIntegral<uint32_t>();
        size_t i = 0;
        while (i < m.leases.size() && m.leases[i].first != slot) i++;
        // A real lease gives back what it has queued; a bogus release must change nothing.
        const uint32_t prefill = i < m.leases.size() ? m.leases[i].prefill : in.ConsumeIntegralInRange<uint32_t>(0, 8);
        const bool ok = st.release(slot, prefill);
        if (i == m.leases.size()) {
          REQUIRE(!ok);
        } else {  // we did hold one there: that was a real release
          REQUIRE(ok);
          m.leases.erase(m.leases.begin() + static_cast<long>(i));
        }
        break;
      }
    }
    check(st, reader, m);
  }

  // Release everything: every counter back to 0, only the members keep slots.
  while (!m.leases.empty()) {
    REQUIRE(st.release(m.leases.back().first, m.leases.back().prefill));
    m.leases.pop_back();
  }
  check(st, reader, m);
  for (const auto& inst : st.instances(reader)) REQUIRE(inst.in_flight == 0 && inst.prefill == 0);
  REQUIRE(st.slots_in_use() == m.members.size());
  st.release_reader(reader);
  return 0;
}
