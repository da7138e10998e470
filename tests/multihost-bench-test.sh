#!/usr/bin/env bash
# CTest: scripts/multihost-bench.sh end to end, with small settings.
#
#   bash tests/multihost-bench-test.sh path/to/rpc-bench
#
# Runs a server host and 3 client hosts (network namespaces, made by
# scripts/netns-hosts.sh) for 1 second and checks the merged result: the
# merged call count is the sum of the hosts' counts, every host made calls,
# the merged histogram is the bucket-by-bucket sum of the hosts' histograms
# and holds every call, the text report has Kudu's rpc-bench lines, and no
# namespace of the run is left. Then a run whose clients fail must exit
# non-zero, say so, and leave no namespace either. Then the script at its
# defaults, plain and TLS: both modes, no failure, no refusal. Then a server
# queue too short: refusals counted and marked, and the run still succeeds. Skips (exit 77) where
# namespaces cannot be made, e.g. when not root.
set -euo pipefail

BENCH="${1:?usage: multihost-bench-test.sh PATH_TO_RPC_BENCH}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NETNS="$ROOT/scripts/netns-hosts.sh"
SCRIPT="$ROOT/scripts/multihost-bench.sh"
PYTHON=/usr/bin/python3
RUN_LIMIT=90  # seconds a run of the script may take before it is a failure
# Light enough for a shared 2-core machine.
SMALL=(-mode async -client_threads 2 -async_call_concurrency 4 -worker_threads 1
       -server_reactors 1)

if ! reason="$("$NETNS" check 2>&1)"; then
  echo "SKIP: $reason"
  exit 77
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/multihost-bench-test.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

TEST_NAME=multihost-bench-test
source "$(dirname "${BASH_SOURCE[0]}")/test-lib.sh"

[[ -x "$BENCH" ]] || { CHECK=setup; fail "'$BENCH' is not an executable"; }
[[ -x "$PYTHON" ]] || { CHECK=setup; fail "needs $PYTHON"; }

# The namespaces of multihost-bench.sh runs (osprey-<PID>mb-*).
bench_namespaces() { ip netns list | awk '{print $1}' | grep -E '^osprey-[0-9]+mb-' | sort || true; }

# run NAME ARGS...: the script, bounded in time; output in $TMP/NAME.out and
# .err, exit status in RC.
RC=0
run() {
  local name="$1"
  shift
  set +e
  timeout -k 5 "$RUN_LIMIT" bash "$SCRIPT" --rpc-bench "$BENCH" "$@" \
    > "$TMP/$name.out" 2> "$TMP/$name.err" < /dev/null
  RC=$?
  set -e
  if [[ $RC -eq 124 || $RC -eq 137 ]]; then
    show "$TMP/$name.out" "$TMP/$name.err"
    fail "multihost-bench.sh $* did not finish within ${RUN_LIMIT}s"
  fi
}

# ------------------------------------------------------------ a good run
bench_namespaces > "$TMP/ns.before"
CHECK="3 client hosts for 1 s"
run good --hosts 3 --run-seconds 1 --json "$TMP/merged.json" -- "${SMALL[@]}"
[[ $RC -eq 0 ]] || { show "$TMP/good.out" "$TMP/good.err"; fail "exit status $RC, expected 0"; }

CHECK="merged JSON"
"$PYTHON" - "$TMP/merged.json" << 'EOF' > "$TMP/json.check" 2>&1 ||
import json, sys
lines = open(sys.argv[1]).read().splitlines()
if len(lines) != 1:
    sys.exit(f"{len(lines)} lines, expected 1 (one mode)")
r = json.loads(lines[0])
hosts = r["per_host"]
if len(hosts) != 3:
    sys.exit(f"{len(hosts)} per_host entries, expected 3")
if [h["host"] for h in hosts] != [2, 3, 4]:
    sys.exit(f"hosts {[h['host'] for h in hosts]}, expected [2, 3, 4]")
for h in hosts:
    if not h["calls"] > 0:
        sys.exit(f"host {h['host']} made {h['calls']} calls")
total = sum(h["calls"] for h in hosts)
if r["total_calls"] != total:
    sys.exit(f"total_calls {r['total_calls']} is not the sum of the hosts' calls, {total}")
