// The exact view's bindings (exact_index.h): the engines' KV events by instance id, the
// view each instance is trusted with, and the dry run for operators.
#include <napi.h>

#include <string>

#include "bind.h"
#include "bind_args.h"
#include "bind_router.h"
#include "exact_index.h"
#include "napi_throw.h"
#include "router.h"

namespace pr::bind {

namespace {

using pr::RouterState;
using pr::Throw;

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

// The engine block sizes the index takes: an integer in ExactIndex's range.
bool BlockSizeArg(double bs) {
  return bs >= pr::ExactIndex::kMinBlockSize && bs <= pr::ExactIndex::kMaxBlockSize && bs == static_cast<double>(static_cast<uint32_t>(bs));
}
const std::string kBlockSizeRange = "blockSize must be an integer from " + std::to_string(pr::ExactIndex::kMinBlockSize) + " to " +
                                    std::to_string(pr::ExactIndex::kMaxBlockSize);

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
  if (!BlockSizeArg(bs)) return Throw(env, "ERR_OUT_OF_RANGE", kBlockSizeRange);
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

// router_exact_apply(h, instance, ops: Float64Array, count, words: BigUint64Array,
//                    tokenIds: Uint32Array, blockSize, out: Float64Array) -> ops applied: one
// instance's batch of KV events in one call, each op as router_exact_store, _remove or _clear
// would apply it, in order, its result in out[i]. An op is exact_op::kWords numbers (its kind,
// tier, blocks and whether a parent is given); a store takes its seed, then its parent if it has
// one, then its engine hashes from `words`, and blocks × blockSize ids from `tokenIds`; a remove
// its engine hashes. The whole batch is checked before any op is applied.
Napi::Value RouterExactApply(const Napi::CallbackInfo& info) {
  namespace op = exact_op;
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  std::string id;
  if (!ExactId(info, &id)) return env.Undefined();
  const double* ops = nullptr;
  size_t nops = 0;
  if (!F64Array(env, info[2], &ops, &nops)) return Throw(env, "ERR_INVALID_ARG_TYPE", "ops must be a Float64Array", true);
  if (!info[3].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "count must be a number", true);
  const double count_d = info[3].As<Napi::Number>().DoubleValue();
  if (!(count_d >= 0 && count_d * op::kWords <= static_cast<double>(nops)) || count_d != static_cast<double>(static_cast<size_t>(count_d)))
    return Throw(env, "ERR_OUT_OF_RANGE", "count must be an integer up to the ops' length / op words");
  const size_t count = static_cast<size_t>(count_d);
  const uint64_t* words = nullptr;
  size_t nwords = 0;
  if (!U64Array(env, info[4], &words, &nwords)) return Throw(env, "ERR_INVALID_ARG_TYPE", "words must be a BigUint64Array", true);
  const uint32_t* tokens = nullptr;
  size_t ntokens = 0;
  if (!U32Array(env, info[5], &tokens, &ntokens)) return Throw(env, "ERR_INVALID_ARG_TYPE", "tokenIds must be a Uint32Array", true);
  if (!info[6].IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", "blockSize must be a number", true);
  const double bs = info[6].As<Napi::Number>().DoubleValue();
  if (!BlockSizeArg(bs)) return Throw(env, "ERR_OUT_OF_RANGE", kBlockSizeRange);
  const size_t block = static_cast<size_t>(bs);
  double* out = nullptr;
  size_t nout = 0;
  if (!F64Array(env, info[7], const_cast<const double**>(&out), &nout) || nout < count)
    return Throw(env, "ERR_INVALID_ARG_TYPE", "out must be a Float64Array of at least count results", true);
  // Results written over the ops would change the ops checked below as they are applied.
  if (out < ops + count * op::kWords && ops < out + count) return Throw(env, "ERR_INVALID_ARG_VALUE", "out must not overlap ops");
  // Every op's fields, and what the ops take of words and tokenIds, checked first.
  size_t w = 0, t = 0;
  for (size_t i = 0; i < count; i++) {
    const double* o = ops + i * op::kWords;
    const double kind = o[op::kKind], tier = o[op::kTier], blocks = o[op::kBlocks], parent = o[op::kParent];
    if (kind == op::kClear) continue;
    if ((kind != op::kStore && kind != op::kRemove) || (tier != 0 && tier != 1) || !(blocks >= 0 && blocks <= 4294967295.0) ||
        blocks != static_cast<double>(static_cast<uint32_t>(blocks)) || (parent != 0 && parent != 1))
      return Throw(env, "ERR_OUT_OF_RANGE", "op " + std::to_string(i) + " is not a store, remove or clear");
    const size_t n = static_cast<size_t>(blocks);
    w += n + (kind == op::kStore ? 1 + static_cast<size_t>(parent) : 0);
    if (kind == op::kStore) t += n * block;
    if (w > nwords || t > ntokens) return Throw(env, "ERR_OUT_OF_RANGE", "the ops take more words or tokenIds than given");
  }
  w = t = 0;
  for (size_t i = 0; i < count; i++) {
    const double* o = ops + i * op::kWords;
    const double kind = o[op::kKind];
    if (kind == op::kClear) {
      out[i] = h->state->exact_clear(h->reader, id) ? 1 : 0;
      continue;
    }
    const pr::ExactTier tier = o[op::kTier] == 0 ? pr::ExactTier::Gpu : pr::ExactTier::Offloaded;
    const size_t n = static_cast<size_t>(o[op::kBlocks]);
    if (kind == op::kRemove) {
      out[i] = static_cast<double>(h->state->exact_remove(h->reader, id, words + w, n, tier));
      w += n;
      continue;
    }
    const uint64_t seed = words[w++];
    const uint64_t* parent = o[op::kParent] == 1 ? &words[w++] : nullptr;
    out[i] = static_cast<double>(h->state->exact_store(h->reader, id, parent, words + w, n, tokens + t, static_cast<uint32_t>(block), seed, tier));
    w += n;
    t += n * block;
  }
  return Napi::Number::New(env, static_cast<double>(count));
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

}  // namespace

void RegisterExact(Napi::Env env, Napi::Object exports) {
  exports.Set("router_exact_store", Napi::Function::New(env, RouterExactStore, "router_exact_store"));
  exports.Set("router_exact_apply", Napi::Function::New(env, RouterExactApply, "router_exact_apply"));
  exports.Set("router_exact_remove", Napi::Function::New(env, RouterExactRemove, "router_exact_remove"));
  exports.Set("router_exact_clear", Napi::Function::New(env, RouterExactClear, "router_exact_clear"));
  exports.Set("router_exact_set_view", Napi::Function::New(env, RouterExactSetView, "router_exact_set_view"));
  exports.Set("router_exact_instance", Napi::Function::New(env, RouterExactInstance, "router_exact_instance"));
  exports.Set("router_exact_match", Napi::Function::New(env, RouterExactMatch, "router_exact_match"));
}

}  // namespace pr::bind
