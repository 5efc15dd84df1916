// The router handle the router, pick and exact bindings share: one per thread that opened a
// router, with the pick's io block (router_io), and the bounds router_configure and
// router_create check as a backstop.
#pragma once
#include <napi.h>

#include <cstddef>
#include <memory>

#include "napi_throw.h"
#include "router.h"
#include "strategy/strategy.h"

namespace pr::bind {

// A pick's numeric arguments and its result, in memory the handle shares with one Float64Array
// (router_io): router_pick_io reads them from there rather than by a V8 call per argument.
// The pick runs on every request, with its code and data mostly evicted from cache by the rest
// of the request, where each of those calls was measured at 100-400 ns.
namespace io {
// Above serve's most tries of one request (retries.max 10, plus the first).
constexpr size_t kMaxAvoid = 16;
enum : size_t {
  kKind,        // 0: a string or Uint8Array prefix; 1: an extracted key's text (key/bindings.h)
  kKeyBytes,    // extracted: the key's end in the text
  kAnchor,      // the anchor (extracted: bytes; else units of a string, bytes of a Uint8Array), -1 for none
  kHashed,      // extracted: 1 when key_extract wrote the hashes after the text
  kGroup,       // -1: no group; -2: the group is named by the call's 4th argument; else its id (router_group_id)
  kTenant,      // 1: the call's 3rd argument is the tenant
  kAvoidCount,  // slots of earlier tries to avoid, at most kMaxAvoid, which follow
  kAvoid,
  kExact = kAvoid + kMaxAvoid,  // 1: the call's 5th and 6th arguments are token ids and their seed
  kNow,                         // with kExact: the time in ms pending blocks expire against
  kAlternates,                  // how many next choices to rank, 0 to pr::kMaxAlternates
  // Written by the pick beside its result in words 0-3: what the strategy saw of the chosen
  // instance, and the next choices it ranked (slots, then their generations).
  kOutBlocks,
  kOutHeld,
  kOutExact,
  kOutAlternates,
  kOutAlternateSlot,
  kOutAlternateGeneration = kOutAlternateSlot + pr::kMaxAlternates,
  kWords = kOutAlternateGeneration + pr::kMaxAlternates
};
// The pick's result, written over words 0-3, and what router_pick_io returns.
constexpr size_t kOutSlot = 0, kOutGeneration = 1, kOutOverflow = 2, kOutPrefill = 3;
constexpr int kPicked = 0, kNoInstances = -1, kNoGroup = -2;
}  // namespace io
struct IoBlock {
  double w[io::kWords] = {};
};

struct Handle {
  std::shared_ptr<RouterState> state;
  int reader = -1;
  // Shared with the ArrayBuffer router_io made, which may outlive the handle.
  std::shared_ptr<IoBlock> io;
  void close() {
    if (state && reader >= 0) state->release_reader(reader);
    state.reset();
    reader = -1;
  }
  ~Handle() { close(); }
};

// router_exact_apply's ops (bind_exact.cc): kWords numbers each, a kind and its fields.
namespace exact_op {
enum : size_t { kKind, kTier, kBlocks, kParent, kWords };
constexpr double kStore = 0, kRemove = 1, kClear = 2;
}  // namespace exact_op

inline Handle* GetHandle(const Napi::CallbackInfo& info) {
  // napi_get_value_external checks the type itself: one crossing into V8, not two.
  void* data = nullptr;
  if (napi_get_value_external(info.Env(), info[0], &data) != napi_ok || data == nullptr) {
    Throw(info.Env(), "ERR_INVALID_ARG_TYPE", "not a router handle", true);
    return nullptr;
  }
  Handle* h = static_cast<Handle*>(data);
  if (!h->state) {
    Throw(info.Env(), "ROUTER_CLOSED", "router is closed");
    return nullptr;
  }
  return h;
}

// router_configure's ranges, by the names its options object gives them: a backstop (src/core/options.ts
// checks narrower ones), exported by abi() so that TypeScript's are checked to lie inside.
struct ParamRange {
  const char* name;
  double min, max;
};
constexpr ParamRange kConfigureRanges[] = {
    {"prefixLength", 1, 1 << 20},  {"concurrencyThreshold", 1, 1 << 20}, {"blockSize", 1, 1 << 20},    {"indexBlocks", 0, 1 << 28},
    {"placementChoices", 1, 64},   {"loadFactor", 0, 1e6},               {"prefillWeight", 0, 1e6},    {"matchLength", 1, 1 << 20},
    {"exactBlockSize", pr::ExactIndex::kMinBlockSize, pr::ExactIndex::kMaxBlockSize},   {"exactCapacity", 1, 1 << 30},        {"cpuBlockWeight", 0, 1},     {"pendingMs", 0, 1e9},
};
constexpr double kMaxVnodes = 65536, kMaxSlots = 16384;

}  // namespace pr::bind
