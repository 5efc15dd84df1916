// XXH3-64 after the reference xxhash.h (Yann Collet, BSD-2-Clause); constants and
// structure follow that file so the output is bit-exact. Only inputs longer than
// 240 bytes reach the SIMD kernels; shorter ones are a few multiplies.
#include "xxh3.h"

#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#define PR_X86 1
#include <immintrin.h>
#endif
#if defined(__aarch64__) || defined(__ARM_NEON)
#define PR_NEON 1
#include <arm_neon.h>
#endif

namespace pr {
namespace {

constexpr uint32_t P32_1 = 0x9E3779B1U;
constexpr uint32_t P32_2 = 0x85EBCA77U;
constexpr uint32_t P32_3 = 0xC2B2AE3DU;
constexpr uint64_t P64_1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t P64_2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t P64_3 = 0x165667B19E3779F9ULL;
constexpr uint64_t P64_4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t P64_5 = 0x27D4EB2F165667C5ULL;

constexpr size_t kSecretSize = 192;
constexpr size_t kStripeLen = 64;
constexpr size_t kConsumeRate = 8;
constexpr size_t kMidsizeMax = 240;

alignas(64) const uint8_t kSecret[kSecretSize] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

// The router only builds for little-endian targets (x86-64, arm64), so a memcpy is a LE read.
inline uint64_t read64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }
inline uint32_t read32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
inline void write64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t xorshift(uint64_t v, int s) { return v ^ (v >> s); }

inline uint64_t mul128_fold64(uint64_t a, uint64_t b) {
  __uint128_t p = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

inline uint64_t xxh64_avalanche(uint64_t h) {
  h ^= h >> 33; h *= P64_2; h ^= h >> 29; h *= P64_3; h ^= h >> 32;
  return h;
}
inline uint64_t avalanche(uint64_t h) {
  h = xorshift(h, 37); h *= 0x165667919E3779F9ULL; return xorshift(h, 32);
}
inline uint64_t rrmxmx(uint64_t h, uint64_t len) {
  h ^= rotl64(h, 49) ^ rotl64(h, 24);
  h *= 0x9FB21C651E98DF25ULL;
  h ^= (h >> 35) + len;
  h *= 0x9FB21C651E98DF25ULL;
  return xorshift(h, 28);
}

uint64_t len_0to16(const uint8_t* in, size_t len, const uint8_t* sec, uint64_t seed) {
  if (len > 8) {
    uint64_t bf1 = (read64(sec + 24) ^ read64(sec + 32)) + seed;
    uint64_t bf2 = (read64(sec + 40) ^ read64(sec + 48)) - seed;
    uint64_t lo = read64(in) ^ bf1;
    uint64_t hi = read64(in + len - 8) ^ bf2;
    uint64_t acc = len + __builtin_bswap64(lo) + hi + mul128_fold64(lo, hi);
    return avalanche(acc);
  }
  if (len >= 4) {
    seed ^= static_cast<uint64_t>(__builtin_bswap32(static_cast<uint32_t>(seed))) << 32;
    uint32_t in1 = read32(in), in2 = read32(in + len - 4);
    uint64_t bf = (read64(sec + 8) ^ read64(sec + 16)) - seed;
    uint64_t in64 = in2 + (static_cast<uint64_t>(in1) << 32);
    return rrmxmx(in64 ^ bf, len);
  }
  if (len) {
    uint32_t c1 = in[0], c2 = in[len >> 1], c3 = in[len - 1];
    uint32_t combined = (c1 << 16) | (c2 << 24) | c3 | (static_cast<uint32_t>(len) << 8);
    uint64_t bf = (read32(sec) ^ read32(sec + 4)) + seed;
    return xxh64_avalanche(static_cast<uint64_t>(combined) ^ bf);
  }
  return xxh64_avalanche(seed ^ (read64(sec + 56) ^ read64(sec + 64)));
}

inline uint64_t mix16(const uint8_t* in, const uint8_t* sec, uint64_t seed) {
  return mul128_fold64(read64(in) ^ (read64(sec) + seed), read64(in + 8) ^ (read64(sec + 8) - seed));
}

uint64_t len_17to128(const uint8_t* in, size_t len, const uint8_t* sec, uint64_t seed) {
  uint64_t acc = len * P64_1;
  if (len > 32) {
    if (len > 64) {
      if (len > 96) {
        acc += mix16(in + 48, sec + 96, seed);
        acc += mix16(in + len - 64, sec + 112, seed);
      }
      acc += mix16(in + 32, sec + 64, seed);
      acc += mix16(in + len - 48, sec + 80, seed);
    }
    acc += mix16(in + 16, sec + 32, seed);
    acc += mix16(in + len - 32, sec + 48, seed);
  }
  acc += mix16(in, sec, seed);
  acc += mix16(in + len - 16, sec + 16, seed);
  return avalanche(acc);
}

uint64_t len_129to240(const uint8_t* in, size_t len, const uint8_t* sec, uint64_t seed) {
  uint64_t acc = len * P64_1;
  int rounds = static_cast<int>(len) / 16;
  for (int i = 0; i < 8; i++) acc += mix16(in + 16 * i, sec + 16 * i, seed);
  acc = avalanche(acc);
  for (int i = 8; i < rounds; i++) acc += mix16(in + 16 * i, sec + 16 * (i - 8) + 3, seed);
  acc += mix16(in + len - 16, sec + 136 - 17, seed);
  return avalanche(acc);
}

// ---- long inputs: 8 accumulator lanes over 64-byte stripes --------------------------

using AccFn = void (*)(uint64_t* acc, const uint8_t* in, const uint8_t* sec, size_t stripes);
using ScrambleFn = void (*)(uint64_t* acc, const uint8_t* sec);

void acc_scalar(uint64_t* acc, const uint8_t* in, const uint8_t* sec, size_t stripes) {
  for (size_t n = 0; n < stripes; n++) {
    const uint8_t* p = in + n * kStripeLen;
    const uint8_t* s = sec + n * kConsumeRate;
    for (int i = 0; i < 8; i++) {
      uint64_t v = read64(p + 8 * i);
      uint64_t k = v ^ read64(s + 8 * i);
      acc[i ^ 1] += v;
      acc[i] += static_cast<uint64_t>(static_cast<uint32_t>(k)) * (k >> 32);
    }
  }
}

void scramble_scalar(uint64_t* acc, const uint8_t* sec) {
  for (int i = 0; i < 8; i++) {
    uint64_t a = xorshift(acc[i], 47) ^ read64(sec + 8 * i);
    acc[i] = a * P32_1;
  }
}

#ifdef PR_X86
__attribute__((target("sse2")))
void acc_sse2(uint64_t* acc, const uint8_t* in, const uint8_t* sec, size_t stripes) {
  __m128i* xacc = reinterpret_cast<__m128i*>(acc);
  for (size_t n = 0; n < stripes; n++) {
    const uint8_t* p = in + n * kStripeLen;
    const uint8_t* s = sec + n * kConsumeRate;
    for (int i = 0; i < 4; i++) {
      __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p) + i);
      __m128i k = _mm_xor_si128(d, _mm_loadu_si128(reinterpret_cast<const __m128i*>(s) + i));
      __m128i prod = _mm_mul_epu32(k, _mm_shuffle_epi32(k, _MM_SHUFFLE(0, 3, 0, 1)));
      __m128i sum = _mm_add_epi64(_mm_load_si128(xacc + i), _mm_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2)));
      _mm_store_si128(xacc + i, _mm_add_epi64(prod, sum));
    }
  }
}

