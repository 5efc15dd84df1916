// N-API bindings only. Arguments are validated in src/ (TypeScript); the checks here are
// a backstop so that no call from JS can crash the process.
#include <napi.h>

#include <algorithm>

#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "key/bindings.h"
#include "napi_throw.h"
#include "prefix_index.h"
#include "router.h"
#include "strategy/request_key.h"
#include "strategy/strategy.h"
#include "xxh3.h"

#ifndef PR_SOURCES_HASH
#define PR_SOURCES_HASH "unknown"
#endif

namespace {

using pr::RouterState;

using pr::Throw;

// Bytes of a Uint8Array (no copy) or a string (UTF-8 into a per-thread buffer).
struct Bytes {
  const uint8_t* data = nullptr;
  size_t len = 0;
  bool ok = false;
};

thread_local std::vector<char> t_utf8;
thread_local std::vector<char16_t> t_utf16;

Bytes GetBytes(const Napi::Value& v) {
  Bytes b;
  if (v.IsTypedArray()) {
    // napi_get_typedarray_info's own pointer: one over a SharedArrayBuffer has no ArrayBuffer
    // to ask for its data (ArrayBuffer().Data() gave a bad pointer and crashed).
    napi_typedarray_type type;
    size_t length = 0;
    void* data = nullptr;
    if (napi_get_typedarray_info(v.Env(), v, &type, &length, &data, nullptr, nullptr) != napi_ok) return b;
    b.data = static_cast<const uint8_t*>(data);
    b.len = v.As<Napi::TypedArray>().ByteLength();
    b.ok = b.data != nullptr || b.len == 0;
  } else if (v.IsString()) {
    napi_env env = v.Env();
    size_t len = 0;
    if (napi_get_value_string_utf8(env, v, nullptr, 0, &len) != napi_ok) return b;
    if (t_utf8.size() < len + 1) t_utf8.resize(len + 1);
    napi_get_value_string_utf8(env, v, t_utf8.data(), len + 1, &len);
    b.data = reinterpret_cast<const uint8_t*>(t_utf8.data());
    b.len = len;
    b.ok = true;
  }
  return b;
}

// The first max_cp code points of a JS string, as UTF-8 (lone surrogates become U+FFFD, as
// in Buffer.from). Copies max_cp + 1 UTF-16 units out of V8 (2*max_cp when surrogate pairs
// need them) and converts them here:
// measured faster than V8's UTF-8 writer because the ASCII runs that dominate prompts go
// 16 units at a time (SSE2 is baseline on x86-64). Also reports where in the UTF-8 two marks
// fall: after `key_cp` code points (the hashed key) and at UTF-16 unit `anchor_units`.
struct Marks {
  size_t key_cp = SIZE_MAX;
  size_t anchor_units = SIZE_MAX;
  size_t key_bytes = SIZE_MAX;     // out
  size_t anchor_bytes = SIZE_MAX;  // out
};

Bytes PrefixOfString(const Napi::Value& v, size_t max_cp, Marks* marks) {
  Bytes b;
  napi_env env = v.Env();
  if (t_utf8.size() < max_cp * 4 + 16) t_utf8.resize(max_cp * 4 + 16);
  // max_cp code points are max_cp units unless some are surrogate pairs, which prompts rarely
  // hold: the first copy takes max_cp + 1 units (the one more ends a pair the last code point
  // may start), and only a text whose pairs used that copy up is copied again, 2*max_cp units.
  // Half the copy for most keys, which come out of caches the rest of a request has evicted.
  for (size_t cap = max_cp + 1;; cap = max_cp * 2) {
    if (t_utf16.size() < cap + 1) t_utf16.resize(cap + 1);
    size_t units = 0;
    if (napi_get_value_string_utf16(env, v, t_utf16.data(), cap + 1, &units) != napi_ok) return b;
    marks->key_bytes = marks->anchor_bytes = SIZE_MAX;
    const char16_t* in = t_utf16.data();
    unsigned char* out = reinterpret_cast<unsigned char*>(t_utf8.data());
    size_t i = 0, o = 0, cp = 0;
    // The next position (in code points and in units) where a mark must be taken exactly.
    size_t stop_cp = marks->key_cp, stop_units = marks->anchor_units;
    while (i < units && cp < max_cp) {
      if (cp >= stop_cp) { marks->key_bytes = o; stop_cp = SIZE_MAX; }
      if (i >= stop_units) { marks->anchor_bytes = o; stop_units = SIZE_MAX; }
#if defined(__SSE2__)
      if (i + 16 <= units && cp + 16 <= max_cp && cp + 16 <= stop_cp && i + 16 <= stop_units) {
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
        const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 8));
        const __m128i high = _mm_and_si128(_mm_or_si128(a, c), _mm_set1_epi16(static_cast<short>(0xFF80)));
        if (_mm_movemask_epi8(_mm_cmpeq_epi16(high, _mm_setzero_si128())) == 0xFFFF) {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(out + o), _mm_packus_epi16(a, c));
          i += 16; o += 16; cp += 16;
          continue;
        }
      }
#endif
      uint32_t ch = in[i++];
      cp++;
      if (ch < 0x80) { out[o++] = static_cast<unsigned char>(ch); continue; }
      if (ch >= 0xD800 && ch <= 0xDBFF && i < units && in[i] >= 0xDC00 && in[i] <= 0xDFFF) {
        ch = 0x10000 + ((ch - 0xD800) << 10) + (in[i++] - 0xDC00);
      } else if (ch >= 0xD800 && ch <= 0xDFFF) {
        ch = 0xFFFD;
      }
      if (ch < 0x800) {
        out[o++] = static_cast<unsigned char>(0xC0 | (ch >> 6));
      } else if (ch < 0x10000) {
        out[o++] = static_cast<unsigned char>(0xE0 | (ch >> 12));
        out[o++] = static_cast<unsigned char>(0x80 | ((ch >> 6) & 0x3F));
      } else {
        out[o++] = static_cast<unsigned char>(0xF0 | (ch >> 18));
        out[o++] = static_cast<unsigned char>(0x80 | ((ch >> 12) & 0x3F));
        out[o++] = static_cast<unsigned char>(0x80 | ((ch >> 6) & 0x3F));
      }
      out[o++] = static_cast<unsigned char>(0x80 | (ch & 0x3F));
    }
    if (i == units && units == cap && cap < max_cp * 2) continue;  // the text goes on past the copy
    if (cp >= stop_cp) marks->key_bytes = o;
    if (i >= stop_units) marks->anchor_bytes = o;
    b.data = out;
    b.len = o;
    b.ok = true;
    return b;
  }
}

// A string argument's UTF-8, false for any other value: one call for the tenant ids and group
// names a pick takes, short enough (tens of bytes) for the string's own buffer.
bool SmallString(napi_env env, napi_value v, std::string* out) {
  char buf[128];
  size_t n = 0;
  if (napi_get_value_string_utf8(env, v, buf, sizeof buf, &n) != napi_ok) return false;
  if (n + 1 < sizeof buf) {
    out->assign(buf, n);
    return true;
  }
  *out = Napi::String(env, v).Utf8Value();  // longer: may have been cut short
  return true;
}

