// libFuzzer target: every supported SIMD path of pr::xxh3 must agree with the scalar
// path and with the reference XXH3_64bits_withSeed. Input: up to 8 bytes of seed
// (little-endian, zero-padded), then the data to hash.
#define XXH_INLINE_ALL
#include <xxhash.h>  // reference XXH3 (Debian libxxhash-dev)

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "../xxh3.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint64_t seed = 0;
  const size_t seed_len = size < 8 ? size : 8;
  std::memcpy(&seed, data, seed_len);
  data += seed_len;
  size -= seed_len;

  const uint64_t want = XXH3_64bits_withSeed(data, size, seed);
  const uint64_t scalar = pr::xxh3_64_path(pr::SimdPath::Scalar, data, size, seed);
  bool ok = scalar == want && pr::xxh3_64(data, size, seed) == want;
  for (pr::SimdPath p : {pr::SimdPath::SSE2, pr::SimdPath::AVX2, pr::SimdPath::NEON})
    if (pr::simd_path_supported(p) && pr::xxh3_64_path(p, data, size, seed) != want) {
      std::fprintf(stderr, "path %s differs\n", pr::simd_path_name(p));
      ok = false;
    }
  if (!ok) {
    std::fprintf(stderr, "xxh3 mismatch: len=%zu seed=%016" PRIx64 " reference=%016" PRIx64 " scalar=%016" PRIx64 "\n",
                 size, seed, want, scalar);
    __builtin_trap();
  }
  return 0;
}
