#!/usr/bin/env bash
# overload-peers.sh: issue 42's overload cells against Kudu's server, in one
# run. For each queue length, in turn: Osprey's rpc-bench server with a
# sleeping handler, then Kudu's kudu-calc-server (its Sleep method), each
# driven open loop by Osprey's client through `benchmarks.sh --overload`
# (server pinned to CPU 0, client to CPU 1, the same loads, seeds and
# deadlines). Both servers run 1 reactor and 1 worker.
#
#   KUDU_CALC_SERVER=/tmp/kudu-peer/build/kudu-calc-server \
#     scripts/overload-peers.sh [RESULTS_DIR]
#
# Without KUDU_CALC_SERVER (or with it not executable) the Kudu rows are
# skipped with a line saying so; ../shared/peers/kudu/build.sh builds it.
# Variables: OVERLOAD_QUEUES ("50 1000 100000"), OVERLOAD_HANDLERS
# ("1000:20": the sleeping handler's microseconds and the deadline in ms),
# and those of benchmarks.sh --overload (OVERLOAD_LOADS, OVERLOAD_SECONDS,
# OVERLOAD_MAX_LAG_US, ...). No burst (OVERLOAD_BURST is set empty).
# Output: RESULTS_DIR/<server>-q<LEN>/ (benchmarks.sh's files) and
# RESULTS_DIR/peers-summary.md, a table of both servers' cells.
# Ends only the Kudu servers it started, by PID.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RESULTS_DIR="${1:-$ROOT/results/overload-peers-$(date -u +%Y%m%dT%H%M%SZ)}"
QUEUES="${OVERLOAD_QUEUES:-50 1000 100000}"
export OVERLOAD_HANDLERS="${OVERLOAD_HANDLERS:-1000:20}"
export OVERLOAD_BURST=""
KUDU_CALC_SERVER="${KUDU_CALC_SERVER:-}"
mkdir -p "$RESULTS_DIR"

KUDU_OK=0
if [[ -n "$KUDU_CALC_SERVER" && -x "$KUDU_CALC_SERVER" ]]; then
  KUDU_OK=1
else
  echo "overload-peers.sh: SKIPPING Kudu: KUDU_CALC_SERVER is not set to an executable" \
       "kudu-calc-server (build it with ../shared/peers/kudu/build.sh)" >&2
fi
PIN=()
command -v taskset >/dev/null && [[ "$(nproc)" -ge 2 ]] && PIN=(taskset -c 0)

KUDU_PID=""
stop_kudu() {
  [[ -n "$KUDU_PID" ]] || return 0
  kill -TERM "$KUDU_PID" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$KUDU_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$KUDU_PID" 2>/dev/null || true
  wait "$KUDU_PID" 2>/dev/null || true
  KUDU_PID=""
}
trap stop_kudu EXIT

FAILED=0
for q in $QUEUES; do
  [[ "$q" =~ ^[1-9][0-9]*$ ]] || { echo "overload-peers.sh: bad queue length '$q'" >&2; exit 2; }
  echo "== osprey, queue $q" >&2
  OVERLOAD_QUEUES="$q" SERVER_FLAGS="-handler=sleep" RESULTS_DIR="$RESULTS_DIR/osprey-q$q" \
    bash "$ROOT/scripts/benchmarks.sh" --overload || FAILED=$((FAILED + 1))
  [[ $KUDU_OK == 1 ]] || continue
  echo "== kudu, queue $q" >&2
  out="$RESULTS_DIR/kudu-q$q.server"
  # Serves until this script stops it (an hour at most).
  "${PIN[@]}" "$KUDU_CALC_SERVER" 0 --run_seconds 3600 --server_reactors 1 --worker_threads 1 \
    --service_queue_length "$q" --rpc_encryption=disabled --rpc_authentication=disabled \
    >"$out.out" 2>"$out.err" </dev/null &
  KUDU_PID=$!
  addr=""
  for _ in $(seq 1 100); do
    addr="$(sed -n 's/^LISTENING \([^ ]*\) .*$/\1/p' "$out.out")"
    [[ -n "$addr" ]] && break
    kill -0 "$KUDU_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z "$addr" ]]; then
    echo "overload-peers.sh: kudu-calc-server did not start; see $out.err" >&2
    stop_kudu
    FAILED=$((FAILED + 1))
    continue
  fi
  SERVER_ADDRESS="$addr" SERVER_PID="$KUDU_PID" RESULTS_DIR="$RESULTS_DIR/kudu-q$q" bash "$ROOT/scripts/benchmarks.sh" --overload || FAILED=$((FAILED + 1))
  stop_kudu
done
trap - EXIT

/usr/bin/python3 - "$RESULTS_DIR" <<'EOF' | tee "$RESULTS_DIR/peers-summary.md"
import csv, glob, os, re, sys
root = sys.argv[1]
rows = []
for path in sorted(glob.glob(os.path.join(root, "*-q*", "overload.csv"))):
    m = re.match(r"(\w+)-q(\d+)$", os.path.basename(os.path.dirname(path)))
    server, queue = m.group(1), int(m.group(2))
    for r in csv.DictReader(open(path)):
        rows.append((int(r["handler_us"]), queue, float(r["load"]), server, r))
def num(r, k):
    try:
        return float(r[k])
    except (KeyError, ValueError, TypeError):
        return None
def share(r, k):
    n, offered = num(r, k), num(r, "offered")
    return f"{100 * n / offered:.1f}%" if n is not None and offered else "-"
print("| handler | deadline | queue | offered/C | server | C (calls/s) | goodput/C | refused "
      "| timed out | late | p99/deadline | refusal p99 | valid |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for h, q, load, server, r in sorted(rows, key=lambda x: (x[0], x[1], x[2], x[3])):
    cap, good, p99 = num(r, "capacity"), num(r, "goodput_per_sec"), num(r, "p99_us")
    rp99 = num(r, "refusal_p99_us")
    deadline_us = 1000 * float(r["deadline_ms"])
    print(f"| {h} us sleep | {r['deadline_ms']} ms | {q} | {load:g} | {server} "
          f"| {cap:.0f} | {good / cap:.2f} | {share(r, 'refused')} | {share(r, 'timeouts')} "
          f"| {share(r, 'late')} | {p99 / deadline_us if p99 is not None else float('nan'):.2f} "
          f"| {'-' if rp99 is None else f'{rp99 / 1000:.2f} ms'} | {r.get('valid', '-')} |")
EOF
[[ $FAILED -eq 0 ]] || { echo "overload-peers.sh: $FAILED runs failed" >&2; exit 1; }
