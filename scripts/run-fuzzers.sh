#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, library included;
# debug information as line tables) in
# build-fuzz/ and runs each for the given number of seconds (default 60), as
# many at once as there are CPUs (OSPREY_FUZZ_JOBS).
#
# Each fuzzer starts from a temporary copy of its seed corpus under fuzz/corpus/,
# so new inputs it finds never end up in the repository. Exits non-zero if a
# fuzzer crashes, leaks, trips a sanitizer or times out; its crash input is
# kept in the temporary directory, whose path is printed.
#
#   scripts/run-fuzzers.sh [seconds]
#
# OSPREY_FUZZ_BUILD_DIR names another build directory to take the fuzzers
# from instead, built already with clang, OSPREY_BUILD_FUZZERS=ON and
# OSPREY_SANITIZE=address,undefined (.ci/run's ASan leg, whose library then
# serves both); nothing is configured or built in it here.
set -euo pipefail

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds == 0)); then
  echo "usage: $0 [seconds]   (a positive whole number; default 60)" >&2
  exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${OSPREY_FUZZ_BUILD_DIR:-$root/build-fuzz}"
fuzzers=(frame_decoder_fuzzer negotiate_fuzzer client_negotiation_fuzzer http_request_parser_fuzzer
  reflection_answer_fuzzer etcd_answer_fuzzer)
jobs="${OSPREY_BUILD_JOBS:-2}"

if [[ -n ${OSPREY_FUZZ_BUILD_DIR:-} ]]; then
  cache="$build/CMakeCache.txt"
  if ! grep -qx 'OSPREY_BUILD_FUZZERS:BOOL=ON' "$cache" 2>/dev/null ||
    ! grep -qx 'OSPREY_SANITIZE:STRING=address,undefined' "$cache"; then
    echo "run-fuzzers: OSPREY_FUZZ_BUILD_DIR=$build is not a build configured with" \
      "-DOSPREY_BUILD_FUZZERS=ON -DOSPREY_SANITIZE=address,undefined" >&2
    exit 2
  fi
  for f in "${fuzzers[@]}"; do
    [[ -x $build/fuzz/$f ]] || { echo "run-fuzzers: $build/fuzz/$f is not built" >&2; exit 2; }
  done
else
  generator=()
  if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
    generator=(-G Ninja)  # as scripts/build.sh
  fi
  CXX=clang++ cmake -S "$root" -B "$build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG" \
    -DOSPREY_SANITIZE=address,undefined \
    -DOSPREY_BUILD_FUZZERS=ON \
    -DOSPREY_BUILD_TESTS=OFF \
    -DOSPREY_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build "$build" -j"$jobs" --target "${fuzzers[@]}"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/osprey-fuzz.XXXXXX")"
echo "run-fuzzers: working in $work"
# One fuzzer per CPU at a time (OSPREY_FUZZ_JOBS): libFuzzer runs one
# thread, and each still gets its full time.
parallel="${OSPREY_FUZZ_JOBS:-$(nproc)}"
run_one() {
  local f="$1" corpus_name="${1%_fuzzer}"
  local corpus="$work/$corpus_name/corpus" artifacts="$work/$corpus_name/artifacts"
  mkdir -p "$corpus" "$artifacts"
  cp "$root/fuzz/corpus/$corpus_name/"* "$corpus/"
  # -timeout: a single input taking 10 s is a hang worth failing on.
  "$build/fuzz/$f" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" >"$work/$corpus_name/log" 2>&1
}
declare -A pid_of=()
for f in "${fuzzers[@]}"; do
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n || true; done
  echo "run-fuzzers: $f for ${seconds}s"
  run_one "$f" &
  pid_of[$f]=$!
done
status=0
for f in "${fuzzers[@]}"; do
  corpus_name="${f%_fuzzer}"
  if ! wait "${pid_of[$f]}"; then
    echo "run-fuzzers: $f FAILED; log and crash input under $work/$corpus_name" >&2
    tail -n 60 "$work/$corpus_name/log" >&2
    status=1
  else
    echo "run-fuzzers: $f:"
    grep -E '^stat::(number_of_executed_units|new_units_added)' "$work/$corpus_name/log" || true
  fi
done

if ((status == 0)); then
  echo "run-fuzzers: all fuzzers ran ${seconds}s without a crash"
  rm -rf "$work"
fi
exit "$status"
