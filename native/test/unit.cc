// Unit tests for the native core (xxh3, ring, router state). No framework: CHECK counts
// and reports; the last line is "N passed, M failed" and the exit code is non-zero on any
// failure. Built and run with sanitizers by native/test/run.sh.
#define XXH_INLINE_ALL
#include <xxhash.h>  // reference XXH3 (Debian libxxhash-dev)

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "../prefix_index.h"
#include "../ring.h"
#include "../router.h"
#include "../strategy/request_key.h"
#include "../strategy/strategy.h"
#include "../xxh3.h"

namespace {

const pr::SimdPath kPaths[] = {pr::SimdPath::Scalar, pr::SimdPath::SSE2, pr::SimdPath::AVX2, pr::SimdPath::NEON};

// ---- xxh3 ---------------------------------------------------------------------------

void test_xxh3() {
  CHECK(pr::xxh3_64(nullptr, 0, 0) == 0x2d06800538d394c2ULL);
  CHECK(pr::xxh3_64("", 0, 0) == 0x2d06800538d394c2ULL);

  const size_t kLarge[] = {64 << 10, 1 << 20, 10 << 20};
  const uint64_t kSeeds[] = {0, 1, 0x9E3779B97F4A7C15ULL, ~uint64_t{0}};
  // 8 spare bytes so every length can also start at an unaligned offset.
  std::vector<uint8_t> random_buf((10 << 20) + 8), zero_buf(random_buf.size(), 0);
  std::mt19937_64 rng(42);
  for (auto& b : random_buf) b = static_cast<uint8_t>(rng());

  std::vector<size_t> lens;
  for (size_t n = 0; n <= 4096; n++) lens.push_back(n);
  lens.insert(lens.end(), std::begin(kLarge), std::end(kLarge));

  for (pr::SimdPath path : kPaths) {
    if (!pr::simd_path_supported(path)) {
      std::printf("  xxh3: path %s not supported here, skipped\n", pr::simd_path_name(path));
      continue;
    }
    size_t mismatches = 0, compared = 0;
    for (const auto* buf : {&random_buf, &zero_buf}) {
      for (size_t len : lens) {
        const uint8_t* p = buf->data() + len % 8;
        for (uint64_t seed : kSeeds) {
          const uint64_t want = XXH3_64bits_withSeed(p, len, seed);
          const uint64_t got = pr::xxh3_64_path(path, p, len, seed);
          compared++;
          if (got != want && ++mismatches <= 5)
            std::fprintf(stderr, "  xxh3 %s len=%zu seed=%#" PRIx64 " zero=%d: got %016" PRIx64 " want %016" PRIx64 "\n",
                         pr::simd_path_name(path), len, seed, buf == &zero_buf, got, want);
        }
      }
    }
    std::printf("  xxh3: path %-6s %zu hashes compared with the reference\n", pr::simd_path_name(path), compared);
    CHECK(mismatches == 0);
  }

  // The dispatching entry point (whatever path this CPU selected).
  size_t mismatches = 0;
  for (size_t len : lens)
    for (uint64_t seed : kSeeds)
      if (pr::xxh3_64(random_buf.data(), len, seed) != XXH3_64bits_withSeed(random_buf.data(), len, seed)) mismatches++;
  std::printf("  xxh3: dispatch uses %s\n", pr::simd_path_name(pr::simd_active_path()));
  CHECK(mismatches == 0);
}

// ---- ring ---------------------------------------------------------------------------

std::vector<pr::RingMember> members_named(const std::string& names, double weight = 1) {
  std::vector<pr::RingMember> m;
  for (char c : names) m.push_back({std::string(1, c), weight});
  return m;
}

std::string owner_id(const pr::Ring& r, uint64_t key) { return r.member(r.owner_of(key)).id; }

void test_ring_deterministic() {
  auto m = members_named("abcdefg");
  pr::Ring r1(m, 1024);
  std::mt19937_64 shuffle_rng(1);
  std::shuffle(m.begin(), m.end(), shuffle_rng);
  pr::Ring r2(m, 1024);
  std::mt19937_64 rng(7);
  size_t differ = 0;
  for (int i = 0; i < 100000; i++) {
    const uint64_t k = rng();
    if (owner_id(r1, k) != owner_id(r2, k)) differ++;
  }
  CHECK(differ == 0);
  CHECK(r1.point_count() == 7 * 1024);
}

constexpr int kKeys = 1000000;
constexpr uint32_t kVnodes = 8192;

const std::vector<uint64_t>& random_keys() {
  static const std::vector<uint64_t> keys = [] {
    std::mt19937_64 rng(12345);
    std::vector<uint64_t> k(kKeys);
    for (auto& x : k) x = rng();
    return k;
  }();
  return keys;
}

void test_ring_balance() {
  const auto& keys = random_keys();
  {  // equal weights: every share within ±5% (relative) of 1/7
    pr::Ring r(members_named("abcdefg"), kVnodes);
    std::vector<size_t> count(7);
    for (uint64_t k : keys) count[r.owner_of(k)]++;
    double worst = 0;
    for (size_t c : count) worst = std::max(worst, std::abs(c / double(kKeys) * 7 - 1));
    std::printf("  ring: 7 equal members, worst share deviation %.2f%%\n", worst * 100);
    CHECK(worst <= 0.05);
  }
  {  // weights 1..7: share of member i proportional to i
    std::vector<pr::RingMember> m;
    double total = 0;
    for (int i = 1; i <= 7; i++) { m.push_back({"w" + std::to_string(i), double(i)}); total += i; }
    pr::Ring r(m, kVnodes);
    std::map<std::string, size_t> count;
    for (uint64_t k : keys) count[owner_id(r, k)]++;
    double worst = 0;
    for (const auto& mm : m) worst = std::max(worst, std::abs(count[mm.id] / double(kKeys) / (mm.weight / total) - 1));
    std::printf("  ring: weights 1..7, worst share deviation %.2f%%\n", worst * 100);
    CHECK(worst <= 0.05);
  }
}

void test_ring_disruption() {
  const auto& keys = random_keys();
  pr::Ring seven(members_named("abcdefg"), kVnodes);
  pr::Ring eight(members_named("abcdefgh"), kVnodes);
  pr::Ring six(members_named("abdefg"), kVnodes);  // "c" removed
  size_t moved = 0, moved_elsewhere = 0, removed_wrong = 0;
  for (uint64_t k : keys) {
    const std::string before = owner_id(seven, k), after = owner_id(eight, k);
    if (before != after) { moved++; if (after != "h") moved_elsewhere++; }
    // Removing "c" may move only the keys "c" owned.
    if (before != "c" && owner_id(six, k) != before) removed_wrong++;
  }
  std::printf("  ring: adding an 8th member moved %.2f%% of keys (ideal %.2f%%)\n", moved * 100.0 / kKeys, 100.0 / 8);
  CHECK(moved <= 1.1 * kKeys / 8);
  CHECK(moved > 0);
  CHECK(moved_elsewhere == 0);
  CHECK(removed_wrong == 0);
}

// ---- router state -------------------------------------------------------------------

constexpr uint32_t kRouterVnodes = 64;

// A key whose ring target (for these members) is `id`: the ring is a pure function of the
// membership, so a standalone Ring predicts the router's choice.
uint64_t key_for(const std::vector<pr::RingMember>& m, const std::string& id) {
  pr::Ring r(m, kRouterVnodes);
  for (uint64_t k = 1;; k++)
    if (owner_id(r, pr::xxh3_64(&k, sizeof k, 0)) == id) return pr::xxh3_64(&k, sizeof k, 0);
}

struct Fixture {
  pr::RouterState st{kRouterVnodes, 64};
  int reader = st.acquire_reader();
  std::vector<pr::RingMember> members;
  explicit Fixture(const std::string& names) : members(members_named(names)) { st.set_instances(members); }
  ~Fixture() { st.release_reader(reader); }
  std::string id(const pr::PickResult& r) { return st.slot_id(static_cast<uint32_t>(r.slot)); }
  int64_t in_flight(const std::string& id) { return st.in_flight(reader, id); }
  // Hold `n` leases on `id` whatever its load: raises the threshold, so callers configure after.
  void hold(const std::string& id, int n, std::vector<uint32_t>* leases) {
    st.configure(pr::Strategy::PrefixAware, 4096, 1u << 30);
    const uint64_t k = key_for(members, id);
    for (int i = 0; i < n; i++) leases->push_back(static_cast<uint32_t>(st.pick(reader, k).slot));
  }
  void release_all(std::vector<uint32_t>* leases) {
    for (uint32_t s : *leases) CHECK(st.release(s));
    leases->clear();
  }
};

void test_prefix_overflow() {
  Fixture f("abcd");
  constexpr uint32_t T = 3;
  f.st.configure(pr::Strategy::PrefixAware, 4096, T);
  const uint64_t key = 0xC0FFEE;
  pr::Ring ring(f.members, kRouterVnodes);
  const std::string target = owner_id(ring, key);
  // The expected second home: the next distinct owner clockwise from the key's point.
  size_t pos = ring.find(key);
  while (ring.member(ring.owner(pos)).id == target) pos = ring.next(pos);
  const std::string second = ring.member(ring.owner(pos)).id;

  std::vector<uint32_t> leases;
  for (uint32_t i = 0; i < T; i++) {
    auto r = f.st.pick(f.reader, key);
    CHECK(f.id(r) == target && !r.overflow);
    leases.push_back(r.slot);
  }
  for (uint32_t i = 0; i < T; i++) {  // spills to the same second home until it is full
    auto r = f.st.pick(f.reader, key);
    CHECK(f.id(r) == second && r.overflow);
    leases.push_back(r.slot);
  }
  auto r = f.st.pick(f.reader, key);  // then to a third instance
  CHECK(r.overflow && f.id(r) != target && f.id(r) != second);
  leases.push_back(r.slot);
  CHECK(f.in_flight(target) == T && f.in_flight(second) == T);
  f.release_all(&leases);
  for (char c : std::string("abcd")) CHECK(f.in_flight(std::string(1, c)) == 0);
}

void test_all_full() {
  Fixture f("abc");
  std::vector<uint32_t> leases;
  f.hold("a", 4, &leases);
  f.hold("b", 3, &leases);
  f.hold("c", 2, &leases);
  f.st.configure(pr::Strategy::PrefixAware, 4096, 2);  // everyone at or over the threshold
  auto r = f.st.pick(f.reader, key_for(f.members, "a"));
  CHECK(f.id(r) == "c" && r.overflow);  // the fewest in flight
  leases.push_back(r.slot);
  r = f.st.pick(f.reader, key_for(f.members, "b"));  // b and c tie at 3: the ring's target wins
  CHECK(f.id(r) == "b" && !r.overflow);
  leases.push_back(r.slot);
  f.release_all(&leases);
  CHECK(f.in_flight("a") == 0 && f.in_flight("b") == 0 && f.in_flight("c") == 0);
}

// The engines' reported load (Slot::ext_in_flight): prefix_aware's threshold counts it only with
// engine_load_all, and it saturates rather than wraps; set_engine_load knows members only.
void test_engine_load() {
  Fixture f("abc");
  const uint64_t key = key_for(f.members, "a");
  pr::RoutingParams p;
  p.strategy = pr::Strategy::PrefixAware;
  p.threshold = 2;
  f.st.configure(p);
  CHECK(f.st.set_engine_load(f.reader, "a", 2, 0));
  CHECK(!f.st.set_engine_load(f.reader, "z", 2, 0));
  auto r = f.st.pick(f.reader, key);  // own counts only: a has room
  CHECK(f.id(r) == "a" && !r.overflow);
  CHECK(f.st.release(r.slot));
  p.engine_load_all = true;
  f.st.configure(p);
  r = f.st.pick(f.reader, key);  // a is at 2 from other clients: spills
  CHECK(f.id(r) != "a" && r.overflow);
  CHECK(f.st.release(r.slot));
  CHECK(f.in_flight("a") == 0);
  pr::Slot s;
  s.ext_in_flight.store(UINT32_MAX);
  s.acquire();
  CHECK(s.load() == static_cast<uint32_t>(pr::kCountMask));  // saturated, not wrapped to 0
  CHECK(!s.try_acquire_load(10));
  s.ext_in_flight.store(3);
  CHECK(s.try_acquire_load(5) && s.in_flight() == 2 && !s.try_acquire_load(5));
  s.ext_prefill.store(7);
  s.add_prefill(5);
  CHECK(s.queued() == 12);
}

void test_release_backstop() {
  Fixture f("ab");
  f.st.configure(pr::Strategy::PrefixAware, 4096, 10);
  auto r = f.st.pick(f.reader, 99);
  CHECK(r.slot >= 0);
  CHECK(f.st.release(r.slot));
  CHECK(!f.st.release(r.slot));   // nothing in flight any more
  CHECK(!f.st.release(63));       // a free slot
  CHECK(!f.st.release(64));       // past the table
  CHECK(!f.st.release(~0u));
  CHECK(f.in_flight("a") == 0 && f.in_flight("b") == 0);
}

void test_draining() {
  Fixture f("abc");
  f.st.configure(pr::Strategy::PrefixAware, 4096, 10);
  auto r = f.st.pick(f.reader, key_for(f.members, "b"));
  CHECK(f.id(r) == "b");
  CHECK(f.st.set_instances(members_named("ac")).empty());
  CHECK(f.in_flight("b") == 1);  // still visible while draining
  CHECK(f.st.slots_in_use() == 3);
  // A new instance must not take the draining slot.
  CHECK(f.st.set_instances(members_named("acz")).empty());
  auto z = f.st.pick(f.reader, key_for(members_named("acz"), "z"));
  CHECK(f.id(z) == "z" && z.slot != r.slot);
  CHECK(f.st.slots_in_use() == 4);
  CHECK(f.st.release(r.slot));
  CHECK(f.in_flight("b") == -1);  // gone once drained
  CHECK(f.in_flight("z") == 1);   // the release hit b's counter, not z's
  CHECK(f.st.slots_in_use() == 3);
  CHECK(f.st.release(z.slot));

  // Re-adding an id while it drains gives it its old counter back.
  auto r2 = f.st.pick(f.reader, key_for(members_named("acz"), "a"));
  CHECK(f.st.set_instances(members_named("cz")).empty());
  CHECK(f.in_flight("a") == 1);
  f.members = members_named("acz");
  CHECK(f.st.set_instances(f.members).empty());
  CHECK(f.in_flight("a") == 1);
  auto r3 = f.st.pick(f.reader, key_for(f.members, "a"));
  CHECK(r3.slot == r2.slot && r3.generation == r2.generation);
  CHECK(f.in_flight("a") == 2);
  CHECK(f.st.release(r2.slot) && f.st.release(r3.slot));
  CHECK(f.in_flight("a") == 0);
  CHECK(f.st.slots_in_use() == 3);
}

void test_least_outstanding() {
  Fixture f("abc");
  std::vector<uint32_t> leases;
  f.hold("a", 2, &leases);
  f.hold("c", 1, &leases);
  f.st.configure(pr::Strategy::LeastOutstanding, 4096, 10);
  auto r = f.st.pick(f.reader, 1);
  CHECK(f.id(r) == "b");  // 2, 0, 1 in flight
  leases.push_back(r.slot);
  r = f.st.pick(f.reader, 1);  // 2, 1, 1: b or c
  CHECK(f.id(r) == "b" || f.id(r) == "c");
  leases.push_back(r.slot);
  f.release_all(&leases);
  // From idle, three picks held at once land on three different instances.
  std::set<std::string> seen;
  for (int i = 0; i < 3; i++) { auto p = f.st.pick(f.reader, 1); seen.insert(f.id(p)); leases.push_back(p.slot); }
  CHECK(seen.size() == 3);
  f.release_all(&leases);
}

void test_random() {
  Fixture f("abcd");
  f.st.configure(pr::Strategy::Random, 4096, 10);
  std::map<std::string, int> count;
  for (int i = 0; i < 4000; i++) {
    auto r = f.st.pick(f.reader, 1);  // same key every time: the key must not matter
    count[f.id(r)]++;
    CHECK(f.st.release(r.slot));
  }
  CHECK(count.size() == 4);
  for (const auto& kv : count) CHECK(kv.second > 800);  // 1000 expected each
}

void test_empty() {
  pr::RouterState st(kRouterVnodes, 8);
  const int reader = st.acquire_reader();
  CHECK(st.pick(reader, 1).slot == -1);
  CHECK(st.slots_in_use() == 0);
  CHECK(st.in_flight(reader, "x") == -1);
  st.release_reader(reader);
}

// Backstops for what the TypeScript layer already rejects: duplicate ids, absurd weights.
void test_bad_membership() {
  pr::RouterState st(kRouterVnodes, 8);
  const int reader = st.acquire_reader();
  CHECK(!st.set_instances({{"a", 1}, {"b", 1}, {"a", 2}}).empty());
  CHECK(st.slots_in_use() == 0);  // rejected whole: nothing allocated
  CHECK(st.set_instances({{"a", 1e300}, {"b", 1}}).empty());  // clamped, not undefined behaviour
  CHECK(st.pick(reader, 7).slot >= 0);
  st.release_reader(reader);
}

// Groups: candidates limited to members listing the group; unknown group reported.
void test_groups() {
  pr::RouterState st(kRouterVnodes, 8);
  const int reader = st.acquire_reader();
  CHECK(st.set_instances({{"a", 1, {"m", "lora"}}, {"b", 1, {"m"}}, {"c", 1, {"m", "lora"}}}).empty());
  const std::string lora = "lora", none = "none";
  std::set<std::string> seen;
  for (uint64_t k = 0; k < 2000; k++) {
    auto r = st.pick(reader, k * 0x9E3779B97F4A7C15ULL, &lora);
    CHECK(r.slot >= 0);
    seen.insert(st.slot_id(static_cast<uint32_t>(r.slot)));
    CHECK(st.release(static_cast<uint32_t>(r.slot)));
  }
  CHECK(seen == (std::set<std::string>{"a", "c"}));
  auto r = st.pick(reader, 1, &none);
  CHECK(r.slot == -1 && r.no_group);
  st.release_reader(reader);
}

// Prefix index: longest match per slot, LRU eviction tail-first, capacity, clearing.
void test_prefix_index() {
  pr::PrefixIndex idx(4);
  idx.set_capacity(0, 8);
  idx.set_capacity(1, 8);
  std::vector<uint8_t> text(64 * 6);
  for (size_t i = 0; i < text.size(); i++) text[i] = static_cast<uint8_t>(i * 31);
  uint64_t h[6];
  CHECK(pr::chain_hashes(text.data(), text.size(), 64, 9, h) == 6);
  CHECK(h[1] == pr::xxh3_64(text.data() + 64, 64, h[0]));
  idx.insert(0, h, 4);  // slot 0 was sent blocks 0..3
  idx.insert(1, h, 2);  // slot 1 blocks 0..1
  std::vector<uint32_t> match(4, 0), touched;
  idx.match(h, 6, match, touched);
  CHECK(match[0] == 4 && match[1] == 2 && match[2] == 0);
  CHECK(touched.size() == 2);
  CHECK(idx.entries() == 6);
  // Capacity 8 on slot 1: a new 6-block prefix evicts slot 1's least recent blocks first.
  uint64_t other[6];
  std::vector<uint8_t> text2(text.rbegin(), text.rend());
  pr::chain_hashes(text2.data(), text2.size(), 64, 9, other);
  idx.insert(1, other, 6);
  CHECK(idx.entries() == 4 + 8);
  for (uint32_t s : touched) match[s] = 0;
  touched.clear();
  idx.match(h, 6, match, touched);
  CHECK(match[1] == 2);  // blocks 0,1 were inserted most-recent-first and survive
  idx.set_capacity(1, 3);
  CHECK(idx.entries() == 4 + 3);
  idx.clear_slot(0);
  CHECK(idx.entries() == 3);
  CHECK(idx.memory_bytes() > 0);
}

// longest_prefix through the router: the longer match wins over the ring's target.
void test_longest_prefix() {
  pr::RouterState st(kRouterVnodes, 8);
  const int reader = st.acquire_reader();
  CHECK(st.set_instances({{"a", 1}, {"b", 1}, {"c", 1}}).empty());
  st.configure(pr::Strategy::LongestPrefix, 65536, 10);
  std::vector<uint8_t> text(64 * 10, 7);
  for (size_t i = 0; i < text.size(); i++) text[i] = static_cast<uint8_t>(i * 13 + 1);
  uint64_t h[10];
  pr::chain_hashes(text.data(), text.size(), 64, 0, h);
  auto first = st.pick(reader, pr::xxh3_64(text.data(), 5 * 64, 0), nullptr, h, 5);
  CHECK(first.slot >= 0);
  st.release(static_cast<uint32_t>(first.slot));
  int same = 0;
  // Longer prompts, keys all over the ring; fewer than kCommonMin of them, so the prompt is
  // still this instance's own rather than common.
  for (uint64_t k = 1; k <= 12; k++) {
    auto r = st.pick(reader, k * 0x9E3779B97F4A7C15ULL, nullptr, h, 10);
    same += r.slot == first.slot;
    st.release(static_cast<uint32_t>(r.slot), r.prefill);
  }
  CHECK(same == 12);
  CHECK(st.index_entries() == 10);
  st.release_reader(reader);
}

// Chained block hashes of a deterministic prompt: `shared` blocks common to every prompt with
// the same `base`, then blocks of its own (`own` seeds them).
std::vector<uint64_t> prompt_blocks(uint8_t base, uint8_t own, size_t shared, size_t total) {
  std::vector<uint8_t> text(64 * total);
  for (size_t i = 0; i < text.size(); i++)
    text[i] = static_cast<uint8_t>(i < 64 * shared ? i * 7 + base * 31 + 1 : i * 11 + own * 17 + base * 5 + 3);
  std::vector<uint64_t> h(total);
  pr::chain_hashes(text.data(), text.size(), 64, 0, h.data());
  return h;
}

pr::RouterState* longest_router(const char* names, uint32_t choices, double load_factor, uint32_t threshold = 1024) {
  auto* st = new pr::RouterState(kRouterVnodes, 16);
  CHECK(st->set_instances(members_named(names)).empty());
  pr::RoutingParams p;
  p.strategy = pr::Strategy::LongestPrefix;
  p.prefix_length = 65536;
  p.threshold = threshold;
  p.placement_choices = choices;
  p.load_factor = load_factor;
  st->configure(p);
  return st;
}

// Queued prefill: a pick adds the blocks the instance must compute; first_token and release
// give them back, and the counters end at zero.
void test_longest_prefix_prefill_accounting() {
  std::unique_ptr<pr::RouterState> st(longest_router("abc", 1, 2));
  const int reader = st->acquire_reader();
  auto h = prompt_blocks(1, 1, 0, 8);
  auto r = st->pick(reader, 42, nullptr, h.data(), h.size());
  CHECK(r.slot >= 0 && r.prefill == 8);  // nobody held any of it
  auto again = st->pick(reader, 42, nullptr, h.data(), h.size());
  CHECK(again.slot == r.slot && again.prefill == 0);  // the index now says it is there
  auto queued = [&] {
    uint64_t sum = 0;
    for (const auto& i : st->instances(reader)) sum += i.prefill;
    return sum;
  };
  CHECK(queued() == 8);
  st->first_token(static_cast<uint32_t>(r.slot), r.prefill);
  CHECK(queued() == 0);
  st->first_token(static_cast<uint32_t>(r.slot), 1000);  // more than queued: saturates at 0
  CHECK(queued() == 0);
  CHECK(st->release(static_cast<uint32_t>(r.slot), 0));
  CHECK(st->release(static_cast<uint32_t>(again.slot), 0));
  auto third = st->pick(reader, 7, nullptr, prompt_blocks(2, 2, 0, 5).data(), 5);
  CHECK(queued() == 5);
  CHECK(st->release(static_cast<uint32_t>(third.slot), third.prefill));  // released before its first token
  CHECK(queued() == 0);
  CHECK(!st->release(static_cast<uint32_t>(third.slot), 5));  // nothing in flight: the queue is not touched
  for (const auto& i : st->instances(reader)) CHECK(i.in_flight == 0 && i.prefill == 0);
  st->release_reader(reader);
}

// A block every prompt shares, held by the first instance that computed it, with no threshold
// in reach: the bounded load spreads concurrent requests instead of piling them on the holder.
void test_longest_prefix_no_collapse() {
  std::unique_ptr<pr::RouterState> st(longest_router("abcd", 1, 1.5));
  const int reader = st->acquire_reader();
  std::vector<pr::PickResult> held;
  std::set<std::string> used;
  for (uint8_t i = 0; i < 40; i++) {
    auto h = prompt_blocks(9, i, 6, 8);  // 6 of 8 blocks shared: a fifth more than anyone else
    const uint64_t key = pr::xxh3_64(&i, 1, 0);  // each prompt's own key: homes all over the ring
    auto r = st->pick(reader, key, nullptr, h.data(), h.size());
    held.push_back(r);
    used.insert(st->slot_id(static_cast<uint32_t>(r.slot)));
  }
  // Owners of the shared blocks keep them while their queues are short; the bound spreads the
  // rest: three instances share the 40, none above the cap.
  CHECK(used.size() >= 3);
  for (const auto& i : st->instances(reader)) CHECK(i.in_flight <= 17);  // ceil(1.5 × 40 / 4) + 2
  for (auto& r : held) CHECK(st->release(static_cast<uint32_t>(r.slot), r.prefill));
  st->release_reader(reader);
}

// The owner of a conversation keeps it while its queue is short, and loses it to another
// candidate once the prefill queued there outweighs what the match saves.
void test_longest_prefix_queue_outweighs_match() {
  std::unique_ptr<pr::RouterState> st(longest_router("abc", 2, 100));  // the home and one more may take it
  const int reader = st->acquire_reader();
  auto convo = prompt_blocks(3, 3, 0, 10);
  const uint64_t key = 77;
  auto first = st->pick(reader, key, nullptr, convo.data(), 4);  // the first turn: 4 blocks
  st->first_token(static_cast<uint32_t>(first.slot), first.prefill);
  CHECK(st->release(static_cast<uint32_t>(first.slot), 0));
  const std::string owner = st->slot_id(static_cast<uint32_t>(first.slot));
  // Another request queues a large prefill on the owner (a different key whose home is the
  // owner, placed by hash alone).
  std::vector<pr::RingMember> m = members_named("abc");
  auto big = prompt_blocks(4, 4, 0, 64);
  st->configure_index(64, 65536, 1);
  auto blocker = st->pick(reader, key_for(m, owner), nullptr, big.data(), big.size());
  st->configure_index(64, 65536, 2);
  CHECK(st->slot_id(static_cast<uint32_t>(blocker.slot)) == owner && blocker.prefill == 64);
  // The next turn (10 blocks, 4 held by the owner): 2 × 6 + 64 queued there, 2 × 10 elsewhere.
  auto next = st->pick(reader, key, nullptr, convo.data(), convo.size());
  CHECK(st->slot_id(static_cast<uint32_t>(next.slot)) != owner && next.overflow);
  CHECK(st->release(static_cast<uint32_t>(next.slot), next.prefill));
  // Once the blocker's prefill is done, the owner is cheapest again.
  st->first_token(static_cast<uint32_t>(blocker.slot), blocker.prefill);
  CHECK(st->release(static_cast<uint32_t>(blocker.slot), 0));
  st->release_reader(reader);
}

// Balanced placement: a prompt nobody holds goes to the least queued of the key's first three
// members; placed prompts stay where they are.
void test_longest_prefix_balanced() {
  std::unique_ptr<pr::RouterState> st(longest_router("abc", 3, 100));
  const int reader = st->acquire_reader();
  const uint64_t key = 0x1234567887654321ULL;  // one key: the same home for every prompt
  pr::PickResult placed[3];
  for (uint8_t i = 0; i < 3; i++) {
    auto h = prompt_blocks(20 + i, 0, 0, 4);
    placed[i] = st->pick(reader, key, nullptr, h.data(), h.size());  // held: their prefill stays queued
    CHECK(placed[i].slot >= 0 && !placed[i].overflow);
  }
  CHECK(placed[0].slot != placed[1].slot && placed[1].slot != placed[2].slot && placed[0].slot != placed[2].slot);
  for (auto& r : placed) CHECK(st->release(static_cast<uint32_t>(r.slot), r.prefill));
  for (uint8_t i = 0; i < 3; i++) {
    auto h = prompt_blocks(20 + i, 0, 0, 4);
    auto again = st->pick(reader, key, nullptr, h.data(), h.size());
    CHECK(again.slot == placed[i].slot && again.prefill == 0);
    CHECK(st->release(static_cast<uint32_t>(again.slot), 0));
  }
  st->release_reader(reader);
}

// configure() publishes parameters with the membership: a pick sees all of a change or none.
void test_configure_publishes() {
  pr::RouterState st(kRouterVnodes, 8);
  const int reader = st.acquire_reader();
  CHECK(st.set_instances(members_named("ab")).empty());
  pr::RoutingParams p;
  p.strategy = pr::Strategy::LongestPrefix;
  p.threshold = 3;
  p.block_bytes = 128;
  p.load_factor = 1.25;
  st.configure(p);
  const pr::RoutingParams got = st.params();
  CHECK(got.strategy == pr::Strategy::LongestPrefix && got.threshold == 3 && got.block_bytes == 128 && got.load_factor == 1.25);
  {
    pr::SnapshotGuard g(st, reader);
    CHECK(g.params().block_bytes == 128);
  }
  CHECK(st.instances(reader).size() == 2);  // the membership came along
  CHECK(pr::strategy_index("longest_prefix") == static_cast<int>(pr::Strategy::LongestPrefix));
  CHECK(pr::strategy_index("prefix_aware") == static_cast<int>(pr::Strategy::PrefixAware));
  CHECK(pr::strategy_index("nope") == -1);
  st.release_reader(reader);
}

// ---- multi-thread stress -------------------------------------------------------------

void test_stress() {
  pr::RouterState st(kRouterVnodes, 64);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> failures{0}, picks{0};
  auto worker = [&](int seed) {
    const int reader = st.acquire_reader();
    std::mt19937_64 rng(seed);
    std::vector<uint32_t> held;  // a few leases held at once, like concurrent requests
    while (!stop.load(std::memory_order_relaxed)) {
      auto r = st.pick(reader, rng());
      if (r.slot >= 0) { held.push_back(static_cast<uint32_t>(r.slot)); picks++; }
      if (held.size() > 4 || (!held.empty() && rng() % 3 == 0)) {
        const size_t i = rng() % held.size();
        if (!st.release(held[i])) failures++;
        held.erase(held.begin() + static_cast<long>(i));
      }
    }
    for (uint32_t s : held) if (!st.release(s)) failures++;
    st.release_reader(reader);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) threads.emplace_back(worker, t + 1);

  std::mt19937_64 rng(99);
  const char pool[] = "abcdefghijkl";
  std::vector<pr::RingMember> m;
  size_t swaps = 0, swap_errors = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < until) {
    m.clear();
    for (int i = 0; i < 12; i++)
      if (rng() % 2) m.push_back({std::string(1, pool[i]), 1.0 + rng() % 3});
    st.configure(static_cast<pr::Strategy>(rng() % 3), 4096, 1 + rng() % 4);
    if (!st.set_instances(m).empty()) swap_errors++;
    swaps++;
  }
  stop = true;
  for (auto& t : threads) t.join();
  std::printf("  stress: %zu membership swaps, %llu picks on 4 threads\n", swaps,
              static_cast<unsigned long long>(picks.load()));
  CHECK(failures == 0);
  CHECK(swap_errors == 0);
  CHECK(picks > 0);
  const int reader = st.acquire_reader();
  auto inst = st.instances(reader);
  CHECK(inst.size() == m.size());
  size_t busy = 0;
  for (const auto& i : inst) busy += i.in_flight != 0;
  for (int i = 0; i < 12; i++) {  // removed ids must have fully drained too
    const int64_t n = st.in_flight(reader, std::string(1, pool[i]));
    busy += n != 0 && n != -1;
  }
  CHECK(busy == 0);
  CHECK(st.slots_in_use() == m.size());
  st.release_reader(reader);
}

