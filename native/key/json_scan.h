// A validating JSON scanner for request bodies: accepts exactly what JSON.parse accepts of
// valid UTF-8 text, without building a tree. A first pass validates the whole text and
// records where the root object's members of interest are; later passes walk those values,
// which are known to be well formed, with the cheap skip/iterate helpers below.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../xxh3.h"

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

// Strings at least this long are recorded by validate, so later walks step over them at once
// and count their UTF-16 units without reading them again.
constexpr size_t kLongString = 64;

struct LongString {
  size_t begin = 0;  // the token, quotes included
  size_t end = 0;
  size_t units = 0;  // UTF-16 units of its value
  // Where its first escape or multi-byte sequence is (end - 1 when it has none): the text
  // before it is copied as it is, without being scanned again.
  size_t plain = 0;
};

// An element of the root's `messages` array as validate saw it: where it begins, whether it is
// an object, and that object's last "role" and "content" values (absent: not present()).
struct MessageFields {
  size_t begin = 0;
  bool object = false;
  Span role;
  Span content;
};

// Root members the caller wants; the last occurrence wins, as with JSON.parse.
struct RootFields {
  static constexpr int kMax = 8;
  const char* const* names = nullptr;  // ASCII, compared after unescaping the key
  int count = 0;
  Span values[kMax];
  bool root_is_object = false;
  // Filled when set: every string token of kLongString bytes or more, in order.
  std::vector<LongString>* long_strings = nullptr;
  // Filled when set: the elements of the array that is the last value of names[messages], in
  // order, so that a walk of the messages need not step through them again.
  int messages = -1;
  std::vector<MessageFields>* message_fields = nullptr;
};

struct ScanOptions {
  size_t max_depth = 1 << 16;
  // How strings are scanned: the fastest this CPU has, or another for tests to compare
  // (SimdPath::Scalar, a byte at a time, is the reference). NEON scans as Scalar.
  SimdPath simd = simd_active_path();
};

Scan validate(const uint8_t* data, size_t len, const ScanOptions& opts, RootFields* root);

// ---- helpers over text already validated -------------------------------------------

// How walks read validated text: the string path, and the long strings validate found, so
// that stepping over a long prompt costs a lookup rather than another scan of it.
struct Walk {
  SimdPath simd = SimdPath::Scalar;
  const LongString* long_strings = nullptr;
  size_t long_count = 0;
  // The record of the long string token starting at i, if it is one.
  const LongString* long_string_at(size_t i) const;
};

size_t skip_ws(const uint8_t* data, size_t len, size_t i);
// End of the value starting at i.
size_t skip_value(const uint8_t* data, size_t len, size_t i, const Walk& w);
// End of the string token starting at the quote at i.
size_t skip_string(const uint8_t* data, size_t len, size_t i, const Walk& w);
// Whether the string token equals `ascii` once unescaped.
bool string_equals(const uint8_t* data, const Span& token, const char* ascii);
bool string_has_escape(const uint8_t* data, const Span& token);

// Walks an object's members or an array's elements: call next() until it returns false.
class Members {
 public:
  // object.end may lie beyond the object (the end of what holds it): the walk stops at the
  // object's closing brace all the same.
  Members(const uint8_t* data, size_t len, Span object, const Walk& w);
  bool next(Span* key, Span* value);
  // Once next() has returned false: where the object ends, past its closing brace.
  size_t end() const { return i_; }

 private:
  const uint8_t* data_;
  size_t len_, i_, end_;
  const Walk& walk_;
};

class Elements {
 public:
  Elements(const uint8_t* data, size_t len, Span array, const Walk& w);
  bool next(Span* value);
  // Only where the next element begins, for a caller that reads it through anyway (an
  // object, member by member) and then tells end_at() where it ended, rather than have it
  // stepped over twice. Without end_at, the next call steps over it.
  bool next_begin(size_t* begin);
  void end_at(size_t end) {
    i_ = end;
    pending_ = false;
  }

 private:
  size_t start();
  const uint8_t* data_;
  size_t len_, i_, end_;
  bool pending_ = false;  // i_ is the beginning of the element next_begin returned
  const Walk& walk_;
};

// Receives a string's text as UTF-16 would see it: runs of ASCII, whole UTF-8 sequences of
// one code point, and the units that escapes spell (so that \uD83D\uDE00 pairs up and a lone
// surrogate stays lone). Returning false stops the decoding early.
class TextSink {
 public:
  virtual ~TextSink() = default;
  virtual bool ascii(const uint8_t* p, size_t n) = 0;
  virtual bool utf8(const uint8_t* p, size_t n) = 0;  // whole code points of 2-4 bytes each
  virtual bool unit(uint16_t u) = 0;                    // from an escape
  // Units the sink still counts once it writes nothing more (SIZE_MAX: all of them). A string
  // whose rest must hold at least that many (an escape spells one unit in at most 6 bytes)
  // need not be read: the sink is told to saturate() instead.
  virtual size_t units_to_go() const { return SIZE_MAX; }
  virtual void saturate() {}
  // Once the sink only counts, a string whose units validate counted is not read again.
  virtual bool counting_only() const { return false; }
  virtual size_t units() const { return 0; }
  virtual bool add_units(size_t) { return true; }
  // Code points the sink still writes: reading further before telling it is wasted.
  virtual size_t writes_to_go() const { return SIZE_MAX; }
};

// Bytes of the UTF-8 sequence a (valid) lead byte >= 0xC2 starts.
inline size_t lead_length(uint8_t c) { return c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2; }

// Feeds the contents of the validated string token to sink; false when the sink stopped.
bool decode_string(const uint8_t* data, const Span& token, TextSink* sink, const Walk& w);

}  // namespace pr::key
