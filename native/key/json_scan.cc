#include "json_scan.h"

#include <algorithm>
#include <cstring>
#include <vector>
#if defined(__x86_64__) || defined(_M_X64)
#define PR_KEY_X86 1
#include <immintrin.h>
#endif

namespace pr::key {
namespace {

inline bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
inline bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

inline int hex(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

inline bool special(uint8_t c) { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80; }

#if defined(PR_KEY_X86)
// Bytes that end a plain ASCII run in a string: a quote, a backslash, a control character
// (invalid there) or the lead of a multi-byte sequence. The signed compare catches the last
// two at once: bytes >= 0x80 are negative.
inline __m128i special16(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                      _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
}

inline __m128i quote_or_slash16(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\')));
}

// First byte in [i, end) that `mask` flags, or end: 64 bytes a step while nothing is found
// (prompts are mostly long plain runs), then the rest as one load that ends at `end` and
// overlaps bytes already seen, so that no run ends byte by byte. `d` is the start of the
// buffer: only a buffer shorter than a block is read a byte at a time.
template <__m128i (*mask)(const uint8_t*), bool (*flag)(uint8_t)>
inline size_t find_sse2(const uint8_t* d, size_t i, size_t end) {
  for (; i + 64 <= end; i += 64) {
    const __m128i a = mask(d + i), b = mask(d + i + 16), c = mask(d + i + 32), e = mask(d + i + 48);
    if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, e))) != 0) {
      const uint64_t m = static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(a))) |
                         static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(b))) << 16 |
                         static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(c))) << 32 |
                         static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(e))) << 48;
      return i + static_cast<size_t>(__builtin_ctzll(m));
    }
  }
  for (; i + 16 <= end; i += 16) {
    const unsigned m = static_cast<unsigned>(_mm_movemask_epi8(mask(d + i)));
    if (m != 0) return i + static_cast<size_t>(__builtin_ctz(m));
  }
  if (i == end) return end;
  if (end >= 16) {
    const unsigned m = static_cast<unsigned>(_mm_movemask_epi8(mask(d + end - 16))) >> (16 - (end - i));
    return m != 0 ? i + static_cast<size_t>(__builtin_ctz(m)) : end;
  }
  while (i < end && !flag(d[i])) i++;
  return i;
}

// The quote and the backslash in one compare: a lookup by low nibble holds each at its own
// (2 and C) and 0 elsewhere, so a byte equals the entry it picks only if it is one of them or
// 0x00 (a control character, special anyway). Bytes >= 0x80 pick 0 and are caught, with the
// controls, by the signed compare.
__attribute__((target("avx2"))) inline __m256i special32(const uint8_t* p) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i quote_or_slash = _mm256_setr_epi8(0, 0, '"', 0, 0, 0, 0, 0, 0, 0, 0, 0, '\\', 0, 0, 0,
                                                  0, 0, '"', 0, 0, 0, 0, 0, 0, 0, 0, 0, '\\', 0, 0, 0);
  return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_shuffle_epi8(quote_or_slash, v), v), _mm256_cmpgt_epi8(_mm256_set1_epi8(0x20), v));
}

__attribute__((target("avx2"))) inline __m256i quote_or_slash32(const uint8_t* p) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm256_or_si256(_mm256_cmpeq_epi8(v, _mm256_set1_epi8('"')), _mm256_cmpeq_epi8(v, _mm256_set1_epi8('\\')));
}

// find_sse2 with 32-byte blocks.
template <__m256i (*mask)(const uint8_t*), bool (*flag)(uint8_t)>
__attribute__((target("avx2"))) size_t find_avx2(const uint8_t* d, size_t i, size_t end) {
  for (; i + 64 <= end; i += 64) {
    const __m256i a = mask(d + i), b = mask(d + i + 32);
    if (!_mm256_testz_si256(_mm256_or_si256(a, b), _mm256_or_si256(a, b))) {
      const uint64_t m = static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(a))) |
                         static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(b))) << 32;
      return i + static_cast<size_t>(__builtin_ctzll(m));
    }
  }
  if (i + 32 <= end) {
    const unsigned m = static_cast<unsigned>(_mm256_movemask_epi8(mask(d + i)));
    if (m != 0) return i + static_cast<size_t>(__builtin_ctz(m));
    i += 32;
  }
  if (i == end) return end;
  if (end >= 32) {
    const unsigned m = static_cast<unsigned>(_mm256_movemask_epi8(mask(d + end - 32))) >> (32 - (end - i));
    return m != 0 ? i + static_cast<size_t>(__builtin_ctz(m)) : end;
  }
  while (i < end && !flag(d[i])) i++;
  return i;
}
#endif

