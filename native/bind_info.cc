// What the addon is: its build (SIMD paths, sources hash, compiler) and the layout it shares
// with TypeScript (abi(), checked by src/core/abi.ts at load).
#include <napi.h>

#include "bind.h"
#include "bind_router.h"
#include "key/bindings.h"
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

// abi() -> every offset, size and limit TypeScript must agree with (src/core/abi.ts checks them
// at load): the io block's words, key_extract's io, the KeyHashes record, the process table,
// the membership's bounds and router_configure's ranges.
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
  Napi::Object key = Napi::Object::New(env);
  key.Set("words", static_cast<double>(pr::kKeyMetaWords));
  key.Set("required", static_cast<double>(pr::kKeyMetaRequired));
  o.Set("keyMeta", key);
  Napi::Object hashes = Napi::Object::New(env);
  hashes.Set("bytes", static_cast<double>(sizeof(pr::KeyHashes)));
  hashes.Set("align", static_cast<double>(alignof(pr::KeyHashes)));
  o.Set("keyHashes", hashes);
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
  return o;
}


}  // namespace

void RegisterInfo(Napi::Env env, Napi::Object exports) {
  exports.Set("build_info", Napi::Function::New(env, BuildInfo, "build_info"));
  exports.Set("abi", Napi::Function::New(env, Abi, "abi"));
}

}  // namespace pr::bind
