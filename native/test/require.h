// The fuzzers' one assertion: an invariant that fails traps at once, so libFuzzer stops and
// saves the input that broke it (CHECK in check.h counts and goes on, for the unit tests).
#pragma once
#include <cstdio>

#define REQUIRE(c)                                                                   \
  do {                                                                               \
    if (!(c)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #c); \
      __builtin_trap();                                                              \
    }                                                                                \
  } while (0)