inline bool quote_or_slash(uint8_t c) { return c == '"' || c == '\\'; }

// The first byte in [i, end) that ends a plain ASCII run inside a string. Prompts are mostly
// such runs, so this is where a scan spends its time.
inline size_t find_special(const uint8_t* d, size_t i, size_t end, SimdPath path) {
#if defined(PR_KEY_X86)
  if (path == SimdPath::AVX2) return find_avx2<special32, special>(d, i, end);
  if (path == SimdPath::SSE2) return find_sse2<special16, special>(d, i, end);
#else
  (void)path;
#endif
  while (i < end && !special(d[i])) i++;
  return i;
}

// In text already validated only quotes and backslashes matter.
inline size_t find_quote_or_slash(const uint8_t* d, size_t i, size_t end, SimdPath path) {
#if defined(PR_KEY_X86)
  if (path == SimdPath::AVX2) return find_avx2<quote_or_slash32, quote_or_slash>(d, i, end);
  if (path == SimdPath::SSE2) return find_sse2<quote_or_slash16, quote_or_slash>(d, i, end);
#else
  (void)path;
#endif
  while (i < end && !quote_or_slash(d[i])) i++;
  return i;
}

// find_special for where the next special byte is likely near (after an escape or a
// multi-byte character: in text that is not English, often the very next byte): one inline
// block first, the call only for a longer run.
__attribute__((always_inline)) inline size_t next_special(const uint8_t* d, size_t i, size_t end, SimdPath path) {
#if defined(PR_KEY_X86)
  if (path != SimdPath::Scalar && i + 16 <= end) {
    const unsigned m = static_cast<unsigned>(_mm_movemask_epi8(special16(d + i)));
    if (m != 0) return i + static_cast<size_t>(__builtin_ctz(m));
    i += 16;
  }
#endif
  return find_special(d, i, end, path);
}

// Length of the well-formed UTF-8 sequence at d[i] (lead byte >= 0x80), or 0 (overlong,
// surrogate, past U+10FFFF, truncated), per the Unicode table of well-formed sequences.
inline size_t utf8_length(const uint8_t* d, size_t i, size_t n) {
  const uint8_t c = d[i];
  auto cont = [&](size_t k, uint8_t lo, uint8_t hi) { return i + k < n && d[i + k] >= lo && d[i + k] <= hi; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1, 0x80, 0xBF) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0, 0xBF) && cont(2, 0x80, 0xBF) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1, 0x80, 0xBF) && cont(2, 0x80, 0xBF) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2, 0x80, 0xBF) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90, 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1, 0x80, 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
  return 0;
}