__attribute__((target("sse2")))
void scramble_sse2(uint64_t* acc, const uint8_t* sec) {
  __m128i* xacc = reinterpret_cast<__m128i*>(acc);
  const __m128i prime = _mm_set1_epi32(static_cast<int>(P32_1));
  for (int i = 0; i < 4; i++) {
    __m128i a = _mm_load_si128(xacc + i);
    a = _mm_xor_si128(a, _mm_srli_epi64(a, 47));
    __m128i k = _mm_xor_si128(a, _mm_loadu_si128(reinterpret_cast<const __m128i*>(sec) + i));
    __m128i lo = _mm_mul_epu32(k, prime);
    __m128i hi = _mm_mul_epu32(_mm_shuffle_epi32(k, _MM_SHUFFLE(0, 3, 0, 1)), prime);
    _mm_store_si128(xacc + i, _mm_add_epi64(lo, _mm_slli_epi64(hi, 32)));
  }
}

__attribute__((target("avx2")))
void acc_avx2(uint64_t* acc, const uint8_t* in, const uint8_t* sec, size_t stripes) {
  __m256i* xacc = reinterpret_cast<__m256i*>(acc);
  __m256i a0 = _mm256_load_si256(xacc), a1 = _mm256_load_si256(xacc + 1);
  for (size_t n = 0; n < stripes; n++) {
    const __m256i* p = reinterpret_cast<const __m256i*>(in + n * kStripeLen);
    const __m256i* s = reinterpret_cast<const __m256i*>(sec + n * kConsumeRate);
    __m256i d0 = _mm256_loadu_si256(p), d1 = _mm256_loadu_si256(p + 1);
    __m256i k0 = _mm256_xor_si256(d0, _mm256_loadu_si256(s));
    __m256i k1 = _mm256_xor_si256(d1, _mm256_loadu_si256(s + 1));
    __m256i m0 = _mm256_mul_epu32(k0, _mm256_shuffle_epi32(k0, _MM_SHUFFLE(0, 3, 0, 1)));
    __m256i m1 = _mm256_mul_epu32(k1, _mm256_shuffle_epi32(k1, _MM_SHUFFLE(0, 3, 0, 1)));
    a0 = _mm256_add_epi64(m0, _mm256_add_epi64(a0, _mm256_shuffle_epi32(d0, _MM_SHUFFLE(1, 0, 3, 2))));
    a1 = _mm256_add_epi64(m1, _mm256_add_epi64(a1, _mm256_shuffle_epi32(d1, _MM_SHUFFLE(1, 0, 3, 2))));
  }
  _mm256_store_si256(xacc, a0);
  _mm256_store_si256(xacc + 1, a1);
}

