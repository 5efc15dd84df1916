// Unit tests for the exact index (exact_index.h) and its use by longest_prefix. Same harness
// as unit.cc: CHECK counts, the last line is "N passed, M failed", non-zero exit on a failure.
// Built and run with sanitizers by native/test/run.sh.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "../exact_index.h"
#include "../prefix_index.h"
#include "../router.h"
#include "../xxh3.h"

namespace {

constexpr uint32_t kBs = 4;  // tokens per block in these tests
constexpr size_t kCap = 1 << 20;

// Tokens of a deterministic prompt: `shared` blocks the same for every `base`, then its own.
std::vector<uint32_t> tokens(uint32_t base, uint32_t own, size_t shared_blocks, size_t blocks) {
  std::vector<uint32_t> t(blocks * kBs);
  for (size_t i = 0; i < t.size(); i++)
    t[i] = i < shared_blocks * kBs ? base * 1000 + static_cast<uint32_t>(i) : own * 100000 + base * 1000 + static_cast<uint32_t>(i);
  return t;
}

std::vector<uint64_t> router_hashes(const std::vector<uint32_t>& t, uint64_t seed, uint32_t bs = kBs) {
  std::vector<uint64_t> h(t.size() / bs);
  h.resize(pr::exact_hashes(t.data(), t.size(), bs, seed, h.data()));
  return h;
}

// Engine hashes: anything distinct (vLLM's are its own); here base + block number.
std::vector<uint64_t> engine_hashes(uint64_t base, size_t n) {
  std::vector<uint64_t> e(n);
  for (size_t i = 0; i < n; i++) e[i] = base + i;
  return e;
}

pr::ExactLead lead_of(pr::ExactIndex& x, uint32_t slot, const std::vector<uint64_t>& h, double now = 0) {
  pr::ExactMatch m;
  m.ensure(16);
  x.match(h.data(), h.size(), now, m);
  const pr::ExactLead l = m.by_slot[slot];
  m.reset();
  return l;
}

void test_contract() {
  // The chain is XXH3-64 over 4 little-endian bytes per id, each block seeded by the last.
  const std::vector<uint32_t> t = {1, 2, 3, 4, 0x01020304, 6, 7, 8, 9};
  uint8_t bytes[32];
  for (size_t i = 0; i < 8; i++) {
    bytes[4 * i] = static_cast<uint8_t>(t[i]);
    bytes[4 * i + 1] = static_cast<uint8_t>(t[i] >> 8);
    bytes[4 * i + 2] = static_cast<uint8_t>(t[i] >> 16);
    bytes[4 * i + 3] = static_cast<uint8_t>(t[i] >> 24);
  }
  const auto h = router_hashes(t, 77);
  CHECK(h.size() == 2);  // the ninth id is not a full block
  CHECK(h[0] == pr::xxh3_64(bytes, 16, 77));
  CHECK(h[1] == pr::xxh3_64(bytes + 16, 16, h[0]));
}

void test_store_remove_clear() {
  pr::ExactIndex x(16);
  const auto t = tokens(1, 1, 0, 5);
  const auto h = router_hashes(t, 9);
  const auto e = engine_hashes(100, 5);
  CHECK(x.store(2, nullptr, e.data(), 5, t.data(), kBs, 9, pr::ExactTier::Gpu, kCap) == 5);
  auto l = lead_of(x, 2, h);
  CHECK(l.lead == 5 && l.gpu == 5 && l.offloaded == 0 && l.pending == 0);
  CHECK(lead_of(x, 3, h).lead == 0);
  CHECK(x.stats().entries == 5);
  // Another seed (another adapter or salt) is another chain.
  CHECK(lead_of(x, 2, router_hashes(t, 10)).lead == 0);
  // The engine evicted block 2: the lead stops before it, although 3 and 4 are still there.
  const uint64_t gone = e[2];
  CHECK(x.remove(2, &gone, 1, pr::ExactTier::Gpu) == 1);
  CHECK(x.remove(2, &gone, 1, pr::ExactTier::Gpu) == 0);
  CHECK(x.remove(2, &e[3], 1, pr::ExactTier::Offloaded) == 0);  // not in that tier
  l = lead_of(x, 2, h);
  CHECK(l.lead == 2 && l.gpu == 2);
  CHECK(x.stats().entries == 4);
  x.clear(2);
  CHECK(lead_of(x, 2, h).lead == 0);
  CHECK(x.stats().entries == 0);
  CHECK(x.info(2).gpu == 0);
}

void test_parent_chain_and_orphans() {
  pr::ExactIndex x(16);
  const auto t = tokens(2, 1, 0, 6);
  const auto h = router_hashes(t, 5);
  const auto e = engine_hashes(200, 6);
  // Two events: blocks 0-2, then 3-5 with block 2 as the parent (the engine's own hash).
  CHECK(x.store(1, nullptr, e.data(), 3, t.data(), kBs, 5, pr::ExactTier::Gpu, kCap) == 3);
  CHECK(x.store(1, &e[2], e.data() + 3, 3, t.data() + 3 * kBs, kBs, 999 /* ignored with a parent */, pr::ExactTier::Gpu, kCap) == 3);
  CHECK(lead_of(x, 1, h).lead == 6);
  // A parent the slot never reported: nothing stored, counted.
  const uint64_t unknown = 12345;
  CHECK(x.store(1, &unknown, engine_hashes(900, 2).data(), 2, t.data(), kBs, 5, pr::ExactTier::Gpu, kCap) == pr::ExactIndex::kOrphan);
  CHECK(x.stats().orphans == 1);
  CHECK(x.stats().entries == 6);
  // Another slot's blocks are not a parent for this one.
  CHECK(x.store(4, &e[2], e.data() + 3, 3, t.data() + 3 * kBs, kBs, 5, pr::ExactTier::Gpu, kCap) == pr::ExactIndex::kOrphan);
}

void test_refcounts() {
  pr::ExactIndex x(16);
  const auto t = tokens(3, 1, 0, 2);
  const auto h = router_hashes(t, 0);
  // The same tokens stored under two engine hashes (vLLM's hash differs per process or
  // hasher): one router hash, held while either is.
  const auto e1 = engine_hashes(300, 2), e2 = engine_hashes(400, 2);
  CHECK(x.store(0, nullptr, e1.data(), 2, t.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 2);
  CHECK(x.store(0, nullptr, e2.data(), 2, t.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 2);
  CHECK(x.stats().entries == 4);
  CHECK(x.info(0).gpu == 4);
  CHECK(x.remove(0, e1.data(), 2, pr::ExactTier::Gpu) == 2);
  CHECK(lead_of(x, 0, h).lead == 2);
  CHECK(x.remove(0, e2.data(), 2, pr::ExactTier::Gpu) == 2);
  CHECK(lead_of(x, 0, h).lead == 0);
  // Stored twice under one engine hash: one entry.
  CHECK(x.store(0, nullptr, e1.data(), 2, t.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 2);
  CHECK(x.store(0, nullptr, e1.data(), 2, t.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 2);
  CHECK(x.stats().entries == 2);
  CHECK(x.remove(0, e1.data(), 2, pr::ExactTier::Gpu) == 2);
  CHECK(x.stats().entries == 0);
  // An engine hash reused for other tokens follows the latest report.
  const auto other = tokens(4, 1, 0, 2);
  CHECK(x.store(0, nullptr, e1.data(), 2, t.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 2);
  CHECK(x.store(0, nullptr, e1.data(), 2, other.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 2);
  CHECK(lead_of(x, 0, h).lead == 0);
  CHECK(lead_of(x, 0, router_hashes(other, 0)).lead == 2);
  CHECK(x.stats().entries == 2);
}

void test_tiers() {
  pr::ExactIndex x(16);
  const auto t = tokens(5, 1, 0, 4);
  const auto h = router_hashes(t, 1);
  const auto e = engine_hashes(500, 4);
  // Blocks 0-1 on the GPU; 2-3 offloaded, their parent reported in the GPU tier.
  CHECK(x.store(3, nullptr, e.data(), 2, t.data(), kBs, 1, pr::ExactTier::Gpu, kCap) == 2);
  CHECK(x.store(3, &e[1], e.data() + 2, 2, t.data() + 2 * kBs, kBs, 1, pr::ExactTier::Offloaded, kCap) == 2);
  auto l = lead_of(x, 3, h);
  CHECK(l.lead == 4 && l.gpu == 2 && l.offloaded == 2);
  CHECK(x.info(3).gpu == 2 && x.info(3).offloaded == 2);
  // Block 0 offloaded as well: still counted once, as GPU (the better tier).
  CHECK(x.store(3, nullptr, e.data(), 1, t.data(), kBs, 1, pr::ExactTier::Offloaded, kCap) == 1);
  l = lead_of(x, 3, h);
  CHECK(l.lead == 4 && l.gpu == 2 && l.offloaded == 2);
  // Its GPU copy evicted: the offloaded one keeps the lead going.
  CHECK(x.remove(3, &e[0], 1, pr::ExactTier::Gpu) == 1);
  l = lead_of(x, 3, h);
  CHECK(l.lead == 4 && l.gpu == 1 && l.offloaded == 3);
}

void test_capacity() {
  pr::ExactIndex x(16);
  const auto t = tokens(6, 1, 0, 8);
  const auto e = engine_hashes(600, 8);
  CHECK(x.store(0, nullptr, e.data(), 8, t.data(), kBs, 0, pr::ExactTier::Gpu, 5) == pr::ExactIndex::kCapacity);
  CHECK(x.stats().entries == 5);
  CHECK(x.stats().dropped == 3);
  CHECK(x.info(0).gpu == 5);
  CHECK(lead_of(x, 0, router_hashes(t, 0)).lead == 5);  // undercounts, never overcounts
  // Pending guesses give way to reported blocks.
  pr::ExactIndex y(16);
  const auto p = router_hashes(tokens(7, 1, 0, 3), 0);
  y.add_pending(1, p.data(), p.size(), 0, 1000, 5);
  CHECK(y.stats().entries == 3);
  CHECK(y.store(0, nullptr, e.data(), 4, t.data(), kBs, 0, pr::ExactTier::Gpu, 5) == 4);
  CHECK(y.stats().entries == 5);
  CHECK(y.info(1).pending == 1);
  // And are not recorded over a full index.
  y.add_pending(2, router_hashes(t, 0).data(), 8, 0, 1000, 5);
  CHECK(y.info(2).pending == 0);
}

void test_pending() {
  pr::ExactIndex x(16);
  const auto t = tokens(8, 1, 0, 6);
  const auto h = router_hashes(t, 0);
  const auto e = engine_hashes(800, 6);
  // Slot 0 holds blocks 0-1; a pick sends the prompt there: 2-5 become pending until 1000.
  CHECK(x.store(0, nullptr, e.data(), 2, t.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 2);
  x.add_pending(0, h.data(), h.size(), 0, 1000, kCap);
  CHECK(x.info(0).pending == 4);
  CHECK(x.stats().entries == 6);
  auto l = lead_of(x, 0, h, 500);
  CHECK(l.lead == 6 && l.gpu == 2 && l.pending == 4);
  // Already held (pending included): recording again adds nothing.
  x.add_pending(0, h.data(), h.size(), 500, 1000, kCap);
  CHECK(x.info(0).pending == 4);
  // The engine reports blocks 2-3: they turn real.
  CHECK(x.store(0, &e[1], e.data() + 2, 2, t.data() + 2 * kBs, kBs, 0, pr::ExactTier::Gpu, kCap) == 2);
  CHECK(x.info(0).pending == 2);
  CHECK(x.stats().entries == 6);
  l = lead_of(x, 0, h, 600);
  CHECK(l.lead == 6 && l.gpu == 4 && l.pending == 2);
  // At 1000 the rest expires: the lead is what the engine reported.
  l = lead_of(x, 0, h, 1000);
  CHECK(l.lead == 4 && l.gpu == 4 && l.pending == 0);
  CHECK(x.info(0).pending == 0);
  CHECK(x.stats().entries == 4);
  // Pending on two slots; a clear takes one slot's, the other's stay.
  x.add_pending(1, h.data(), h.size(), 2000, 1000, kCap);
  x.add_pending(2, h.data(), h.size(), 2000, 1000, kCap);
  CHECK(x.info(1).pending == 6 && x.info(2).pending == 6);
  x.clear(1);
  CHECK(x.info(1).pending == 0 && x.info(2).pending == 6);
  CHECK(lead_of(x, 2, h, 2500).pending == 6);
  CHECK(lead_of(x, 1, h, 2500).lead == 0);
  // pending_ms 0: nothing pending.
  x.add_pending(3, h.data(), h.size(), 2500, 0, kCap);
  CHECK(x.info(3).pending == 0);
  // Many short-lived entries: the expiry FIFO stays bounded as they expire.
  for (int i = 0; i < 5000; i++) {
    const uint64_t one = 0xABC000 + static_cast<uint64_t>(i);
    x.add_pending(4, &one, 1, 3000 + i, 10, kCap);
  }
  CHECK(x.info(4).pending <= 11);
  CHECK(x.stats().memory_bytes > 0);
}

void test_lead_counting() {
  pr::ExactIndex x(16);
  const auto t = tokens(9, 1, 3, 6);
  const auto h = router_hashes(t, 0);
  const auto e = engine_hashes(900, 6);
  CHECK(x.store(0, nullptr, e.data(), 6, t.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 6);
  CHECK(x.store(1, nullptr, e.data(), 2, t.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 2);
  // Slot 2 holds blocks 1-3 but not block 0 (evicted): no lead at all.
  CHECK(x.store(2, nullptr, e.data(), 4, t.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 4);
  CHECK(x.remove(2, &e[0], 1, pr::ExactTier::Gpu) == 1);
  // A prompt sharing 3 blocks with t, then its own.
  const auto u = tokens(9, 2, 3, 6);
  const auto hu = router_hashes(u, 0);
  pr::ExactMatch m;
  m.ensure(16);
  x.match(hu.data(), hu.size(), 0, m);
  CHECK(m.by_slot[0].lead == 3 && m.by_slot[1].lead == 2 && m.by_slot[2].lead == 0);
  CHECK(m.touched.size() == 2);
  m.reset();
  CHECK(m.by_slot[0].lead == 0 && m.touched.empty());
}

void test_views_and_forget() {
  pr::ExactIndex x(16);
  CHECK(!x.any_fresh());
  x.set_view(5, pr::ExactView::Fresh);
  CHECK(x.fresh(5) && x.any_fresh());
  const auto t = tokens(10, 1, 0, 3);
  const auto e = engine_hashes(1000, 3);
  CHECK(x.store(5, nullptr, e.data(), 3, t.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 3);
  x.set_view(5, pr::ExactView::Stale);  // kept, not trusted
  CHECK(!x.fresh(5) && !x.any_fresh());
  CHECK(x.info(5).gpu == 3 && x.info(5).view == pr::ExactView::Stale);
  x.set_view(5, pr::ExactView::Fresh);
  x.forget(5);
  CHECK(!x.any_fresh());
  CHECK(x.info(5).view == pr::ExactView::None && x.info(5).gpu == 0);
  CHECK(x.stats().entries == 0);
  x.set_view(6, pr::ExactView::Fresh);
  CHECK(x.store(6, nullptr, e.data(), 3, t.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 3);
  x.set_view(6, pr::ExactView::None);  // no view: nothing kept
  CHECK(x.info(6).gpu == 0 && x.stats().entries == 0);
  // Out-of-range slots are ignored.
  CHECK(x.store(99, nullptr, e.data(), 3, t.data(), kBs, 0, pr::ExactTier::Gpu, kCap) == 0);
  CHECK(x.remove(99, e.data(), 3, pr::ExactTier::Gpu) == 0);
}

// The router: events by id, the pick, and membership changes.
pr::RoutingParams exact_params() {
  pr::RoutingParams p;
  p.strategy = pr::Strategy::LongestPrefix;
  p.prefix_length = 65536;
  p.threshold = 1024;
  p.exact_block_size = kBs;
  return p;
}

void test_router_exact_pick() {
  pr::RouterState st(64, 16);
  const int reader = st.acquire_reader();
  CHECK(st.set_instances({{"a", 1}, {"b", 1}, {"c", 1}}).empty());
  st.configure(exact_params());
  const auto t = tokens(11, 1, 0, 32);
  const auto e = engine_hashes(1100, 32);
  // Approximate blocks: the same prompt as text, 64 bytes a block.
  std::vector<uint8_t> text(t.size() * 4);
  std::memcpy(text.data(), t.data(), text.size());
  std::vector<uint64_t> blocks(text.size() / 64);
  pr::chain_hashes(text.data(), text.size(), 64, 0, blocks.data());
  const uint64_t key = pr::xxh3_64(text.data(), 64, 0);
  for (const char* id : {"a", "b", "c"}) CHECK(st.exact_set_view(reader, id, pr::ExactView::Fresh));
  CHECK(st.exact_store(reader, "nobody", nullptr, e.data(), 32, t.data(), kBs, 0, pr::ExactTier::Gpu) == pr::RouterState::kNotMember);
  CHECK(st.exact_store(reader, "b", nullptr, e.data(), 16, t.data(), 8, 0, pr::ExactTier::Gpu) == pr::RouterState::kBlockSize);
  CHECK(st.exact_store(reader, "b", nullptr, e.data(), 32, t.data(), kBs, 0, pr::ExactTier::Gpu) == 32);
  pr::ExactRequest req{t.data(), t.size(), 0, 0};
  auto pick = [&](const pr::ExactRequest* r) {
    pr::SnapshotGuard g(st, reader);
    const pr::PickResult res = st.pick(g, key, nullptr, blocks.data(), blocks.size(), 0, nullptr, 0, r);
    st.release(static_cast<uint32_t>(res.slot), res.prefill);
    return res;
  };
  const auto rows = st.exact_match(reader, req);
  uint32_t b_slot = UINT32_MAX;
  for (const auto& row : rows)
    if (row.id == "b") {
      CHECK(row.lead.lead == 32 && row.lead.gpu == 32);
    }
  // The engine of "b" holds the whole prompt: it goes there, with nothing to prefill.
  const auto r1 = pick(&req);
  CHECK(st.slot_id(static_cast<uint32_t>(r1.slot)) == "b");
  CHECK(r1.prefill == 0);
  b_slot = static_cast<uint32_t>(r1.slot);
  // Its events say the blocks are gone: "b" has no claim any more.
  CHECK(st.exact_remove(reader, "b", e.data(), 32, pr::ExactTier::Gpu) == 32);
  const auto r2 = pick(&req);
  CHECK(r2.prefill == blocks.size());
  // The pick recorded the prompt as pending where it went: the next one follows.
  pr::ExactSlotInfo info;
  CHECK(st.exact_info(reader, st.slot_id(static_cast<uint32_t>(r2.slot)), &info));
  CHECK(info.pending == 32);
  const auto r3 = pick(&req);
  CHECK(r3.slot == r2.slot && r3.prefill == 0);
  // "b" leaves and comes back: it starts with no view.
  CHECK(st.exact_store(reader, "b", nullptr, e.data(), 32, t.data(), kBs, 0, pr::ExactTier::Gpu) == 32);
  CHECK(st.set_instances({{"a", 1}, {"c", 1}}).empty());
  CHECK(!st.exact_info(reader, "b", &info));
  CHECK(st.set_instances({{"a", 1}, {"b", 1}, {"c", 1}}).empty());
  CHECK(st.exact_info(reader, "b", &info));
  CHECK(info.view == pr::ExactView::None && info.gpu == 0);
  // What is left: the pending blocks on r2's instance, unless that was "b" (forgotten).
  CHECK(st.exact_stats().entries == (static_cast<uint32_t>(r2.slot) == b_slot ? 0u : 32u));
  st.release_reader(reader);
}

void test_router_no_exact_is_unchanged() {
  // Two routers, one with a fresh view that holds nothing of the prompts, one without: with
  // no token ids passed, they pick alike for a whole sequence.
  pr::RouterState s1(64, 16), s2(64, 16);
  const int r1 = s1.acquire_reader(), r2 = s2.acquire_reader();
  for (auto* st : {&s1, &s2}) {
    CHECK(st->set_instances({{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}}).empty());
    st->configure(exact_params());
  }
  CHECK(s1.exact_set_view(r1, "a", pr::ExactView::Fresh));
  int same = 0;
  for (uint32_t k = 0; k < 200; k++) {
    std::vector<uint8_t> text(64 * 8);
    for (size_t i = 0; i < text.size(); i++) text[i] = static_cast<uint8_t>(i < 64 * 4 ? i : i * (k % 7 + 1));
    std::vector<uint64_t> blocks(8);
    pr::chain_hashes(text.data(), text.size(), 64, 0, blocks.data());
    const uint64_t key = pr::xxh3_64(text.data(), 64 * 4, k);
    const auto a = s1.pick(r1, key, nullptr, blocks.data(), blocks.size());
    const auto b = s2.pick(r2, key, nullptr, blocks.data(), blocks.size());
    same += a.slot == b.slot && a.prefill == b.prefill;
    if (k % 3 != 0) {
      s1.release(static_cast<uint32_t>(a.slot), a.prefill);
      s2.release(static_cast<uint32_t>(b.slot), b.prefill);
    }
  }
  CHECK(same == 200);
  s1.release_reader(r1);
  s2.release_reader(r2);
}

// Events on one thread while others pick with token ids and the membership changes: under
// TSan, the exact index's lock covers every access.
void test_router_exact_threads() {
  pr::RouterState st(64, 16);
  CHECK(st.set_instances({{"a", 1}, {"b", 1}, {"c", 1}}).empty());
  st.configure(exact_params());
  const auto t = tokens(12, 1, 0, 16);
  const auto e = engine_hashes(1200, 16);
  std::vector<uint8_t> text(t.size() * 4);
  std::memcpy(text.data(), t.data(), text.size());
  std::vector<uint64_t> blocks(text.size() / 64);
  pr::chain_hashes(text.data(), text.size(), 64, 0, blocks.data());
  std::atomic<bool> stop{false};
  std::atomic<int> picks{0};
  std::thread events([&] {
    const int reader = st.acquire_reader();
    // At least 400 rounds, and on until the pickers have picked a hundred times (bounded).
    for (int i = 0; i < 1000000 && (i < 400 || picks.load() < 100); i++) {
      const char* id = i % 2 ? "a" : "b";
      st.exact_set_view(reader, id, pr::ExactView::Fresh);
      st.exact_store(reader, id, nullptr, e.data(), 16, t.data(), kBs, 0, pr::ExactTier::Gpu);
      if (i % 3 == 0) st.exact_remove(reader, id, e.data(), 8, pr::ExactTier::Gpu);
      if (i % 7 == 0) st.exact_clear(reader, id);
    }
    st.release_reader(reader);
    stop = true;
  });
  std::vector<std::thread> pickers;
  for (int k = 0; k < 2; k++)
    pickers.emplace_back([&, k] {
      const int reader = st.acquire_reader();
      double now = 0;
      while (!stop.load()) {
        pr::ExactRequest req{t.data(), t.size(), 0, now += 5};
        pr::SnapshotGuard g(st, reader);
        const auto r = st.pick(g, 7 + static_cast<uint64_t>(k), nullptr, blocks.data(), blocks.size(), 0, nullptr, 0, &req);
        if (r.slot >= 0) st.release(static_cast<uint32_t>(r.slot), r.prefill);
        picks++;
      }
      st.release_reader(reader);
    });
  for (int i = 0; i < 20; i++) {
    CHECK(st.set_instances(i % 2 ? std::vector<pr::RingMember>{{"a", 1}, {"b", 1}, {"c", 1}} : std::vector<pr::RingMember>{{"a", 1}, {"c", 1}}).empty());
    std::this_thread::yield();
  }
  events.join();
  for (auto& th : pickers) th.join();
  CHECK(picks.load() >= 100);
  CHECK(st.exact_stats().entries <= 16 * 3 * 2);
}

}  // namespace

int main() {
  struct { const char* name; void (*fn)(); } tests[] = {
      {"exact hash contract", test_contract},
      {"exact store/remove/clear", test_store_remove_clear},
      {"exact parent chain and orphans", test_parent_chain_and_orphans},
      {"exact refcounts", test_refcounts},
      {"exact tiers", test_tiers},
      {"exact capacity", test_capacity},
      {"exact pending", test_pending},
      {"exact lead counting", test_lead_counting},
      {"exact views and forget", test_views_and_forget},
      {"router exact pick", test_router_exact_pick},
      {"router without exact input unchanged", test_router_no_exact_is_unchanged},
      {"router exact under threads", test_router_exact_threads},
  };
  for (const auto& t : tests) {
    std::printf("%s\n", t.name);
    t.fn();
  }
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
