// How the addon's bindings fail: a JS Error (or TypeError) carrying a `code`, which the
// TypeScript wrappers match on.
#pragma once
#include <napi.h>

#include <string>

namespace pr {

inline Napi::Value Throw(Napi::Env env, const char* code, const std::string& message, bool type_error = false) {
  Napi::Error e = type_error ? Napi::TypeError::New(env, message) : Napi::Error::New(env, message);
  e.Set("code", Napi::String::New(env, code));
  e.ThrowAsJavaScriptException();
  return env.Undefined();
}

}  // namespace pr
