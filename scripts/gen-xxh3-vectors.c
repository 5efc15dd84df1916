/* Writes test/vectors/xxh3-seeded.json: XXH3_64bits_withSeed from the reference library
 * (Debian's libxxhash-dev) over deterministic inputs, for the seeded cases xxhsum cannot do.
 * Build and run: cc -O2 scripts/gen-xxh3-vectors.c -o /tmp/gen && /tmp/gen > test/vectors/xxh3-seeded.json
 * Input bytes: a 32-bit LCG, x = x * 1664525 + 1013904223 from x = 0x12345678, byte = x >> 24
 * (test/core/hash.test.ts regenerates the same bytes). */
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned char* lcg_bytes(size_t n) {
  unsigned char* b = malloc(n ? n : 1);
  unsigned int x = 0x12345678u;
  for (size_t i = 0; i < n; i++) { x = x * 1664525u + 1013904223u; b[i] = (unsigned char)(x >> 24); }
  return b;
}

int main(void) {
  const unsigned long long seeds[] = {1ULL, 42ULL, 0x9E3779B97F4A7C15ULL, 0xFFFFFFFFFFFFFFFFULL};
  size_t lens[400];
  size_t nlens = 0;
  for (size_t l = 0; l <= 300; l++) lens[nlens++] = l;
  const size_t extra[] = {500, 1000, 1024, 1025, 2048, 4096, 8192, 65536, 1048576};
  for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) lens[nlens++] = extra[i];
  unsigned char* data = lcg_bytes(1048576);
  printf("{\n  \"generator\": \"scripts/gen-xxh3-vectors.c\",\n  \"xxhash\": \"%d.%d.%d\",\n  \"vectors\": [\n",
         XXH_VERSION_MAJOR, XXH_VERSION_MINOR, XXH_VERSION_RELEASE);
  int first = 1;
  for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++)
    for (size_t i = 0; i < nlens; i++) {
      printf("%s    {\"len\": %zu, \"seed\": \"%llu\", \"hash\": \"%016llx\"}", first ? "" : ",\n", lens[i], seeds[s],
             (unsigned long long)XXH3_64bits_withSeed(data, lens[i], seeds[s]));
      first = 0;
    }
  printf("\n  ]\n}\n");
  free(data);
  return 0;
}
