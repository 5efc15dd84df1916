// The addon's entry: each native resource registers its own bindings (bind_*.cc). Arguments
// are validated in src/ (TypeScript); the checks in the bindings are a backstop so that no
// call from JS can crash the process.
#include <napi.h>

#include "bind.h"

namespace {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  pr::bind::RegisterHash(env, exports);
  pr::bind::RegisterInfo(env, exports);
  pr::bind::RegisterRouter(env, exports);
  pr::bind::RegisterPick(env, exports);
  pr::bind::RegisterExact(env, exports);
  pr::bind::RegisterKey(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(prefix_router, Init)
