// One binding file per native resource, each registering its own functions on the addon's
// exports (addon.cc calls them in turn).
#pragma once
#include <napi.h>

namespace pr::bind {

void RegisterHash(Napi::Env env, Napi::Object exports);    // bind_hash.cc: xxh3, its paths and chains
void RegisterInfo(Napi::Env env, Napi::Object exports);    // bind_info.cc: build_info, abi
void RegisterRouter(Napi::Env env, Napi::Object exports);  // bind_router.cc: the router handle
void RegisterPick(Napi::Env env, Napi::Object exports);    // bind_pick.cc: router_io, router_pick_io
void RegisterExact(Napi::Env env, Napi::Object exports);   // bind_exact.cc: the exact view
void RegisterKey(Napi::Env env, Napi::Object exports);     // bind_key.cc: key_extract

}  // namespace pr::bind
