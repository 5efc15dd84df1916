#include "openai_key.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace pr::key {
namespace {

// Role markers, as in src/core/key/prompt-text.ts.
const uint8_t kRoleOpen[] = {0xE2, 0x90, 0x9E};   // U+241E
const uint8_t kRoleClose[] = {0xE2, 0x90, 0x9F};  // U+241F
const uint8_t kReplacement[] = {0xEF, 0xBF, 0xBD};  // U+FFFD, for a lone surrogate

// Where the code point after the first m of the UTF-8 in p[0, n) begins (n if there is none).
size_t code_point_at(const uint8_t* p, size_t n, size_t m) {
  for (size_t i = 0; i < n; i++)
    if ((p[i] & 0xC0) != 0x80 && m-- == 0) return i;
  return n;
}

// Builds the text as JS would (UTF-16 units, for the cap the TS loop stops at) while writing
// the UTF-8 of its first `span` code points (for the router). Surrogates arrive one unit at a
// time from escapes; one high surrogate waits for the next unit, since a pair may be split
// across two strings that the text concatenates (two content parts).
class Emitter final : public TextSink {
 public:
  // unit_cap SIZE_MAX: no count of units, only the span matters.
  Emitter(uint8_t* out, size_t room, size_t span, size_t prefix, size_t unit_cap)
      : out_(out), room_(room), span_(span), prefix_(prefix), cap_(unit_cap) {}

  // Text that would not fit in `room` (which out_capacity sizes so that it never happens).
  bool overflowed() const { return overflowed_; }

  bool done() const { return units_ >= cap_; }
  size_t units_to_go() const override { return cps_ < span_ ? SIZE_MAX : cap_ == SIZE_MAX ? 0 : cap_ - units_; }
  void saturate() override { units_ = cap_; }
  bool counting_only() const override { return cps_ >= span_; }
  size_t writes_to_go() const override { return cps_ < span_ ? span_ - cps_ : 0; }
  size_t units() const override { return units_; }
  bool add_units(size_t n) override {
    units_ = n > cap_ - units_ ? cap_ : units_ + n;
    return !done();
  }
  size_t len() const { return len_; }
  size_t key_bytes() const { return cps_ >= prefix_ ? key_bytes_ : len_; }

  bool ascii(const uint8_t* p, size_t n) override {
    if (done()) return false;
    if (pending_ != 0) flush();
    units_ += n;
    if (cps_ < span_) {
      size_t take = std::min(n, span_ - cps_);
      if (take > room_ - len_) {
        overflowed_ = true;
        take = room_ - len_;
      }
      if (cps_ < prefix_ && cps_ + take >= prefix_) key_bytes_ = len_ + (prefix_ - cps_);
      std::memcpy(out_ + len_, p, take);
      len_ += take;
      cps_ += take;
    }
    return !done();
  }

  bool utf8(const uint8_t* p, size_t n) override {
    if (done()) return false;
    if (pending_ != 0) flush();
    // Counted byte by byte rather than sequence by sequence, which would chain every step on
    // the load before it: a character is its lead byte, and one of four bytes is two units.
    size_t cps = 0, astral = 0;
    for (size_t i = 0; i < n; i++) {
      cps += (p[i] & 0xC0) != 0x80;
      astral += p[i] >= 0xF0;
    }
    units_ += cps + astral;
    if (cps_ >= span_) return !done();
    // The code points the span still takes, copied at once.
    const size_t take_cps = std::min(cps, span_ - cps_);
    const size_t take = take_cps == cps ? n : code_point_at(p, n, take_cps);
    if (take > room_ - len_) {
      // Never expected (see out_capacity): one code point at a time, as put() checks.
      for (size_t k = 0; k < n && cps_ < span_; k += lead_length(p[k])) put(p + k, lead_length(p[k]));
      return !done();
    }
    if (cps_ < prefix_ && cps_ + take_cps >= prefix_) key_bytes_ = len_ + code_point_at(p, take, prefix_ - cps_);
    std::memcpy(out_ + len_, p, take);
    len_ += take;
    cps_ += take_cps;
    return !done();
  }

