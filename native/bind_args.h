// Reading the arguments of a binding: typed arrays in place, strings as UTF-8, bigint seeds.
// Shared by every binding file; the checks keep any call from JS memory-safe.
#pragma once
#include <napi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pr::bind {

// Bytes of a Uint8Array (no copy) or a string (UTF-8 into a per-thread buffer).
struct Bytes {
  const uint8_t* data = nullptr;
  size_t len = 0;
  bool ok = false;
};


// Per thread: the UTF-8 of a string argument (GetBytes, and the pick's PrefixOfString).
inline thread_local std::vector<char> t_utf8;

inline Bytes GetBytes(const Napi::Value& v) {
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

// A string argument's UTF-8, false for any other value: one call for the tenant ids and group
// names a pick takes, short enough (tens of bytes) for the string's own buffer.
inline bool SmallString(napi_env env, napi_value v, std::string* out) {
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

inline uint64_t GetSeed(const Napi::Value& v, bool* ok) {
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
inline bool TypedOf(napi_env env, napi_value v, napi_typedarray_type want, const T** data, size_t* len) {
  bool is = false;
  if (napi_is_typedarray(env, v, &is) != napi_ok || !is) return false;
  napi_typedarray_type type;
  void* p = nullptr;
  if (napi_get_typedarray_info(env, v, &type, len, &p, nullptr, nullptr) != napi_ok || type != want) return false;
  *data = static_cast<const T*>(p);
  return p != nullptr || *len == 0;
}
inline bool U32Array(napi_env env, napi_value v, const uint32_t** data, size_t* len) { return TypedOf(env, v, napi_uint32_array, data, len); }
inline bool F64Array(napi_env env, napi_value v, const double** data, size_t* len) { return TypedOf(env, v, napi_float64_array, data, len); }
inline bool U64Array(napi_env env, napi_value v, const uint64_t** data, size_t* len) { return TypedOf(env, v, napi_biguint64_array, data, len); }

}  // namespace pr::bind