uint64_t GetSeed(const Napi::Value& v, bool* ok) {
  *ok = true;
  if (v.IsUndefined()) return 0;
  if (!v.IsBigInt()) { *ok = false; return 0; }
  bool lossless = false;
  uint64_t seed = v.As<Napi::BigInt>().Uint64Value(&lossless);
  *ok = lossless;
  return seed;
}

// A typed array of one element type, read in place (no copy); false for any other value.
template <typename T>
bool TypedOf(napi_env env, napi_value v, napi_typedarray_type want, const T** data, size_t* len) {
  bool is = false;
  if (napi_is_typedarray(env, v, &is) != napi_ok || !is) return false;
  napi_typedarray_type type;
  void* p = nullptr;
  if (napi_get_typedarray_info(env, v, &type, len, &p, nullptr, nullptr) != napi_ok || type != want) return false;
  *data = static_cast<const T*>(p);
  return p != nullptr || *len == 0;
}
bool U32Array(napi_env env, napi_value v, const uint32_t** data, size_t* len) { return TypedOf(env, v, napi_uint32_array, data, len); }
bool U64Array(napi_env env, napi_value v, const uint64_t** data, size_t* len) { return TypedOf(env, v, napi_biguint64_array, data, len); }

Napi::Value Xxh3(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Bytes b = GetBytes(info[0]);
  if (!b.ok) return Throw(env, "ERR_INVALID_ARG_TYPE", "data must be a Uint8Array or a string", true);
  bool ok;
  uint64_t seed = GetSeed(info[1], &ok);
  if (!ok) return Throw(env, "ERR_INVALID_ARG_TYPE", "seed must be a bigint from 0 to 2^64-1", true);
  return Napi::BigInt::New(env, pr::xxh3_64(b.data, b.len, seed));
}

// xxh3_path(path, data, seed): one SIMD path, for tests that compare paths from JS.
Napi::Value Xxh3Path(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "path must be a number", true);
  int path = info[0].As<Napi::Number>().Int32Value();
  if (path < 0 || path > 3) return Throw(env, "ERR_OUT_OF_RANGE", "path must be 0..3");
  Bytes b = GetBytes(info[1]);
  if (!b.ok) return Throw(env, "ERR_INVALID_ARG_TYPE", "data must be a Uint8Array or a string", true);
  bool ok;
  uint64_t seed = GetSeed(info[2], &ok);
  if (!ok) return Throw(env, "ERR_INVALID_ARG_TYPE", "seed must be a bigint from 0 to 2^64-1", true);
  return Napi::BigInt::New(env, pr::xxh3_64_path(static_cast<pr::SimdPath>(path), b.data, b.len, seed));
}

// xxh3_chain(data, blockBytes, seed, out: BigUint64Array | Float64Array) -> blocks written.
// Chained hashes of the full blocks (block i seeded with block i-1's hash) in one call; into
// a Float64Array it writes the low 52 bits, exact as doubles (the simulator's cache keys).
Napi::Value Xxh3Chain(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Bytes b = GetBytes(info[0]);
  if (!b.ok) return Throw(env, "ERR_INVALID_ARG_TYPE", "data must be a Uint8Array or a string", true);
  if (!info[1].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "blockBytes must be a number", true);
  const int64_t block = info[1].As<Napi::Number>().Int64Value();
  if (block < 1 || block > (1 << 20)) return Throw(env, "ERR_OUT_OF_RANGE", "blockBytes must be 1..1048576");
  bool ok;
  const uint64_t seed = GetSeed(info[2], &ok);
  if (!ok) return Throw(env, "ERR_INVALID_ARG_TYPE", "seed must be a bigint from 0 to 2^64-1", true);
  // The typed array's own data pointer (offset applied), as GetBytes takes it: one over a
  // SharedArrayBuffer has no ArrayBuffer to ask (ArrayBuffer().Data() was null, and the
  // hashes were written through it).
  napi_typedarray_type type;
  size_t length = 0;
  void* dst = nullptr;
  if (!info[3].IsTypedArray() || napi_get_typedarray_info(env, info[3], &type, &length, &dst, nullptr, nullptr) != napi_ok ||
      (type != napi_biguint64_array && type != napi_float64_array))
    return Throw(env, "ERR_INVALID_ARG_TYPE", "out must be a BigUint64Array or Float64Array", true);
  const size_t n = b.len / static_cast<size_t>(block);
  if (length < n || (dst == nullptr && n > 0)) return Throw(env, "ERR_OUT_OF_RANGE", "out is shorter than the number of full blocks");
  if (type == napi_biguint64_array) {
    pr::chain_hashes(b.data, b.len, static_cast<size_t>(block), seed, static_cast<uint64_t*>(dst));
  } else {
    thread_local std::vector<uint64_t> tmp;
    if (tmp.size() < n) tmp.resize(n);
    pr::chain_hashes(b.data, b.len, static_cast<size_t>(block), seed, tmp.data());
    double* d = static_cast<double*>(dst);
    for (size_t i = 0; i < n; i++) d[i] = static_cast<double>(tmp[i] & ((uint64_t{1} << 52) - 1));
  }
  return Napi::Number::New(env, static_cast<double>(n));
}

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

// ---- routers ------------------------------------------------------------------------

// Named routers live in a process-wide registry so worker threads can open them; the
// state lives as long as any handle to it does.
std::mutex g_registry_mutex;
std::unordered_map<std::string, std::weak_ptr<RouterState>> g_registry;

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

Napi::Value Wrap(Napi::Env env, std::shared_ptr<RouterState> state) {
  int reader = state->acquire_reader();
  if (reader < 0)
    return Throw(env, "ROUTER_TOO_MANY_HANDLES", "at most 128 open handles per router (one per thread)");
  auto* h = new Handle{std::move(state), reader, nullptr};
  return Napi::External<Handle>::New(env, h, [](Napi::Env, Handle* p) { delete p; });
}