  bool unit(uint16_t u) override {
    if (done()) return false;
    units_++;
    if (pending_ != 0) {
      if (u >= 0xDC00 && u <= 0xDFFF) {
        const uint32_t cp = 0x10000 + ((static_cast<uint32_t>(pending_) - 0xD800) << 10) + (u - 0xDC00);
        pending_ = 0;
        const uint8_t b[4] = {static_cast<uint8_t>(0xF0 | (cp >> 18)), static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F)),
                              static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)), static_cast<uint8_t>(0x80 | (cp & 0x3F))};
        put(b, 4);
        return !done();
      }
      flush();
    }
    if (u >= 0xD800 && u <= 0xDBFF) {
      pending_ = u;
    } else if (u >= 0xDC00 && u <= 0xDFFF) {
      put(kReplacement, 3);
    } else if (u < 0x80) {
      const uint8_t b = static_cast<uint8_t>(u);
      put(&b, 1);
    } else if (u < 0x800) {
      const uint8_t b[2] = {static_cast<uint8_t>(0xC0 | (u >> 6)), static_cast<uint8_t>(0x80 | (u & 0x3F))};
      put(b, 2);
    } else {
      const uint8_t b[3] = {static_cast<uint8_t>(0xE0 | (u >> 12)), static_cast<uint8_t>(0x80 | ((u >> 6) & 0x3F)),
                            static_cast<uint8_t>(0x80 | (u & 0x3F))};
      put(b, 3);
    }
    return !done();
  }

  // A high surrogate with nothing after it, or before a marker, stays lone.
  void flush() {
    if (pending_ == 0) return;
    pending_ = 0;
    put(kReplacement, 3);
  }

 private:
  // One code point of n bytes, if the span still has room.
  void put(const uint8_t* p, size_t n) {
    if (cps_ >= span_) return;
    if (n > room_ - len_) {
      overflowed_ = true;
      cps_ = span_;  // writes nothing more
      return;
    }
    std::memcpy(out_ + len_, p, n);
    len_ += n;
    if (++cps_ == prefix_) key_bytes_ = len_;
  }

  uint8_t* out_;
  size_t room_, span_, prefix_, cap_;
  bool overflowed_ = false;
  size_t len_ = 0, cps_ = 0, units_ = 0, key_bytes_ = 0;
  uint16_t pending_ = 0;
};

enum Root { kModel, kCacheKey, kStream, kMessages, kPrompt, kRootCount };
const char* const kRootNames[kRootCount] = {"model", "prompt_cache_key", "stream", "messages", "prompt"};

struct Body {
  const uint8_t* d;
  size_t n;
  const Walk& walk;
  uint8_t first(const Span& s) const { return d[s.begin]; }
  bool is_string(const Span& s) const { return s.present() && d[s.begin] == '"'; }
};

// The last of each named member of an object (JSON.parse keeps the last duplicate); returns
// where the object ends.
template <size_t N>
size_t last_members(const Body& b, const Span& object, const char* const (&names)[N], Span (&out)[N]) {
  Members it(b.d, b.n, object, b.walk);
  Span k, v;
  while (it.next(&k, &v))
    for (size_t i = 0; i < N; i++)
      if (string_equals(b.d, k, names[i])) out[i] = v;
  return it.end();
}

// contentText's parts: each object part's `text`, or `[image:URL]` for an image_url part.
void parts_text(const Body& b, const Span& parts, Emitter* em) {
  static const char* const kNames[] = {"text", "type", "image_url"};
  static const char* const kUrl[] = {"url"};
  static const uint8_t kOpen[] = {'[', 'i', 'm', 'a', 'g', 'e', ':'};
  Elements it(b.d, b.n, parts, b.walk);
  size_t at = 0;
  while (!em->done() && it.next_begin(&at)) {
    if (b.d[at] != '{') continue;
    Span f[3];
    it.end_at(last_members(b, Span{at, parts.end}, kNames, f));
    if (b.is_string(f[0])) {
      decode_string(b.d, f[0], em, b.walk);
    } else if (b.is_string(f[1]) && string_equals(b.d, f[1], "image_url")) {
      Span url;
      if (b.is_string(f[2])) {
        url = f[2];
      } else if (f[2].present() && b.first(f[2]) == '{') {
        Span u[1];
        last_members(b, f[2], kUrl, u);
        if (b.is_string(u[0])) url = u[0];
      }
      em->ascii(kOpen, sizeof kOpen);
      if (url.present()) decode_string(b.d, url, em, b.walk);
      const uint8_t close = ']';
      em->ascii(&close, 1);
    }
  }
}

