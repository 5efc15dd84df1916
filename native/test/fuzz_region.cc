// libFuzzer target: a shared region whose membership and fleet records another process wrote
// (a build that differs, a creator that died mid-write, anything that maps the memory), read by
// an attached process. The input is written into the region as the creator would publish it,
// raw or as a record of fuzzed members (slots, weights, ids, groups), under fuzzed lengths;
// the attached process then refreshes, picks, lists and reads the fleet record. Nothing it
// reads may crash it, hold memory without bound, or lease a slot outside the table.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "../router.h"

#include "require.h"

namespace {

constexpr uint32_t kSlots = 16;

struct World {
  std::unique_ptr<pr::RouterState> creator, other;
  std::unique_ptr<pr::Region> raw;  // the creator's memory, written behind its back
  int reader = -1;
};

World& world() {
  static World* w = [] {
    auto* w = new World();
    std::string err;
    w->creator = pr::RouterState::create_shared("/dev/shm", true, 16, kSlots, &err);
    if (!w->creator) { std::fprintf(stderr, "create_shared: %s\n", err.c_str()); std::abort(); }
    w->other = pr::RouterState::attach(w->creator->shared_path(), &err);
    w->raw = pr::Region::attach(w->creator->shared_path(), &err);
    if (!w->other || !w->raw) { std::fprintf(stderr, "attach: %s\n", err.c_str()); std::abort(); }
    w->reader = w->other->acquire_reader();
    return w;
  }();
  return *w;
}

void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

// A record in the creator's format (router.cc serialize) with fuzzed fields.
std::string structured(FuzzedDataProvider& in) {
  std::string out;
  const uint32_t n = in.ConsumeIntegralInRange<uint32_t>(0, 12);
  put_u32(out, in.ConsumeBool() ? n : in.ConsumeIntegral<uint32_t>());
  for (uint32_t i = 0; i < n; i++) {
    put_u32(out, in.ConsumeIntegralInRange<uint32_t>(0, kSlots + 2));
    double w;
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: w = 1; break;
      case 1: w = in.ConsumeFloatingPoint<double>(); break;
      case 2: w = 1e300; break;
      default: std::memcpy(&w, "\xff\xff\xff\xff\xff\xff\xff\x7f", 8);  // a NaN
    }
    out.append(reinterpret_cast<const char*>(&w), 8);
    put_u32(out, in.ConsumeIntegral<uint32_t>());
    const std::string id = in.ConsumeRandomLengthString(8);
    put_u32(out, static_cast<uint32_t>(id.size()));
    out += id;
    const uint32_t ng = in.ConsumeIntegralInRange<uint32_t>(0, 3);
    put_u32(out, ng);
    for (uint32_t j = 0; j < ng; j++) {
      const std::string g = in.ConsumeRandomLengthString(4);
      put_u32(out, static_cast<uint32_t>(g.size()));
      out += g;
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  FuzzedDataProvider in(data, size);
  const bool raw_bytes = in.ConsumeBool();
  const bool members_moved = in.ConsumeBool();
  const uint64_t blob_len = in.ConsumeBool() ? in.ConsumeIntegral<uint64_t>() : UINT64_MAX;  // UINT64_MAX: the record's own
  const uint64_t fleet_len = in.ConsumeIntegralInRange<uint64_t>(0, pr::kBlobCapacity + 64);
  const std::string record = raw_bytes ? in.ConsumeRandomLengthString(512) : structured(in);
  const std::string tail = in.ConsumeRemainingBytesAsString();

  pr::RegionHeader* h = w.raw->header();
  h->meta.lock();
  std::memcpy(w.raw->blob(), record.data(), record.size());
  std::memcpy(w.raw->blob() + record.size(), tail.data(), tail.size());
  h->blob_len = blob_len == UINT64_MAX ? record.size() : blob_len;
  h->fleet_len = fleet_len;
  if (members_moved) h->members_version.fetch_add(1);
  h->version.fetch_add(1);
  h->fleet_version.fetch_add(1);
  h->meta.unlock();

  pr::PickResult r = w.other->pick(w.reader, 42);
  REQUIRE(r.slot < static_cast<int32_t>(kSlots));
  if (r.slot >= 0) REQUIRE(w.other->release(static_cast<uint32_t>(r.slot)));
  const std::string group = "g";
  r = w.other->pick(w.reader, 7, &group);
  REQUIRE(r.slot < static_cast<int32_t>(kSlots));
  if (r.slot >= 0) REQUIRE(w.other->release(static_cast<uint32_t>(r.slot)));
  for (const auto& i : w.other->instances(w.reader)) (void)w.other->in_flight(w.reader, i.id);
  uint64_t version = 0;
  std::string text;
  if (w.other->fleet(0, &version, &text)) REQUIRE(text.size() <= pr::kBlobCapacity);

  // The creator publishes a real membership again: the attached process takes it up.
  const std::vector<pr::RingMember> good = {{"a", 1.0}, {"b", 1.0}};
  REQUIRE(w.creator->set_instances(good).empty());
  r = w.other->pick(w.reader, 42);
  REQUIRE(r.slot >= 0 && r.slot < static_cast<int32_t>(kSlots));
  const std::string id = w.other->slot_id(static_cast<uint32_t>(r.slot));
  REQUIRE(id == "a" || id == "b");
  REQUIRE(w.other->release(static_cast<uint32_t>(r.slot)));
  return 0;
}
