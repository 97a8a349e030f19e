#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang) into build-fuzz/ (or $SPENDCAP_FUZZ_BUILD) and
# runs each for a bounded time over its corpus (tests/fuzz/corpus/<target>/, read only; new inputs go to a scratch
# directory). Exits non-zero on the first crash, leak or sanitizer report; the reproducer is left
# in that directory (crash-*). Usage: scripts/fuzz.sh [SECONDS_EACH] (default 20), or
# scripts/fuzz.sh --runs N [SECONDS_CAP]: N inputs each (the corpus, then mutations), the same work
# however loaded the machine is, stopped at SECONDS_CAP (default 60) should a slow machine not get
# there (the suite's `fuzz` test: 100,000 each, 16 s of CPU in all against 75 s for 15 s each).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=-1
if [ "${1:-}" = "--runs" ]; then
  runs="${2:?--runs takes a number of inputs}"
  case "$runs" in '' | *[!0-9]*) echo "fuzz: --runs $runs: give a whole number of inputs, e.g. --runs 100000" >&2; exit 2 ;; esac
  seconds="${3:-60}"
else
  seconds="${1:-20}"
fi
repo="$(pwd)"
build="${SPENDCAP_FUZZ_BUILD:-build-fuzz}"
mkdir -p "$build"
build="$(cd "$build" && pwd)"
command -v clang++ >/dev/null || { echo "fuzz: clang++ is missing: install clang (scripts/setup.sh does with SPENDCAP_SETUP_TESTS=1)" >&2; exit 2; }
# clang links libFuzzer and the sanitizers from libclang-rt-14-dev, which clang only recommends: name
# the package instead of failing in the linker.
for runtime in libclang_rt.fuzzer-x86_64.a libclang_rt.asan-x86_64.a; do
  found="$(clang++ -print-file-name="lib/linux/$runtime" 2>/dev/null || true)"
  [ -f "$found" ] || found="$(find /usr/lib/llvm-*/lib/clang -name "$runtime" 2>/dev/null | head -n1)"
  [ -n "$found" ] && [ -f "$found" ] || {
    echo "fuzz: clang's $runtime is missing: install libclang-rt-14-dev (scripts/setup.sh does with SPENDCAP_SETUP_TESTS=1)" >&2
    exit 2
  }
done
# ccache, where there is one, makes the rebuild after a change of the fuzzed code only the change.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S tests/fuzz -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "${launcher[@]}" >/dev/null
cmake --build "$build" -j"${JOBS:-2}" >/dev/null
for target in policy duration money progress runner; do
  scratch="$(mktemp -d)"
  if [ "$runs" -ge 0 ]; then
    echo "fuzz: $target for $runs inputs (at most ${seconds}s)"
  else
    echo "fuzz: $target for ${seconds}s"
  fi
  status=0
  (cd "$build" && ./fuzz_"$target" -runs="$runs" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 "$scratch" "$repo/tests/fuzz/corpus/$target") \
    >"$build/$target.log" 2>&1 || status=$?
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY)|ERROR" \
    "$build/$target.log" || true
  rm -rf "$scratch"
  [ "$status" -eq 0 ] || { echo "fuzz: $target failed (reproducer in $build/)" >&2; exit 1; }
done
echo "fuzz: no findings"
