// The router handle's bindings: creating, opening and attaching its state, its parameters
// and membership, the fleet record, leases and load. The pick is in bind_pick.cc, the exact
// view in bind_exact.cc.
#include <napi.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "bind.h"
#include "bind_args.h"
#include "bind_router.h"
#include "napi_throw.h"
#include "router.h"
#include "strategy/strategy.h"

namespace pr::bind {

namespace {

using pr::RouterState;
using pr::Throw;

// Named routers live in a process-wide registry so worker threads can open them; the
// state lives as long as any handle to it does.
std::mutex g_registry_mutex;
std::unordered_map<std::string, std::weak_ptr<RouterState>> g_registry;

Napi::Value Wrap(Napi::Env env, std::shared_ptr<RouterState> state) {
  int reader = state->acquire_reader();
  if (reader < 0)
    return Throw(env, "ROUTER_TOO_MANY_HANDLES", "at most 128 open handles per router (one per thread)");
  auto* h = new Handle{std::move(state), reader, nullptr};
  return Napi::External<Handle>::New(env, h, [](Napi::Env, Handle* p) { delete p; });
}

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

// router_configure(h, options): publishes the whole set. `options` names each parameter: the
// strategy, every one of kConfigureRanges (the exact view's four, exactBlockSize on, may be left
// out: their defaults then) and engineLoadAll (a boolean, default false); abi() lists the names.
Napi::Value RouterConfigure(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info);
  if (!h) return env.Undefined();
  if (!h->state->writable()) return Throw(env, "ROUTER_READ_ONLY", "this router is attached to another process's state: only its creator configures it");
  if (!info[1].IsObject()) return Throw(env, "ERR_INVALID_ARG_TYPE", "options must be an object", true);
  const Napi::Object options = info[1].As<Napi::Object>();
  // A getter may throw: its exception is left pending, and nothing is configured.
  auto get = [&](const char* name, Napi::Value* v) {
    *v = options.Get(name);
    return !env.IsExceptionPending() && !v->IsEmpty();
  };
  Napi::Value strategy_name, engine_load_all;
  if (!get("strategy", &strategy_name) || !get("engineLoadAll", &engine_load_all)) return env.Undefined();
  if (!strategy_name.IsString()) return Throw(env, "ERR_INVALID_ARG_TYPE", "strategy must be a string", true);
  if (!engine_load_all.IsUndefined() && !engine_load_all.IsBoolean()) return Throw(env, "ERR_INVALID_ARG_TYPE", "engineLoadAll must be a boolean", true);
  constexpr size_t kParams = sizeof kConfigureRanges / sizeof kConfigureRanges[0];
  constexpr size_t kFirstOptional = 8;  // exactBlockSize
  const pr::RoutingParams defaults;
  const double optional_defaults[] = {static_cast<double>(defaults.exact_block_size), static_cast<double>(defaults.exact_capacity),
                                      defaults.cpu_block_weight, defaults.pending_ms};
  static_assert(kFirstOptional + sizeof optional_defaults / sizeof optional_defaults[0] == kParams, "a default per optional parameter");
  double values[kParams];
  for (size_t i = 0; i < kParams; i++) {
    Napi::Value v;
    if (!get(kConfigureRanges[i].name, &v)) return env.Undefined();
    if (i >= kFirstOptional && v.IsUndefined()) {
      values[i] = optional_defaults[i - kFirstOptional];
      continue;
    }
    if (!v.IsNumber()) return Throw(env, "ERR_INVALID_ARG_TYPE", std::string("routing parameter ") + kConfigureRanges[i].name + " must be a number", true);
    values[i] = v.As<Napi::Number>().DoubleValue();
  }
  const int strategy = pr::strategy_index(strategy_name.As<Napi::String>().Utf8Value().c_str());
  if (strategy < 0) return Throw(env, "ERR_OUT_OF_RANGE", "unknown strategy");
  for (size_t i = 0; i < kParams; i++)
    if (!(values[i] >= kConfigureRanges[i].min && values[i] <= kConfigureRanges[i].max))
      return Throw(env, "ERR_OUT_OF_RANGE", std::string("routing parameter ") + kConfigureRanges[i].name + " out of range");
  const auto [len, thr, block, blocks, choices, load, weight, match, exact_block, exact_cap, cpu_weight, pending] = values;
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
  p.engine_load_all = engine_load_all.IsBoolean() && engine_load_all.As<Napi::Boolean>().Value();
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

}  // namespace

void RegisterRouter(Napi::Env env, Napi::Object exports) {
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
  exports.Set("router_release", Napi::Function::New(env, RouterRelease, "router_release"));
  exports.Set("router_first_token", Napi::Function::New(env, RouterFirstToken, "router_first_token"));
  exports.Set("strategies", Napi::Function::New(env, Strategies, "strategies"));
  exports.Set("router_slot_id", Napi::Function::New(env, RouterSlotId, "router_slot_id"));
  exports.Set("router_in_flight", Napi::Function::New(env, RouterInFlight, "router_in_flight"));
  exports.Set("router_set_engine_load", Napi::Function::New(env, RouterSetEngineLoad, "router_set_engine_load"));
  exports.Set("router_instances", Napi::Function::New(env, RouterInstances, "router_instances"));
  exports.Set("router_stats", Napi::Function::New(env, RouterStats, "router_stats"));
}

}  // namespace pr::bind
