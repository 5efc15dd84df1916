// The pick: the one binding on every request's path (router_pick_io), its io block
// (router_io) and the group ids it takes (router_group_id).
#include <napi.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cstdint>
#include <string>
#include <vector>

#include "bind.h"
#include "bind_args.h"
#include "bind_router.h"
#include "key/bindings.h"
#include "napi_throw.h"
#include "router.h"
#include "strategy/request_key.h"
#include "strategy/strategy.h"
#include "xxh3.h"

namespace pr::bind {

namespace {

using pr::RouterState;
using pr::Throw;

thread_local std::vector<char16_t> t_utf16;

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
  if (r.slot < 0) return Napi::Number::New(env, r.no_group ? io::kNoGroup : io::kNoInstances);
  a.out[io::kOutSlot] = r.slot;
  a.out[io::kOutGeneration] = r.generation;
  a.out[io::kOutOverflow] = r.overflow ? 1 : 0;
  a.out[io::kOutPrefill] = r.prefill;
  a.out[io::kOutBlocks] = r.blocks;
  a.out[io::kOutHeld] = r.held;
  a.out[io::kOutExact] = r.exact ? 1 : 0;
  a.out[io::kOutAlternates] = r.nalternates;
  for (uint32_t i = 0; i < r.nalternates; i++) {
    a.out[io::kOutAlternateSlot + i] = r.alternate_slot[i];
    a.out[io::kOutAlternateGeneration + i] = r.alternate_generation[i];
  }
  return Napi::Number::New(env, io::kPicked);
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

}  // namespace

void RegisterPick(Napi::Env env, Napi::Object exports) {
  exports.Set("router_io", Napi::Function::New(env, RouterIo, "router_io"));
  napi_value pick_io;
  if (napi_create_function(env, "router_pick_io", NAPI_AUTO_LENGTH, RouterPickIo, nullptr, &pick_io) == napi_ok)
    exports.Set("router_pick_io", Napi::Value(env, pick_io));
  exports.Set("router_group_id", Napi::Function::New(env, RouterGroupId, "router_group_id"));
}

}  // namespace pr::bind
