// The routing key of an OpenAI chat or completions body, read from its bytes: the same
// text src/core/key/openai-key.ts builds from JSON.parse's tree (role markers, content parts,
// image URLs; a completion's prompt or the first of a batch), written as the UTF-8 of its
// first `span` code points, exactly as the router would convert that string.
#pragma once
#include <cstddef>
#include <cstdint>

#include "json_scan.h"

namespace pr::key {

enum class Api : int { Chat = 0, Completions = 1 };

struct KeyParams {
  size_t span = 0;    // code points of text wanted (max(prefixLength, matchLength) for longest_prefix)
  size_t prefix = 0;  // code points the key hashes (prefixLength)
  ScanOptions scan;
};

struct KeyResult {
  Scan status = Scan::Invalid;
  size_t len = 0;        // bytes of text written
  size_t key_bytes = 0;  // bytes of the first `prefix` code points (<= len)
  bool has_anchor = false;
  size_t anchor_bytes = 0;  // chat: bytes up to the end of the first user message (<= len)
  Span model;               // string tokens, quotes included; empty when absent
  Span prompt_cache_key;
  bool stream = false;
  bool overflowed = false;  // the text did not fit out_capacity (never expected; then Unsupported)
};

// Bytes `out` must hold for a span and a body: every code point is at most 4 bytes of UTF-8,
// and the text is never longer than the body (each byte written comes from at least one byte
// of a string, and a message's or image part's markers from its braces and member names).
// Writes are checked all the same: text that would not fit makes the result Unsupported.
inline size_t out_capacity(size_t span, size_t body_len) { return span * 4 < body_len ? span * 4 : body_len; }

KeyResult extract(Api api, const uint8_t* body, size_t len, const KeyParams& params, uint8_t* out);

}  // namespace pr::key
