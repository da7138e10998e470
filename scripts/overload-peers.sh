#!/usr/bin/env bash
# overload-peers.sh: issue 42's overload cells against Kudu's and brpc's
# servers, in one run.
#
# Kudu: for each queue length, in turn: Osprey's rpc-bench server with a
# sleeping handler, then Kudu's kudu-calc-server (its Sleep method), each
# driven open loop by Osprey's client through `benchmarks.sh --overload`
# (server pinned to CPU 0, client to CPU 1, the same loads, seeds and
# deadlines). Both servers run 1 reactor and 1 worker.
#
# brpc (when BRPC_OVERLOAD_BENCH names bench/brpc-overload's
# brpc-overload-bench): for each of BRPC_OVERLOAD_HANDLERS ("20:50 1000:20",
# HANDLER_US:DEADLINE_MS) in turn: Osprey's rpc-bench server with the burning
# handler (-handler=burn) at each of BRPC_OSPREY_QUEUES ("50", Osprey's
# default) driven by Osprey's client; then brpc's server
# (brpc-overload-bench -server_only -handler=burn, 2 bthread workers, pinned
# to CPU 0) with its limiter off (-max_concurrency=0) and then with brpc's
# auto limiter (-max_concurrency=auto), a fresh server each, driven by
# brpc-overload-bench's brpc client on CPU 1 (benchmarks.sh with
# SERVER_ADDRESS, SERVER_PID and OVERLOAD_CLIENT). brpc-auto is measured
# against brpc-none's C (OVERLOAD_CAPACITY), so both rows share one C, the
# server's with its limiter off; its own capacity runs stay in its raw files.
#
#   KUDU_CALC_SERVER=/tmp/kudu-peer/build/kudu-calc-server \
#   BRPC_OVERLOAD_BENCH=/tmp/brpc-peer/overload-build/brpc-overload-bench \
#     scripts/overload-peers.sh [RESULTS_DIR]
#
# Without KUDU_CALC_SERVER (or with it not executable) the Kudu rows are
# skipped with a line saying so; ../shared/peers/kudu/build.sh builds it.
# Without BRPC_OVERLOAD_BENCH likewise for brpc; bench/brpc-overload/build.sh
# builds it.
# Variables: OVERLOAD_QUEUES ("50 1000 100000"), OVERLOAD_HANDLERS
# ("1000:20": the sleeping handler's microseconds and the deadline in ms, for
# the Kudu part), BRPC_OVERLOAD_HANDLERS and BRPC_OSPREY_QUEUES (the brpc
# part; BRPC_OSPREY_QUEUES="" runs no Osprey rows there), BRPC_SERVER_FLAGS
# (more flags for brpc's server, e.g. -brpc_clamp_workers for brpc's minimum
# of 4 bthread workers) and BRPC_LABEL ("brpc": the result directories'
# and rows' prefix, e.g. brpc4w), and those of benchmarks.sh --overload (OVERLOAD_LOADS,
# OVERLOAD_SECONDS, OVERLOAD_MAX_LAG_US, RPC_BENCH, ...). No burst
# (OVERLOAD_BURST is set empty).
# Output: RESULTS_DIR/<server>-q<LEN>/ (benchmarks.sh's files: osprey-q<LEN>
# and kudu-q<LEN>, sleeping handler), RESULTS_DIR/osprey-burn-q<LEN>-h<US>/,
# RESULTS_DIR/brpc-none-h<US>/ and RESULTS_DIR/brpc-auto-h<US>/ (burning
# handler), and RESULTS_DIR/peers-summary.md: a table of the sleeping
# handler's cells (Osprey and Kudu), then one of the burning handler's
# (Osprey and brpc; brpc has no queue length: "-").
# Ends only the Kudu and brpc servers it started, by PID.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RESULTS_DIR="${1:-$ROOT/results/overload-peers-$(date -u +%Y%m%dT%H%M%SZ)}"
QUEUES="${OVERLOAD_QUEUES:-50 1000 100000}"
export OVERLOAD_HANDLERS="${OVERLOAD_HANDLERS:-1000:20}"
export OVERLOAD_BURST=""
KUDU_CALC_SERVER="${KUDU_CALC_SERVER:-}"
BRPC_OVERLOAD_BENCH="${BRPC_OVERLOAD_BENCH:-}"
BRPC_HANDLERS="${BRPC_OVERLOAD_HANDLERS:-20:50 1000:20}"
BRPC_OSPREY_QUEUES="${BRPC_OSPREY_QUEUES-50}"
BRPC_SERVER_FLAGS="${BRPC_SERVER_FLAGS:-}"
BRPC_LABEL="${BRPC_LABEL:-brpc}"
[[ "$BRPC_LABEL" =~ ^brpc[a-z0-9]*$ ]] || { echo "overload-peers.sh: BRPC_LABEL must be brpc[a-z0-9]*" >&2; exit 2; }
read -ra BRPC_EXTRA <<<"$BRPC_SERVER_FLAGS"
mkdir -p "$RESULTS_DIR"