// Validates the string token whose quote is at d[i]; *end gets the index after its closing
// quote, *units the UTF-16 length of its value, *plain where its first escape or multi-byte
// sequence is (its closing quote when there is none).
Scan scan_string(const uint8_t* d, size_t n, size_t i, SimdPath path, size_t* end, size_t* units, size_t* plain) {
  const size_t begin = i++;
  size_t shrink = 0;  // bytes beyond one per unit: escapes and multi-byte sequences
#if defined(PR_KEY_X86)
  // Keys and most other values are short plain strings: one block without a call.
  if (path != SimdPath::Scalar && i + 16 <= n) {
    const unsigned m = static_cast<unsigned>(_mm_movemask_epi8(special16(d + i)));
    if (m != 0) {
      const size_t at = i + static_cast<size_t>(__builtin_ctz(m));
      if (d[at] == '"') {
        *plain = at;
        *end = at + 1;
        *units = at - i;
        return Scan::Ok;
      }
    }
  }
#endif
  i = find_special(d, i, n, path);
  *plain = i;
  for (;; i = next_special(d, i, n, path)) {
    if (i >= n) return Scan::Invalid;
    const uint8_t c = d[i];
    if (c == '"') {
      *end = i + 1;
      *units = i - begin - 1 - shrink;
      return Scan::Ok;
    }
    if (c == '\\') {
      if (i + 1 >= n) return Scan::Invalid;
      const uint8_t e = d[i + 1];
      if (e == 'u') {
        if (i + 5 >= n) return Scan::Invalid;
        for (size_t k = 2; k < 6; k++)
          if (hex(d[i + k]) < 0) return Scan::Invalid;
        i += 6;
        shrink += 5;
      } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
        i += 2;
        shrink += 1;
      } else {
        return Scan::Invalid;
      }
      continue;
    }
    if (c < 0x20) return Scan::Invalid;
    // Text that is not English is runs of multi-byte characters: read here, one after the
    // other, rather than searched for.
    do {
      const size_t len = utf8_length(d, i, n);
      if (len == 0) return Scan::Unsupported;
      i += len;
      shrink += len == 4 ? 2 : len - 1;
    } while (i < n && d[i] >= 0x80);
  }
}

Scan scan_number(const uint8_t* d, size_t n, size_t i, size_t* end) {
  if (d[i] == '-') i++;
  if (i >= n) return Scan::Invalid;
  if (d[i] == '0') {
    i++;
  } else if (d[i] >= '1' && d[i] <= '9') {
    while (i < n && is_digit(d[i])) i++;
  } else {
    return Scan::Invalid;
  }
  if (i < n && d[i] == '.') {
    i++;
    if (i >= n || !is_digit(d[i])) return Scan::Invalid;
    while (i < n && is_digit(d[i])) i++;
  }
  if (i < n && (d[i] == 'e' || d[i] == 'E')) {
    i++;
    if (i < n && (d[i] == '+' || d[i] == '-')) i++;
    if (i >= n || !is_digit(d[i])) return Scan::Invalid;
    while (i < n && is_digit(d[i])) i++;
  }
  *end = i;
  return Scan::Ok;
}

inline bool literal(const uint8_t* d, size_t n, size_t i, const char* word, size_t len) {
  return i + len <= n && std::memcmp(d + i, word, len) == 0;
}

// string_equals for a member's name, answering the usual case (another first character, which
// no escape spells) without the call: a body's every key is compared with every name wanted.
inline bool key_is(const uint8_t* d, const Span& token, const char* name) {
  const uint8_t c = d[token.begin + 1];
  return (c == static_cast<uint8_t>(name[0]) || c == '\\') && string_equals(d, token, name);
}

}  // namespace

size_t skip_ws(const uint8_t* d, size_t n, size_t i) {
  while (i < n && is_ws(d[i])) i++;
  return i;
}

