// Unit tests for the shared region as an attaching process reads it: a header or a membership
// record another process wrote is not trusted (a forged process count, a record torn by a
// creator that died mid-write). Built and run with sanitizers by native/test/run.sh.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "../router.h"

namespace {

constexpr uint32_t kVnodes = 160;

std::vector<pr::RingMember> named(const std::string& ids) {
  std::vector<pr::RingMember> out;
  for (char c : ids) out.push_back({std::string(1, c), 1.0});
  return out;
}

// The header says the process table has more rows than pids[] holds: attach refuses it, rather
// than claiming a row past the array (UBSan stops the run there when it does not).
void test_attach_bounds_processes() {
  std::string err;
  // One slot: the held rows of 64 processes and of 200 both fit in one page, so the layout
  // check alone does not see the forged count.
  auto creator = pr::RouterState::create_shared("/dev/shm", true, kVnodes, 1, &err);
  CHECK(creator != nullptr);
  if (!creator) return;
  auto raw = pr::Region::attach(creator->shared_path(), &err);
  CHECK(raw != nullptr);
  if (!raw) return;
  pr::RegionHeader* h = raw->header();
  h->processes = 200;
  // Every real row taken by a live process (this one): a claim would look past them.
  for (uint32_t row = 0; row < pr::kMaxProcesses; row++) h->pids[row].store(static_cast<int32_t>(::getpid()));
  err.clear();
  auto other = pr::RouterState::attach(creator->shared_path(), &err);
  CHECK(other == nullptr);
  CHECK(err.find("200") != std::string::npos && err.find("64") != std::string::npos);
  if (other == nullptr) std::printf("  refused: %s\n", err.c_str());
  h->processes = pr::kMaxProcesses;
  for (uint32_t row = 1; row < pr::kMaxProcesses; row++) h->pids[row].store(0);
}

// A creator with members `ids`, and a router attached to its region (in this process: a
// second mapping, read as another process would).
struct Pair {
  std::unique_ptr<pr::RouterState> creator, other;
};
Pair attached_pair(const std::string& ids) {
  std::string err;
  Pair p;
  p.creator = pr::RouterState::create_shared("/dev/shm", true, kVnodes, 8, &err);
  CHECK(p.creator != nullptr);
  if (!p.creator) return p;
  if (!ids.empty()) CHECK(p.creator->set_instances(named(ids)).empty());
  p.other = pr::RouterState::attach(p.creator->shared_path(), &err);
  CHECK(p.other != nullptr);
  return p;
}

// A membership record that cannot be read (torn) keeps the attached process on the membership
// it had, under the members_version that membership had: a pick on it must not lease a slot
// the creator has since given to another instance as if it were the old one's.
void test_torn_record_keeps_old_version() {
  std::string err;
  auto [creator, other] = attached_pair("a");
  if (!other) return;
  const int ro = other->acquire_reader();
  auto first = other->pick(ro, 1);
  CHECK(first.slot >= 0 && other->slot_id(static_cast<uint32_t>(first.slot)) == "a");
  CHECK(other->release(static_cast<uint32_t>(first.slot)));
  const int32_t a_slot = first.slot;
  // b takes another slot (a's is still pinned while b's membership is built); c then takes a's.
  CHECK(creator->set_instances(named("b")).empty());
  CHECK(creator->set_instances(named("c")).empty());
  CHECK(creator->slot_id(static_cast<uint32_t>(a_slot)) == "c");
  {
    // The record torn: its length cut short, as by a creator that died while writing it.
    auto raw = pr::Region::attach(creator->shared_path(), &err);
    CHECK(raw != nullptr);
    if (!raw) return;
    raw->header()->meta.lock();
    raw->header()->blob_len = 3;
    raw->header()->meta.unlock();
  }
  auto torn = other->pick(ro, 1);
  // Before the fix: slot a_slot, leased as "a" under the new version while it is c's.
  CHECK(torn.slot < 0);
  if (torn.slot >= 0) other->release(static_cast<uint32_t>(torn.slot));
  // The next readable publication is taken up.
  CHECK(creator->set_instances(named("cd")).empty());
  auto next = other->pick(ro, 1);
  CHECK(next.slot >= 0);
  if (next.slot >= 0) {
    const std::string id = other->slot_id(static_cast<uint32_t>(next.slot));
    CHECK(id == "c" || id == "d");
    CHECK(other->release(static_cast<uint32_t>(next.slot)));
  }
  other->release_reader(ro);
}

// A record the creator's serialize() could not have written: a weight out of range (which would
// have the reader build a ring of 2^24 points for it, and the next, and stall there), a NaN
// weight, a repeated id. The attached process treats it as torn: no lease until a record
// that holds together arrives.
void test_record_fields_checked() {
  std::string err;
  auto [creator, other] = attached_pair("a");
  if (!other) return;
  const int ro = other->acquire_reader();
  auto raw = pr::Region::attach(creator->shared_path(), &err);
  CHECK(raw != nullptr);
  if (!raw) return;
  const auto record = [](const std::vector<std::pair<std::string, double>>& members) {
    std::string out;
    const auto u32 = [&](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
    u32(static_cast<uint32_t>(members.size()));
    uint32_t slot = 0;
    for (const auto& [id, weight] : members) {
      u32(slot++);
      out.append(reinterpret_cast<const char*>(&weight), 8);
      u32(0);
      u32(static_cast<uint32_t>(id.size()));
      out += id;
      u32(0);
    }
    return out;
  };
  const std::vector<std::vector<std::pair<std::string, double>>> bad = {
      {{"x", 1e300}, {"y", 1e300}, {"z", 1e300}}, {{"x", std::nan("")}}, {{"x", -1}}, {{"x", 1}, {"x", 1}}};
  for (const auto& members : bad) {
    const std::string text = record(members);
    pr::RegionHeader* h = raw->header();
    h->meta.lock();
    std::memcpy(raw->blob(), text.data(), text.size());
    h->blob_len = text.size();
    h->members_version.fetch_add(1);
    h->version.fetch_add(1);
    h->meta.unlock();
    auto r = other->pick(ro, 5);
    CHECK(r.slot < 0);
    if (r.slot >= 0) other->release(static_cast<uint32_t>(r.slot));
  }
  CHECK(creator->set_instances(named("b")).empty());
  auto r = other->pick(ro, 5);
  CHECK(r.slot >= 0 && other->slot_id(static_cast<uint32_t>(r.slot)) == "b");
  if (r.slot >= 0) other->release(static_cast<uint32_t>(r.slot));
  other->release_reader(ro);
}

// The fleet record an attached process reads: as the creator last set it, through membership
// changes that rewrite the record before it in the blob, and versioned so a reader copies it
// only when it moved.
void test_fleet_record() {
  std::string err;
  auto [creator, other] = attached_pair("");
  if (!other) return;
  uint64_t v = 0;
  std::string text;
  CHECK(!other->fleet(0, &v, &text));  // nothing published yet
  CHECK(creator->set_fleet("{\"a\":1}").empty());
  CHECK(other->fleet(0, &v, &text) && v == 1 && text == "{\"a\":1}");
  CHECK(!other->fleet(v, &v, &text));
  // A membership change moves the record along with the membership's, unchanged.
  CHECK(creator->set_instances(named("abcdef")).empty());
  CHECK(!other->fleet(1, &v, &text));
  CHECK(other->fleet(0, &v, &text) && text == "{\"a\":1}");
  CHECK(creator->set_fleet("second").empty());
  CHECK(other->fleet(1, &v, &text) && v == 2 && text == "second");
  CHECK(!other->set_fleet("x").empty());  // only the creator writes it
  CHECK(!creator->set_fleet(std::string(pr::kBlobCapacity, 'x')).empty());
  CHECK(other->fleet(1, &v, &text) && text == "second");
}

}  // namespace

int main() {
  struct { const char* name; void (*fn)(); } tests[] = {
      {"attach bounds the process table", test_attach_bounds_processes},
      {"torn membership record keeps the old version", test_torn_record_keeps_old_version},
      {"fleet record", test_fleet_record},
      {"membership record fields checked", test_record_fields_checked},
  };
  for (const auto& t : tests) {
    std::printf("%s\n", t.name);
    t.fn();
  }
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