__attribute__((target("avx2")))
void scramble_avx2(uint64_t* acc, const uint8_t* sec) {
  __m256i* xacc = reinterpret_cast<__m256i*>(acc);
  const __m256i prime = _mm256_set1_epi32(static_cast<int>(P32_1));
  for (int i = 0; i < 2; i++) {
    __m256i a = _mm256_load_si256(xacc + i);
    a = _mm256_xor_si256(a, _mm256_srli_epi64(a, 47));
    __m256i k = _mm256_xor_si256(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sec) + i));
    __m256i lo = _mm256_mul_epu32(k, prime);
    __m256i hi = _mm256_mul_epu32(_mm256_shuffle_epi32(k, _MM_SHUFFLE(0, 3, 0, 1)), prime);
    _mm256_store_si256(xacc + i, _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32)));
  }
}
#endif  // PR_X86

#ifdef PR_NEON
void acc_neon(uint64_t* acc, const uint8_t* in, const uint8_t* sec, size_t stripes) {
  for (size_t n = 0; n < stripes; n++) {
    const uint8_t* p = in + n * kStripeLen;
    const uint8_t* s = sec + n * kConsumeRate;
    for (int i = 0; i < 4; i++) {
      uint64x2_t d = vreinterpretq_u64_u8(vld1q_u8(p + 16 * i));
      uint64x2_t k = veorq_u64(d, vreinterpretq_u64_u8(vld1q_u8(s + 16 * i)));
      uint32x2_t klo = vmovn_u64(k);
      uint32x2_t khi = vshrn_n_u64(k, 32);
      uint64x2_t sw = vextq_u64(d, d, 1);
      uint64x2_t a = vld1q_u64(acc + 2 * i);
      a = vaddq_u64(a, sw);
      a = vmlal_u32(a, klo, khi);
      vst1q_u64(acc + 2 * i, a);
    }
  }
}
#endif