Handle* GetHandle(const Napi::CallbackInfo& info) {
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

// router_configure's ranges, for its arguments 2 to 13 in order: a backstop (src/core/options.ts
// checks narrower ones), exported by abi() so that TypeScript's are checked to lie inside.
struct ParamRange {
  const char* name;
  double min, max;
};
constexpr ParamRange kConfigureRanges[] = {
    {"prefixLength", 1, 1 << 20},  {"concurrencyThreshold", 1, 1 << 20}, {"blockSize", 1, 1 << 20},    {"indexBlocks", 0, 1 << 28},
    {"placementChoices", 1, 64},   {"loadFactor", 0, 1e6},               {"prefillWeight", 0, 1e6},    {"matchLength", 1, 1 << 20},
    {"exactBlockSize", 1, 1024},   {"exactCapacity", 1, 1 << 30},        {"cpuBlockWeight", 0, 1},     {"pendingMs", 0, 1e9},
};
constexpr double kMaxVnodes = 65536, kMaxSlots = 16384;

// router_create(name | undefined, vnodes, slotCapacity, sharedDir?, anonymous?): with
// sharedDir, the state lives in shared memory that other processes open with router_attach:
// a memfd if `anonymous` and the system allows, else a new file in sharedDir.
Napi::Value RouterCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[1].IsNumber() || !info[2].IsNumber())
    return Throw(env, "ERR_INVALID_ARG_TYPE", "vnodes and slots must be numbers", true);
  const int64_t vnodes = info[1].As<Napi::Number>().Int64Value();
  const int64_t slots = info[2].As<Napi::Number>().Int64Value();
  if (vnodes < 1 || vnodes > kMaxVnodes) return Throw(env, "ERR_OUT_OF_RANGE", "vnodes must be 1..65536");
  if (slots < 1 || slots > kMaxSlots) return Throw(env, "ERR_OUT_OF_RANGE", "slots must be 1..16384");
  if (!info[3].IsUndefined() && !info[3].IsString()) return Throw(env, "ERR_INVALID_ARG_TYPE", "sharedDir must be a string", true);
  std::shared_ptr<RouterState> state;
  if (info[3].IsString()) {
    std::string err;
    state = RouterState::create_shared(info[3].As<Napi::String>().Utf8Value(), info[4].IsBoolean() && info[4].As<Napi::Boolean>().Value(),
                                       static_cast<uint32_t>(vnodes), static_cast<uint32_t>(slots), &err);
    if (!state) return Throw(env, "ROUTER_SHARED_STATE", err);
  } else {
    state = std::make_shared<RouterState>(static_cast<uint32_t>(vnodes), static_cast<uint32_t>(slots));
  }
  if (info[0].IsString()) {
    std::string name = info[0].As<Napi::String>().Utf8Value();
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    auto it = g_registry.find(name);
    if (it != g_registry.end() && !it->second.expired())
      return Throw(env, "ROUTER_EXISTS", "a router named '" + name + "' is already open in this process");
    g_registry[name] = state;
  }
  return Wrap(env, std::move(state));
}

// router_attach(path): the state another process created with a sharedPath.
Napi::Value RouterAttach(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) return Throw(env, "ERR_INVALID_ARG_TYPE", "path must be a string", true);
  std::string err;
  std::shared_ptr<RouterState> state = RouterState::attach(info[0].As<Napi::String>().Utf8Value(), &err);
  if (!state) return Throw(env, "ROUTER_SHARED_STATE", err);
  return Wrap(env, std::move(state));
}

// router_shared_path(h) -> what router_attach opens, or undefined for a process-private router.
Napi::Value RouterSharedPath(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  const std::string& path = h->state->shared_path();
  return path.empty() ? env.Undefined() : Napi::String::New(env, path);
}

// router_release_process(h, pid) -> leases released: what a process that exited still held.
Napi::Value RouterReleaseProcess(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!info[1].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "pid must be a number", true);
  const double pid = info[1].As<Napi::Number>().DoubleValue();
  if (!(pid >= 1 && pid <= 2147483647.0)) return Throw(env, "ERR_OUT_OF_RANGE", "pid must be a positive integer");
  return Napi::Number::New(env, static_cast<double>(h->state->release_process(static_cast<int32_t>(pid))));
}

// router_lease_collected(h, slot, prefill): a lease the garbage collector found unreleased.
Napi::Value RouterLeaseCollected(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!info[1].IsNumber() || !info[2].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "slot and prefill must be numbers", true);
  const int64_t slot = info[1].As<Napi::Number>().Int64Value();
  const int64_t prefill = info[2].As<Napi::Number>().Int64Value();
  if (slot < 0 || slot > 0xFFFFFFFF || prefill < 0 || prefill > 0xFFFFFFFF) return env.Undefined();
  if (h->state->release(static_cast<uint32_t>(slot), static_cast<uint32_t>(prefill))) h->state->count_collected();
  return env.Undefined();
}

Napi::Value RouterOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) return Throw(env, "ERR_INVALID_ARG_TYPE", "name must be a string", true);
  std::string name = info[0].As<Napi::String>().Utf8Value();
  std::shared_ptr<RouterState> state;
  {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    auto it = g_registry.find(name);
    if (it != g_registry.end()) state = it->second.lock();
    if (!state && it != g_registry.end()) g_registry.erase(it);
  }
  if (!state) return Throw(env, "ROUTER_NOT_FOUND", "no router named '" + name + "' is open in this process");
  return Wrap(env, std::move(state));
}

Napi::Value RouterClose(const Napi::CallbackInfo& info) {
  if (info[0].IsExternal()) info[0].As<Napi::External<Handle>>().Data()->close();
  return info.Env().Undefined();
}

// router_configure(h, strategy: string, prefixLength, threshold, blockBytes, indexBlocks,
//                  placementChoices, loadFactor, prefillWeight, matchLength, exactBlockSize, exactCapacity,
//                  cpuBlockWeight, pendingMs, engineLoadAll): publishes the whole set.
Napi::Value RouterConfigure(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!h->state->writable()) return Throw(env, "ROUTER_READ_ONLY", "this router is attached to another process's state: only its creator configures it");
  if (!info[1].IsString()) return Throw(env, "ERR_INVALID_ARG_TYPE", "strategy must be a string", true);
  // The exact view's four (10-13) and engineLoadAll (14) may be left out: their defaults then.
  if (!info[14].IsUndefined() && !info[14].IsBoolean()) return Throw(env, "ERR_INVALID_ARG_TYPE", "engineLoadAll must be a boolean", true);
  for (size_t i = 2; i <= 13; i++)
    if (!info[i].IsNumber() && !(i >= 10 && info[i].IsUndefined()))
      return Throw(env, "ERR_INVALID_ARG_TYPE", "routing parameters must be numbers", true);
  const int strategy = pr::strategy_index(info[1].As<Napi::String>().Utf8Value().c_str());
  if (strategy < 0) return Throw(env, "ERR_OUT_OF_RANGE", "unknown strategy");
  auto num = [&](size_t i) { return info[i].As<Napi::Number>().DoubleValue(); };
  const pr::RoutingParams defaults;
  auto opt = [&](size_t i, double d) { return info[i].IsUndefined() ? d : num(i); };
  const double len = num(2), thr = num(3), block = num(4), blocks = num(5), choices = num(6), load = num(7), weight = num(8),
               match = num(9), exact_block = opt(10, defaults.exact_block_size), exact_cap = opt(11, defaults.exact_capacity),
               cpu_weight = opt(12, defaults.cpu_block_weight), pending = opt(13, defaults.pending_ms);
  const double values[] = {len, thr, block, blocks, choices, load, weight, match, exact_block, exact_cap, cpu_weight, pending};
  static_assert(sizeof values / sizeof values[0] == sizeof kConfigureRanges / sizeof kConfigureRanges[0], "one range per parameter");
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
    if (!(values[i] >= kConfigureRanges[i].min && values[i] <= kConfigureRanges[i].max))
      return Throw(env, "ERR_OUT_OF_RANGE", std::string("routing parameter ") + kConfigureRanges[i].name + " out of range");
  pr::RoutingParams p;
  p.strategy = static_cast<pr::Strategy>(strategy);
  p.prefix_length = static_cast<uint32_t>(len);
  p.threshold = static_cast<uint32_t>(thr);
  p.block_bytes = static_cast<uint32_t>(block);
  p.index_default = static_cast<uint32_t>(blocks);
  p.placement_choices = static_cast<uint32_t>(choices);
  p.load_factor = load;
  p.prefill_weight = weight;
  p.match_length = static_cast<uint32_t>(match);
  p.exact_block_size = static_cast<uint32_t>(exact_block);
  p.exact_capacity = static_cast<uint32_t>(exact_cap);
  p.cpu_block_weight = cpu_weight;
  p.pending_ms = pending;
  p.engine_load_all = info[14].IsBoolean() && info[14].As<Napi::Boolean>().Value();
  h->state->configure(p);
  return env.Undefined();
}