// ---- shared state (several processes on one region) ----------------------------------

// A process that attached sees the creator's membership and parameters, shares counters and
// the prefix index, and may not change membership or parameters. On Linux the state is a
// memfd that others open through the creator's /proc/<pid>/fd.
void test_shared_attach() {
  std::string err;
  auto creator = pr::RouterState::create_shared("/dev/shm", true, kRouterVnodes, 64, &err);
  CHECK(creator != nullptr);
  if (!creator) return;
  const std::string path = creator->shared_path();
  CHECK(path.rfind("/proc/" + std::to_string(::getpid()) + "/fd/", 0) == 0);
  auto members = members_named("abcd");
  CHECK(creator->set_instances(members).empty());
  creator->configure(pr::Strategy::PrefixAware, 4096, 2);
  auto other = pr::RouterState::attach(path, &err);
  CHECK(other != nullptr);
  if (!other) return;
  CHECK(!other->writable() && creator->writable());
  CHECK(!other->set_instances(members_named("x")).empty());
  const int rc = creator->acquire_reader(), ro = other->acquire_reader();
  CHECK(other->params().threshold == 2);
  const uint64_t key = key_for(members, "b");
  auto r1 = creator->pick(rc, key);
  auto r2 = other->pick(ro, key);
  CHECK(other->slot_id(r1.slot) == "b" && r2.slot == r1.slot && !r2.overflow);
  auto r3 = other->pick(ro, key);  // b is at the threshold in both processes' eyes
  CHECK(r3.overflow && creator->slot_id(r3.slot) != "b");
  CHECK(creator->in_flight(rc, "b") == 2 && other->in_flight(ro, "b") == 2);
  // Membership published by the creator reaches the other's next pick.
  CHECK(creator->set_instances(members_named("bz")).empty());
  auto r4 = other->pick(ro, key_for(members_named("bz"), "z"));
  CHECK(other->slot_id(r4.slot) == "z");
  CHECK(other->release(r4.slot) && other->release(r3.slot) && other->release(r2.slot) && creator->release(r1.slot));
  CHECK(creator->in_flight(rc, "b") == 0 && creator->slots_in_use() == 2);
  // Not a region: refused with a reason.
  CHECK(pr::RouterState::attach("/nonexistent/region", &err) == nullptr && err.find("/nonexistent/region") != std::string::npos);
  other->release_reader(ro);
  creator->release_reader(rc);
  other.reset();
  creator.reset();
  CHECK(::access(path.c_str(), F_OK) != 0);  // the creator's close lets the memory go
}