struct LongKernels { AccFn acc; ScrambleFn scramble; };

LongKernels kernels_for(SimdPath path) {
  switch (path) {
#ifdef PR_X86
    case SimdPath::AVX2: return {acc_avx2, scramble_avx2};
    case SimdPath::SSE2: return {acc_sse2, scramble_sse2};
#endif
#ifdef PR_NEON
    case SimdPath::NEON: return {acc_neon, scramble_scalar};
#endif
    default: return {acc_scalar, scramble_scalar};
  }
}

uint64_t hash_long(const uint8_t* in, size_t len, const uint8_t* sec, LongKernels k) {
  alignas(64) uint64_t acc[8] = {P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1};
  const size_t stripes_per_block = (kSecretSize - kStripeLen) / kConsumeRate;
  const size_t block_len = kStripeLen * stripes_per_block;
  const size_t blocks = (len - 1) / block_len;
  for (size_t n = 0; n < blocks; n++) {
    k.acc(acc, in + n * block_len, sec, stripes_per_block);
    k.scramble(acc, sec + kSecretSize - kStripeLen);
  }
  const size_t stripes = ((len - 1) - block_len * blocks) / kStripeLen;
  k.acc(acc, in + blocks * block_len, sec, stripes);
  k.acc(acc, in + len - kStripeLen, sec + kSecretSize - kStripeLen - 7, 1);
  uint64_t r = len * P64_1;
  const uint8_t* ms = sec + 11;
  for (int i = 0; i < 4; i++) r += mul128_fold64(acc[2 * i] ^ read64(ms + 16 * i), acc[2 * i + 1] ^ read64(ms + 16 * i + 8));
  return avalanche(r);
}

uint64_t hash_with(LongKernels k, const void* data, size_t len, uint64_t seed) {
  const uint8_t* in = static_cast<const uint8_t*>(data);
  if (len <= 16) return len_0to16(in, len, kSecret, seed);
  if (len <= 128) return len_17to128(in, len, kSecret, seed);
  if (len <= kMidsizeMax) return len_129to240(in, len, kSecret, seed);
  if (seed == 0) return hash_long(in, len, kSecret, k);
  // Seeded long inputs use a secret derived from the seed, as XXH3_64bits_withSeed does.
  alignas(64) uint8_t custom[kSecretSize];
  for (size_t i = 0; i < kSecretSize / 16; i++) {
    write64(custom + 16 * i, read64(kSecret + 16 * i) + seed);
    write64(custom + 16 * i + 8, read64(kSecret + 16 * i + 8) - seed);
  }
  return hash_long(in, len, custom, k);
}

SimdPath detect() {
#ifdef PR_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) return SimdPath::AVX2;
  return SimdPath::SSE2;
#elif defined(PR_NEON)
  return SimdPath::NEON;
#else
  return SimdPath::Scalar;
#endif
}

const SimdPath g_active = detect();
const LongKernels g_kernels = kernels_for(g_active);

}  // namespace

bool simd_path_supported(SimdPath path) {
  switch (path) {
    case SimdPath::Scalar: return true;
#ifdef PR_X86
    case SimdPath::SSE2: return true;
    case SimdPath::AVX2: return __builtin_cpu_supports("avx2");
#endif
#ifdef PR_NEON
    case SimdPath::NEON: return true;
#endif
    default: return false;
  }
}

SimdPath simd_active_path() { return g_active; }

const char* simd_path_name(SimdPath path) {
  switch (path) {
    case SimdPath::SSE2: return "sse2";
    case SimdPath::AVX2: return "avx2";
    case SimdPath::NEON: return "neon";
    default: return "scalar";
  }
}

uint64_t xxh3_64(const void* data, size_t len, uint64_t seed) { return hash_with(g_kernels, data, len, seed); }

uint64_t xxh3_64_path(SimdPath path, const void* data, size_t len, uint64_t seed) {
  if (!simd_path_supported(path)) path = SimdPath::Scalar;
  return hash_with(kernels_for(path), data, len, seed);
}

}  // namespace pr
