// The XXH3 bindings: one hash, one SIMD path (for tests comparing paths), a chain of block hashes.
#include <napi.h>

#include <vector>

#include "bind.h"
#include "bind_args.h"
#include "napi_throw.h"
#include "prefix_index.h"
#include "xxh3.h"

namespace pr::bind {

namespace {

using pr::Throw;

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

}  // namespace

void RegisterHash(Napi::Env env, Napi::Object exports) {
  exports.Set("xxh3", Napi::Function::New(env, Xxh3, "xxh3"));
  exports.Set("xxh3_path", Napi::Function::New(env, Xxh3Path, "xxh3_path"));
  exports.Set("xxh3_chain", Napi::Function::New(env, Xxh3Chain, "xxh3_chain"));
}

}  // namespace pr::bind
