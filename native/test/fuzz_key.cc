// libFuzzer target for the routing-key scanner. Input: one byte of parameters (API, span),
// then a request body. Invariants: no crash or out-of-bounds access (ASan sizes `out` to the
// exact capacity), the text never outgrows that capacity, outputs within bounds, the text well-formed UTF-8 of at most `span` code
// points, and every SIMD string path agrees with the scalar one on everything.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../key/openai_key.h"

namespace {

// Code points in s, or SIZE_MAX when it is not well-formed UTF-8.
size_t code_points(const uint8_t* s, size_t n) {
  size_t cps = 0;
  for (size_t i = 0; i < n; cps++) {
    const uint8_t c = s[i];
    size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (len == 0 || i + len > n) return SIZE_MAX;
    for (size_t k = 1; k < len; k++)
      if ((s[i + k] & 0xC0) != 0x80) return SIZE_MAX;
    i += len;
  }
  return cps;
}

bool same_span(const pr::key::Span& a, const pr::key::Span& b) { return a.begin == b.begin && a.end == b.end; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t knobs = data[0];
  std::vector<uint8_t> body(data + 1, data + size);  // exact size: reads past it are caught
  pr::key::KeyParams p;
  p.span = 1 + (knobs >> 1) % 48;
  p.prefix = 1 + (knobs >> 3) % p.span;
  p.scan.max_depth = 32;
  const auto api = (knobs & 1) ? pr::key::Api::Completions : pr::key::Api::Chat;
  // The scalar path is the reference; every other path this CPU runs must match it.
  std::vector<uint8_t> simd_out(pr::key::out_capacity(p.span, body.size())), scalar_out(simd_out.size());
  p.scan.simd = pr::SimdPath::Scalar;
  const pr::key::KeyResult b = pr::key::extract(api, body.data(), body.size(), p, scalar_out.data());
  bool ok = true;
  bool overflowed = b.overflowed;
  for (pr::SimdPath path : {pr::SimdPath::SSE2, pr::SimdPath::AVX2}) {
    if (!pr::simd_path_supported(path)) continue;
    p.scan.simd = path;
    const pr::key::KeyResult a = pr::key::extract(api, body.data(), body.size(), p, simd_out.data());
    overflowed = overflowed || a.overflowed;
    const bool same = a.status == b.status && a.len == b.len && a.key_bytes == b.key_bytes && a.has_anchor == b.has_anchor &&
                      a.anchor_bytes == b.anchor_bytes && a.stream == b.stream && same_span(a.model, b.model) &&
                      same_span(a.prompt_cache_key, b.prompt_cache_key) &&
                      (a.len == 0 || std::memcmp(simd_out.data(), scalar_out.data(), a.len) == 0);
    if (!same) {
      std::fprintf(stderr, "the %s and scalar paths differ\n", pr::simd_path_name(path));
      ok = false;
    }
  }
  if (overflowed) {
    std::fprintf(stderr, "the text outgrew out_capacity(span, body bytes)\n");
    ok = false;
  }
  if (b.status == pr::key::Scan::Ok) {
    const size_t cps = code_points(scalar_out.data(), b.len);
    if (b.len > scalar_out.size() || b.key_bytes > b.len || (b.has_anchor && b.anchor_bytes > b.len) || cps > p.span) {
      std::fprintf(stderr, "output out of bounds: len=%zu key=%zu anchor=%zu cps=%zu span=%zu\n", b.len, b.key_bytes, b.anchor_bytes, cps, p.span);
      ok = false;
    }
    if (b.model.end > body.size() || b.prompt_cache_key.end > body.size()) ok = false;
    if (b.model.present() && body[b.model.begin] != '"') ok = false;
    // Marks fall on code point boundaries.
    if (b.key_bytes < b.len && (scalar_out[b.key_bytes] & 0xC0) == 0x80) ok = false;
    if (b.has_anchor && b.anchor_bytes < b.len && (scalar_out[b.anchor_bytes] & 0xC0) == 0x80) ok = false;
    pr::key::RootFields root;
    if (pr::key::validate(body.data(), body.size(), p.scan, &root) != pr::key::Scan::Ok) ok = false;
  }
  if (!ok) __builtin_trap();
  return 0;
}