// router_params(h) -> the parameters picks use now: for an attached router, those its creator
// last published.
Napi::Value RouterParams(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  const pr::RoutingParams p = pr::SnapshotGuard(*h->state, h->reader).params();
  const auto& list = pr::strategy_registry();
  const uint32_t id = static_cast<uint32_t>(p.strategy);
  Napi::Object o = Napi::Object::New(env);
  o.Set("strategy", id < list.size() ? list[id].name : "prefix_aware");
  o.Set("prefixLength", p.prefix_length);
  o.Set("concurrencyThreshold", p.threshold);
  o.Set("blockSize", p.block_bytes);
  o.Set("indexBlocks", p.index_default);
  o.Set("placementChoices", p.placement_choices);
  o.Set("matchLength", p.match_length);
  o.Set("loadFactor", p.load_factor);
  o.Set("prefillWeight", p.prefill_weight);
  o.Set("exactBlockSize", p.exact_block_size);
  o.Set("exactCapacity", p.exact_capacity);
  o.Set("cpuBlockWeight", p.cpu_block_weight);
  o.Set("pendingMs", p.pending_ms);
  o.Set("engineLoadAll", p.engine_load_all);
  return o;
}

// strategies() -> [{ name, targeted, blocks, exactView, engineLoad, placement, defaultThreshold }]:
// the registry in order, each strategy with its traits (strategy/strategy.h).
Napi::Value Strategies(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const auto& list = pr::strategy_registry();
  Napi::Array out = Napi::Array::New(env, list.size());
  for (uint32_t i = 0; i < list.size(); i++) {
    const pr::StrategyTraits& t = list[i].impl.traits();
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", list[i].name);
    o.Set("targeted", t.targeted);
    o.Set("blocks", t.blocks);
    o.Set("exactView", t.exact_view);
    o.Set("engineLoad", t.engine_load);
    o.Set("placement", t.placement);
    o.Set("defaultThreshold", t.default_threshold);
    out.Set(i, o);
  }
  return out;
}

// router_set_instances(h, ids: string[], weights: number[], groups?: string[][], indexBlocks?: number[])
Napi::Value RouterSetInstances(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!h->state->writable()) return Throw(env, "ROUTER_READ_ONLY", "this router is attached to another process's state: only its creator sets its instances");
  if (!info[1].IsArray() || !info[2].IsArray())
    return Throw(env, "ERR_INVALID_ARG_TYPE", "ids and weights must be arrays", true);
  Napi::Array ids = info[1].As<Napi::Array>(), weights = info[2].As<Napi::Array>();
  if (ids.Length() != weights.Length()) return Throw(env, "ERR_INVALID_ARG_VALUE", "ids and weights differ in length");
  const bool has_groups = !info[3].IsUndefined();
  if (has_groups && (!info[3].IsArray() || info[3].As<Napi::Array>().Length() != ids.Length()))
    return Throw(env, "ERR_INVALID_ARG_TYPE", "groups must be an array of string arrays, one per id", true);
  const bool has_index = !info[4].IsUndefined();
  if (has_index && (!info[4].IsArray() || info[4].As<Napi::Array>().Length() != ids.Length()))
    return Throw(env, "ERR_INVALID_ARG_TYPE", "indexBlocks must be an array of numbers, one per id", true);
  std::vector<pr::RingMember> members;
  members.reserve(ids.Length());
  for (uint32_t i = 0; i < ids.Length(); i++) {
    Napi::Value id = ids.Get(i), w = weights.Get(i);
    if (!id.IsString() || !w.IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "bad instance entry", true);
    const double weight = w.As<Napi::Number>().DoubleValue();
    if (!(weight > 0 && weight <= 1e6)) return Throw(env, "ERR_OUT_OF_RANGE", "weight out of range");
    pr::RingMember m{id.As<Napi::String>().Utf8Value(), weight};
    if (has_groups) {
      Napi::Value g = info[3].As<Napi::Array>().Get(i);
      if (!g.IsArray()) return Throw(env, "ERR_INVALID_ARG_TYPE", "groups must be an array of string arrays", true);
      Napi::Array ga = g.As<Napi::Array>();
      for (uint32_t j = 0; j < ga.Length(); j++) {
        Napi::Value name = ga.Get(j);
        if (!name.IsString()) return Throw(env, "ERR_INVALID_ARG_TYPE", "group names must be strings", true);
        m.groups.push_back(name.As<Napi::String>().Utf8Value());
      }
    }
    if (has_index) {
      Napi::Value v = info[4].As<Napi::Array>().Get(i);
      if (!v.IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "indexBlocks entries must be numbers", true);
      const int64_t blocks = v.As<Napi::Number>().Int64Value();
      if (blocks < 0 || blocks > (1 << 28)) return Throw(env, "ERR_OUT_OF_RANGE", "indexBlocks out of range");
      m.index_blocks = static_cast<uint32_t>(blocks);
    }
    members.push_back(std::move(m));
  }
  std::string err = h->state->set_instances(members);
  if (!err.empty()) return Throw(env, "ROUTER_CAPACITY", err);
  return env.Undefined();
}

// router_set_fleet(h, text): the fleet record attached processes read (router_fleet).
Napi::Value RouterSetFleet(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!h->state->writable()) return Throw(env, "ROUTER_READ_ONLY", "this router is attached to another process's state: only its creator publishes the fleet record");
  if (!info[1].IsString()) return Throw(env, "ERR_INVALID_ARG_TYPE", "text must be a string", true);
  const std::string err = h->state->set_fleet(info[1].As<Napi::String>().Utf8Value());
  if (!err.empty()) return Throw(env, "ROUTER_CAPACITY", err);
  return env.Undefined();
}

// router_fleet(h, since) -> { version, text } when the fleet record's version is not `since`, else undefined.
Napi::Value RouterFleet(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!info[1].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "since must be a number", true);
  const double since = info[1].As<Napi::Number>().DoubleValue();
  if (!(since >= 0 && since <= 9007199254740991.0)) return Throw(env, "ERR_OUT_OF_RANGE", "since must be a version from 0 to 2^53-1");
  uint64_t version = 0;
  std::string text;
  if (!h->state->fleet(static_cast<uint64_t>(since), &version, &text)) return env.Undefined();
  Napi::Object o = Napi::Object::New(env);
  o.Set("version", static_cast<double>(version));
  o.Set("text", Napi::String::New(env, text));
  return o;
}