m = r["latency_histogram"]
if m["count"] != r["total_calls"]:
    sys.exit(f"merged histogram count {m['count']} is not total_calls {r['total_calls']}")
if sum(c for _, c in m["buckets"]) != m["count"]:
    sys.exit("merged histogram buckets do not add up to its count")
# Bucket by bucket, the sum of the hosts' histograms.
want = {}
for h in hosts:
    if h["latency_histogram"]["count"] != h["calls"]:
        sys.exit(f"host {h['host']}: histogram count is not its calls")
    for upper, c in h["latency_histogram"]["buckets"]:
        want[upper] = want.get(upper, 0) + c
if m["buckets"] != [[u, want[u]] for u in sorted(want)]:
    sys.exit("merged buckets are not the sum of the hosts' buckets")
hs = [h["latency_histogram"] for h in hosts]
if m["sum"] != sum(h["sum"] for h in hs) or m["min"] != min(h["min"] for h in hs) \
        or m["max"] != max(h["max"] for h in hs):
    sys.exit("merged sum, min or max is not that of the hosts")
lat = r["latency_us"]
if not 0 < lat["p50"] <= lat["p99"] <= lat["p99.9"] <= lat["max"]:
    sys.exit(f"merged latencies out of order: {lat}")
# A merged percentile lies between the hosts' (within a bucket, 1%).
for p in ["p50", "p99", "p99.9"]:
    own = [h["latency_us"][p] for h in hosts]
    if not min(own) * 0.99 <= lat[p] <= max(own) * 1.01:
        sys.exit(f"merged {p} {lat[p]} is outside the hosts' {own}")
if r["errors"] != 0:
    sys.exit(f"{r['errors']} errors")
if not r["reqs_per_sec"] > 0:
    sys.exit(f"reqs_per_sec {r['reqs_per_sec']}")
# For the text checks below.
print(r["host_set"])
print(r["total_calls"])
for h in hosts:
    print(h["host"], h["calls"])
EOF
  { show "$TMP/merged.json" "$TMP/json.check"; fail "$(tail -n 1 "$TMP/json.check")"; }
SET="$(sed -n 1p "$TMP/json.check")"
TOTAL="$(sed -n 2p "$TMP/json.check")"

CHECK="text report"
NUM='[0-9]+(\.[0-9]+)?'
want=('^== 3 client hosts .* merged ==$'
      '^Mode:            Async$'
      '^Client reactors:  2$'
      '^Call concurrency: 4$'
      '^Worker threads:   1$'
      '^Server reactors:  1$'
      '^Encryption:       0 \(negotiated clear; rpc_encryption=disabled\)$'
      '^----------------------------------$'
      "^Reqs/sec:         ${NUM}\$"
      "^User CPU per req: ${NUM}us\$"
      "^Sys CPU per req:  ${NUM}us\$"
      "^Ctx Sw\\. per req:  ${NUM}\$"
      "^Latency p50:      ${NUM}us\$"
      "^Latency p99:      ${NUM}us\$"
      "^Latency p99\\.9:    ${NUM}us\$"
      "^Latency max:      ${NUM}us\$"
      '^Errors:           0$'
      '^Refused: +0$'
      "^Merged histogram: ${TOTAL} calls; p50 ${NUM}us, p99 ${NUM}us, p99\\.9 ${NUM}us, max ${NUM}us\$")
for i in "${!want[@]}"; do
  line="$(sed -n "$((i + 1))p" "$TMP/good.out")"
  [[ $line =~ ${want[$i]} ]] || { show "$TMP/good.out"; fail "line $((i + 1)) is '$line', expected /${want[$i]}/"; }
done
while read -r host calls; do
  grep -Eq "^  host $host \\(198\\.18\\.0\\.$host\\): calls $calls, reqs/sec [0-9]+, p99 ${NUM}us\$" \
    "$TMP/good.out" || { show "$TMP/good.out"; fail "no line for host $host with its $calls calls"; }
done < <(tail -n +3 "$TMP/json.check")

