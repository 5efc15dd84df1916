// Unit tests for the routing-key scanner (native/key/). Same conventions as unit.cc: CHECK
// counts, the last line is "N passed, M failed", non-zero exit on a failure. Built and run
// under ASan+UBSan by native/test/run.sh.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "../key/json_scan.h"
#include "../key/openai_key.h"

namespace {

using pr::SimdPath;
using pr::key::Scan;

// The string paths this CPU runs; Scalar, the reference, first.
std::vector<SimdPath> paths() {
  std::vector<SimdPath> v;
  for (SimdPath p : {SimdPath::Scalar, SimdPath::SSE2, SimdPath::AVX2})
    if (pr::simd_path_supported(p)) v.push_back(p);
  return v;
}

Scan validate(const std::string& s, SimdPath path = pr::simd_active_path(), size_t depth = 64) {
  pr::key::RootFields root;
  pr::key::ScanOptions o;
  o.simd = path;
  o.max_depth = depth;
  // Copied so that ASan sees a read past the end of the text.
  std::vector<uint8_t> buf(s.begin(), s.end());
  return pr::key::validate(buf.data(), buf.size(), o, &root);
}

void test_grammar() {
  const char* ok[] = {
      "{}", "[]", " \t\r\n{} ", "0", "-0", "1.5e+10", "-12.0E-3", "1e5", "\"\"", "true", "false", "null",
      "{\"a\":[1,2,{\"b\":null}],\"c\":\"x\"}", "[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\\uDE00\\uD800\"]",
      "\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"", "{\"a\":1,\"a\":2}", "[[[[]]]]", "\"\x7F\"",
  };
  for (const char* s : ok)
    for (SimdPath path : paths()) CHECK(validate(s, path) == Scan::Ok);
  const char* invalid[] = {
      "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{,}", "01", "1.", ".5", "+1", "-", "1e", "1e+", "--1", "0x1",
      "NaN", "Infinity", "tru", "nul", "'a'", "\"a", "\"\\x\"", "\"\\u12\"", "\"\\u12G4\"", "\"a\nb\"", "\"\t\"",
      "{\"a\"}", "{\"a\" 1}", "{1:2}", "[1 2]", "{} {}", "{}x", "\xEF\xBB\xBF{}", "[\"a\"]]", "\x80",
  };
  for (const char* s : invalid)
    for (SimdPath path : paths()) CHECK(validate(s, path) == Scan::Invalid);
  // Bytes Buffer#toString would replace: left to the TypeScript path.
  const char* unsupported[] = {
      "\"\x80\"", "\"\xC0\xAF\"", "\"\xC3\"", "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"", "\"\xF5\x80\x80\x80\"",
      "\"\xE0\x80\xAF\"", "\"\xF0\x80\x80\xAF\"", "\"\xE2\x82\"",
  };
  for (const char* s : unsupported)
    for (SimdPath path : paths()) CHECK(validate(s, path) == Scan::Unsupported);
  CHECK(validate("[[[]]]", SimdPath::Scalar, 3) == Scan::Ok);
  CHECK(validate("[[[[]]]]", SimdPath::Scalar, 3) == Scan::Unsupported);
  // Every prefix of a valid document but the whole is invalid.
  const std::string doc = "{\"messages\":[{\"role\":\"user\",\"content\":\"hello \\u00e9\"}],\"n\":-1.5e3}";
  for (size_t i = 0; i < doc.size(); i++) CHECK(validate(doc.substr(0, i)) == Scan::Invalid);
}

struct Out {
  Scan status;
  std::string text;
  size_t key, anchor;
  bool has_anchor, stream;
  std::string model;
};

Out extract(const std::string& body, pr::key::Api api, size_t span, size_t prefix, SimdPath path = pr::simd_active_path()) {
  pr::key::KeyParams p;
  p.span = span;
  p.prefix = prefix;
  p.scan.simd = path;
  std::vector<uint8_t> in(body.begin(), body.end()), out(pr::key::out_capacity(span, body.size()));
  const pr::key::KeyResult r = pr::key::extract(api, in.data(), in.size(), p, out.data());
  Out o{r.status, std::string(out.begin(), out.begin() + static_cast<long>(r.len)), r.key_bytes, r.anchor_bytes, r.has_anchor, r.stream, ""};
  if (r.model.present()) o.model = body.substr(r.model.begin, r.model.end - r.model.begin);
  return o;
}

const std::string kOpen = "\xE2\x90\x9E", kClose = "\xE2\x90\x9F";

void test_chat() {
  using pr::key::Api;
  Out o = extract("{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\"},"
                  "{\"role\":\"assistant\",\"content\":null}],\"stream\":true}",
                  Api::Chat, 100, 100);
  CHECK(o.status == Scan::Ok);
  const std::string want = kOpen + "system" + kClose + "be brief" + kOpen + "user" + kClose + "hi" + kOpen + "assistant" + kClose;
  CHECK(o.text == want);
  CHECK(o.has_anchor && o.anchor == (kOpen + "system" + kClose + "be brief" + kOpen + "user" + kClose + "hi").size());
  CHECK(o.key == want.size());
  CHECK(o.stream);
  CHECK(o.model == "\"m\"");

  // The last duplicate wins, at the root and in a message; escaped keys count.
  o = extract("{\"messages\":[],\"m\\u0065ssages\":[{\"role\":\"x\",\"r\\u006fle\":\"user\",\"content\":[{\"text\":\"a\",\"text\":\"b\"}]}],"
              "\"stream\":true,\"stream\":false}",
              Api::Chat, 100, 100);
  CHECK(o.status == Scan::Ok && o.text == kOpen + "user" + kClose + "b" && !o.stream && o.has_anchor);

  // Parts: text wins over type; image URLs as a string or an object; non-objects skipped.
  o = extract("{\"messages\":[{\"role\":\"user\",\"content\":[1,null,[],\"s\",{\"type\":\"image_url\",\"image_url\":{\"url\":\"u\"}},"
              "{\"type\":\"image_url\",\"image_url\":\"v\"},{\"type\":\"image_url\",\"image_url\":[\"w\"]},{\"type\":\"image_url\"},"
              "{\"type\":\"text\",\"text\":\"t\"},{\"type\":\"image_url\",\"text\":\"over\"}]}]}",
              Api::Chat, 100, 100);
  CHECK(o.status == Scan::Ok && o.text == kOpen + "user" + kClose + "[image:u][image:v][image:][image:]tover");

  // A surrogate pair split across two parts joins; lone ones become U+FFFD.
  o = extract("{\"messages\":[{\"role\":\"u\",\"content\":[{\"text\":\"\\uD83D\"},{\"text\":\"\\uDE00\\uDC00x\\uD800\"}]}]}", Api::Chat, 100, 100);
  CHECK(o.status == Scan::Ok && o.text == kOpen + "u" + kClose + "\xF0\x9F\x98\x80\xEF\xBF\xBDx\xEF\xBF\xBD" + kOpen.substr(0, 0));
  CHECK(!o.has_anchor);

  // Shapes the TypeScript path refuses.
  const char* refused[] = {
      "[]", "{\"messages\":[]}", "{\"messages\":{}}", "{}", "{\"messages\":[1]}", "{\"messages\":[{\"content\":\"x\"}]}",
      "{\"messages\":[{\"role\":1}]}", "{\"messages\":[{\"role\":\"u\",\"content\":5}]}", "{\"messages\":[{\"role\":\"u\",\"content\":{}}]}",
      "{\"model\":1,\"messages\":[{\"role\":\"u\"}]}", "{\"prompt_cache_key\":null,\"messages\":[{\"role\":\"u\"}]}",
      "{\"messages\":[[\"role\"]]}",
  };
  for (const char* s : refused) CHECK(extract(s, Api::Chat, 100, 100).status == Scan::Invalid);

  // The loop stops at 2*span UTF-16 units: a bad message after that is never looked at, one
  // before it is.
  const std::string longc(200, 'a');
  o = extract("{\"messages\":[{\"role\":\"u\",\"content\":\"" + longc + "\"},{\"role\":5}]}", Api::Chat, 100, 50);
  CHECK(o.status == Scan::Ok && o.text.size() == kOpen.size() + 1 + kClose.size() + 97 && o.key == kOpen.size() + 1 + kClose.size() + 47);
  CHECK(extract("{\"messages\":[{\"role\":\"u\",\"content\":\"" + longc + "\"},{\"role\":5}]}", Api::Chat, 102, 50).status == Scan::Invalid);
  // ...and a message under way is shape-checked even past the cap.
  CHECK(extract("{\"messages\":[{\"role\":\"" + longc + "\",\"content\":5}]}", Api::Chat, 50, 50).status == Scan::Invalid);
  // Past the span, a long string's units come from validate's record, not from reading it:
  // 30 escaped and 100 raw two-byte characters, each one unit, decide where the cap falls.
  std::string esc, raw;
  for (int k = 0; k < 30; k++) esc += "\\u00e9";
  for (int k = 0; k < 100; k++) raw += "\xC3\xA9";
  const auto then_bad = [](const std::string& c) { return "{\"messages\":[{\"role\":\"u\",\"content\":\"" + c + "\"},{\"role\":5}]}"; };
  CHECK(extract(then_bad(esc), Api::Chat, 16, 16).status == Scan::Ok);        // 33 units >= cap 32
  CHECK(extract(then_bad(esc), Api::Chat, 17, 16).status == Scan::Invalid);   // 33 < 34: the next one counts
  CHECK(extract(then_bad(raw), Api::Chat, 51, 16).status == Scan::Ok);        // 103 >= 102
  CHECK(extract(then_bad(raw), Api::Chat, 52, 16).status == Scan::Invalid);   // 103 < 104
  CHECK(extract(then_bad(esc + raw), Api::Chat, 66, 1).status == Scan::Ok);   // 133 >= 132
  CHECK(extract(then_bad(esc + raw), Api::Chat, 67, 1).status == Scan::Invalid);

  // The text is never longer than the body, which sizes the output: the densest shapes.
  for (const char* s : {"{\"messages\":[{\"role\":\"\"},{\"role\":\"\"}]}", "{\"messages\":[{\"role\":\"\",\"content\":[{\"type\":\"image_url\"},{\"type\":\"image_url\"}]}]}",
                        "{\"messages\":[{\"role\":\"\\uD800\\uD83D\\uDE00\\n\"}]}", "{\"prompt\":\"\\u0800\\uDC00\"}"}) {
    pr::key::KeyParams p;
    p.span = 1000;
    p.prefix = 10;
    const std::string body(s);
    std::vector<uint8_t> in(body.begin(), body.end()), out(pr::key::out_capacity(p.span, body.size()));
    const auto api = body.find("prompt") != std::string::npos ? pr::key::Api::Completions : pr::key::Api::Chat;
    const pr::key::KeyResult r = pr::key::extract(api, in.data(), in.size(), p, out.data());
    CHECK(r.status == Scan::Ok && !r.overflowed && r.len > 0 && r.len <= body.size());
  }
  // An astral character at the span's end is one code point of four bytes.
  o = extract("{\"messages\":[{\"role\":\"user\",\"content\":\"\xF0\x9F\x98\x80\\uD83D\\uDE00z\"}]}", Api::Chat, 8, 7);
  CHECK(o.status == Scan::Ok && o.text == kOpen + "user" + kClose + "\xF0\x9F\x98\x80\xF0\x9F\x98\x80" && o.key == o.text.size() - 4);
  CHECK(o.has_anchor && o.anchor == o.text.size());
}

void test_completions() {
  using pr::key::Api;
  Out o = extract("{\"prompt\":\"hello\"}", Api::Completions, 3, 2);
  CHECK(o.status == Scan::Ok && o.text == "hel" && o.key == 2 && !o.has_anchor);
  o = extract("{\"prompt\":[\"first\",\"second\"]}", Api::Completions, 100, 100);
  CHECK(o.status == Scan::Ok && o.text == "first");
  CHECK(extract("{\"prompt\":[1,2]}", Api::Completions, 100, 100).status == Scan::Unsupported);
  CHECK(extract("{\"prompt\":[[1,2]]}", Api::Completions, 100, 100).status == Scan::Unsupported);
  for (const char* s : {"{\"prompt\":[]}", "{\"prompt\":5}", "{\"prompt\":null}", "{}", "{\"prompt\":[null]}", "{\"prompt\":[{}]}"})
    CHECK(extract(s, Api::Completions, 100, 100).status == Scan::Invalid);
}

bool same(const Out& a, const Out& b) {
  return a.status == b.status && a.text == b.text && a.key == b.key && a.anchor == b.anchor && a.has_anchor == b.has_anchor &&
         a.stream == b.stream && a.model == b.model;
}

// Every string path gives the scalar one's result for `body` (validate and both APIs).
bool paths_agree(const std::string& body, size_t span, size_t prefix) {
  const Scan want = validate(body, SimdPath::Scalar);
  const Out chat = extract(body, pr::key::Api::Chat, span, prefix, SimdPath::Scalar);
  const Out completions = extract(body, pr::key::Api::Completions, span, prefix, SimdPath::Scalar);
  for (SimdPath path : paths()) {
    if (validate(body, path) != want || !same(extract(body, pr::key::Api::Chat, span, prefix, path), chat) ||
        !same(extract(body, pr::key::Api::Completions, span, prefix, path), completions)) {
      std::fprintf(stderr, "path %s differs from scalar on a %zu-byte body\n", pr::simd_path_name(path), body.size());
      return false;
    }
  }
  return true;
}

// The string paths agree on random documents built from pieces that stress the 16- and
// 32-byte blocks: escapes, quotes and multi-byte sequences at every offset.
void test_paths_agree() {
  const char* pieces[] = {"a", "bcdefghijklmnopq", "\\\"", "\\\\", "\\u00e9", "\\uD83D", "\\uDE00", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", " ", "\\n",
                          "rstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456"};
  std::mt19937 rng(7);
  int differ = 0;
  for (int t = 0; t < 3000; t++) {
    std::string s;
    const int n = static_cast<int>(rng() % 40);
    for (int k = 0; k < n; k++) s += pieces[rng() % (sizeof pieces / sizeof *pieces)];
    const std::string body = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"" + s + "\"},{\"text\":\"" + s + "\"}]}]}";
    const size_t span = 1 + rng() % 64;
    const size_t prefix = 1 + rng() % span;
    if (extract(body, pr::key::Api::Chat, span, prefix, SimdPath::Scalar).status != Scan::Ok || !paths_agree(body, span, prefix)) differ++;
  }
  CHECK(differ == 0);
}

// One byte that ends a plain run (a quote, an escape, a control character, a valid or a
// broken multi-byte sequence, a random byte >= 0x80) at every offset of strings of every
// length around the block sizes, each placed at every alignment, and ending at the very end
// of the buffer (a string as the whole document) as well as inside a body.
void test_block_offsets() {
  const std::vector<std::string> specials = {"\\\"", "\\\\", "\\n", "\\u00e9", "\\uD800", "\x01", "\x1f", "\xC3\xA9", "\xE2\x82\xAC",
                                             "\xF0\x9F\x98\x80", "\x80", "\xC3", "\xED\xA0\x80", "\xFF", "\\x", "\x7f", "\""};
  std::mt19937 rng(11);
  int differ = 0, cases = 0;
  for (size_t len : {0, 1, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 95, 96, 127, 128, 129}) {
    for (size_t at = 0; at <= len; at++) {
      for (size_t pad = 0; pad < 33; pad += (len > 64 ? 5 : 1)) {
        std::string text(len, 'x');
        for (char& c : text) c = static_cast<char>('a' + rng() % 26);
        std::string special = specials[rng() % specials.size()];
        if (rng() % 4 == 0) special = std::string(1, static_cast<char>(0x80 + rng() % 0x80));
        text.insert(at, special);
        const std::string padding(pad, ' ');
        // The string as the whole document ends the buffer: tail loads end exactly there.
        const std::string alone = padding + "\"" + text + "\"";
        const std::string body = "{\"prompt\":" + padding + "\"" + text + "\",\"messages\":[{\"role\":\"" + text + "\",\"content\":\"" + text + "\"}]}";
        const size_t span = 1 + rng() % (len + 8);
        cases++;
        if (!paths_agree(alone, span, 1 + rng() % span) || !paths_agree(body, span, 1 + rng() % span)) differ++;
        // Cut short anywhere: an unterminated string at the buffer's end.
        if (!paths_agree(body.substr(0, rng() % body.size()), span, span)) differ++;
      }
    }
  }
  CHECK(cases > 5000 && differ == 0);
}

// Random bytes, mostly ASCII, in long strings: the paths agree whatever they make of them.
void test_random_strings() {
  std::mt19937 rng(13);
  int differ = 0;
  for (int t = 0; t < 3000; t++) {
    std::string s(rng() % 300, ' ');
    for (char& c : s) {
      const unsigned r = rng() % 100;
      c = static_cast<char>(r < 80 ? 0x20 + rng() % 0x5F : r < 95 ? 0x80 + rng() % 0x80 : rng() % 0x20);
    }
    const std::string body = "{\"messages\":[{\"role\":\"user\",\"content\":\"" + s + "\"}],\"prompt\":\"" + s + "\"}";
    const size_t span = 1 + rng() % 200;
    if (!paths_agree(body, span, 1 + rng() % span)) differ++;
  }
  CHECK(differ == 0);
}

// Byte offset after the first m code points of UTF-8 s (its length if it has fewer).
size_t after_code_points(const std::string& s, size_t m) {
  size_t i = 0;
  for (; i < s.size() && m > 0; m--) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    i += c < 0x80 ? 1 : pr::key::lead_length(c);
  }
  return i;
}

// A completion's text is the first `span` code points of its prompt and the key the first
// `prefix`: checked against a plain count for prompts of multi-byte runs (written a run at a
// time) long enough that validate's record of them is used, at every span and prefix.
void test_multibyte_runs() {
  const char* chars[] = {"a", "\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x98\x80", "\xE2\x82\xAC", " "};
  std::mt19937 rng(17);
  int wrong = 0;
  for (int t = 0; t < 40; t++) {
    std::string prompt;
    const size_t count = 20 + rng() % 80;
    for (size_t k = 0; k < count; k++) prompt += chars[rng() % (t % 2 == 0 ? 6 : 5)];
    for (size_t span = 1; span <= count + 2; span++) {
      const size_t prefix = 1 + rng() % span;
      for (SimdPath path : paths()) {
        const Out o = extract("{\"prompt\":\"" + prompt + "\"}", pr::key::Api::Completions, span, prefix, path);
        if (o.status != Scan::Ok || o.text != prompt.substr(0, after_code_points(prompt, span)) || o.key != after_code_points(prompt, prefix)) wrong++;
      }
    }
  }
  CHECK(wrong == 0);
}

// validate's record of the root's messages: each element of the last "messages" array, and
// each object element's last role and content, whatever their shape or the nesting around them.
void test_message_fields() {
  const std::string s =
      "{\"messages\":[{\"role\":\"x\"}],\"m\":[{\"role\":\"no\"}],\"messages\":[{\"content\":[{\"role\":\"deep\"}],"
      "\"role\":\"a\",\"role\":{\"role\":1}},7,[{\"role\":\"no\"}],{},{\"content\":\"c\",\"x\":{\"content\":2}}],\"n\":{\"messages\":[1]}}";
  std::vector<uint8_t> buf(s.begin(), s.end());
  const char* names[] = {"messages"};
  std::vector<pr::key::MessageFields> m;
  pr::key::RootFields root;
  root.names = names;
  root.count = 1;
  root.messages = 0;
  root.message_fields = &m;
  CHECK(pr::key::validate(buf.data(), buf.size(), pr::key::ScanOptions{}, &root) == Scan::Ok);
  const auto text = [&](const pr::key::Span& t) { return t.present() ? s.substr(t.begin, t.end - t.begin) : std::string("-"); };
  CHECK(m.size() == 5);
  if (m.size() != 5) return;
  CHECK(m[0].object && text(m[0].role) == "{\"role\":1}" && text(m[0].content) == "[{\"role\":\"deep\"}]");
  CHECK(!m[1].object && text(m[1].role) == "-" && text(m[1].content) == "-");
  CHECK(!m[2].object && s[m[2].begin] == '[' && text(m[2].role) == "-");
  CHECK(m[3].object && text(m[3].role) == "-" && text(m[3].content) == "-");
  CHECK(m[4].object && text(m[4].role) == "-" && text(m[4].content) == "\"c\"");
  CHECK(s[m[1].begin] == '7');
  // Not an array: nothing is recorded, and the walk refuses it.
  const std::string o = "{\"messages\":[{\"role\":\"x\"}],\"messages\":{\"role\":\"x\"}}";
  std::vector<uint8_t> obuf(o.begin(), o.end());
  CHECK(pr::key::validate(obuf.data(), obuf.size(), pr::key::ScanOptions{}, &root) == Scan::Ok);
  CHECK(m.empty());
}

}  // namespace

int main() {
  test_grammar();
  test_chat();
  test_completions();
  test_paths_agree();
  test_block_offsets();
  test_random_strings();
  test_multibyte_runs();
  test_message_fields();
  for (SimdPath path : paths())
    if (path != SimdPath::Scalar) std::printf("  key scan: path %s compared with scalar\n", pr::simd_path_name(path));
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
