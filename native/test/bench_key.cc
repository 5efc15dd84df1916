// Where native key extraction spends its time, without N-API or JS around it: validate alone,
// then the whole extract, on a body file (default: a generated 8 KiB chat body like
// bench/key.bench.ts's). Run by hand:
//   clang++ -std=c++17 -O3 -march=x86-64 native/test/bench_key.cc native/xxh3.cc native/key/*.cc -o /tmp/bench_key && /tmp/bench_key [body.json|-] [span] [path]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../key/json_scan.h"
#include "../key/openai_key.h"

namespace {

std::string chat_body(size_t bytes) {
  const std::string head = "{\"model\":\"llama-3-8b\",\"stream\":true,\"temperature\":0.2,\"messages\":[{\"role\":\"system\",\"content\":\"";
  const std::string tail =
      "\"},{\"role\":\"user\",\"content\":\"R\xC3\xA9sum\xC3\xA9 of the ticket, please.\\nKeep it short.\"},{\"role\":\"assistant\",\"content\":"
      "\"The customer reports \\\"error 42\\\" after the update; caf\xC3\xA9-style UI broken.\"},{\"role\":\"user\",\"content\":\"And the next step?\"}]}";
  const std::string unit = "You are a meticulous assistant for the ACME support desk; answer with care. ";
  std::string system;
  while (system.size() + head.size() + tail.size() < bytes) system += unit;
  system.resize(bytes - head.size() - tail.size());
  return head + system + tail;
}

// Calls per timed round: BENCH_REPS, default 2000 (fewer for large bodies).
int reps() {
  const char* r = std::getenv("BENCH_REPS");
  return r != nullptr && std::atoi(r) > 0 ? std::atoi(r) : 2000;
}

template <class F>
double best_ns(F&& f, int reps = ::reps(), int rounds = 15) {
  std::vector<double> per;
  for (int r = 0; r < rounds; r++) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < reps; k++) f();
    const auto t1 = std::chrono::steady_clock::now();
    per.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / reps);
  }
  // The fastest round: on a shared machine the others measure the neighbours.
  return *std::min_element(per.begin(), per.end());
}

}  // namespace

int main(int argc, char** argv) {
  std::string body;
  if (argc > 1 && std::string(argv[1]) != "-" && std::string(argv[1]) != "--dump") {
    std::ifstream f(argv[1], std::ios::binary);
    body.assign(std::istreambuf_iterator<char>(f), {});
  } else {
    body = chat_body(8195);
  }
  if (argc > 1 && std::string(argv[1]) == "--dump") return std::fwrite(body.data(), 1, body.size(), stdout) == body.size() ? 0 : 1;
  const size_t span = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 4096;
  const auto* d = reinterpret_cast<const uint8_t*>(body.data());
  const size_t n = body.size();
  std::vector<uint8_t> out(pr::key::out_capacity(span, n));
  volatile size_t sink = 0;
  const char* names[] = {"model", "prompt_cache_key", "stream", "messages", "prompt"};
  std::vector<pr::key::LongString> longs;
  std::vector<pr::key::MessageFields> messages;
  // A third argument names the one path to time (scalar, sse2, avx2); default all.
  const std::string only = argc > 3 ? argv[3] : "";
  for (const pr::SimdPath path : {pr::SimdPath::AVX2, pr::SimdPath::SSE2, pr::SimdPath::Scalar}) {
    if (!pr::simd_path_supported(path) || (!only.empty() && only != pr::simd_path_name(path))) continue;
    pr::key::ScanOptions so;
    so.simd = path;
    so.max_depth = 64;
    const double v = best_ns([&] {
      pr::key::RootFields root;
      root.names = names;
      root.count = 5;
      root.long_strings = &longs;
      // What extract asks of validate for a chat body: the messages' fields as well.
      root.messages = 3;
      root.message_fields = &messages;
      sink = sink + static_cast<size_t>(pr::key::validate(d, n, so, &root));
    });
    pr::key::KeyParams p;
    p.span = span;
    p.prefix = std::min<size_t>(span, 4096);
    p.scan = so;
    const pr::key::KeyResult r = pr::key::extract(pr::key::Api::Chat, d, n, p, out.data());
    const double e = best_ns([&] { sink = sink + pr::key::extract(pr::key::Api::Chat, d, n, p, out.data()).len; });
    std::printf("%-7s %zu-byte body, span %zu: validate %.0f ns (%.2f GB/s)  extract %.0f ns (%.2f GB/s)  status %d len %zu\n",
                pr::simd_path_name(path), n, span, v, n / v, e, n / e, static_cast<int>(r.status), r.len);
  }
  return 0;
}
