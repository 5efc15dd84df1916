// XXH3-64, bit-exact with the reference xxHash (0.8.x), with runtime SIMD dispatch.
#pragma once
#include <cstddef>
#include <cstdint>

namespace pr {

enum class SimdPath : int { Scalar = 0, SSE2 = 1, AVX2 = 2, NEON = 3 };

// One-shot hash, through the fastest path this CPU supports.
uint64_t xxh3_64(const void* data, size_t len, uint64_t seed);

// The same hash through a chosen path; used by tests and the fuzzer to compare paths.
// Falls back to scalar when the path is not compiled in or not supported here.
uint64_t xxh3_64_path(SimdPath path, const void* data, size_t len, uint64_t seed);

bool simd_path_supported(SimdPath path);
SimdPath simd_active_path();
const char* simd_path_name(SimdPath path);

}  // namespace pr
