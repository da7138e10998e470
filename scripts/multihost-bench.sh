#!/usr/bin/env bash
# rpc-bench with one server host and K client hosts, each host a network
# namespace made by scripts/netns-hosts.sh (host i is 198.18.0.i), and one
# report for the whole run made by merging the clients' latency histograms.
#
#   multihost-bench.sh [--hosts K] [--run-seconds S] [--rpc-bench PATH]
#                      [--port P] [--json FILE] [--timeout SECS]
#                      [-- extra rpc-bench client flags]
#
#   --hosts K         client hosts (default 3); host 1 serves, hosts 2..K+1 call
#   --run-seconds S   rpc-bench -run_seconds of every client (default 5)
#   --rpc-bench PATH  the rpc-bench binary (default build/tools/rpc-bench/rpc-bench)
#   --port P          the server's port on 198.18.0.1 (default 7050)
#   --json FILE       also write the merged result there, one JSON object a
#                     line, one line per mode (as rpc-bench -output json does)
#   --timeout SECS    how long a client may run (default 2 * S + 60)
#
# The flags after -- go to every client. Those that concern the server too
# (-worker_threads, -server_reactors, --rpc_encryption,
# --rpc_encrypt_loopback_connections, -enable_encryption, -metrics) also go
# to the server, so the report's header lines are true of it;
# --rpc_service_queue_length goes to the server alone. Without it the
# server's queue holds every call the clients offer at once: K times the
# larger of -client_threads and -async_call_concurrency (rpc-bench's
# defaults: 16 and 60), at least 50.
#
# Output on stdout, for each mode the clients ran:
#   (a) one report in Kudu's rpc-bench text format for all clients together:
#       Reqs/sec is the sum of the clients' rates, CPU per req is the clients'
#       total CPU over their total calls, the latencies come from the merged
#       histogram;
#   (b) the merged percentiles, from the merged histogram (never an average
#       of the clients' percentiles);
#   (c) one line per client host: its calls, reqs/sec and p99.
# A call the server refused because its queue was full is not a failure: the
# report counts it (Refused), and each client line marks it. The merged
# report is printed whenever every client produced one; the script then
# exits 1 with a message on stderr if a client failed. It also exits 1 if
# not root or if the hosts cannot be made. The hosts are removed at exit, whatever happens.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NETNS="$HERE/netns-hosts.sh"
PYTHON=/usr/bin/python3

HOSTS=3
RUN_SECONDS=5
BENCH="$HERE/../build/tools/rpc-bench/rpc-bench"
PORT=7050
JSON_OUT=""
CLIENT_LIMIT=""
EXTRA=()

