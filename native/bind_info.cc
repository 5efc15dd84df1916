// What the addon is: its build (SIMD paths, sources hash, compiler) and the layout it shares
// with TypeScript (abi(), checked by src/core/abi.ts at load).
#include <napi.h>

#include <initializer_list>
#include <utility>

#include "bind.h"
#include "bind_router.h"
#include "exact_index.h"
#include "key/bindings.h"
#include "key/json_scan.h"
#include "key/openai_key.h"
#include "snapshot.h"
#include "shared_region.h"
#include "xxh3.h"

#ifndef PR_SOURCES_HASH
#define PR_SOURCES_HASH "unknown"
#endif

namespace pr::bind {

namespace {

using pr::RouterState;
using pr::Throw;

Napi::Value BuildInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("simd", pr::simd_path_name(pr::simd_active_path()));
  Napi::Array supported = Napi::Array::New(env);
  uint32_t k = 0;
  for (int p = 0; p < 4; p++)
    if (pr::simd_path_supported(static_cast<pr::SimdPath>(p)))
      supported.Set(k++, pr::simd_path_name(static_cast<pr::SimdPath>(p)));
  o.Set("simdSupported", supported);
  o.Set("sourcesHash", PR_SOURCES_HASH);
  o.Set("napiVersion", NAPI_VERSION);
#if defined(__clang__)
  o.Set("compiler", "clang " __clang_version__);
#elif defined(__GNUC__)
  o.Set("compiler", "gcc " __VERSION__);
#endif
  return o;
}

// An object of named numbers.
Napi::Object Numbers(Napi::Env env, std::initializer_list<std::pair<const char*, double>> entries) {
  Napi::Object o = Napi::Object::New(env);
  for (const auto& [name, value] : entries) o.Set(name, value);
  return o;
}

// abi() -> every offset, size, code and limit TypeScript must agree with (src/core/abi.ts checks
// them at load): the io block's words and the pick's results, key_extract's io words, API and
// status codes, the KeyHashes record, the exact view's results, views, tiers, block sizes and
// batch ops, the process table, the membership's bounds, the Strategy enum by name (checked
// against the registry's order), router_configure's option names and ranges.
Napi::Value Abi(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  Napi::Object w = Napi::Object::New(env);
  w.Set("kind", static_cast<double>(io::kKind));
  w.Set("keyBytes", static_cast<double>(io::kKeyBytes));
  w.Set("anchor", static_cast<double>(io::kAnchor));
  w.Set("hashed", static_cast<double>(io::kHashed));
  w.Set("group", static_cast<double>(io::kGroup));
  w.Set("tenant", static_cast<double>(io::kTenant));
  w.Set("avoidCount", static_cast<double>(io::kAvoidCount));
  w.Set("avoid", static_cast<double>(io::kAvoid));
  w.Set("maxAvoid", static_cast<double>(io::kMaxAvoid));
  w.Set("exact", static_cast<double>(io::kExact));
  w.Set("now", static_cast<double>(io::kNow));
  w.Set("alternates", static_cast<double>(io::kAlternates));
  w.Set("maxAlternates", static_cast<double>(pr::kMaxAlternates));
  w.Set("outBlocks", static_cast<double>(io::kOutBlocks));
  w.Set("outHeld", static_cast<double>(io::kOutHeld));
  w.Set("outExact", static_cast<double>(io::kOutExact));
  w.Set("outAlternates", static_cast<double>(io::kOutAlternates));
  w.Set("outAlternateSlot", static_cast<double>(io::kOutAlternateSlot));
  w.Set("outAlternateGeneration", static_cast<double>(io::kOutAlternateGeneration));
  w.Set("words", static_cast<double>(io::kWords));
  o.Set("io", w);
  o.Set("pick", Numbers(env, {{"slot", io::kOutSlot},
                               {"generation", io::kOutGeneration},
                               {"overflow", io::kOutOverflow},
                               {"prefill", io::kOutPrefill},
                               {"picked", io::kPicked},
                               {"noInstances", io::kNoInstances},
                               {"noGroup", io::kNoGroup}}));
  Napi::Object key = Numbers(env, {{"words", pr::kKeyMetaWords},
                                   {"required", pr::kKeyMetaRequired},
                                   {"api", key_io::kApi},
                                   {"span", key_io::kSpan},
                                   {"prefix", key_io::kPrefix},
                                   {"maxDepth", key_io::kMaxDepth},
                                   {"outOffset", key_io::kOutOffset},
                                   {"blockBytes", key_io::kBlockBytes},
                                   {"hash", key_io::kHash},
                                   {"textBytes", key_io::kTextBytes},
                                   {"keyBytes", key_io::kKeyBytes},
                                   {"anchorBytes", key_io::kAnchorBytes},
                                   {"modelBegin", key_io::kModelBegin},
                                   {"modelEnd", key_io::kModelEnd},
                                   {"cacheKeyBegin", key_io::kCacheKeyBegin},
                                   {"cacheKeyEnd", key_io::kCacheKeyEnd},
                                   {"stream", key_io::kStream},
                                   {"escapes", key_io::kEscapes},
                                   {"hashBytes", key_io::kHashBytes},
                                   {"modelGeneration", key_io::kModelGeneration},
                                   {"cacheKeyGeneration", key_io::kCacheKeyGeneration},
                                   {"escapedModel", key_io::kEscapedModel},
                                   {"escapedCacheKey", key_io::kEscapedCacheKey}});
  key.Set("apis", Numbers(env, {{"chat", static_cast<int>(pr::key::Api::Chat)}, {"completions", static_cast<int>(pr::key::Api::Completions)}}));
  key.Set("status", Numbers(env, {{"ok", static_cast<int>(pr::key::Scan::Ok)},
                                  {"invalid", static_cast<int>(pr::key::Scan::Invalid)},
                                  {"unsupported", static_cast<int>(pr::key::Scan::Unsupported)}}));
  o.Set("keyMeta", key);
  o.Set("keyHashes", Numbers(env, {{"bytes", sizeof(pr::KeyHashes)}, {"align", alignof(pr::KeyHashes)}}));
  Napi::Object exact = Numbers(env, {{"orphan", pr::ExactIndex::kOrphan},
                                     {"notMember", pr::RouterState::kNotMember},
                                     {"blockSize", pr::RouterState::kBlockSize},
                                     {"capacity", pr::ExactIndex::kCapacity},
                                     {"minBlockSize", pr::ExactIndex::kMinBlockSize},
                                     {"maxBlockSize", pr::ExactIndex::kMaxBlockSize}});
  exact.Set("views", Numbers(env, {{"none", static_cast<int>(pr::ExactView::None)},
                                   {"fresh", static_cast<int>(pr::ExactView::Fresh)},
                                   {"stale", static_cast<int>(pr::ExactView::Stale)}}));
  exact.Set("tiers", Numbers(env, {{"gpu", static_cast<int>(pr::ExactTier::Gpu)}, {"offloaded", static_cast<int>(pr::ExactTier::Offloaded)}}));
  exact.Set("op", Numbers(env, {{"kind", exact_op::kKind},
                                {"tier", exact_op::kTier},
                                {"blocks", exact_op::kBlocks},
                                {"parent", exact_op::kParent},
                                {"words", exact_op::kWords},
                                {"store", exact_op::kStore},
                                {"remove", exact_op::kRemove},
                                {"clear", exact_op::kClear}}));
  o.Set("exact", exact);
  o.Set("noThreshold", static_cast<double>(pr::kNoThreshold));
  o.Set("strategyEnum", Numbers(env, {{"random", static_cast<int>(pr::Strategy::Random)},
                                      {"least_outstanding_requests", static_cast<int>(pr::Strategy::LeastOutstanding)},
                                      {"prefix_aware", static_cast<int>(pr::Strategy::PrefixAware)},
                                      {"longest_prefix", static_cast<int>(pr::Strategy::LongestPrefix)}}));
  o.Set("maxProcesses", static_cast<double>(pr::kMaxProcesses));
  o.Set("maxMembers", static_cast<double>(pr::kMaxMembers));
  o.Set("maxIdBytes", static_cast<double>(pr::kMaxIdBytes));
  o.Set("maxVnodes", kMaxVnodes);
  o.Set("maxSlots", kMaxSlots);
  Napi::Object ranges = Napi::Object::New(env);
  for (const ParamRange& r : kConfigureRanges) {
    Napi::Object range = Napi::Object::New(env);
    range.Set("min", r.min);
    range.Set("max", r.max);
    ranges.Set(r.name, range);
  }
  o.Set("configure", ranges);
  // The names router_configure reads from its options object.
  Napi::Array fields = Napi::Array::New(env);
  fields.Set(fields.Length(), "strategy");
  for (const ParamRange& r : kConfigureRanges) fields.Set(fields.Length(), r.name);
  fields.Set(fields.Length(), "engineLoadAll");
  o.Set("configureFields", fields);
  return o;
}


}  // namespace

void RegisterInfo(Napi::Env env, Napi::Object exports) {
  exports.Set("build_info", Napi::Function::New(env, BuildInfo, "build_info"));
  exports.Set("abi", Napi::Function::New(env, Abi, "abi"));
}

}  // namespace pr::bind