CHECK="no namespace left after the run"
[[ $SET =~ ^[0-9]+mb$ ]] || fail "host_set '$SET' is not <PID>mb"
left="$(ip netns list | awk '{print $1}' | grep "^osprey-$SET-" || true)"
[[ -z $left ]] || fail "left behind: $left"

# --------------------------------------------------- clients that fail
# -client_threads 0 is refused by the clients (exit 2), not by the server.
CHECK="clients that fail"
run bad --hosts 2 --run-seconds 1 -- -mode async -client_threads 0
[[ $RC -ne 0 ]] || { show "$TMP/bad.out" "$TMP/bad.err"; fail "exit status 0"; }
grep -q 'client on host 2 (198.18.0.2) failed, exit status 2' "$TMP/bad.err" ||
  { show "$TMP/bad.err"; fail "no message naming the failed client"; }
grep -q 'clients failed' "$TMP/bad.err" || { show "$TMP/bad.err"; fail "no 'clients failed' message"; }

# --------------------------------------------- the script at its defaults
# Both modes, 3 client hosts of rpc-bench's defaults (16 threads; 16
# reactors with 60 calls in flight): the server's queue must hold them all.
for tls in plain tls; do
  CHECK="defaults ($tls)"
  args=(--run-seconds 1)
  [[ $tls == tls ]] && args+=(-- --rpc_encryption=required)
  run "defaults-$tls" "${args[@]}"
  [[ $RC -eq 0 ]] || { show "$TMP/defaults-$tls.out" "$TMP/defaults-$tls.err"; fail "exit status $RC"; }
  out="$TMP/defaults-$tls.out"
  grep -q 'service queue 180 calls' "$TMP/defaults-$tls.err" ||
    { show "$TMP/defaults-$tls.err"; fail "the server's queue is not sized to 3 x 60 calls"; }
  [[ $(grep -c '^== 3 client hosts .* merged ==$' "$out") -eq 2 ]] ||
    { show "$out"; fail "not one merged report per mode"; }
  grep -q '^Mode:            Sync$' "$out" && grep -q '^Mode:            Async$' "$out" ||
    { show "$out"; fail "not both modes"; }
  [[ $(grep -c '^Errors:           0$' "$out") -eq 2 ]] || { show "$out"; fail "calls failed"; }
  [[ $(grep -Ec '^Refused: +0$' "$out") -eq 2 ]] || { show "$out"; fail "calls refused"; }
  if [[ $tls == tls ]]; then
    [[ $(grep -c '^Encryption:       1 (negotiated TLS (encrypted); rpc_encryption=required)$' \
      "$out") -eq 2 ]] || { show "$out"; fail "not encrypted"; }
  fi
done

# ----------------------------------- refusals are reported, not failures
CHECK="a queue too short: refusals, not failures"
run refused --hosts 2 --run-seconds 1 -- -mode async --rpc_service_queue_length 5
[[ $RC -eq 0 ]] || { show "$TMP/refused.out" "$TMP/refused.err"; fail "exit status $RC, expected 0"; }
grep -q 'service queue 5 calls' "$TMP/refused.err" || { show "$TMP/refused.err"; fail "queue not 5"; }
grep -Eq '^Refused: +[1-9][0-9]*$' "$TMP/refused.out" ||
  { show "$TMP/refused.out"; fail "no Refused line with a count"; }
grep -Eq '^  Refused, [a-z_]+: [1-9][0-9]*$' "$TMP/refused.out" ||
  { show "$TMP/refused.out"; fail "no line naming the server's reason"; }
grep -Eq '^  host 2 .*, REFUSED [1-9][0-9]* calls \([a-z_]+ [1-9][0-9]*.*\)$' "$TMP/refused.out" ||
  { show "$TMP/refused.out"; fail "host 2 is not marked as refused"; }
grep -q '^Errors:           0$' "$TMP/refused.out" || { show "$TMP/refused.out"; fail "refusals counted as errors"; }

CHECK="no namespace left after any run"
bench_namespaces > "$TMP/ns.after"
new="$(comm -13 "$TMP/ns.before" "$TMP/ns.after")"
[[ -z $new ]] || fail "left behind: $new"

echo "multihost-bench-test: all checks passed"