// The hashes key_extract wrote after an extracted key's text (key/bindings.h), when they are
// what this pick would compute: the record lies inside the text's buffer and follows this
// text, and its stamp matches the snapshot's parameters and the tenant's seed. Otherwise
// (a copy of the key, parameters reloaded since the extraction, another tenant) null, and the
// pick hashes the text.
PR_HOT const pr::KeyHashes* Hashed(napi_env env, const pr::ExtractedText& text, const pr::KeyPlan& plan, uint64_t seed) {
  size_t buffer_len = 0;
  void* base = nullptr;
  if (text.data == nullptr || text.buffer == nullptr || napi_get_arraybuffer_info(env, text.buffer, &base, &buffer_len) != napi_ok ||
      base == nullptr)
    return nullptr;
  const uint8_t* at = pr::key_hashes_at(const_cast<uint8_t*>(text.data), text.len);
  const uint8_t* end = static_cast<const uint8_t*>(base) + buffer_len;
  if (at < static_cast<const uint8_t*>(base) || at > end || static_cast<size_t>(end - at) < sizeof(pr::KeyHashes)) return nullptr;
  const auto* h = reinterpret_cast<const pr::KeyHashes*>(at);
  if (h->magic != pr::KeyHashes::kMagic || h->text_bytes != text.len || h->seed != seed || h->prefix != plan.prefix ||
      h->span != plan.span || h->block_bytes != plan.block_bytes)
    return nullptr;
  if (h->blocks > (static_cast<size_t>(end - at) - sizeof(pr::KeyHashes)) / sizeof(uint64_t) || h->anchor_blocks > h->blocks) return nullptr;
  return h;
}

// What a pick reads from its caller, however the binding received it.
struct PickArgs {
  Handle* h = nullptr;
  napi_value prefix = nullptr;                 // a string or Uint8Array (unless `prepared`)
  const pr::ExtractedText* prepared = nullptr;  // an extracted key's text (io kind 1)
  bool hashed = false;                         // the caller says key_extract wrote the hashes
  size_t anchor = SIZE_MAX;                    // UTF-16 units or bytes of `prefix`; ignored with `prepared`
  napi_value tenant = nullptr;                 // a string, or null for none
  napi_value group_name = nullptr;             // a string (looked up by name), or null
  uint32_t group_id = pr::RouterState::kNoGroup;  // used when group_name is null
  uint32_t avoid[io::kMaxAvoid];
  size_t navoid = 0;
  double* out = nullptr;                       // [slot, generation, overflow (0/1), prefill blocks], and io::kOut*
  const pr::ExactRequest* exact = nullptr;     // token ids for the exact view, or null
  size_t alternates = 0;                       // next choices to rank
};

// The pick itself: 0, -1 (no instances) or -2 (no instance in the group), or undefined with
// an exception pending.
PR_HOT Napi::Value PickWith(napi_env env, const PickArgs& a) {
  Handle* h = a.h;
  // Everything below reads the parameters of one snapshot, the one the pick uses.
  pr::SnapshotGuard guard(*h->state, h->reader);
  const pr::RoutingParams& p = guard.params();
  // What the strategy reads of the text and hashes from it (strategy/request_key.h).
  const pr::KeyPlan plan = pr::key_plan(guard.snap().strategy->traits(), p);
  const size_t span = plan.span;
  const pr::ExtractedText* prepared = a.prepared;
  // Only a strategy matching blocks ends its key at the anchor: for the others it is not read.
  const size_t anchor = plan.block_bytes == 0 ? SIZE_MAX : prepared != nullptr ? prepared->anchor_bytes : a.anchor;
  Marks marks;
  Bytes b;
  if (prepared != nullptr) {
    b.data = prepared->data;
    b.len = prepared->len;
    b.ok = true;
    marks.key_bytes = prepared->key_bytes;
    marks.anchor_bytes = anchor;
  } else {
    const Napi::Value prefix(env, a.prefix);
    if (prefix.IsString()) {
      marks.key_cp = p.prefix_length;
      marks.anchor_units = anchor;
      b = PrefixOfString(prefix, span, &marks);
    } else {
      b = GetBytes(prefix);
      if (b.len > span) b.len = span;
      marks.key_bytes = p.prefix_length;
      marks.anchor_bytes = anchor;
    }
  }
  if (!b.ok) return Throw(env, "ERR_INVALID_ARG_TYPE", "prefix must be a Uint8Array or a string", true);
  // Tenants get their own key space: the tenant id's hash seeds the prefix hash.
  uint64_t seed = 0;
  std::string tenant;
  if (a.tenant != nullptr && SmallString(env, a.tenant, &tenant)) seed = pr::xxh3_64(tenant.data(), tenant.size(), 0);
  std::string group;
  const bool has_group = a.group_name != nullptr && SmallString(env, a.group_name, &group);
  uint64_t key = 0;
  const uint64_t* blocks = nullptr;
  size_t nblocks = 0, anchor_blocks = 0;
  const pr::KeyHashes* hashed = prepared != nullptr && a.hashed ? Hashed(env, *prepared, plan, seed) : nullptr;
  if (hashed != nullptr) {
    key = hashed->key;
    nblocks = hashed->blocks;
    blocks = nblocks == 0 ? nullptr : reinterpret_cast<const uint64_t*>(hashed + 1);
    anchor_blocks = hashed->anchor_blocks;
  } else {
    thread_local std::vector<uint64_t> chain;
    if (chain.size() < pr::chain_capacity(plan, b.len) + 1) chain.resize(pr::chain_capacity(plan, b.len) + 1);
    const pr::RequestKey k = pr::hash_request(b.data, b.len, marks.key_bytes, anchor != SIZE_MAX, marks.anchor_bytes, plan, seed, chain.data());
    key = k.key;
    nblocks = k.blocks;
    blocks = plan.block_bytes == 0 ? nullptr : chain.data();
    anchor_blocks = k.anchor_blocks;
  }
  pr::PickResult r = has_group ? h->state->pick(guard, key, &group, blocks, nblocks, anchor_blocks, a.avoid, a.navoid, a.exact, a.alternates)
                               : h->state->pick_by_id(guard, key, a.group_id, blocks, nblocks, anchor_blocks, a.avoid, a.navoid, a.exact, a.alternates);
  if (r.slot < 0) return Napi::Number::New(env, r.no_group ? -2 : -1);
  a.out[0] = r.slot;
  a.out[1] = r.generation;
  a.out[2] = r.overflow ? 1 : 0;
  a.out[3] = r.prefill;
  a.out[io::kOutBlocks] = r.blocks;
  a.out[io::kOutHeld] = r.held;
  a.out[io::kOutExact] = r.exact ? 1 : 0;
  a.out[io::kOutAlternates] = r.nalternates;
  for (uint32_t i = 0; i < r.nalternates; i++) {
    a.out[io::kOutAlternateSlot + i] = r.alternate_slot[i];
    a.out[io::kOutAlternateGeneration + i] = r.alternate_generation[i];
  }
  return Napi::Number::New(env, 0);
}

