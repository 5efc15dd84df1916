#!/usr/bin/env bash
# Native test suite (npm run test:native): the C++ unit tests under ASan+UBSan (and the
# same binary under TSan, for the lock-free snapshot/counter code), then the libFuzzer
# targets for FUZZ_SECONDS each (default 30). Everything is built into native/test/out/,
# which is gitignored; the fuzz corpora are seeded afresh there on every run.
set -euo pipefail

cd "$(dirname "$0")/../.."
OUT=native/test/out
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
CXX=${CXX:-clang++}
CORE=(native/xxh3.cc native/ring.cc native/router.cc native/prefix_index.cc native/exact_index.cc native/strategy/*.cc native/key/*.cc)
FLAGS=(-std=c++17 -O1 -g -Wall -Wextra -pthread -fno-sanitize-recover=all)
HINT="install the toolchain with: apt-get install -y clang libclang-rt-14-dev libxxhash-dev xxhash
(clang for clang++, libclang-rt-14-dev for the sanitizer and libFuzzer runtimes on Debian 12,
libxxhash-dev for the reference <xxhash.h> the tests compare against)"

step() { printf '\n== %s\n' "$*"; }
die() { printf 'native tests: %s\n' "$*" >&2; exit 1; }

command -v "$CXX" >/dev/null || die "$CXX not found; $HINT"
mkdir -p "$OUT"

# Preflight: the reference header and the sanitizer/fuzzer runtimes are separate packages.
printf '#include <xxhash.h>\nextern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  > "$OUT/preflight.cc"
"$CXX" -fsanitize=fuzzer,address,undefined "$OUT/preflight.cc" -o "$OUT/preflight" 2> "$OUT/preflight.log" ||
  { cat "$OUT/preflight.log" >&2; die "cannot build with <xxhash.h> and -fsanitize=fuzzer,address,undefined; $HINT"; }

step "unit tests (address,undefined): $OUT/unit"
"$CXX" "${FLAGS[@]}" -fsanitize=address,undefined native/test/unit.cc "${CORE[@]}" -o "$OUT/unit"
"$OUT/unit"

step "shared region unit tests (address,undefined): $OUT/unit_region"
"$CXX" "${FLAGS[@]}" -fsanitize=address,undefined native/test/unit_region.cc "${CORE[@]}" -o "$OUT/unit_region"
"$OUT/unit_region"

step "routing-key unit tests (address,undefined): $OUT/unit_key"
"$CXX" "${FLAGS[@]}" -fsanitize=address,undefined native/test/unit_key.cc "${CORE[@]}" -o "$OUT/unit_key"
"$OUT/unit_key"

step "exact index unit tests (address,undefined): $OUT/unit_exact"
"$CXX" "${FLAGS[@]}" -fsanitize=address,undefined native/test/unit_exact.cc "${CORE[@]}" -o "$OUT/unit_exact"
"$OUT/unit_exact"

step "exact index unit tests (thread): $OUT/unit_exact_tsan"
"$CXX" "${FLAGS[@]}" -fsanitize=thread native/test/unit_exact.cc "${CORE[@]}" -o "$OUT/unit_exact_tsan"
"$OUT/unit_exact_tsan" | tail -n 1

step "unit tests (thread): $OUT/unit_tsan"
"$CXX" "${FLAGS[@]}" -fsanitize=thread native/test/unit.cc "${CORE[@]}" -o "$OUT/unit_tsan"
"$OUT/unit_tsan" | tail -n 1

# seed_corpus DIR: a fresh directory of starting inputs.
seed_corpus() { rm -rf "$1" && mkdir -p "$1"; }

# fuzz NAME MAX_LEN: build native/test/NAME.cc and run it for FUZZ_SECONDS on out/corpus/NAME.
fuzz() {
  local name=$1 max_len=$2
  step "fuzz $name for ${FUZZ_SECONDS}s (max_len $max_len): $OUT/$name"
  "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer,address,undefined "native/test/$name.cc" "${CORE[@]}" -o "$OUT/$name"
  if ! "$OUT/$name" -max_total_time="$FUZZ_SECONDS" -max_len="$max_len" -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$OUT/$name-" "$OUT/corpus/$name" > "$OUT/$name.log" 2>&1; then
    tail -n 60 "$OUT/$name.log" >&2
    die "$name failed; full log $OUT/$name.log, reproducer $OUT/$name-crash-*"
  fi
  grep -E '^Done [0-9]+ runs' "$OUT/$name.log"
  grep -E '^stat::(number_of_executed_units|peak_rss_mb|new_units_added)' "$OUT/$name.log" | tr '\n' ' '
  echo
}

# xxh3 inputs: 8 seed bytes + data, at the lengths where the algorithm changes branch
# (0, 1-3, 4-8, 9-16, 17-128, 129-240, >240 with one or several 1024-byte blocks).
seed_corpus "$OUT/corpus/fuzz_xxh3"
for len in 0 1 3 4 8 9 16 17 64 128 129 240 241 1024 1025 2048 4097; do
  head -c $((8 + len)) /dev/urandom > "$OUT/corpus/fuzz_xxh3/rand-$len"
  head -c $((8 + len)) /dev/zero > "$OUT/corpus/fuzz_xxh3/zero-$len"
done
fuzz fuzz_xxh3 8200

# Ring programs: random byte strings decode into mixed sequences of operations.
seed_corpus "$OUT/corpus/fuzz_ring"
for i in $(seq 1 16); do head -c $((32 * i)) /dev/urandom > "$OUT/corpus/fuzz_ring/prog-$i"; done
fuzz fuzz_ring 512

# Request bodies: a parameter byte (API, span) and then real chat and completions bodies.
seed_corpus "$OUT/corpus/fuzz_key"
printf '\x10{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"caf\xc3\xa9 \\u00e9 \\ud83d\\ude00 \\ud800"}],"stream":true}' \
  > "$OUT/corpus/fuzz_key/chat"
printf '\x22{"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:x"}}]}],"prompt_cache_key":"t1"}' \
  > "$OUT/corpus/fuzz_key/parts"
printf '\x31 {"prompt": ["first \\"quoted\\"\\n", "second"], "max_tokens": 1.5e3, "n": -0}' > "$OUT/corpus/fuzz_key/completions"
printf '\x07{"prompt":[1,2,3],"x":[[[{}]]],"y":null,"z":false}' > "$OUT/corpus/fuzz_key/tokens"
fuzz fuzz_key 4096

# Shared regions another process wrote: raw or structured membership records under fuzzed
# lengths, read by an attached process (it must neither crash nor lease outside the table).
seed_corpus "$OUT/corpus/fuzz_region"
for i in $(seq 1 8); do head -c $((32 * i)) /dev/urandom > "$OUT/corpus/fuzz_region/rec-$i"; done
fuzz fuzz_region 2048

# Exact-index programs: 5 bytes an operation (store, remove, clear, pending, match); first a
# fixed run over thousands of blocks (the table grows and deletes), then the fuzzer.
step "exact index programs over many blocks (address,undefined): $OUT/exact_programs"
"$CXX" "${FLAGS[@]}" -fsanitize=address,undefined -DPR_FUZZ_MAIN -DPR_EXACT_PROMPTS=64 -DPR_EXACT_BLOCKS=64 native/test/fuzz_exact.cc \
  native/exact_index.cc native/prefix_index.cc native/xxh3.cc -o "$OUT/exact_programs"
"$OUT/exact_programs" 20 6000
seed_corpus "$OUT/corpus/fuzz_exact"
for i in $(seq 1 16); do head -c $((16 * i)) /dev/urandom > "$OUT/corpus/fuzz_exact/prog-$i"; done
fuzz fuzz_exact 1024

step "native tests passed"
