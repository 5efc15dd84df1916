// The bindings' one way to fail (napi_throw.h).
#include "napi_throw.h"

namespace pr {

Napi::Value Throw(Napi::Env env, const char* code, const std::string& message, bool type_error) {
  Napi::Error e = type_error ? Napi::TypeError::New(env, message) : Napi::Error::New(env, message);
  e.Set("code", Napi::String::New(env, code));
  e.ThrowAsJavaScriptException();
  return env.Undefined();
}

}  // namespace pr