std::vector<std::string> state_files(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d))
    if (std::string(e->d_name).rfind(pr::Region::kFilePrefix, 0) == 0) out.push_back(dir + "/" + e->d_name);
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// The file a creator keeps in a directory: locked while it lives, removed by its close, and
// removed by the next creator in that directory when it crashed; never one whose creator lives.
void test_shared_file() {
  char tmpl[] = "/tmp/prefix-router-unit-XXXXXX";
  const char* made = ::mkdtemp(tmpl);
  CHECK(made != nullptr);
  if (made == nullptr) return;
  const std::string dir = made;
  // A creator that crashes: its file stays, its lock goes with it.
  const pid_t child = ::fork();
  if (child == 0) {
    std::string e;
    auto st = pr::RouterState::create_shared(dir, false, kRouterVnodes, 16, &e);
    ::_exit(st ? 0 : 2);  // no destructors: as a SIGKILL would leave it
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(state_files(dir).size() == 1);
  // An unlocked file whose pid lives (a creator between open and lock, or an older version's).
  const std::string live = dir + "/" + pr::Region::kFilePrefix + std::to_string(::getppid()) + "-1-1";
  const int fd = ::open(live.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  CHECK(fd >= 0);
  ::close(fd);

  std::string err;
  auto a = pr::RouterState::create_shared(dir, false, kRouterVnodes, 16, &err);
  CHECK(a != nullptr);
  if (!a) return;
  CHECK(a->shared_path().rfind(dir + "/" + pr::Region::kFilePrefix + std::to_string(::getpid()) + "-", 0) == 0);
  std::vector<std::string> expect = {live, a->shared_path()};
  std::sort(expect.begin(), expect.end());
  CHECK(state_files(dir) == expect);  // the crashed creator's file went
  // A second creator in this process sweeps too, and leaves the first's locked file alone.
  auto b = pr::RouterState::create_shared(dir, false, kRouterVnodes, 16, &err);
  CHECK(b != nullptr && state_files(dir).size() == 3);
  auto other = pr::RouterState::attach(a->shared_path(), &err);
  CHECK(other != nullptr && !other->writable());
  const std::string a_path = a->shared_path();
  other.reset();
  a.reset();
  b.reset();
  CHECK(state_files(dir) == std::vector<std::string>{live});
  CHECK(::access(a_path.c_str(), F_OK) != 0);
  ::unlink(live.c_str());
  ::rmdir(dir.c_str());
}

// fork(): a child attaches, takes leases and queued prefill, and is killed holding them;
// release_process(child) takes exactly its share off the counters.
void test_shared_dead_process() {
  std::string err;
  auto st = pr::RouterState::create_shared("/dev/shm", true, kRouterVnodes, 64, &err);
  CHECK(st != nullptr);
  if (!st) return;
  const std::string path = st->shared_path();
  auto members = members_named("abc");
  CHECK(st->set_instances(members).empty());
  st->configure(pr::Strategy::LeastOutstanding, 4096, 100);
  const int reader = st->acquire_reader();
  auto mine = st->pick(reader, 1);  // the parent's own lease must survive the child's release
  int ready[2];
  CHECK(::pipe(ready) == 0);
  const pid_t child = ::fork();
  if (child == 0) {
    std::string e;
    auto other = pr::RouterState::attach(path, &e);
    if (!other) ::_exit(2);
    const int r = other->acquire_reader();
    for (int i = 0; i < 7; i++) other->pick(r, static_cast<uint64_t>(i));
    const char ok = 1;
    if (::write(ready[1], &ok, 1) != 1) ::_exit(3);
    for (;;) ::pause();
  }
  char byte = 0;
  CHECK(::read(ready[0], &byte, 1) == 1 && byte == 1);
  int64_t total = 0;
  for (char c : std::string("abc")) total += st->in_flight(reader, std::string(1, c));
  CHECK(total == 8);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK(st->release_process(child) == 7);
  CHECK(st->release_process(child) == 0);
  total = 0;
  for (char c : std::string("abc")) total += st->in_flight(reader, std::string(1, c));
  CHECK(total == 1);
  CHECK(st->release(mine.slot));
  ::close(ready[0]);
  ::close(ready[1]);
  st->release_reader(reader);
}

// A writer churns membership through fresh ids (so slots are freed and reused all the time)
// while readers pick, on the creator's state and on a second mapping attached to it. Every
// lease must be on the instance the pick's snapshot names, and everything drains to zero.
void test_shared_churn() {
  std::string err;
  auto creator = pr::RouterState::create_shared("/dev/shm", true, kRouterVnodes, 16, &err);
  CHECK(creator != nullptr);
  if (!creator) return;
  auto other = pr::RouterState::attach(creator->shared_path(), &err);
  CHECK(creator != nullptr && other != nullptr);
  if (!creator || !other) return;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> wrong{0}, failures{0}, picks{0};
  auto worker = [&](pr::RouterState* st, int seed) {
    const int reader = st->acquire_reader();
    std::mt19937_64 rng(seed);
    std::vector<std::pair<uint32_t, uint32_t>> held;  // (slot, queued prefill)
    while (!stop.load(std::memory_order_relaxed)) {
      uint32_t slot, prefill;
      std::string expected;
      {
        pr::SnapshotGuard g(*st, reader);
        // A few prompts' chained blocks, for the rounds that run longest_prefix.
        const uint64_t conv = rng() % 8, blocks[3] = {conv, conv * 7 + 1, conv * 13 + 2};
        auto r = st->pick(g, rng(), nullptr, blocks, 3);
        if (r.slot < 0) continue;
        slot = static_cast<uint32_t>(r.slot);
        prefill = r.prefill;
        const auto& s = g.snap();
        for (size_t m = 0; m < s.slot_of.size(); m++)
          if (s.slot_of[m] == slot) expected = s.ring->member(m).id;
      }
      picks++;
      if (expected.empty() || st->slot_id(slot) != expected) wrong++;
      held.emplace_back(slot, prefill);
      if (held.size() > 3 || rng() % 2 == 0) {
        const size_t i = rng() % held.size();
        if (!st->release(held[i].first, held[i].second)) failures++;
        held.erase(held.begin() + static_cast<long>(i));
      }
    }
    for (auto [s, p] : held) if (!st->release(s, p)) failures++;
    st->release_reader(reader);
  };
  std::vector<std::thread> threads;
  threads.emplace_back(worker, creator.get(), 1);
  threads.emplace_back(worker, other.get(), 2);
  threads.emplace_back(worker, other.get(), 3);
  // Counts, not time: enough rounds, and picks on every thread meanwhile.
  size_t rounds = 0, errors = 0;
  std::vector<pr::RingMember> m;
  while (rounds < 400 || picks.load() < 3000) {
    m.clear();
    for (size_t k = 0; k < 4; k++) m.push_back({"id-" + std::to_string(rounds + k), 1.0});
    creator->configure(static_cast<pr::Strategy>(rounds % 4), 4096, 1 + rounds % 3);
    if (!creator->set_instances(m).empty()) errors++;
    rounds++;
  }
  stop = true;
  for (auto& t : threads) t.join();
  std::printf("  shared churn: %zu rounds, %llu picks on 3 threads over 2 mappings\n", rounds,
              static_cast<unsigned long long>(picks.load()));
  CHECK(wrong == 0);
  CHECK(failures == 0);
  CHECK(errors == 0);
  const int reader = creator->acquire_reader();
  for (const auto& i : creator->instances(reader)) CHECK(i.in_flight == 0 && i.prefill == 0);
  CHECK(creator->slots_in_use() == 4);
  creator->release_reader(reader);
}

// A process that dies holding the index's mutex (mid-insert, as far as anyone knows) leaves
// it to the next locker, which clears the index instead of blocking forever.
void test_shared_index_owner_died() {
  const uint32_t slots = 4, nodes = 1024;
  const size_t bytes = pr::PrefixIndex::area_bytes(slots, nodes);
  void* area = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(area != MAP_FAILED);
  if (area == MAP_FAILED) return;
  {
    pr::PrefixIndex idx(area, slots, nodes, true);
    const uint64_t h[3] = {11, 22, 33};
    {
      std::lock_guard<pr::IndexMutex> l(idx.mutex());
      idx.set_capacity(1, 100);
      idx.insert(1, h, 3);
      CHECK(idx.entries() == 3);
    }
    const pid_t child = ::fork();
    if (child == 0) {
      pr::PrefixIndex other(area, slots, nodes, false);
      other.mutex().lock();
      ::_exit(0);  // never unlocks
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    std::lock_guard<pr::IndexMutex> l(idx.mutex());  // would block forever on a plain mutex
    CHECK(idx.entries() == 0);
    idx.insert(1, h, 3);  // capacities survive the clearing; the index works on
    std::vector<uint32_t> match(slots, 0), touched;
    idx.match(h, 3, match, touched);
    CHECK(match[1] == 3 && idx.entries() == 3);
  }
  ::munmap(area, bytes);
}

}  // namespace

// The hashes a pick routes by, as each strategy's traits plan them (strategy/request_key.h):
// the key alone for prefix_aware; for longest_prefix the chain too, to match_length, and a
// chat's key cut at its anchor, whose whole blocks are the opening.
void test_request_key() {
  pr::RoutingParams p;
  p.prefix_length = 1024;
  p.match_length = 4096;
  p.block_bytes = 16;
  const auto& reg = pr::strategy_registry();
  const pr::KeyPlan hashed = pr::key_plan(reg[pr::strategy_index("prefix_aware")].impl.traits(), p);
  const pr::KeyPlan chained = pr::key_plan(reg[pr::strategy_index("longest_prefix")].impl.traits(), p);
  CHECK(hashed.block_bytes == 0 && hashed.span == 1024 && hashed.prefix == 1024);
  CHECK(chained.block_bytes == 16 && chained.span == 4096 && chained.prefix == 1024);
  std::vector<uint8_t> text(200);
  for (size_t i = 0; i < text.size(); i++) text[i] = static_cast<uint8_t>('a' + i % 26);
  std::vector<uint64_t> chain(pr::chain_capacity(chained, text.size()) + 1), want(chain.size());
  // Without a chain the anchor is ignored: the key is the first key_bytes.
  pr::RequestKey k = pr::hash_request(text.data(), text.size(), 150, true, 100, hashed, 7, chain.data());
  CHECK(k.key == pr::xxh3_64(text.data(), 150, 7) && k.blocks == 0 && k.anchor_blocks == 0);
  // With one: the key ends at the anchor, and its 6 whole blocks are the opening.
  k = pr::hash_request(text.data(), text.size(), 150, true, 100, chained, 7, chain.data());
  CHECK(k.key == pr::xxh3_64(text.data(), 100, 7));
  CHECK(k.blocks == 12 && pr::chain_hashes(text.data(), text.size(), 16, 7, want.data()) == 12);
  CHECK(std::equal(want.begin(), want.begin() + 12, chain.begin()));
  CHECK(k.anchor_blocks == 6);
  // An anchor past the text (SIZE_MAX) still marks a first turn: the key's blocks, at least 1.
  k = pr::hash_request(text.data(), text.size(), 150, true, SIZE_MAX, chained, 7, chain.data());
  CHECK(k.key == pr::xxh3_64(text.data(), 150, 7) && k.anchor_blocks == 9);
  k = pr::hash_request(text.data(), 10, 150, true, SIZE_MAX, chained, 7, chain.data());
  CHECK(k.blocks == 0 && k.anchor_blocks == 0);
  // No anchor: the whole key, no opening.
  k = pr::hash_request(text.data(), text.size(), 150, false, SIZE_MAX, chained, 7, chain.data());
  CHECK(k.key == pr::xxh3_64(text.data(), 150, 7) && k.blocks == 12 && k.anchor_blocks == 0);
}

int main() {
  struct { const char* name; void (*fn)(); } tests[] = {
      {"xxh3 vs reference", test_xxh3},
      {"ring deterministic", test_ring_deterministic},
      {"ring balance", test_ring_balance},
      {"ring minimal disruption", test_ring_disruption},
      {"router prefix_aware overflow", test_prefix_overflow},
      {"router all at threshold", test_all_full},
      {"router release backstop", test_release_backstop},
      {"router engine load", test_engine_load},
      {"router draining leases", test_draining},
      {"router least_outstanding_requests", test_least_outstanding},
      {"router random", test_random},
      {"router empty", test_empty},
      {"router bad membership backstops", test_bad_membership},
      {"router groups", test_groups},
      {"prefix index", test_prefix_index},
      {"router longest_prefix", test_longest_prefix},
      {"router longest_prefix queued prefill", test_longest_prefix_prefill_accounting},
      {"router longest_prefix no collapse", test_longest_prefix_no_collapse},
      {"router longest_prefix queue outweighs match", test_longest_prefix_queue_outweighs_match},
      {"router longest_prefix balanced", test_longest_prefix_balanced},
      {"router configure publishes", test_configure_publishes},
      {"request key by strategy traits", test_request_key},
      {"router multi-thread stress", test_stress},
      {"shared state attach", test_shared_attach},
      {"shared state file", test_shared_file},
      {"shared state dead process", test_shared_dead_process},
      {"shared state membership churn", test_shared_churn},
      {"shared index owner died", test_shared_index_owner_died},
  };
  for (const auto& t : tests) {
    std::printf("%s\n", t.name);
    t.fn();
  }

  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