KUDU_OK=0
if [[ -n "$KUDU_CALC_SERVER" && -x "$KUDU_CALC_SERVER" ]]; then
  KUDU_OK=1
else
  echo "overload-peers.sh: SKIPPING Kudu: KUDU_CALC_SERVER is not set to an executable" \
       "kudu-calc-server (build it with ../shared/peers/kudu/build.sh)" >&2
fi
BRPC_OK=0
if [[ -n "$BRPC_OVERLOAD_BENCH" && -x "$BRPC_OVERLOAD_BENCH" ]]; then
  BRPC_OK=1
else
  echo "overload-peers.sh: SKIPPING brpc: BRPC_OVERLOAD_BENCH is not set to an executable" \
       "brpc-overload-bench (build it with bench/brpc-overload/build.sh)" >&2
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
BRPC_PID=""
stop_brpc() {
  [[ -n "$BRPC_PID" ]] || return 0
  kill -TERM "$BRPC_PID" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$BRPC_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$BRPC_PID" 2>/dev/null || true
  wait "$BRPC_PID" 2>/dev/null || true
  BRPC_PID=""
}
trap 'stop_kudu; stop_brpc' EXIT

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

# brpc: Osprey with the burning handler, then brpc without and with its auto
# limiter, one handler at a time.
if [[ $BRPC_OK == 1 ]]; then
  for hd in $BRPC_HANDLERS; do
    [[ "$hd" =~ ^([0-9]+):([1-9][0-9]*)$ ]] ||
      { echo "overload-peers.sh: bad BRPC_OVERLOAD_HANDLERS pair '$hd'" >&2; exit 2; }
    h="${BASH_REMATCH[1]}"
    for q in $BRPC_OSPREY_QUEUES; do
      [[ "$q" =~ ^[1-9][0-9]*$ ]] || { echo "overload-peers.sh: bad queue length '$q'" >&2; exit 2; }
      echo "== osprey (burn), queue $q, handler $hd" >&2
      OVERLOAD_QUEUES="$q" OVERLOAD_HANDLERS="$hd" SERVER_FLAGS="-handler=burn" \
        RESULTS_DIR="$RESULTS_DIR/osprey-burn-q$q-h$h" \
        bash "$ROOT/scripts/benchmarks.sh" --overload || FAILED=$((FAILED + 1))
    done
    brpc_c=""
    for lim in none auto; do
      echo "== brpc, limiter $lim, handler $hd" >&2
      out="$RESULTS_DIR/$BRPC_LABEL-$lim-h$h.server"
      # 1 + 1 bthread workers (brpc has no reactor/worker split; see
      # bench/brpc-overload/README.md). Serves until stopped (an hour at most).
      "${PIN[@]}" "$BRPC_OVERLOAD_BENCH" -server_only -listen 127.0.0.1:0 -server_reactors 1 \
        -worker_threads 1 -handler=burn -max_concurrency="$([[ $lim == auto ]] && echo auto || echo 0)" \
        -run_seconds 3600 "${BRPC_EXTRA[@]}" >"$out.out" 2>"$out.err" </dev/null &
      BRPC_PID=$!
      addr=""
      for _ in $(seq 1 100); do
        addr="$(sed -n 's/^LISTENING \([^ ]*\)$/\1/p' "$out.out")"
        [[ -n "$addr" ]] && break
        kill -0 "$BRPC_PID" 2>/dev/null || break
        sleep 0.1
      done
      if [[ -z "$addr" ]]; then
        echo "overload-peers.sh: brpc-overload-bench did not start; see $out.err" >&2
        stop_brpc
        FAILED=$((FAILED + 1))
        continue
      fi
      cap="${OVERLOAD_CAPACITY:-}"
      [[ -z "$cap" && $lim == auto && -n "$brpc_c" ]] && cap="$h:$brpc_c"
      OVERLOAD_CAPACITY="$cap" OVERLOAD_HANDLERS="$hd" SERVER_FLAGS="" SERVER_ADDRESS="$addr" \
        SERVER_PID="$BRPC_PID" OVERLOAD_CLIENT="$BRPC_OVERLOAD_BENCH" \
        RESULTS_DIR="$RESULTS_DIR/$BRPC_LABEL-$lim-h$h" \
        bash "$ROOT/scripts/benchmarks.sh" --overload || FAILED=$((FAILED + 1))
      stop_brpc
      if [[ $lim == none && -s "$RESULTS_DIR/$BRPC_LABEL-none-h$h/overload.csv" ]]; then
        brpc_c="$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "capacity") c = i }
          NR == 2 { printf "%.0f", $c }' "$RESULTS_DIR/$BRPC_LABEL-none-h$h/overload.csv")"
      fi
    done
  done
