// A validating JSON scanner for request bodies: accepts exactly what JSON.parse accepts of
// valid UTF-8 text, without building a tree. A first pass validates the whole text and
// records where the root object's members of interest are; later passes walk those values,
// which are known to be well formed, with the cheap skip/iterate helpers below.
#pragma once
#include <cstddef>
#include <cstdint>

namespace pr::key {

enum class Scan : int {
  Ok = 0,
  Invalid = 1,      // JSON.parse would throw
  Unsupported = 2,  // not for this scanner: invalid UTF-8 (Buffer#toString would replace it), too deep
};

// A token or value in the text: [begin, end).
struct Span {
  size_t begin = 0;
  size_t end = 0;
  bool present() const { return end > begin; }
};

// Root members the caller wants; the last occurrence wins, as with JSON.parse.
struct RootFields {
  static constexpr int kMax = 8;
  const char* const* names = nullptr;  // ASCII, compared after unescaping the key
  int count = 0;
  Span values[kMax];
  bool root_is_object = false;
};

struct ScanOptions {
  size_t max_depth = 1 << 16;
  // Byte-at-a-time string scanning even where SIMD is compiled in: the reference the fuzzer
  // compares the SIMD path with.
  bool scalar = false;
};

Scan validate(const uint8_t* data, size_t len, const ScanOptions& opts, RootFields* root);

// ---- helpers over text already validated -------------------------------------------

size_t skip_ws(const uint8_t* data, size_t len, size_t i);
// End of the value starting at i.
size_t skip_value(const uint8_t* data, size_t len, size_t i, bool scalar);
// End of the string token starting at the quote at i.
size_t skip_string(const uint8_t* data, size_t len, size_t i, bool scalar);
// Whether the string token equals `ascii` once unescaped.
bool string_equals(const uint8_t* data, const Span& token, const char* ascii);
bool string_has_escape(const uint8_t* data, const Span& token);

// Walks an object's members or an array's elements: call next() until it returns false.
class Members {
 public:
  Members(const uint8_t* data, size_t len, Span object, bool scalar);
  bool next(Span* key, Span* value);

 private:
  const uint8_t* data_;
  size_t len_, i_, end_;
  bool scalar_;
};

class Elements {
 public:
  Elements(const uint8_t* data, size_t len, Span array, bool scalar);
  bool next(Span* value);

 private:
  const uint8_t* data_;
  size_t len_, i_, end_;
  bool scalar_;
};

// Receives a string's text as UTF-16 would see it: runs of ASCII, whole UTF-8 sequences of
// one code point, and the units that escapes spell (so that \uD83D\uDE00 pairs up and a lone
// surrogate stays lone). Returning false stops the decoding early.
class TextSink {
 public:
  virtual ~TextSink() = default;
  virtual bool ascii(const uint8_t* p, size_t n) = 0;
  virtual bool utf8(const uint8_t* p, size_t n) = 0;  // one code point, 2-4 bytes
  virtual bool unit(uint16_t u) = 0;                    // from an escape
};

// Feeds the contents of the validated string token to sink; false when the sink stopped.
bool decode_string(const uint8_t* data, const Span& token, TextSink* sink, bool scalar);

}  // namespace pr::key
