// The N-API side of native routing-key extraction (native/bind_key.cc), and the pick on
// its output, which lives in bind_pick.cc with the router handles it needs.
#pragma once
#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pr {

// An extracted key's text as router_pick_io reads it (io kind 1, native/bind_pick.cc): UTF-8
// already cut to the span, with the key's and the anchor's ends in bytes. When the io block
// says key_extract hashed it, a KeyHashes record follows the text (below), which the pick uses
// when its stamp matches the router's parameters and the tenant, instead of hashing the text
// again.
struct ExtractedText {
  const uint8_t* data = nullptr;
  size_t len = 0;
  size_t key_bytes = 0;
  size_t anchor_bytes = SIZE_MAX;  // SIZE_MAX without an anchor
  napi_value buffer = nullptr;  // the ArrayBuffer holding the text (and any KeyHashes after it)
};

// key_extract's io block (a Float64Array): at least kKeyMetaRequired words; with
// kKeyMetaWords, the model's and prompt_cache_key's token generations too.
constexpr size_t kKeyMetaRequired = 10, kKeyMetaWords = 12;
// Its words: the numbers in, then the results written over them (native/bind_key.cc).
namespace key_io {
enum : size_t { kApi, kSpan, kPrefix, kMaxDepth, kOutOffset, kBlockBytes, kHash };
enum : size_t {
  kTextBytes,
  kKeyBytes,
  kAnchorBytes,
  kModelBegin,
  kModelEnd,
  kCacheKeyBegin,
  kCacheKeyEnd,
  kStream,
  kEscapes,
  kHashBytes,
  kModelGeneration,
  kCacheKeyGeneration,
};
static_assert(kHashBytes + 1 == kKeyMetaRequired && kCacheKeyGeneration + 1 == kKeyMetaWords, "key_extract's io words");
// kEscapes' bits: the model's string has escapes, prompt_cache_key's has.
constexpr double kEscapedModel = 1, kEscapedCacheKey = 2;
}  // namespace key_io

// The hashes a pick computes from extracted text, computed by key_extract right after writing
// the text, while it is still in cache (a pick reads it after the rest of the request has
// evicted it: 4 KiB hashed in 1 µs warm, 5 µs cold). The record sits at the first 8-byte
// boundary after the text, in the same buffer, followed by the chain's `blocks` hashes; the
// stamp (seed to match_span) is everything the hashes depend on besides the text.
struct KeyHashes {
  static constexpr uint64_t kMagic = 0x7072'6b68'3031'0001ULL;  // "prkh01", layout version 1
  uint64_t magic;
  uint64_t seed;          // xxh3 of the tenant, 0 without one
  uint64_t prefix;        // prefixLength (code points) the key was cut at
  uint64_t span;          // code points of text extracted
  uint64_t block_bytes;   // the chain's block size (a strategy matching blocks); 0 for none
  uint64_t text_bytes;    // the text's length, which the record must follow
  uint64_t key;           // xxh3 of the key's bytes (up to the anchor with a chain)
  uint64_t blocks;        // chained block hashes that follow
  uint64_t anchor_blocks;  // as the pick computes it (hash_request, strategy/request_key.h)
};

inline uint8_t* key_hashes_at(uint8_t* text, size_t text_bytes) {
  const uintptr_t end = reinterpret_cast<uintptr_t>(text) + text_bytes;
  return reinterpret_cast<uint8_t*>((end + 7) & ~uintptr_t{7});
}

}  // namespace pr
