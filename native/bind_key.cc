// N-API bindings of the native routing-key extraction (native/key/). Arguments are checked
// in src/core/key/native-key.ts; the checks here keep any call from JS memory-safe.
#include <napi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "bind.h"
#include "key/bindings.h"
#include "napi_throw.h"
#include "key/openai_key.h"
#include "xxh3.h"
#include "strategy/request_key.h"

namespace {

using pr::Throw;
namespace io = pr::key_io;

struct View {
  uint8_t* data = nullptr;
  size_t len = 0;
};

// Through napi_get_typedarray_info's own data pointer: a body gathered into a
// SharedArrayBuffer (for the parse worker) has no ArrayBuffer to ask for one. The call fails
// on anything that is not a typed array, so no type check goes before it.
bool GetView(napi_env env, napi_value v, napi_typedarray_type type, View* out) {
  napi_typedarray_type t;
  size_t length = 0, offset = 0;
  void* data = nullptr;
  if (napi_get_typedarray_info(env, v, &t, &length, &data, nullptr, &offset) != napi_ok || t != type) return false;
  out->data = static_cast<uint8_t*>(data);
  out->len = length * (type == napi_float64_array ? sizeof(double) : 1);
  // An empty array may have no buffer at all.
  if (out->data == nullptr && out->len != 0) return false;
  return true;
}

bool Int(double d, double lo, double hi, size_t* out) {
  if (!(d >= lo && d <= hi) || std::floor(d) != d) return false;
  *out = static_cast<size_t>(d);
  return true;
}
bool Int(const Napi::Value& v, double lo, double hi, size_t* out) {
  double d = 0;
  if (napi_get_value_double(v.Env(), v, &d) != napi_ok) return false;  // not a number
  return Int(d, lo, hi, out);
}

napi_valuetype TypeOf(napi_env env, napi_value v) {
  napi_valuetype t = napi_undefined;
  return napi_typeof(env, v, &t) == napi_ok ? t : napi_undefined;
}

// The tenant a pick will be given, as the bytes it hashes for the seed: the header's value when
// the caller passed one (tenantOf prefers it), else the body's prompt_cache_key when it is its
// own bytes (no escapes; 1 to 64 printable ASCII, as tenantOf requires), else none. False
// when it cannot be told here: the pick then hashes the text itself.
bool TenantSeed(napi_env env, napi_value header, bool header_is_string, const uint8_t* body, const pr::key::KeyResult& r, uint64_t* seed) {
  *seed = 0;
  if (header_is_string) {
    char buf[72];
    size_t n = 0;
    // A longer value is not a tenant tenantOf accepts: the request fails before any pick.
    if (napi_get_value_string_utf8(env, header, buf, sizeof buf, &n) != napi_ok || n == 0 || n > 64) return false;
    *seed = pr::xxh3_64(buf, n, 0);
    return true;
  }
  if (!r.prompt_cache_key.present()) return true;
  const uint8_t* s = body + r.prompt_cache_key.begin + 1;
  const size_t n = r.prompt_cache_key.end - r.prompt_cache_key.begin - 2;
  if (n == 0 || n > 64) return false;
  for (size_t i = 0; i < n; i++)
    if (s[i] < 0x20 || s[i] > 0x7e || s[i] == '\\') return false;
  *seed = pr::xxh3_64(s, n, 0);
  return true;
}

// What the pick (bind_pick.cc) computes from the text, computed now: the same function
// (strategy/request_key.h) on the same bytes. A nonzero `block` is a strategy matching blocks
// (StrategyTraits::blocks), whose key ends at the anchor. Returns the bytes the record takes
// after the text, 0 when it is not written.
size_t WriteHashes(uint8_t* text, const pr::key::KeyResult& r, size_t prefix, size_t span, size_t block, uint64_t seed,
                   uint8_t* end) {
  uint8_t* at = pr::key_hashes_at(text, r.len);
  pr::KeyPlan plan;
  plan.prefix = prefix;
  plan.span = span;
  plan.block_bytes = block;
  if (static_cast<size_t>(end - at) < sizeof(pr::KeyHashes) + pr::chain_capacity(plan, r.len) * sizeof(uint64_t)) return 0;
  const pr::RequestKey k = pr::hash_request(text, r.len, r.key_bytes, r.has_anchor, r.anchor_bytes, plan, seed,
                                            reinterpret_cast<uint64_t*>(at + sizeof(pr::KeyHashes)));
  pr::KeyHashes h{};
  h.magic = pr::KeyHashes::kMagic;
  h.seed = seed;
  h.prefix = prefix;
  h.span = span;
  h.block_bytes = block;
  h.text_bytes = r.len;
  h.key = k.key;
  h.blocks = k.blocks;
  h.anchor_blocks = k.anchor_blocks;
  std::memcpy(at, &h, sizeof h);
  return static_cast<size_t>(at - (text + r.len)) + sizeof h + h.blocks * sizeof(uint64_t);
}

// The string members the wrapper turns into JS strings are most often the same from one request
// to the next (a fleet serves a few models): a memo of the last token's bytes gives each
// distinct token a generation, and the wrapper makes a string only for a generation it has not
// seen last. Per thread, as each thread runs its own JS (the parse workers).
class TokenMemo {
 public:
  // The token's generation: the same as the last call's when the bytes are; 0 for a token too
  // long to keep or an absent one, which are never taken from a memo.
  double note(const uint8_t* body, const pr::key::Span& token) {
    const size_t n = token.end - token.begin;
    if (!token.present() || n > sizeof bytes_) return 0;
    if (n != len_ || std::memcmp(bytes_, body + token.begin, n) != 0) {
      std::memcpy(bytes_, body + token.begin, n);
      len_ = n;
      gen_++;
    }
    return gen_;
  }

