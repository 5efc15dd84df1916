// How the addon's bindings fail: a JS Error (or TypeError) carrying a `code`, which the
// TypeScript wrappers match on.
#pragma once
#include <napi.h>

#include <string>

namespace pr {

// Defined once (napi_throw.cc) rather than inline: each binding file would otherwise carry
// its own copy, and only failing calls reach it.
Napi::Value Throw(Napi::Env env, const char* code, const std::string& message, bool type_error = false);

}  // namespace pr