// router_io(h) -> Float64Array: the handle's io block (see io:: above), for router_pick_io.
Napi::Value RouterIo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!h->io) h->io = std::make_shared<IoBlock>();
  auto* keep = new std::shared_ptr<IoBlock>(h->io);
  napi_value buffer, array;
  const auto release = [](napi_env, void*, void* hint) { delete static_cast<std::shared_ptr<IoBlock>*>(hint); };
  if (napi_create_external_arraybuffer(env, h->io->w, sizeof(IoBlock), release, keep, &buffer) != napi_ok) {
    delete keep;
    return Throw(env, "ROUTER_NO_EXTERNAL_BUFFERS", "this runtime does not allow external ArrayBuffers");
  }
  if (napi_create_typedarray(env, napi_float64_array, io::kWords, buffer, 0, &array) != napi_ok) return env.Undefined();
  return Napi::Value(env, array);
}

// An io word that must be a whole number in [0, limit]: false for anything else.
inline bool IoIndex(double d, double limit, size_t* out) {
  if (!(d >= 0 && d <= limit) || d != static_cast<double>(static_cast<uint64_t>(d))) return false;
  *out = static_cast<size_t>(d);
  return true;
}

// router_pick_io(h, prefix: Uint8Array | string, tenant?: string, group?: string) -> 0, or -1
// (no instances), -2 (no instance in the group), with the other arguments in the handle's io
// block and the result [slot, generation, overflow 0/1, prefill blocks] written over its first
// four words. The prefix is an extracted key's text when the block says so. A plain
// N-API callback: node-addon-api's wrapper would add a frame and a CallbackInfo off the hot pages.
PR_HOT napi_value RouterPickIo(napi_env env, napi_callback_info cb) {
  size_t argc = 6;
  napi_value argv[6];
  if (napi_get_cb_info(env, cb, &argc, argv, nullptr, nullptr) != napi_ok) return nullptr;
  napi_value undefined;
  napi_get_undefined(env, &undefined);
  for (size_t i = argc; i < 6; i++) argv[i] = undefined;
  void* handle = nullptr;
  if (napi_get_value_external(env, argv[0], &handle) != napi_ok || handle == nullptr) {
    Throw(env, "ERR_INVALID_ARG_TYPE", "not a router handle", true);
    return nullptr;
  }
  PickArgs a;
  a.h = static_cast<Handle*>(handle);
  if (!a.h->state) {
    Throw(env, "ROUTER_CLOSED", "router is closed");
    return nullptr;
  }
  if (!a.h->io) {
    Throw(env, "ERR_INVALID_STATE", "router_io was not called on this handle");
    return nullptr;
  }
  double* w = a.h->io->w;
  pr::ExtractedText text;
  size_t n = 0;
  if (w[io::kKind] == 1) {
    napi_typedarray_type type;
    void* data = nullptr;
    size_t offset = 0;
    if (napi_get_typedarray_info(env, argv[1], &type, &text.len, &data, &text.buffer, &offset) != napi_ok ||
        type != napi_uint8_array || (data == nullptr && text.len != 0)) {
      Throw(env, "ERR_INVALID_ARG_TYPE", "text must be a Uint8Array", true);
      return nullptr;
    }
    text.data = static_cast<const uint8_t*>(data);
    if (!IoIndex(w[io::kKeyBytes], static_cast<double>(text.len), &text.key_bytes)) {
      Throw(env, "ERR_OUT_OF_RANGE", "keyBytes must be an integer from 0 to the text's length");
      return nullptr;
    }
    if (w[io::kAnchor] != -1 && !IoIndex(w[io::kAnchor], static_cast<double>(text.len), &text.anchor_bytes)) {
      Throw(env, "ERR_OUT_OF_RANGE", "anchorBytes must be an integer from 0 to the text's length");
      return nullptr;
    }
    a.prepared = &text;
    a.hashed = w[io::kHashed] == 1;
  } else {
    a.prefix = argv[1];
    if (IoIndex(w[io::kAnchor], 4294967295.0, &n)) a.anchor = n;
  }
  if (w[io::kTenant] == 1) a.tenant = argv[2];
  if (w[io::kGroup] == -2) a.group_name = argv[3];
  else if (IoIndex(w[io::kGroup], 4294967294.0, &n)) a.group_id = static_cast<uint32_t>(n);
  size_t navoid = 0;
  if (IoIndex(w[io::kAvoidCount], io::kMaxAvoid, &navoid))
    for (size_t i = 0; i < navoid; i++)
      if (IoIndex(w[io::kAvoid + i], 4294967295.0, &n)) a.avoid[a.navoid++] = static_cast<uint32_t>(n);
  pr::ExactRequest exact;
  if (w[io::kExact] == 1) {
    // Read in place: the ids stay in the caller's Uint32Array for the length of the call.
    if (!U32Array(env, argv[4], &exact.tokens, &exact.ntokens)) {
      Throw(env, "ERR_INVALID_ARG_TYPE", "tokens.ids must be a Uint32Array", true);
      return nullptr;
    }
    bool lossless = false;
    if (napi_get_value_bigint_uint64(env, argv[5], &exact.seed, &lossless) != napi_ok || !lossless) {
      Throw(env, "ERR_INVALID_ARG_TYPE", "tokens.seed must be a bigint from 0 to 2^64-1", true);
      return nullptr;
    }
    exact.now = w[io::kNow];
    a.exact = &exact;
  }
  if (IoIndex(w[io::kAlternates], static_cast<double>(pr::kMaxAlternates), &n)) a.alternates = n;
  a.out = w;
  return PickWith(env, a);
}

// router_group_id(h, name) -> the id router_pick_io takes for the group, or -1 for a name no
// membership of this router has listed.
Napi::Value RouterGroupId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!info[1].IsString()) return Throw(env, "ERR_INVALID_ARG_TYPE", "name must be a string", true);
  return Napi::Number::New(env, static_cast<double>(h->state->group_id(info[1].As<Napi::String>().Utf8Value())));
}


// router_release(h, slot, prefill?) -> boolean; router_first_token(h, slot, prefill)
Napi::Value RouterRelease(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!info[1].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "slot must be a number", true);
  const int64_t slot = info[1].As<Napi::Number>().Int64Value();
  const int64_t prefill = info[2].IsNumber() ? info[2].As<Napi::Number>().Int64Value() : 0;
  if (slot < 0 || slot > 0xFFFFFFFF || prefill < 0 || prefill > 0xFFFFFFFF) return Napi::Boolean::New(env, false);
  return Napi::Boolean::New(env, h->state->release(static_cast<uint32_t>(slot), static_cast<uint32_t>(prefill)));
}

Napi::Value RouterFirstToken(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!info[1].IsNumber() || !info[2].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "slot and prefill must be numbers", true);
  const int64_t slot = info[1].As<Napi::Number>().Int64Value();
  const int64_t prefill = info[2].As<Napi::Number>().Int64Value();
  if (slot >= 0 && slot <= 0xFFFFFFFF && prefill >= 0 && prefill <= 0xFFFFFFFF)
    h->state->first_token(static_cast<uint32_t>(slot), static_cast<uint32_t>(prefill));
  return env.Undefined();
}

Napi::Value RouterSlotId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!info[1].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "slot must be a number", true);
  const int64_t slot = info[1].As<Napi::Number>().Int64Value();
  if (slot < 0 || slot > 0xFFFFFFFF) return Napi::String::New(env, "");
  return Napi::String::New(env, h->state->slot_id(static_cast<uint32_t>(slot)));
}

