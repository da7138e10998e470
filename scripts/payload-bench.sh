#!/usr/bin/env bash
# Large payloads against the raw-TCP ceiling, in one interleaved run:
#
#   scripts/payload-bench.sh [--kudu-server PATH] [--before RPC_BENCH] [--reps N]
#                            [--seconds S] [--sizes "B ..."]
#
# For each size (default 65536 and 1048576 bytes each way) and mode (sync:
# one thread, one call at a time; async: one client reactor, 8 calls in
# flight), it runs, one after another in each repetition:
#   probe         bench/payload-probe: raw TCP, a length and the bytes, echoed
#   osprey        rpc-bench -payload_bytes (Echo; its own server in-process)
#   osprey->kudu  rpc-bench -server_address against Kudu's kudu-calc-server
#                 (../shared/peers/kudu; given with --kudu-server), whose Echo
#                 it calls
#   before        with --before, an older rpc-bench the same way as osprey
#                 (and before-kudu against Kudu's server), for a change's
#                 before and after in one run
# and prints one CSV row per run, then the medians in MB/s each way with
# each one's ratio to the probe's. Binaries come from ${BUILD_DIR:-build}.
# Every server it starts it ends by PID.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR="${BUILD_DIR:-build}"
PROBE="$BUILD_DIR/bench/payload-probe"
BENCH="$BUILD_DIR/tools/rpc-bench/rpc-bench"
KUDU_SERVER=""
BEFORE=""
REPS=3
SECONDS_EACH=2
SIZES="65536 1048576"
while (($#)); do
  case "$1" in
    --kudu-server) KUDU_SERVER="$2"; shift 2 ;;
    --before) BEFORE="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --seconds) SECONDS_EACH="$2"; shift 2 ;;
    --sizes) SIZES="$2"; shift 2 ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "payload-bench: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
for f in "$PROBE" "$BENCH" ${BEFORE:+"$BEFORE"}; do
  [[ -x $f ]] || { echo "payload-bench: $f not found: build first (scripts/build.sh)" >&2; exit 2; }
done

tmp=$(mktemp -d)
kudu_pid=""
cleanup() {
  local rc=$?
  if [[ -n $kudu_pid ]]; then
    kill "$kudu_pid" 2>/dev/null || true
    wait "$kudu_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT

kudu_addr=""
if [[ -n $KUDU_SERVER ]]; then
  : >"$tmp/kudu.out"  # the job may open it after the loop first reads it
  "$KUDU_SERVER" 0 --run_seconds=3600 --rpc_encryption=disabled >"$tmp/kudu.out" 2>"$tmp/kudu.err" &
  kudu_pid=$!
  for _ in $(seq 200); do
    kudu_addr=$(awk '/^LISTENING /{print $2; exit}' "$tmp/kudu.out")
    [[ -n $kudu_addr ]] && break
    sleep 0.05
  done
  [[ -n $kudu_addr ]] || { echo "payload-bench: Kudu's server did not start" >&2; exit 1; }
fi

# Seconds any one run may take: both modes' worth, and start-up.
limit=$(awk -v s="$SECONDS_EACH" 'BEGIN { printf "%d", s * 4 + 30 }')
failures=0
shape=(-client_threads 1 -async_call_concurrency 8 -server_reactors 1 -worker_threads 1)
reqs() { awk '/Reqs\/sec:/ {print $NF}'; }
echo "rep,peer,mode,payload_bytes,reqs_per_sec,mb_per_sec_each_way" | tee "$tmp/rows.csv"
for rep in $(seq "$REPS"); do
  for size in $SIZES; do
    for mode in sync async; do
      common=(-mode "$mode" -payload_bytes "$size" -run_seconds "$SECONDS_EACH" "${shape[@]}")
      peers=(probe)
      [[ -n $BEFORE ]] && peers+=(before)
      peers+=(osprey)
      [[ -n $kudu_addr && -n $BEFORE ]] && peers+=(before-kudu)
      [[ -n $kudu_addr ]] && peers+=(osprey-kudu)
      for peer in "${peers[@]}"; do
        case $peer in
          probe) cmd=("$PROBE" "${common[@]}") ;;
          osprey) cmd=("$BENCH" "${common[@]}") ;;
          before) cmd=("$BEFORE" "${common[@]}") ;;
          before-kudu) cmd=("$BEFORE" "${common[@]}" -server_address "$kudu_addr") ;;
          osprey-kudu) cmd=("$BENCH" "${common[@]}" -server_address "$kudu_addr") ;;
        esac
        r=$(timeout "$limit" "${cmd[@]}" 2>"$tmp/err" | reqs) || true
        if [[ -z $r ]]; then
          echo "payload-bench: $peer $mode $size failed: $(head -c 300 "$tmp/err")" >&2
          failures=$((failures + 1))
          continue
        fi
        awk -v rep="$rep" -v peer="$peer" -v mode="$mode" -v size="$size" -v r="$r" \
          'BEGIN { printf "%s,%s,%s,%s,%.1f,%.1f\n", rep, peer, mode, size, r, r * size / 1e6 }' |
          tee -a "$tmp/rows.csv"
      done
    done
  done
done

/usr/bin/python3 - "$tmp/rows.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {}
for key in {(r["peer"], r["mode"], r["payload_bytes"]) for r in rows}:
    med[key] = statistics.median(float(r["mb_per_sec_each_way"]) for r in rows
                                 if (r["peer"], r["mode"], r["payload_bytes"]) == key)
print()
print("| payload | mode | peer | MB/s each way (median) | × probe |")
print("|---|---|---|---|---|")
for size in sorted({k[2] for k in med}, key=int):
    for mode in ("sync", "async"):
        probe = med.get(("probe", mode, size))
        for peer in ("probe", "before", "osprey", "before-kudu", "osprey-kudu"):
            v = med.get((peer, mode, size))
            if v is None:
                continue
            ratio = f"{v / probe:.2f}" if probe else "-"
            print(f"| {int(size) // 1024} KiB | {mode} | {peer} | {v:.0f} | {ratio} |")
PY
if ((failures > 0)); then
  echo "payload-bench: $failures runs failed" >&2
  exit 1
fi