fi
trap - EXIT

/usr/bin/python3 - "$RESULTS_DIR" <<'EOF' | tee "$RESULTS_DIR/peers-summary.md"
import csv, glob, os, re, sys
root = sys.argv[1]
# Directories: <server>-q<N> (osprey, kudu: sleeping handler),
# osprey-burn-q<N>-h<US>, brpc-none-h<US>, brpc-auto-h<US> (burning handler).
sleep_rows, burn_rows = [], []
for path in sorted(glob.glob(os.path.join(root, "*", "overload.csv"))):
    m = re.match(r"(\w+(?:-\w+)*?)(?:-q(\d+))?(?:-h\d+)?$", os.path.basename(os.path.dirname(path)))
    if not m:
        continue
    server, queue = m.group(1), (int(m.group(2)) if m.group(2) else None)
    burn = server == "osprey-burn" or server.startswith("brpc")
    for r in csv.DictReader(open(path)):
        if burn:
            burn_rows.append((int(r["handler_us"]), float(r["load"]), server, queue, r))
        else:
            sleep_rows.append((int(r["handler_us"]), queue, float(r["load"]), server, r))
def num(r, k):
    try:
        return float(r[k])
    except (KeyError, ValueError, TypeError):
        return None
def share(r, k):
    n, offered = num(r, k), num(r, "offered")
    return f"{100 * n / offered:.1f}%" if n is not None and offered else "-"
def cells(r):
    cap, good, p99 = num(r, "capacity"), num(r, "goodput_per_sec"), num(r, "p99_us")
    rp99 = num(r, "refusal_p99_us")
    deadline_us = 1000 * float(r["deadline_ms"])
    return (f"| {cap:.0f} | {good / cap:.2f} | {share(r, 'refused')} | {share(r, 'timeouts')} "
            f"| {share(r, 'late')} | {p99 / deadline_us if p99 is not None else float('nan'):.2f} "
            f"| {'-' if rp99 is None else f'{rp99 / 1000:.2f} ms'} | {r.get('valid', '-')} |")
HEAD = ("| handler | deadline | queue | offered/C | server | C (calls/s) | goodput/C | refused "
        "| timed out | late | p99/deadline | refusal p99 | valid |")
if sleep_rows:
    print(HEAD)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for h, q, load, server, r in sorted(sleep_rows, key=lambda x: (x[0], x[1], x[2], x[3])):
        print(f"| {h} us sleep | {r['deadline_ms']} ms | {q} | {load:g} | {server} " + cells(r))
if burn_rows:
    if sleep_rows:
        print()
    print("Burning handler: Osprey against brpc without (brpc-none) and with its auto "
          "limiter (brpc-auto); brpc has no queue length (-).")
    print()
    print(HEAD)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    def order(server):  # osprey, then each brpc label's none before its auto
        if server == "osprey-burn":
            return (0, "", 0)
        label, _, lim = server.rpartition("-")
        return (1, label, 0 if lim == "none" else 1)
    for h, load, server, q, r in sorted(burn_rows, key=lambda x: (
            x[0], x[1], order(x[2]), x[3] or 0)):
        name = "osprey" if server == "osprey-burn" else server
        print(f"| {h} us burn | {r['deadline_ms']} ms | {q if q is not None else '-'} | {load:g} "
              f"| {name} " + cells(r))
EOF
[[ $FAILED -eq 0 ]] || { echo "overload-peers.sh: $FAILED runs failed" >&2; exit 1; }