Napi::Value RouterInFlight(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!info[1].IsString()) return Throw(env, "ERR_INVALID_ARG_TYPE", "id must be a string", true);
  return Napi::Number::New(env, static_cast<double>(h->state->in_flight(h->reader, info[1].As<Napi::String>())));
}

// router_set_engine_load(h, id, inFlight, prefillBlocks) -> bool: the load at `id` beyond this
// router's own leases (Slot::ext_in_flight); false if no member has that id.
Napi::Value RouterSetEngineLoad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!info[1].IsString()) return Throw(env, "ERR_INVALID_ARG_TYPE", "id must be a string", true);
  if (!info[2].IsNumber() || !info[3].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "inFlight and prefillBlocks must be numbers", true);
  const double n = info[2].As<Napi::Number>().DoubleValue(), q = info[3].As<Napi::Number>().DoubleValue();
  if (!(n >= 0 && n <= 4294967295.0 && q >= 0 && q <= 9007199254740991.0)) return Throw(env, "ERR_OUT_OF_RANGE", "engine load out of range");
  return Napi::Boolean::New(env, h->state->set_engine_load(h->reader, info[1].As<Napi::String>(), static_cast<uint32_t>(n), static_cast<uint64_t>(q)));
}

Napi::Value RouterInstances(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  auto list = h->state->instances(h->reader);
  Napi::Array out = Napi::Array::New(env, list.size());
  for (uint32_t i = 0; i < list.size(); i++) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("id", list[i].id);
    o.Set("weight", list[i].weight);
    o.Set("inFlight", list[i].in_flight);
    o.Set("queuedPrefillBlocks", static_cast<double>(list[i].prefill));
    o.Set("engineInFlight", list[i].ext_in_flight);
    o.Set("engineQueuedPrefillBlocks", static_cast<double>(list[i].ext_prefill));
    Napi::Array groups = Napi::Array::New(env, list[i].groups.size());
    for (uint32_t j = 0; j < list[i].groups.size(); j++) groups.Set(j, list[i].groups[j]);
    o.Set("groups", groups);
    out.Set(i, o);
  }
  return out;
}

Napi::Value RouterStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  Napi::Object o = Napi::Object::New(env);
  o.Set("slotsInUse", h->state->slots_in_use());
  o.Set("ringPoints", static_cast<double>(h->state->ring_points(h->reader)));
  o.Set("ringBytes", static_cast<double>(h->state->ring_memory_bytes(h->reader)));
  o.Set("indexEntries", static_cast<double>(h->state->index_entries()));
  o.Set("indexBytes", static_cast<double>(h->state->index_memory_bytes()));
  o.Set("leasesCollected", static_cast<double>(h->state->leases_collected()));
  const pr::ExactStats e = h->state->exact_stats();
  o.Set("exactEntries", static_cast<double>(e.entries));
  o.Set("exactCapacity", static_cast<double>(pr::SnapshotGuard(*h->state, h->reader).params().exact_capacity));
  o.Set("exactMemoryBytes", static_cast<double>(e.memory_bytes));
  o.Set("exactDropped", static_cast<double>(e.dropped));
  o.Set("exactOrphans", static_cast<double>(e.orphans));
  return o;
}

// ---- the exact view (exact_index.h): events by instance id -----------------------------

// The instance id argument, and the tier (0 GPU, 1 offloaded) where one is taken.
bool ExactId(const Napi::CallbackInfo& info, std::string* id) {
  if (!info[1].IsString()) {
    Throw(info.Env(), "ERR_INVALID_ARG_TYPE", "instance must be a string", true);
    return false;
  }
  *id = info[1].As<Napi::String>().Utf8Value();
  return true;
}
bool ExactTierArg(const Napi::Value& v, pr::ExactTier* tier) {
  if (!v.IsNumber()) return false;
  const double t = v.As<Napi::Number>().DoubleValue();
  if (t != 0 && t != 1) return false;
  *tier = t == 0 ? pr::ExactTier::Gpu : pr::ExactTier::Offloaded;
  return true;
}

// router_exact_store(h, instance, parent: bigint | null, engineHashes: BigUint64Array,
//                    tokenIds: Uint32Array, blockSize, seed: bigint, tier) -> blocks recorded, or
// -1 orphan, -2 not a member, -3 another block size, -4 capacity reached.
Napi::Value RouterExactStore(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  std::string id;
  if (!ExactId(info, &id)) return env.Undefined();
  uint64_t parent = 0;
  const bool has_parent = !info[2].IsNull() && !info[2].IsUndefined();
  bool ok = true;
  if (has_parent) parent = GetSeed(info[2], &ok);
  if (!ok || (has_parent && !info[2].IsBigInt())) return Throw(env, "ERR_INVALID_ARG_TYPE", "parent must be null or a bigint from 0 to 2^64-1", true);
  const uint64_t* engine = nullptr;
  size_t n = 0;
  if (!U64Array(env, info[3], &engine, &n)) return Throw(env, "ERR_INVALID_ARG_TYPE", "engineHashes must be a BigUint64Array", true);
  const uint32_t* tokens = nullptr;
  size_t ntokens = 0;
  if (!U32Array(env, info[4], &tokens, &ntokens)) return Throw(env, "ERR_INVALID_ARG_TYPE", "tokenIds must be a Uint32Array", true);
  if (!info[5].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "blockSize must be a number", true);
  const double bs = info[5].As<Napi::Number>().DoubleValue();
  if (!(bs >= 1 && bs <= 1024) || bs != static_cast<double>(static_cast<uint32_t>(bs))) return Throw(env, "ERR_OUT_OF_RANGE", "blockSize must be an integer from 1 to 1024");
  if (ntokens != n * static_cast<size_t>(bs)) return Throw(env, "ERR_OUT_OF_RANGE", "tokenIds must hold engineHashes.length × blockSize ids");
  if (!info[6].IsBigInt()) return Throw(env, "ERR_INVALID_ARG_TYPE", "seed must be a bigint from 0 to 2^64-1", true);
  const uint64_t seed = GetSeed(info[6], &ok);
  if (!ok) return Throw(env, "ERR_INVALID_ARG_TYPE", "seed must be a bigint from 0 to 2^64-1", true);
  pr::ExactTier tier;
  if (!ExactTierArg(info[7], &tier)) return Throw(env, "ERR_OUT_OF_RANGE", "tier must be 0 (GPU) or 1 (offloaded)");
  return Napi::Number::New(env, static_cast<double>(h->state->exact_store(h->reader, id, has_parent ? &parent : nullptr, engine, n, tokens,
                                                                          static_cast<uint32_t>(bs), seed, tier)));
}

// router_exact_remove(h, instance, engineHashes: BigUint64Array, tier) -> removed, or -2 not a member.
Napi::Value RouterExactRemove(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  std::string id;
  if (!ExactId(info, &id)) return env.Undefined();
  const uint64_t* engine = nullptr;
  size_t n = 0;
  if (!U64Array(env, info[2], &engine, &n)) return Throw(env, "ERR_INVALID_ARG_TYPE", "engineHashes must be a BigUint64Array", true);
  pr::ExactTier tier;
  if (!ExactTierArg(info[3], &tier)) return Throw(env, "ERR_OUT_OF_RANGE", "tier must be 0 (GPU) or 1 (offloaded)");
  return Napi::Number::New(env, static_cast<double>(h->state->exact_remove(h->reader, id, engine, n, tier)));
}

