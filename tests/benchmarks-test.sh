#!/usr/bin/env bash
# CTest: scripts/benchmarks.sh as a new user runs it, with one sample of the
# quick matrix: every run succeeds, the CSV holds a row per run, and both
# plots are drawn (PNG files that are not blank: a plot has axes, a key and
# lines in several colours).
#
#   bash tests/benchmarks-test.sh path/to/rpc-bench
set -euo pipefail

BENCH="${1:?usage: benchmarks-test.sh PATH_TO_RPC_BENCH}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON=/usr/bin/python3
TMP="$(mktemp -d "${TMPDIR:-/tmp}/benchmarks-test.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

TEST_NAME=benchmarks-test
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh"

CHECK="one sample of the quick matrix"
set +e
timeout -k 5 200 bash "$ROOT/scripts/benchmarks.sh" --rpc-bench "$BENCH" --matrix quick \
  --samples 1 --run-seconds 0.3 --results-dir "$TMP/results" > "$TMP/out" 2> "$TMP/err"
rc=$?
set -e
[[ $rc -eq 0 ]] || { show "$TMP/out" "$TMP/err"; fail "exit status $rc, expected 0"; }

CHECK="CSV"
rows=$(($(wc -l < "$TMP/results/results.csv") - 1))
[[ $rows -eq 4 ]] || { show "$TMP/results/results.csv"; fail "$rows rows, expected 4 (one per run)"; }
if grep -q run_failed "$TMP/results/results.csv"; then
  show "$TMP/results/results.csv"
  fail "a run failed"
fi

CHECK="plots"
for png in reqs_per_sec.png cpu_per_req.png; do
  [[ -s $TMP/results/$png ]] || { show "$TMP/err"; fail "$png was not drawn"; }
  "$PYTHON" - "$TMP/results/$png" << 'PY' > "$TMP/png.check" 2>&1 ||
import sys
from PIL import Image
img = Image.open(sys.argv[1]).convert("RGB")
w, h = img.size
if w < 400 or h < 200:
    sys.exit(f"{w}x{h}: too small for a plot")
colours = img.getcolors(maxcolors=1 << 20) or []
# Background, text, grid and at least two lines of their own colours.
if len(colours) < 5:
    sys.exit(f"only {len(colours)} colours: a blank picture")
background = max(colours)[0]
if background > 0.99 * w * h:
    sys.exit(f"{background} of {w * h} pixels are the background: nothing drawn")
PY
    { show "$TMP/png.check"; fail "$png is blank"; }
done

CHECK="the latency-throughput curve, before and after on one chart"
set +e
timeout -k 5 120 bash "$ROOT/scripts/benchmarks.sh" --curve --rpc-bench "$BENCH" --before "$BENCH" \
  --points 50,100 --run-seconds 0.3 --results-dir "$TMP/curve" > "$TMP/out" 2> "$TMP/err"
rc=$?
set -e
[[ $rc -eq 0 ]] || { show "$TMP/out" "$TMP/err"; fail "exit status $rc, expected 0"; }
# Two configs x two points x two binaries, each with a rate and ordered
# percentiles.
"$PYTHON" - "$TMP/curve/curve.csv" << 'PY' > "$TMP/curve.check" 2>&1 ||
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
if len(rows) != 8:
    sys.exit(f"{len(rows)} rows, expected 8")
for r in rows:
    if float(r["achieved_rate"]) <= 0 or int(r["errors"]) != 0:
        sys.exit(f"a point without calls or with errors: {r}")
    if not float(r["p50_us"]) <= float(r["p99_us"]) <= float(r["p999_us"]):
        sys.exit(f"percentiles out of order: {r}")
if {r["binary"] for r in rows} != {"before", "after"}:
    sys.exit("both binaries must be on the chart")
PY
  { show "$TMP/curve.check" "$TMP/curve/curve.csv"; fail "curve.csv is wrong"; }
[[ -s $TMP/curve/curve.png ]] || { show "$TMP/err"; fail "curve.png was not drawn"; }

echo "PASS: benchmarks.sh drew both plots from $rows runs, and the curve"