Scan validate(const uint8_t* d, size_t n, const ScanOptions& o, RootFields* root) {
  // Containers open (1 object, 0 array). The buffer is kept per thread so a scan allocates
  // nothing, and reached through a plain pointer: in a shared library every thread_local
  // access may be a call.
  thread_local std::vector<uint8_t> tls_stack;
  std::vector<uint8_t>& storage = tls_stack;
  if (storage.size() < 64) storage.resize(64);
  uint8_t* stack = storage.data();
  size_t depth = 0;
  root->root_is_object = false;
  for (int k = 0; k < root->count; k++) root->values[k] = Span{};
  int field = -1;
  size_t value_begin = 0;
  std::vector<LongString>* long_strings = root->long_strings;
  if (long_strings) long_strings->clear();
  std::vector<MessageFields>* messages = root->message_fields;
  if (messages) messages->clear();
  // The root member being read is names[root->messages] (its elements are recorded), and which
  // of role (0) or content (1) the member of one of its elements being read is.
  bool in_messages = false;
  int message_field = -1;
  size_t message_value_begin = 0;

  // A member's key and colon, with i at the key's quote; leaves i at the value.
  auto key = [&](size_t* pi) -> Scan {
    size_t i = *pi;
    if (i >= n || d[i] != '"') return Scan::Invalid;
    size_t end = 0, units = 0, plain = 0;
    const Scan s = scan_string(d, n, i, o.simd, &end, &units, &plain);
    if (s != Scan::Ok) return s;
    if (depth == 1) {
      field = -1;
      for (int k = 0; k < root->count; k++)
        if (key_is(d, Span{i, end}, root->names[k])) field = k;
      in_messages = messages != nullptr && field >= 0 && field == root->messages;
      // A later duplicate replaces the array, as JSON.parse keeps the last.
      if (in_messages) messages->clear();
    } else if (depth == 3 && in_messages && stack[1] == 0) {
      message_field = key_is(d, Span{i, end}, "role") ? 0 : key_is(d, Span{i, end}, "content") ? 1 : -1;
    }
    i = skip_ws(d, n, end);
    if (i >= n || d[i] != ':') return Scan::Invalid;
    *pi = skip_ws(d, n, i + 1);
    return Scan::Ok;
  };

  size_t i = skip_ws(d, n, 0);
  for (;;) {
    // At a value.
    if (i >= n) return Scan::Invalid;
    if (depth == 1) value_begin = i;
    const uint8_t c = d[i];
    if (in_messages) {
      if (depth == 2 && stack[1] == 0) {
        messages->push_back(MessageFields{i, c == '{', Span{}, Span{}});
      } else if (depth == 3) {
        message_value_begin = i;
      }
    }
    size_t end = 0, units = 0, plain = 0;
    Scan s = Scan::Ok;
    if (c == '{' || c == '[') {
      if (depth >= o.max_depth) return Scan::Unsupported;
      if (depth == 0) root->root_is_object = c == '{';
      if (depth == storage.size()) {
        storage.resize(depth * 2);
        stack = storage.data();
      }
      stack[depth++] = c == '{';
      i = skip_ws(d, n, i + 1);
      const uint8_t close = c == '{' ? '}' : ']';
      if (i < n && d[i] == close) {
        depth--;
        i++;
      } else {
        if (c == '{' && (s = key(&i)) != Scan::Ok) return s;
        continue;
      }
    } else if (c == '"') {
      if ((s = scan_string(d, n, i, o.simd, &end, &units, &plain)) != Scan::Ok) return s;
      if (long_strings && end - i >= kLongString) long_strings->push_back(LongString{i, end, units, plain});
      i = end;
    } else if (c == '-' || is_digit(c)) {
      if ((s = scan_number(d, n, i, &end)) != Scan::Ok) return s;
      i = end;
    } else if (c == 't' && literal(d, n, i, "true", 4)) {
      i += 4;
    } else if (c == 'f' && literal(d, n, i, "false", 5)) {
      i += 5;
    } else if (c == 'n' && literal(d, n, i, "null", 4)) {
      i += 4;
    } else {
      return Scan::Invalid;
    }
    // After a value: record a root member's, then a comma, a close, or the end.
    for (;;) {
      if (depth == 1 && field >= 0) {
        root->values[field] = Span{value_begin, i};
        field = -1;
      }
      if (depth == 3 && message_field >= 0) {
        MessageFields& m = messages->back();
        (message_field == 0 ? m.role : m.content) = Span{message_value_begin, i};
        message_field = -1;
      }
      i = skip_ws(d, n, i);
      if (depth == 0) return i == n ? Scan::Ok : Scan::Invalid;
      if (i >= n) return Scan::Invalid;
      const bool in_object = stack[depth - 1] == 1;
      if (d[i] == ',') {
        i = skip_ws(d, n, i + 1);
        if (in_object && (s = key(&i)) != Scan::Ok) return s;
        break;
      }
      if (d[i] != (in_object ? '}' : ']')) return Scan::Invalid;
      depth--;
      i++;
    }
  }
}