 private:
  uint8_t bytes_[128];
  size_t len_ = SIZE_MAX;
  double gen_ = 0;
};

// key_extract(body: Uint8Array, out: Uint8Array, io: Float64Array(10 or 12), tenant?)
//   -> 0 ok | 1 invalid | 2 unsupported
// io holds the numbers in, [api (0 chat | 1 completions), span, prefix, maxDepth, outOffset,
// blockBytes, hash (0 | 1)], and the results out (below): numbers written into a typed array
// by JS cost next to nothing, where each one read as an argument is a crossing of its own.
// The text is written at out[outOffset..], which must have room for min(4*span, body bytes).
// io out: [textBytes, keyBytes, anchorBytes or -1, model begin, end, prompt_cache_key begin, end,
//          stream 0/1, escapes (1 model, 2 prompt_cache_key), hash bytes, and when io has room,
//          model generation, prompt_cache_key generation (TokenMemo)]; a string member's span
//          covers its quotes, begin = end = 0 when absent.
// With hash 1, the routing hashes are written after the text as well (blockBytes: the block size
// of a strategy matching blocks, 0 for the others), for a router whose prefixLength is `prefix` and a
// request whose tenant header is `tenant` (undefined without one), when out has room for
// them and the tenant is known (see TenantSeed); io[9] is the bytes they take, 0 when not.
// A plain napi_callback rather than node-addon-api's CallbackInfo, which allocates its argument
// array on the heap for more than six arguments: this runs once per request.
napi_value KeyExtract(napi_env raw_env, napi_callback_info cb) {
  Napi::Env env(raw_env);
  napi_value argv[4];
  size_t argc = 4;
  if (napi_get_cb_info(raw_env, cb, &argc, argv, nullptr, nullptr) != napi_ok) return nullptr;
  napi_value undefined = nullptr;
  napi_get_undefined(raw_env, &undefined);
  for (size_t i = argc; i < 4; i++) argv[i] = undefined;
  View body, out, meta;
  if (!GetView(raw_env, argv[2], napi_float64_array, &meta) || meta.len < pr::kKeyMetaRequired * sizeof(double))
    return Throw(env, "ERR_INVALID_ARG_TYPE", "io must be a Float64Array of 10", true);
  double* m = reinterpret_cast<double*>(meta.data);
  size_t api = 0, span = 0, prefix = 0, depth = 0;
  if (!Int(m[io::kApi], 0, 1, &api)) return Throw(env, "ERR_OUT_OF_RANGE", "api must be 0 (chat) or 1 (completions)");
  if (!GetView(raw_env, argv[0], napi_uint8_array, &body)) return Throw(env, "ERR_INVALID_ARG_TYPE", "body must be a Uint8Array", true);
  if (!Int(m[io::kSpan], 1, 1 << 20, &span)) return Throw(env, "ERR_OUT_OF_RANGE", "span must be an integer from 1 to 1048576");
  if (!Int(m[io::kPrefix], 1, static_cast<double>(span), &prefix)) return Throw(env, "ERR_OUT_OF_RANGE", "prefix must be an integer from 1 to span");
  if (!Int(m[io::kMaxDepth], 1, 1 << 20, &depth)) return Throw(env, "ERR_OUT_OF_RANGE", "maxDepth must be an integer from 1 to 1048576");
  if (!GetView(raw_env, argv[1], napi_uint8_array, &out)) return Throw(env, "ERR_INVALID_ARG_TYPE", "out must be a Uint8Array", true);
  size_t offset = 0;
  if (!Int(m[io::kOutOffset], 0, static_cast<double>(out.len), &offset)) return Throw(env, "ERR_OUT_OF_RANGE", "outOffset must be an integer within out");
  size_t block = 0, hash_flag = 0;
  if (!Int(m[io::kHash], 0, 1, &hash_flag)) return Throw(env, "ERR_OUT_OF_RANGE", "hash must be 0 or 1");
  const bool hash = hash_flag == 1;
  if (hash && !Int(m[io::kBlockBytes], 0, 1 << 20, &block)) return Throw(env, "ERR_OUT_OF_RANGE", "blockBytes must be an integer from 0 to 1048576");
  const napi_valuetype tenant_type = TypeOf(raw_env, argv[3]);
  if (tenant_type != napi_undefined && tenant_type != napi_string) return Throw(env, "ERR_INVALID_ARG_TYPE", "tenant must be a string", true);
  if (out.len - offset < pr::key::out_capacity(span, body.len))
    return Throw(env, "ERR_OUT_OF_RANGE", "out must have room for min(4*span, body bytes) after outOffset");
  out.data += offset;
  out.len -= offset;
  const auto overlap = [](const View& a, const View& b) { return a.data < b.data + b.len && b.data < a.data + a.len; };
  if (overlap(out, body) || overlap(out, meta) || overlap(meta, body))
    return Throw(env, "ERR_INVALID_ARG_VALUE", "body, out and meta must not overlap");
  // The text goes to memory the caller has just allocated (a new slab), which is rarely in
  // cache: asking for its lines now lets them arrive while the body is validated, rather than
  // one miss after another as the text is copied in.
  // As many lines as text of one byte per code point takes (most prompts): more would cost
  // prefetches of lines the text may never reach.
  const size_t expect = std::min(out.len, std::min(span, body.len) + sizeof(pr::KeyHashes));
  for (size_t k = 0; k < expect; k += 64) __builtin_prefetch(out.data + k, 1, 3);
  pr::key::KeyParams p;
  p.span = span;
  p.prefix = prefix;
  p.scan.max_depth = depth;
  const pr::key::KeyResult r = pr::key::extract(static_cast<pr::key::Api>(api), body.data, body.len, p, out.data);
  m[io::kTextBytes] = static_cast<double>(r.len);
  m[io::kKeyBytes] = static_cast<double>(r.key_bytes);
  m[io::kAnchorBytes] = r.has_anchor ? static_cast<double>(r.anchor_bytes) : -1;
  m[io::kModelBegin] = static_cast<double>(r.model.begin);
  m[io::kModelEnd] = static_cast<double>(r.model.end);
  m[io::kCacheKeyBegin] = static_cast<double>(r.prompt_cache_key.begin);
  m[io::kCacheKeyEnd] = static_cast<double>(r.prompt_cache_key.end);
  m[io::kStream] = r.stream ? 1 : 0;
  m[io::kEscapes] = (r.model.present() && pr::key::string_has_escape(body.data, r.model) ? io::kEscapedModel : 0) +
         (r.prompt_cache_key.present() && pr::key::string_has_escape(body.data, r.prompt_cache_key) ? io::kEscapedCacheKey : 0);
  uint64_t seed = 0;
  m[io::kHashBytes] = hash && r.status == pr::key::Scan::Ok && TenantSeed(raw_env, argv[3], tenant_type == napi_string, body.data, r, &seed)
             ? static_cast<double>(WriteHashes(out.data, r, prefix, span, block, seed, out.data + out.len))
             : 0;
  if (meta.len >= pr::kKeyMetaWords * sizeof(double)) {
    // A reference: in a shared library each access to a thread_local may be a call.
    thread_local TokenMemo tls_memo[2];
    TokenMemo* memo = tls_memo;
    m[io::kModelGeneration] = memo[0].note(body.data, r.model);
    m[io::kCacheKeyGeneration] = memo[1].note(body.data, r.prompt_cache_key);
  }
  napi_value status = nullptr;
  napi_create_uint32(raw_env, static_cast<uint32_t>(r.status), &status);
  return status;
}

}  // namespace

namespace pr::bind {

void RegisterKey(Napi::Env env, Napi::Object exports) {
  napi_value extract = nullptr;
  NAPI_THROW_IF_FAILED_VOID(env, napi_create_function(env, "key_extract", NAPI_AUTO_LENGTH, KeyExtract, nullptr, &extract));
  exports.Set("key_extract", extract);
}

}  // namespace pr::bind
