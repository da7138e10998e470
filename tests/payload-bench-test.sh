#!/usr/bin/env bash
# CTest: scripts/payload-bench.sh end to end, small and short: a row per
# peer and mode with a positive rate, and the table of medians with the
# probe's ratio. BUILD_DIR names the build to take the binaries from.
set -euo pipefail
TEST_NAME=payload-bench-test
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

CHECK="the script runs"
timeout 120 bash "$root/scripts/payload-bench.sh" --reps 1 --seconds 0.3 --sizes 4096 >"$out" ||
  { show "$out"; fail "exit status $?"; }

CHECK="a row per peer and mode, each with calls and bytes"
for peer in probe osprey; do
  for mode in sync async; do
    grep -qE "^1,$peer,$mode,4096,[1-9][0-9.]*,[0-9.]+$" "$out" || { show "$out"; fail "no $peer $mode row"; }
  done
done

CHECK="the medians, the probe at 1.00 of itself"
grep -qF "| 4 KiB | sync | probe |" "$out" || { show "$out"; fail "no table"; }
grep -qE "^\| 4 KiB \| async \| probe \| [0-9]+ \| 1\.00 \|$" "$out" || { show "$out"; fail "probe ratio"; }
grep -qE "^\| 4 KiB \| async \| osprey \| [0-9]+ \| [0-9]+\.[0-9]{2} \|$" "$out" || { show "$out"; fail "osprey ratio"; }
echo "$TEST_NAME: all checks passed"