const LongString* Walk::long_string_at(size_t i) const {
  if (long_count == 0) return nullptr;
  const LongString* end = long_strings + long_count;
  const LongString* at = std::lower_bound(long_strings, end, i, [](const LongString& s, size_t pos) { return s.begin < pos; });
  return at != end && at->begin == i ? at : nullptr;
}

size_t skip_string(const uint8_t* d, size_t n, size_t i, const Walk& w) {
#if defined(PR_KEY_X86)
  // Most strings a walk steps over are keys and roles: one block holds the whole of them,
  // which needs neither the lookup nor a call.
  if (w.simd != SimdPath::Scalar && i + 17 <= n) {
    const unsigned m = static_cast<unsigned>(_mm_movemask_epi8(quote_or_slash16(d + i + 1)));
    if (m != 0) {
      const size_t at = i + 1 + static_cast<size_t>(__builtin_ctz(m));
      if (d[at] == '"') return at + 1;
    }
  }
#endif
  if (const LongString* s = w.long_string_at(i)) return s->end;
  i++;
  for (;;) {
    i = find_quote_or_slash(d, i, n, w.simd);
    if (i >= n) return n;
    if (d[i] == '"') return i + 1;
    i += 2;
  }
}

size_t skip_value(const uint8_t* d, size_t n, size_t i, const Walk& w) {
  if (i >= n) return n;
  const uint8_t c = d[i];
  if (c == '"') return skip_string(d, n, i, w);
  if (c == '{' || c == '[') {
    size_t depth = 0;
    while (i < n) {
      const uint8_t b = d[i];
      if (b == '"') {
        i = skip_string(d, n, i, w);
        continue;
      }
      if (b == '{' || b == '[') depth++;
      if (b == '}' || b == ']') {
        if (--depth == 0) return i + 1;
      }
      i++;
    }
    return n;
  }
  while (i < n && d[i] != ',' && d[i] != '}' && d[i] != ']' && !is_ws(d[i])) i++;
  return i;
}

bool string_has_escape(const uint8_t* d, const Span& t) { return std::memchr(d + t.begin, '\\', t.end - t.begin) != nullptr; }

namespace {
// Collects a short string's units to compare with an ASCII name.
class Compare : public TextSink {
 public:
  explicit Compare(const char* want) : want_(want) {}
  bool ascii(const uint8_t* p, size_t n) override {
    for (size_t k = 0; k < n; k++)
      if (want_[pos_] == 0 || static_cast<uint8_t>(want_[pos_++]) != p[k]) return equal_ = false;
    return true;
  }
  bool utf8(const uint8_t*, size_t) override { return equal_ = false; }
  bool unit(uint16_t u) override {
    if (u >= 0x80) return equal_ = false;
    const uint8_t b = static_cast<uint8_t>(u);
    return ascii(&b, 1);
  }
  bool equal() const { return equal_ && want_[pos_] == 0; }

 private:
  const char* want_;
  size_t pos_ = 0;
  bool equal_ = true;
};
}  // namespace

bool string_equals(const uint8_t* d, const Span& t, const char* ascii) {
  // Byte for byte up to the first difference: only an escape there can still make the
  // string equal (a plain or multi-byte character is itself the unit that differs).
  const uint8_t* p = d + t.begin + 1;
  const size_t len = t.end - t.begin - 2;
  size_t k = 0;
  while (k < len && ascii[k] != 0 && p[k] == static_cast<uint8_t>(ascii[k])) k++;
  if (k == len) return ascii[k] == 0;
  if (p[k] != '\\') return false;
  Compare c(ascii);
  decode_string(d, t, &c, Walk{SimdPath::Scalar, nullptr, 0});
  return c.equal();
}

