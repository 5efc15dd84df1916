// The N-API side of native routing-key extraction (native/key_addon.cc), and the pick on
// its output, which lives in addon.cc with the router handles it needs.
#pragma once
#include <napi.h>

namespace pr {

// router_pick_extracted(h, text, tenant, group, anchorBytes, out, avoid, keyBytes): router_pick
// on UTF-8 text already cut to the span, with the key's and the anchor's ends in bytes.
// Arguments are checked by the caller in key_addon.cc.
Napi::Value PickPrepared(const Napi::CallbackInfo& info);

void RegisterKey(Napi::Env env, Napi::Object exports);

}  // namespace pr