// messagesText: messages in order until the text reaches the cap; those after it are not read.
// validate recorded each message's role and content, so the array is not stepped through again.
Scan chat_text(const Body& b, const Span& messages, const std::vector<MessageFields>& fields, Emitter* em, KeyResult* r) {
  if (!messages.present() || b.first(messages) != '[') return Scan::Invalid;
  bool any = false;
  for (const MessageFields& m : fields) {
    if (em->done()) break;
    any = true;
    if (!m.object) return Scan::Invalid;
    const Span f[2] = {m.role, m.content};
    if (!b.is_string(f[0])) return Scan::Invalid;
    const Span& content = f[1];
    const uint8_t c = content.present() ? b.first(content) : 'n';
    if (c != 'n' && c != '"' && c != '[') return Scan::Invalid;
    em->utf8(kRoleOpen, 3);
    decode_string(b.d, f[0], em, b.walk);
    em->utf8(kRoleClose, 3);
    if (c == '"') decode_string(b.d, content, em, b.walk);
    else if (c == '[') parts_text(b, content, em);
    if (!r->has_anchor && string_equals(b.d, f[0], "user")) {
      em->flush();
      r->has_anchor = true;
      r->anchor_bytes = em->len();
    }
  }
  return any ? Scan::Ok : Scan::Invalid;
}

// promptText: a string, or the first string of a batch. Token ids are joined into text by JS
// number formatting, which stays in TypeScript.
Scan completion_text(const Body& b, const Span& prompt, Emitter* em) {
  if (!prompt.present()) return Scan::Invalid;
  Span s = prompt;
  if (b.first(prompt) == '[') {
    Elements it(b.d, b.n, prompt, b.walk);
    if (!it.next(&s)) return Scan::Invalid;
    const uint8_t c = b.first(s);
    if (c == '-' || (c >= '0' && c <= '9') || c == '[') return Scan::Unsupported;
  }
  if (!b.is_string(s)) return Scan::Invalid;
  decode_string(b.d, s, em, b.walk);
  return Scan::Ok;
}

}  // namespace

KeyResult extract(Api api, const uint8_t* d, size_t n, const KeyParams& p, uint8_t* out) {
  KeyResult r;
  RootFields root;
  root.names = kRootNames;
  root.count = kRootCount;
  // Per thread so that a scan allocates nothing; a reference, since in a shared library each
  // access to a thread_local may be a call.
  thread_local std::vector<LongString> tls_long;
  thread_local std::vector<MessageFields> tls_messages;
  std::vector<LongString>& long_strings = tls_long;
  std::vector<MessageFields>& messages = tls_messages;
  root.long_strings = &long_strings;
  if (api == Api::Chat) {
    root.messages = kMessages;
    root.message_fields = &messages;
  }
  r.status = validate(d, n, p.scan, &root);
  if (r.status != Scan::Ok) return r;
  Walk walk;
  walk.simd = p.scan.simd;
  walk.long_strings = long_strings.data();
  walk.long_count = long_strings.size();
  const Body b{d, n, walk};
  const Span* v = root.values;
  if (!root.root_is_object) return r.status = Scan::Invalid, r;
  if ((v[kModel].present() && !b.is_string(v[kModel])) || (v[kCacheKey].present() && !b.is_string(v[kCacheKey])))
    return r.status = Scan::Invalid, r;
  r.model = v[kModel];
  r.prompt_cache_key = v[kCacheKey];
  r.stream = v[kStream].present() && b.first(v[kStream]) == 't';
  // The TS loop stops adding messages once the text has 2*span UTF-16 units; a completion's
  // text is one string, of which nothing past the span matters (no cap: stop at the span).
  Emitter em(out, out_capacity(p.span, n), p.span, p.prefix, api == Api::Chat ? p.span * 2 : SIZE_MAX);
  r.status = api == Api::Chat ? chat_text(b, v[kMessages], messages, &em, &r) : completion_text(b, v[kPrompt], &em);
  em.flush();
  r.overflowed = em.overflowed();
  if (r.overflowed) r.status = Scan::Unsupported;
  r.len = em.len();
  r.key_bytes = em.key_bytes();
  return r;
}

}  // namespace pr::key