// router_exact_clear(h, instance) -> false for a non-member.
Napi::Value RouterExactClear(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  std::string id;
  if (!ExactId(info, &id)) return env.Undefined();
  return Napi::Boolean::New(env, h->state->exact_clear(h->reader, id));
}

// router_exact_set_view(h, instance, view: 0 none, 1 fresh, 2 stale) -> false for a non-member.
Napi::Value RouterExactSetView(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  std::string id;
  if (!ExactId(info, &id)) return env.Undefined();
  const double v = info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : -1;
  if (v != 0 && v != 1 && v != 2) return Throw(env, "ERR_OUT_OF_RANGE", "view must be 0 (none), 1 (fresh) or 2 (stale)");
  return Napi::Boolean::New(env, h->state->exact_set_view(h->reader, id, static_cast<pr::ExactView>(static_cast<int>(v))));
}

Napi::Object ExactInfoObject(Napi::Env env, const pr::ExactSlotInfo& info) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("view", static_cast<double>(static_cast<int>(info.view)));
  o.Set("gpuBlocks", static_cast<double>(info.gpu));
  o.Set("offloadedBlocks", static_cast<double>(info.offloaded));
  o.Set("pendingBlocks", static_cast<double>(info.pending));
  return o;
}

// router_exact_instance(h, instance) -> { view: 0|1|2, gpuBlocks, offloadedBlocks, pendingBlocks } | undefined
Napi::Value RouterExactInstance(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  std::string id;
  if (!ExactId(info, &id)) return env.Undefined();
  pr::ExactSlotInfo out;
  if (!h->state->exact_info(h->reader, id, &out)) return env.Undefined();
  return ExactInfoObject(env, out);
}

// router_exact_match(h, tokenIds: Uint32Array, seed: bigint, now) -> per member, in ring order,
// { instance, view, blocks, gpuBlocks, offloadedBlocks, pendingBlocks } (blocks of the lead).
Napi::Value RouterExactMatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  pr::ExactRequest req;
  if (!U32Array(env, info[1], &req.tokens, &req.ntokens)) return Throw(env, "ERR_INVALID_ARG_TYPE", "tokenIds must be a Uint32Array", true);
  bool ok = info[2].IsBigInt();
  if (ok) req.seed = GetSeed(info[2], &ok);
  if (!ok) return Throw(env, "ERR_INVALID_ARG_TYPE", "seed must be a bigint from 0 to 2^64-1", true);
  if (!info[3].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "now must be a number", true);
  req.now = info[3].As<Napi::Number>().DoubleValue();
  const auto rows = h->state->exact_match(h->reader, req);
  Napi::Array out = Napi::Array::New(env, rows.size());
  for (uint32_t i = 0; i < rows.size(); i++) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("instance", rows[i].id);
    o.Set("view", static_cast<double>(static_cast<int>(rows[i].info.view)));
    o.Set("blocks", static_cast<double>(rows[i].lead.lead));
    o.Set("gpuBlocks", static_cast<double>(rows[i].lead.gpu));
    o.Set("offloadedBlocks", static_cast<double>(rows[i].lead.offloaded));
    o.Set("pendingBlocks", static_cast<double>(rows[i].lead.pending));
    out.Set(i, o);
  }
  return out;
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

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("xxh3", Napi::Function::New(env, Xxh3, "xxh3"));
  exports.Set("xxh3_path", Napi::Function::New(env, Xxh3Path, "xxh3_path"));
  exports.Set("xxh3_chain", Napi::Function::New(env, Xxh3Chain, "xxh3_chain"));
  exports.Set("build_info", Napi::Function::New(env, BuildInfo, "build_info"));
  exports.Set("abi", Napi::Function::New(env, Abi, "abi"));
  exports.Set("router_create", Napi::Function::New(env, RouterCreate, "router_create"));
  exports.Set("router_open", Napi::Function::New(env, RouterOpen, "router_open"));
  exports.Set("router_params", Napi::Function::New(env, RouterParams, "router_params"));
  exports.Set("router_attach", Napi::Function::New(env, RouterAttach, "router_attach"));
  exports.Set("router_shared_path", Napi::Function::New(env, RouterSharedPath, "router_shared_path"));
  exports.Set("router_release_process", Napi::Function::New(env, RouterReleaseProcess, "router_release_process"));
  exports.Set("router_lease_collected", Napi::Function::New(env, RouterLeaseCollected, "router_lease_collected"));
  exports.Set("router_close", Napi::Function::New(env, RouterClose, "router_close"));
  exports.Set("router_configure", Napi::Function::New(env, RouterConfigure, "router_configure"));
  exports.Set("router_set_instances", Napi::Function::New(env, RouterSetInstances, "router_set_instances"));
  exports.Set("router_set_fleet", Napi::Function::New(env, RouterSetFleet, "router_set_fleet"));
  exports.Set("router_fleet", Napi::Function::New(env, RouterFleet, "router_fleet"));
  exports.Set("router_io", Napi::Function::New(env, RouterIo, "router_io"));
  napi_value pick_io;
  if (napi_create_function(env, "router_pick_io", NAPI_AUTO_LENGTH, RouterPickIo, nullptr, &pick_io) == napi_ok)
    exports.Set("router_pick_io", Napi::Value(env, pick_io));
  exports.Set("router_group_id", Napi::Function::New(env, RouterGroupId, "router_group_id"));
  exports.Set("router_release", Napi::Function::New(env, RouterRelease, "router_release"));
  exports.Set("router_first_token", Napi::Function::New(env, RouterFirstToken, "router_first_token"));
  exports.Set("strategies", Napi::Function::New(env, Strategies, "strategies"));
  exports.Set("router_slot_id", Napi::Function::New(env, RouterSlotId, "router_slot_id"));
  exports.Set("router_in_flight", Napi::Function::New(env, RouterInFlight, "router_in_flight"));
  exports.Set("router_set_engine_load", Napi::Function::New(env, RouterSetEngineLoad, "router_set_engine_load"));
  exports.Set("router_instances", Napi::Function::New(env, RouterInstances, "router_instances"));
  exports.Set("router_stats", Napi::Function::New(env, RouterStats, "router_stats"));
  exports.Set("router_exact_store", Napi::Function::New(env, RouterExactStore, "router_exact_store"));
  exports.Set("router_exact_remove", Napi::Function::New(env, RouterExactRemove, "router_exact_remove"));
  exports.Set("router_exact_clear", Napi::Function::New(env, RouterExactClear, "router_exact_clear"));
  exports.Set("router_exact_set_view", Napi::Function::New(env, RouterExactSetView, "router_exact_set_view"));
  exports.Set("router_exact_instance", Napi::Function::New(env, RouterExactInstance, "router_exact_instance"));
  exports.Set("router_exact_match", Napi::Function::New(env, RouterExactMatch, "router_exact_match"));
  pr::RegisterKey(env, exports);
  return exports;
}

}  // namespace


NODE_API_MODULE(prefix_router, Init)