die() {
  echo "multihost-bench: $*" >&2
  exit 1
}
say() { echo "multihost-bench: $*" >&2; }
usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 1
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --hosts) [[ $# -ge 2 ]] || usage; HOSTS=$2; shift 2 ;;
    --run-seconds) [[ $# -ge 2 ]] || usage; RUN_SECONDS=$2; shift 2 ;;
    --rpc-bench) [[ $# -ge 2 ]] || usage; BENCH=$2; shift 2 ;;
    --port) [[ $# -ge 2 ]] || usage; PORT=$2; shift 2 ;;
    --json) [[ $# -ge 2 ]] || usage; JSON_OUT=$2; shift 2 ;;
    --timeout) [[ $# -ge 2 ]] || usage; CLIENT_LIMIT=$2; shift 2 ;;
    -h | --help) usage ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "multihost-bench: unknown argument '$1'" >&2; usage ;;
  esac
done

[[ $HOSTS =~ ^[0-9]+$ && $HOSTS -ge 1 && $HOSTS -le 199 ]] ||
  die "--hosts must be from 1 to 199, got '$HOSTS'"
if ! [[ $RUN_SECONDS =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
  ! awk -v s="$RUN_SECONDS" 'BEGIN { exit !(s > 0) }'; then
  die "--run-seconds must be a number above 0, got '$RUN_SECONDS'"
fi
[[ $PORT =~ ^[0-9]+$ && $PORT -ge 1 && $PORT -le 65535 ]] || die "--port must be from 1 to 65535, got '$PORT'"
if [[ -z $CLIENT_LIMIT ]]; then
  CLIENT_LIMIT="$(awk -v s="$RUN_SECONDS" 'BEGIN { printf "%d", 2 * s + 60 }')"
fi
[[ $CLIENT_LIMIT =~ ^[0-9]+$ && $CLIENT_LIMIT -ge 1 ]] || die "--timeout must be whole seconds, got '$CLIENT_LIMIT'"
[[ -x $BENCH ]] || die "'$BENCH' is not an executable (build rpc-bench, or give --rpc-bench PATH)"
BENCH="$(cd "$(dirname "$BENCH")" && pwd)/$(basename "$BENCH")"
[[ -x $PYTHON ]] || die "needs $PYTHON to merge the reports"
[[ -z $JSON_OUT || -d "$(dirname "$JSON_OUT")" ]] || die "--json: no directory for '$JSON_OUT'"

# The flags the script sets itself may not come after --; the ones the
# server needs too are copied to it.
SERVER_FLAGS=()
QUEUE_FLAG=""
CLIENT_EXTRA=()
client_threads=16
concurrency=60
server_bool='^--?(no)?(enable_encryption|rpc_encrypt_loopback_connections|metrics)(=.*)?$'
server_value='^--?(worker_threads|server_reactors|rpc_encryption)(=.*)?$'
owned='^--?(server_address|listen|server_only|output|run_seconds)(=.*)?$'
server_alone='^--?rpc_service_queue_length(=(.*))?$'
load_value='^--?(client_threads|async_call_concurrency)(=(.*))?$'
for ((i = 0; i < ${#EXTRA[@]}; i++)); do
  a=${EXTRA[i]}
  if [[ $a =~ $server_alone ]]; then
    SERVER_FLAGS+=("$a")
    QUEUE_FLAG=1
    if [[ -z ${BASH_REMATCH[1]} && $((i + 1)) -lt ${#EXTRA[@]} ]]; then
      i=$((i + 1))
      SERVER_FLAGS+=("${EXTRA[i]}")
    fi
    continue
  fi
  CLIENT_EXTRA+=("$a")
  if [[ $a =~ $load_value ]]; then
    v=${BASH_REMATCH[3]}
    if [[ -z ${BASH_REMATCH[2]} && $((i + 1)) -lt ${#EXTRA[@]} ]]; then
      i=$((i + 1))
      v=${EXTRA[i]}
      CLIENT_EXTRA+=("$v")
    fi
    [[ $v =~ ^[0-9]+$ ]] || die "rpc-bench flag '$a' needs a whole number, got '$v'"
    if [[ $a == *client_threads* ]]; then
      client_threads=$v
    else
      concurrency=$v
    fi
    continue
  fi
  if [[ $a =~ $owned ]]; then
    die "rpc-bench flag '$a' is set by this script (use --run-seconds, --port)"
  elif [[ $a =~ $server_bool ]]; then
    SERVER_FLAGS+=("$a")
  elif [[ $a =~ $server_value ]]; then
    SERVER_FLAGS+=("$a")
    if [[ -z ${BASH_REMATCH[2]} && $((i + 1)) -lt ${#EXTRA[@]} ]]; then
      i=$((i + 1))
      SERVER_FLAGS+=("${EXTRA[i]}")
      CLIENT_EXTRA+=("${EXTRA[i]}")
    fi
  fi
done
if [[ -z $QUEUE_FLAG ]]; then
  per_client=$((client_threads > concurrency ? client_threads : concurrency))
  queue=$((HOSTS * per_client))
  SERVER_FLAGS+=("--rpc_service_queue_length=$((queue > 50 ? queue : 50))")
fi

[[ $(id -u) == 0 ]] || die "needs root, to make network namespaces"
reason="$("$NETNS" check 2>&1)" || die "cannot make hosts here: $reason"

SET="$$mb"  # netns-hosts.sh removes sets of PIDs that no longer run
TMP="$(mktemp -d "${TMPDIR:-/tmp}/multihost-bench.XXXXXX")"
SERVER_PID=""
CLIENT_PIDS=()
HOSTS_UP=""

# stop_server: SIGTERM, up to 10 s to exit, then SIGKILL. Sets SERVER_RC.
SERVER_RC=""
stop_server() {
  [[ -n $SERVER_PID ]] || return 0
  kill -TERM "$SERVER_PID" 2> /dev/null || true
  local n
  for ((n = 0; n < 100; n++)); do
    kill -0 "$SERVER_PID" 2> /dev/null || break
    sleep 0.1
  done
  if kill -0 "$SERVER_PID" 2> /dev/null; then
    say "server still running 10 s after SIGTERM; killing it"
    kill -KILL "$SERVER_PID" 2> /dev/null || true
  fi
  if wait "$SERVER_PID" 2> /dev/null; then SERVER_RC=0; else SERVER_RC=$?; fi
  SERVER_PID=""
}

cleanup() {
  local rc=$?
  set +e
  # Only what this script started, by PID. Each client runs under timeout,
  # which passes the signal on and then exits.
  local pid
  for pid in "${CLIENT_PIDS[@]}"; do
    if kill -0 "$pid" 2> /dev/null; then
      kill -TERM "$pid" 2> /dev/null
      wait "$pid" 2> /dev/null
    fi
  done
  stop_server
  if [[ -n $HOSTS_UP ]]; then
    "$NETNS" down "$SET"
    if ip netns list 2> /dev/null | awk '{print $1}' | grep -q "^osprey-$SET-"; then
      echo "multihost-bench: could not remove the namespaces osprey-$SET-*" >&2
      rc=1
    fi
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

# ------------------------------------------------------------------ hosts
HOSTS_UP=1
"$NETNS" up "$SET" $((HOSTS + 1)) || die "could not make $((HOSTS + 1)) hosts (set $SET)"
SERVER_HOST="$("$NETNS" addr "$SET" 1)"

# ----------------------------------------------------------------- server
# Bounded too: should this script be killed without its trap running, the
# server still ends, and the next netns-hosts.sh up removes the hosts.
SERVER_LIMIT=$((CLIENT_LIMIT + 60))
# The file exists before the loop reads it: the job may open it later.
: > "$TMP/server.out"
timeout -k 5 "$SERVER_LIMIT" "$NETNS" exec "$SET" 1 "$BENCH" "${SERVER_FLAGS[@]}" \
  -server_only -listen "$SERVER_HOST:$PORT" > "$TMP/server.out" 2> "$TMP/server.err" < /dev/null &
SERVER_PID=$!
ADDR=""
for ((n = 0; n < 100; n++)); do  # up to 10 s
  ADDR="$(sed -n 's/^Listening on \(.*\)$/\1/p' "$TMP/server.out")"
  [[ -n $ADDR ]] && break
  if ! kill -0 "$SERVER_PID" 2> /dev/null; then
    die "the server on host 1 exited before listening: $(tail -n 5 "$TMP/server.err")"
  fi
  sleep 0.1
done
[[ -n $ADDR ]] || die "the server on host 1 did not listen within 10 s: $(tail -n 5 "$TMP/server.err")"
QUEUE_LINE="$(sed -n 's/^Service queue length: \([0-9]*\).*/\1/p' "$TMP/server.out")"
say "server on host 1 listens on $ADDR (service queue ${QUEUE_LINE:-?} calls);" \
  "$HOSTS clients for ${RUN_SECONDS}s each"

# ---------------------------------------------------------------- clients
# All started together, then all waited for (each bounded by timeout).
for ((i = 2; i <= HOSTS + 1; i++)); do
  timeout -k 5 "$CLIENT_LIMIT" "$NETNS" exec "$SET" "$i" "$BENCH" "${CLIENT_EXTRA[@]}" \
    -server_address "$ADDR" -output json -run_seconds "$RUN_SECONDS" \
    > "$TMP/client$i.json" 2> "$TMP/client$i.err" < /dev/null &
  CLIENT_PIDS+=($!)
done
failed=0
for ((i = 2; i <= HOSTS + 1; i++)); do
  pid=${CLIENT_PIDS[i - 2]}
  if wait "$pid"; then rc=0; else rc=$?; fi
  if [[ $rc -ne 0 ]]; then
    failed=$((failed + 1))
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
      say "client on host $i ($("$NETNS" addr "$SET" "$i")) did not finish within ${CLIENT_LIMIT}s"
    else
      say "client on host $i ($("$NETNS" addr "$SET" "$i")) failed, exit status $rc:"
    fi
    sed 's/^/    /' "$TMP/client$i.err" | tail -n 10 >&2
  fi
done
CLIENT_PIDS=()

kill -0 "$SERVER_PID" 2> /dev/null || say "the server exited during the run: $(tail -n 5 "$TMP/server.err")"
stop_server
[[ $SERVER_RC -eq 0 ]] || say "warning: the server exited with status $SERVER_RC after SIGTERM"
# A client that failed may still have written its report (calls that failed
# are counted in it): then the merged report is printed, and the script
# fails after it.
for ((i = 2; i <= HOSTS + 1; i++)); do
  [[ -s $TMP/client$i.json ]] || die "$failed of $HOSTS clients failed; host $i wrote no report"
done

# ------------------------------------------------------------------ merge
args=("$JSON_OUT" "$SET" "$ADDR")
for ((i = 2; i <= HOSTS + 1; i++)); do
  args+=("$i" "$("$NETNS" addr "$SET" "$i")" "$TMP/client$i.json")
done
"$PYTHON" - "${args[@]}" << 'EOF' || die "could not merge the clients' reports"
import json
import math
import sys

json_out, host_set, server = sys.argv[1:4]
rest = sys.argv[4:]
hosts = [(int(rest[i]), rest[i + 1], rest[i + 2]) for i in range(0, len(rest), 3)]


def fail(msg):
    sys.exit(f"multihost-bench: {msg}")


def num(v):
    """rpc-bench's Num(): %g (6 digits), but never in exponent form."""
    return "%.0f" % v if abs(v) >= 1e6 else "%g" % v


def lower_bound(upper):
    """A bucket's lowest value from its highest (histogram.h's layout)."""
    return upper if upper < 128 else upper + 1 - (1 << (upper.bit_length() - 8))


def percentile(h, p):
    """Histogram::Percentile, on a JSON latency_histogram: nanoseconds."""
    if h["count"] == 0:
        return 0
    p = min(max(p, 0.0), 100.0)
    rank = max(1, math.ceil(p / 100.0 * float(h["count"])))
    seen = 0
    for upper, count in sorted(h["buckets"]):
        seen += count
        if seen >= rank:
            low = lower_bound(upper)
            return min(max(low + (upper - low + 1) // 2, h["min"]), h["max"])
    return h["max"]


def merge(hists):
    buckets = {}
    for h in hists:
        for upper, count in h["buckets"]:
            buckets[upper] = buckets.get(upper, 0) + count
    full = [h for h in hists if h["count"] > 0]
    return {"unit": "ns", "count": sum(h["count"] for h in hists),
            "sum": sum(h["sum"] for h in hists),
            "min": min((h["min"] for h in full), default=0),
            "max": max((h["max"] for h in full), default=0),
            "buckets": [[u, buckets[u]] for u in sorted(buckets)]}


PCTS = [("p50", 50), ("p99", 99), ("p99.9", 99.9)]


def latencies_us(h):
    out = {name: float(num(percentile(h, p) / 1000.0)) for name, p in PCTS}
    out["max"] = float(num(h["max"] / 1000.0))
    return out


# Each client printed one JSON line per mode it ran.
runs = []
for index, addr, path in hosts:
    try:
        with open(path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        fail(f"host {index} ({addr}): no JSON report: {e}")
    if not lines:
        fail(f"host {index} ({addr}): empty report")
    for r in lines:
        h = r.get("latency_histogram")
        if h is None:
            fail(f"host {index} ({addr}): no latency_histogram in the report (an old rpc-bench?)")
        if sum(c for _, c in h["buckets"]) != h["count"]:
            fail(f"host {index} ({addr}): histogram buckets do not add up to its count")
        # The histogram must give the client's own percentiles, or merging it
        # would not be exact.
        mine, theirs = latencies_us(h), r["latency_us"]
        if any(num(mine[k]) != num(theirs[k]) for k in mine):
            fail(f"host {index} ({addr}) {r['mode']}: histogram gives {mine}, "
                 f"the client reported {theirs}")
    runs.append(lines)
modes = [r["mode"] for r in runs[0]]
for (index, addr, _), lines in zip(hosts, runs):
    if [r["mode"] for r in lines] != modes:
        fail(f"host {index} ({addr}) ran modes {[r['mode'] for r in lines]}, host "
             f"{hosts[0][0]} ran {modes}")

json_lines = []
for m, mode in enumerate(modes):
    parts = [lines[m] for lines in runs]
    first = parts[0]
    calls = sum(r["calls"] for r in parts)
    per_req = max(calls, 1)
    rate = sum(r["calls"] / r["wall_seconds"] for r in parts)
    user_us = sum(r["user_cpu_us"] for r in parts)
    sys_us = sum(r["sys_cpu_us"] for r in parts)
    ctx = sum(r["context_switches"] for r in parts)
    errors = sum(r["errors"] for r in parts)
    refused = sum(r.get("refused", 0) for r in parts)
    hist = merge([r["latency_histogram"] for r in parts])
    if hist["count"] != calls:
        fail(f"{mode}: merged histogram holds {hist['count']} calls, the clients made {calls}")
    lat = latencies_us(hist)
    negotiated = []
    for r in parts:
        if r["negotiated"] not in negotiated:
            negotiated.append(r["negotiated"])
    asked = "rpc_encryption=" + first["rpc_encryption"]
    if first["rpc_encrypt_loopback_connections"]:
        asked += ", loopback encrypted"
    first_error = next((f"host {h[0]}: {r['first_error']}" for h, r in zip(hosts, parts)
                        if r["first_error"]), "")

    # (a) Kudu's rpc-bench text report, for all the clients together.
    o = [f"== {len(parts)} client hosts ({', '.join(h[1] for h in hosts)}) calling "
         f"{server}, merged ==",
         f"Mode:            {mode.capitalize()}"]
    if mode == "async":
        o += [f"Client reactors:  {first['client_threads']}",
              f"Call concurrency: {first['async_call_concurrency']}"]
    else:
        o += [f"Client threads:   {first['client_threads']}"]
    o += [f"Worker threads:   {first['worker_threads']}",
          f"Server reactors:  {first['server_reactors']}",
          f"Encryption:       {1 if all(r['encryption'] for r in parts) else 0} "
          f"(negotiated {' and '.join(negotiated)}; {asked})",
          "----------------------------------",
          f"Reqs/sec:         {num(round(rate))}",
          f"User CPU per req: {num(user_us / per_req)}us",
          f"Sys CPU per req:  {num(sys_us / per_req)}us",
          f"Ctx Sw. per req:  {num(ctx / per_req)}"]
    o += [f"Latency {name + ':':<10}{num(lat[name])}us" for name in ["p50", "p99", "p99.9", "max"]]
    if first["target_rate"] > 0:
        o.append(f"Target rate:      {num(sum(r['target_rate'] for r in parts))}/s (open loop)")
    if first["payload_bytes"] > 0:
        o.append(f"Payload bytes:    {first['payload_bytes']}")
    o.append(f"Errors:           {errors}")
    # Refusals by the server's reason, as rpc-bench's own report counts
    # them (its text report gives each reason's advice).
    reasons = {}
    for r in parts:
        for k, v in r.get("refused_by_reason", {}).items():
            reasons[k] = reasons.get(k, 0) + v
    o.append(f"Refused:          {refused}")
    o += [f"  Refused, {k}: {v}" for k, v in sorted(reasons.items()) if v]
    if first_error:
        o.append(f"First error:      {first_error}")
    # (b) The merged percentiles.
    o.append(f"Merged histogram: {hist['count']} calls; p50 {num(lat['p50'])}us, "
             f"p99 {num(lat['p99'])}us, p99.9 {num(lat['p99.9'])}us, max {num(lat['max'])}us")
    # (c) Each client host.
    per_host = []
    for (index, addr, _), r in zip(hosts, parts):
        own = latencies_us(r["latency_histogram"])
        host_rate = r["calls"] / r["wall_seconds"]
        marks = ""
        if r["errors"]:
            marks += f", FAILED {r['errors']} calls"
        if r.get("refused", 0):
            why = ", ".join(f"{k} {v}" for k, v in sorted(r.get("refused_by_reason", {}).items())
                            if v)
            marks += f", REFUSED {r['refused']} calls ({why})"
        o.append(f"  host {index} ({addr}): calls {r['calls']}, reqs/sec {num(round(host_rate))}, "
                 f"p99 {num(own['p99'])}us{marks}")
        per_host.append({"host": index, "address": addr, "calls": r["calls"],
                         "reqs_per_sec": float(num(host_rate)),
                         "wall_seconds": r["wall_seconds"], "errors": r["errors"],
                         "refused": r.get("refused", 0),
                         "latency_us": own, "latency_histogram": r["latency_histogram"]})
    print("\n".join(o), flush=True)
    json_lines.append({
        "mode": mode, "host_set": host_set, "server_address": server,
        "client_hosts": len(parts), "client_threads": first["client_threads"],
        "async_call_concurrency": first["async_call_concurrency"],
        "worker_threads": first["worker_threads"], "server_reactors": first["server_reactors"],
        "run_seconds": first["run_seconds"], "payload_bytes": first["payload_bytes"],
        "total_calls": calls, "errors": errors, "refused": refused,
        "refused_by_reason": reasons,
        "reqs_per_sec": float(num(rate)),
        "user_cpu_us_per_req": float(num(user_us / per_req)),
        "sys_cpu_us_per_req": float(num(sys_us / per_req)),
        "ctx_switches_per_req": float(num(ctx / per_req)),
        "latency_us": lat, "latency_histogram": hist, "per_host": per_host})

if json_out:
    with open(json_out, "w") as f:
        for line in json_lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
EOF
[[ $failed -eq 0 ]] || die "$failed of $HOSTS clients failed"
