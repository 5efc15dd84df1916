// The native unit tests' one assertion: CHECK counts passes and failures instead of stopping,
// so a run reports every failure; each test binary ends with "N passed, M failed" and a
// non-zero exit on a failure.
#pragma once
#include <cstdio>

inline int g_passed = 0, g_failed = 0;

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (cond) {                                                                     \
      g_passed++;                                                                   \
    } else {                                                                        \
      g_failed++;                                                                   \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                               \
  } while (0)