bool decode_string(const uint8_t* d, const Span& t, TextSink* sink, const Walk& w) {
  size_t i = t.begin + 1;
  const size_t end = t.end - 1;
  const LongString* known = t.end - t.begin >= kLongString ? w.long_string_at(t.begin) : nullptr;
  const size_t start_units = sink->units();
  while (i < end) {
    if (known != nullptr && sink->counting_only()) return sink->add_units(known->units - (sink->units() - start_units));
    const size_t to_go = sink->units_to_go();
    if (to_go != SIZE_MAX && (end - i) / 6 >= to_go) {
      sink->saturate();
      return false;
    }
    // With the string's units known, read no further than the sink still writes: past that
    // it only counts, which the record answers.
    const size_t limit = known != nullptr ? i + std::min(end - i, std::max<size_t>(1, sink->writes_to_go())) : end;
    const size_t j = known != nullptr && i < known->plain ? std::min(known->plain, limit) : next_special(d, i, limit, w.simd);
    if (j > i && !sink->ascii(d + i, j - i)) return false;
    if (j >= end) return true;
    if (j == limit) {
      i = j;
      continue;
    }
    if (d[j] == '\\') {
      const uint8_t e = d[j + 1];
      uint8_t b = 0;
      switch (e) {
        case 'b': b = '\b'; break;
        case 'f': b = '\f'; break;
        case 'n': b = '\n'; break;
        case 'r': b = '\r'; break;
        case 't': b = '\t'; break;
        case 'u': {
          const uint16_t u = static_cast<uint16_t>(hex(d[j + 2]) << 12 | hex(d[j + 3]) << 8 | hex(d[j + 4]) << 4 | hex(d[j + 5]));
          if (!sink->unit(u)) return false;
          i = j + 6;
          continue;
        }
        default: b = e;  // \" \\ \/
      }
      if (!sink->ascii(&b, 1)) return false;
      i = j + 2;
      continue;
    }
    // A run of multi-byte characters at once: up to the limit (past which the sink only
    // counts), then to the end of the character the limit cuts.
    size_t k = j + 1;
#if defined(PR_KEY_X86)
    if (w.simd != SimdPath::Scalar) {
      for (; k + 16 <= limit; k += 16) {
        const unsigned ascii = ~static_cast<unsigned>(_mm_movemask_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + k)))) & 0xFFFF;
        if (ascii != 0) {
          k += static_cast<size_t>(__builtin_ctz(ascii));
          break;
        }
      }
    }
#endif
    while (k < limit && d[k] >= 0x80) k++;
    while (k < end && (d[k] & 0xC0) == 0x80) k++;
    if (!sink->utf8(d + j, k - j)) return false;
    i = k;
  }
  return true;
}

Members::Members(const uint8_t* d, size_t n, Span o, const Walk& w) : data_(d), len_(n), i_(o.begin + 1), end_(o.end), walk_(w) {}

bool Members::next(Span* key, Span* value) {
  size_t i = skip_ws(data_, end_, i_);
  if (i >= end_ || data_[i] == '}') {
    i_ = i < end_ ? i + 1 : end_;
    return false;
  }
  if (data_[i] == ',') i = skip_ws(data_, end_, i + 1);
  key->begin = i;
  key->end = skip_string(data_, end_, i, walk_);
  i = skip_ws(data_, end_, key->end);
  i = skip_ws(data_, end_, i + 1);  // the colon
  value->begin = i;
  value->end = skip_value(data_, end_, i, walk_);
  i_ = value->end;
  (void)len_;
  return true;
}

Elements::Elements(const uint8_t* d, size_t n, Span a, const Walk& w) : data_(d), len_(n), i_(a.begin + 1), end_(a.end), walk_(w) {}

// The next element's first byte, or end_ when there is none.
size_t Elements::start() {
  if (pending_) end_at(skip_value(data_, end_, i_, walk_));
  size_t i = skip_ws(data_, end_, i_);
  if (i >= end_ || data_[i] == ']') return end_;
  if (data_[i] == ',') i = skip_ws(data_, end_, i + 1);
  (void)len_;
  return i;
}

bool Elements::next(Span* value) {
  const size_t i = start();
  if (i >= end_) return false;
  value->begin = i;
  value->end = skip_value(data_, end_, i, walk_);
  i_ = value->end;
  return true;
}

bool Elements::next_begin(size_t* begin) {
  const size_t i = start();
  if (i >= end_) return false;
  *begin = i_ = i;
  pending_ = true;
  return true;
}

}  // namespace pr::key
