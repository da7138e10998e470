#!/usr/bin/env bash
# Runs a matrix of rpc-bench configurations several times each, appends every
# run to a CSV, prints median per configuration and, with gnuplot, draws
# plots. See --help.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEFAULT_BENCH="$ROOT/build/tools/rpc-bench/rpc-bench"

usage() {
  cat <<EOF
Usage: scripts/benchmarks.sh [options]

Runs each rpc-bench configuration of a matrix NUM_SAMPLES times (the samples
interleaved: the whole matrix once, then again), each run with -output=json,
and appends one CSV row per run to RESULTS_DIR/results.csv:

  timestamp,mode,client_threads,async_call_concurrency,worker_threads,
  server_reactors,payload_bytes,run_seconds,reqs_per_sec,user_us_per_req,
  sys_us_per_req,ctx_switches_per_req,p50_us,p99_us,p999_us,max_us,errors

(the header is written once, when the file is new; a failed run gets a row
with empty measurements and errors=run_failed). Then prints the medians per
configuration ([min..max] for requests/sec) and saves them to
RESULTS_DIR/summary.txt. It draws (gnuplot, installed by scripts/install-deps.sh)
RESULTS_DIR/reqs_per_sec.png and RESULTS_DIR/cpu_per_req.png: sync (x: client
threads) beside async (x: call concurrency); plots.gp and plot-data/ stay in
RESULTS_DIR to redraw them. Exit status 1 if any run failed or the plots could not be drawn.

Each option is an environment variable or the flag beside it (the flag wins):

  NUM_SAMPLES=5       --samples N        runs of each configuration
  RUN_SECONDS=3       --run-seconds S    rpc-bench -run_seconds (fractions allowed)
  RESULTS_DIR=...     --results-dir DIR  default: results/bench-<date>-<time> in
                                         the project root; reusing a folder
                                         appends to its results.csv
  RPC_BENCH=...       --rpc-bench PATH   default: build/tools/rpc-bench/rpc-bench,
                                         built with scripts/build.sh if missing
  MATRIX=default      --matrix NAME      which configurations (below)
  PAYLOAD_BYTES=0     --payload-bytes N  0: the Add call; N: Echo of N bytes
  SERVER_REACTORS=2   --server-reactors N  server reactors in the sweeps
  WORKER_THREADS=1    --worker-threads N   server worker threads in the sweeps
                      --peers            run the peers comparison instead (below)
                      --overload         the overload benchmark instead (below)
                      --fleet            one service on 3 servers instead (below)
  BEFORE_BENCH=       --curve [--before PATH]  the latency-throughput curve
                                         instead (below); --before: an earlier
                                         rpc-bench drawn on the same chart
  CURVE_POINTS=10,25,50,75,90,100,110,120  --points LIST  percentages of the
                                         closed-loop maximum the curve visits
                      -h, --help         this text

Matrices (sized for a 2-core machine):
  default  sync:  -client_threads 1, 2, 4, 8, 16
           async: -async_call_concurrency 1, 4, 16, 64, 256 with -client_threads 2
           (both sweeps with SERVER_REACTORS and WORKER_THREADS), and Kudu's
           command line in both modes:
           -server_reactors 24 -async_call_concurrency 100 -worker_threads 40
           -client_threads 24
  quick    a tiny subset for smoke runs: sync with 1 and 4 client threads,
           async with call concurrency 4 and 64
  kudu     Kudu's command line only, both modes

The default matrix at the defaults takes about 12 x 5 x 3 s = 3 minutes plus
start-up; a smoke run: MATRIX=quick NUM_SAMPLES=1 RUN_SECONDS=0.3.

--peers: when ../shared/peers/run-all.sh exists beside the project (or in
PEERS_DIR), runs it with OSPREY_BENCH=<RPC_BENCH> PEERS="osprey grpc limit",
REPS=NUM_SAMPLES and RUN_SECONDS (whole seconds there) for its own config
matrix, writes its CSV to RESULTS_DIR/peers.csv and raw reports to
RESULTS_DIR/peers-raw/, and its summarize.py medians to
RESULTS_DIR/peers-summary.md. It builds the gRPC peer first (heavy; needs
apt-get install -y libgrpc++-dev protobuf-compiler-grpc libgflags-dev pkg-config).

--curve: open-loop sweeps (rpc-bench -target_rate) from 10% to 120% of
each config's closed-loop maximum, for sync (one client thread, its own
connection) and async (one client thread, 32 calls in flight), with 1
server reactor and 1 worker; plots p50, p99 and p99.9 latency (log scale)
against the achieved rate in RESULTS_DIR/curve.png, rows in curve.csv
(scripts/latency_curve.py). With --before, each point runs both binaries,
the earlier first, for a before/after chart from one interleaved run.
NUM_SAMPLES does not apply; RUN_SECONDS is each point's length.

--overload: the server under overload. One rpc-bench -server_only process per
(handler, queue length), pinned to CPU 0 (taskset -c 0) with
-server_reactors 1 -worker_threads 1, and the client pinned to CPU 1 (with a
line saying so, nothing is pinned when taskset is missing or there is one
CPU). For each handler it first measures the capacity C: a closed loop of
Sleep calls (-mode async, 2500/handler_us in flight, 2 to 48) for
OVERLOAD_CAPACITY_SECONDS, then an open loop at twice that rate for as long
(under overload the server reads and answers calls in larger batches, which
costs less per call); C is the larger goodput of the two (or
OVERLOAD_CAPACITY's, to compare runs with different SERVER_FLAGS at one C).
Then each cell offers an open loop (-rate_schedule, poisson arrivals) of
Sleep(handler) calls with a deadline,
at each load times C, for OVERLOAD_SECONDS; and, with the first handler, the
burst OVERLOAD_BURST (SECONDS:LOAD phases, LOAD times C) for each queue
length, its time series in 100 ms windows. Between cells it waits 1 s for
the server to drain. Writes:
  RESULTS_DIR/overload.csv        one row per cell: offered, goodput,
                                  refusal, timeout and late rates, latency
                                  percentiles, whether the client kept to
                                  its schedule (behind_windows; valid), the
                                  server's CPU over the cell (/proc/PID/stat
                                  utime+stime), an estimate of its CPU per
                                  call not served ((server CPU - answered x
                                  handler) / (refused + timed out)) and its
                                  peak RSS (VmHWM); then (appended)
                                  CLIENT_FLAGS, the attempts the client sent
                                  (first attempts and retries), sent/offered,
                                  the calls its adaptive throttling refused,
                                  and the server's own count of calls
                                  received over the cell (its /metrics, when
                                  it has one)
  RESULTS_DIR/burst-q<LEN>.csv    the burst's windows
  RESULTS_DIR/overload-summary.md goodput/C, shares refused and timed out,
                                  p99/deadline, server CPU per refusal, peak
                                  RSS, valid?; and the bursts' recovery
  RESULTS_DIR/overload-goodput-h<US>.png  goodput/C against offered/C, a
                                  line per queue length (one per handler)
  RESULTS_DIR/overload-burst.png  goodput over time through the burst, a line
                                  per queue length
  raw reports in overload-raw/, server output in overload-servers/.
Its variables (environment only):
  OVERLOAD_SECONDS=3            each cell's length
  OVERLOAD_LOADS="0.5 1 1.5 2 4"  offered load, times C
  OVERLOAD_QUEUES="50 1000 100000"  server --rpc_service_queue_length values
  OVERLOAD_HANDLERS="20:50 1000:20"  HANDLER_US:DEADLINE_MS pairs: the Sleep
                                cost and the call's deadline (-call_timeout_ms)
  OVERLOAD_BURST="5:0.8,10:4,10:0.8"  the burst's SECONDS:LOAD phases ("":
                                no burst)
  OVERLOAD_CAPACITY_SECONDS=2   the capacity runs' length
  OVERLOAD_CAPACITY=            "HANDLER_US:C ...": use this C (calls/s) for
                                that handler instead of the measured one
  OVERLOAD_MAX_LAG_US=1000      rpc-bench -max_start_lag_us: a call started
                                later than this marks its window behind and
                                the cell invalid (raise it on a machine whose
                                timers stall, e.g. a VM; max lag is reported)
  OVERLOAD_DEFAULTS_LOADS="1 4"  then the same handlers, queues and C
                                against defaults-server (beside rpc-bench:
                                rpc-bench's service on a server with the
                                public API's defaults, MessengerBuilder's
                                and ServicePoolOptions', but for the queue
                                length), at these loads; its rows have
                                server=defaults and a table of their own in
                                the summary ("": none; quick: "0.5 2")
  OVERLOAD_QUICK=1              a smoke run: handler 20:50 only, loads 0.5 and
                                2, queue 1000, 1 s cells, a 3 s burst (the
                                variables above still override it)
  SERVER_FLAGS=                 more flags for the server, e.g.
                                "-overload_control=false -queue_deadline_order=false"
                                to measure the mechanisms off; or -handler=sleep
  SERVER_ADDRESS=HOST:PORT      drive a server already running (Kudu's
                                kudu-calc-server, whose Sleep sleeps) instead
                                of starting ours: OVERLOAD_QUEUES and
                                SERVER_FLAGS do not apply; SERVER_PID=<pid>
                                of it (same machine) adds its CPU and RSS
  CLIENT_FLAGS=                 more flags for the client (e.g. -client_threads 3
                                -arrivals=uniform -seed 7; retries: -retry_attempts 3
                                -retry_budget=false -client_throttling), the
                                capacity runs' too (fix C with OVERLOAD_CAPACITY
                                to compare client settings at one C)
  OVERLOAD_CLIENT=PATH          run this client instead of rpc-bench (default:
                                rpc-bench itself): it takes the same flags and
                                prints the same -output=json report, e.g.
                                bench/brpc-overload's brpc-overload-bench, whose
                                brpc client drives its brpc server (SERVER_ADDRESS)
It ends only the servers it started, by PID. Exit status 1 if a run failed
(no report) or the plots could not be drawn; cells where the client fell
behind are kept, marked valid=no.

--fleet: one service on 3 rpc-bench -server_only processes on loopback
(-handler=sleep, 4 workers each, pinned to CPU 0 and the client to CPU 1 as
--overload pins), called by one open-loop rpc-bench client (-rate_schedule,
Sleep(200us) calls, -server_address naming the 3). Run 1, a rolling restart
(-lb=p2c): each server drained with SIGTERM (-drain_grace_ms) and started
again on its address, 4 s apart, through 20 s at 1500 calls/s. Run 2, a slow
server: the third server's Sleep takes 10x as long (-handler_factor 10), 10 s
with -lb=p2c, 10 s with -lb=round_robin, then 10 s with -lb=p2c -hedge=p95
(hedged calls). With BRPC_OVERLOAD_BENCH naming bench/brpc-overload's binary
(as --overload takes it; bench/brpc-overload/build.sh builds it), run 2 also
runs each fleet healthy first (p2c-healthy), adds -hedge at a fixed
FLEET_BACKUP_MS (default 1), and then does the same with 3 brpc servers and
brpc's client: brpc-la-healthy, brpc-rr, brpc-la and brpc-la-backup-<ms>
(brpc's backup_request_ms); without it, says it skips them. Writes
(scripts/fleet_bench.py):
  RESULTS_DIR/fleet-restart.csv   per 100 ms window: calls answered by each
                                  server, failed calls, mean and max latency
  RESULTS_DIR/fleet-restarts.csv  each server's SIGTERM, exit status and restart
  RESULTS_DIR/fleet-slow-<run>.csv the slow-server runs' windows (p2c,
                                  round_robin, p2c-hedge), the same columns
  RESULTS_DIR/fleet-summary.md    calls, failures, percentiles; the slow
                                  server's share of calls under each -lb
  RESULTS_DIR/fleet-restart.png   calls per server over time through the restart
  RESULTS_DIR/fleet-slow.png      latency over time: p2c, round robin, p2c hedged
  RESULTS_DIR/fleet-slow-brpc.png the same for brpc's runs (with BRPC_OVERLOAD_BENCH)
  RESULTS_DIR/fleet-slow-runs.csv each slow-server run's answered calls, failures,
                                  slow server's share, hedges, p50/p99/p99.9
  RESULTS_DIR/fleet-slow-runs.png those percentiles side by side, run by run
  raw reports in fleet-raw/, server output in fleet-servers/.
Its variables (environment only): FLEET_SECONDS=20 (run 1), FLEET_GAP=4 (between
restarts), FLEET_SLOW_SECONDS=10 (each slow run), FLEET_RATE=1500 (calls/s),
FLEET_HANDLER_US=200 (the Sleep), FLEET_BACKUP_MS=1 (brpc's backup and the fixed
hedge), BRPC_OVERLOAD_BENCH (brpc's side), FLEET_QUICK=1 (a smoke run of about 12 s: 6 s
with restarts 1 s apart, 2 s slow runs, 300 calls/s). It ends only the
processes it started, by PID. Exit status 1 if a run gave no report, a
server did not exit 0 after SIGTERM, or the plots could not be drawn.

Plots need gnuplot: scripts/install-deps.sh installs it (gnuplot-nox) at start.
EOF
}

die() {
  echo "benchmarks.sh: $*" >&2
  exit 2
}

NUM_SAMPLES="${NUM_SAMPLES:-5}"
RUN_SECONDS="${RUN_SECONDS:-3}"
RESULTS_DIR="${RESULTS_DIR:-}"
RPC_BENCH="${RPC_BENCH:-}"
MATRIX="${MATRIX:-default}"
PAYLOAD_BYTES="${PAYLOAD_BYTES:-0}"
SERVER_REACTORS="${SERVER_REACTORS:-2}"
WORKER_THREADS="${WORKER_THREADS:-1}"
PEERS_DIR="${PEERS_DIR:-$ROOT/../shared/peers}"
PEERS_MODE=0
CURVE_MODE=0
OVERLOAD_MODE=0
FLEET_MODE=0
BEFORE_BENCH="${BEFORE_BENCH:-}"
CURVE_POINTS="${CURVE_POINTS:-10,25,50,75,90,100,110,120}"

while [[ $# -gt 0 ]]; do
  opt="$1"
  case "$opt" in
    -h|--help) usage; exit 0 ;;
    --peers) PEERS_MODE=1; shift; continue ;;
    --curve) CURVE_MODE=1; shift; continue ;;
    --overload) OVERLOAD_MODE=1; shift; continue ;;
    --fleet) FLEET_MODE=1; shift; continue ;;
    --*=*) set -- "${opt%%=*}" "${opt#*=}" "${@:2}"; continue ;;
  esac
  [[ $# -ge 2 ]] || die "$opt needs a value (see --help)"
  case "$opt" in
    --samples) NUM_SAMPLES="$2" ;;
    --run-seconds) RUN_SECONDS="$2" ;;
    --results-dir) RESULTS_DIR="$2" ;;
    --rpc-bench) RPC_BENCH="$2" ;;
    --matrix) MATRIX="$2" ;;
    --payload-bytes) PAYLOAD_BYTES="$2" ;;
    --server-reactors) SERVER_REACTORS="$2" ;;
    --worker-threads) WORKER_THREADS="$2" ;;
    --before) BEFORE_BENCH="$2" ;;
    --points) CURVE_POINTS="$2" ;;
    *) die "unknown option '$opt' (see --help)" ;;
  esac
  shift 2
done

[[ "$NUM_SAMPLES" =~ ^[1-9][0-9]*$ ]] || die "NUM_SAMPLES must be a positive integer, got '$NUM_SAMPLES'"
if ! [[ "$RUN_SECONDS" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] ||
   ! awk -v s="$RUN_SECONDS" 'BEGIN { exit !(s > 0) }'; then
  die "RUN_SECONDS must be a positive number, got '$RUN_SECONDS'"
fi
[[ "$PAYLOAD_BYTES" =~ ^[0-9]+$ ]] || die "PAYLOAD_BYTES must be a non-negative integer, got '$PAYLOAD_BYTES'"
[[ "$SERVER_REACTORS" =~ ^[1-9][0-9]*$ ]] || die "SERVER_REACTORS must be a positive integer, got '$SERVER_REACTORS'"
[[ "$WORKER_THREADS" =~ ^[0-9]+$ ]] || die "WORKER_THREADS must be a non-negative integer, got '$WORKER_THREADS'"
command -v python3 >/dev/null || die "python3 is needed (CSV rows and medians)"
# gnuplot for the plots, as everything else is installed: only what is missing.
bash "$ROOT/scripts/install-deps.sh" || die "could not install the packages it needs (scripts/install-deps.sh)"

# ---------------------------------------------------------------- matrix
# One configuration a line: mode client_threads async_call_concurrency
# worker_threads server_reactors ("-": flag not passed, rpc-bench's default).
SR="$SERVER_REACTORS"
WT="$WORKER_THREADS"
KUDU_LINES=$'sync 24 100 40 24\nasync 24 100 40 24'
case "$MATRIX" in
  default)
    CONFIGS="$(
      for ct in 1 2 4 8 16; do echo "sync $ct - $WT $SR"; done
      for acc in 1 4 16 64 256; do echo "async 2 $acc $WT $SR"; done
      echo "$KUDU_LINES"
    )" ;;
  quick)
    CONFIGS="$(
      for ct in 1 4; do echo "sync $ct - $WT $SR"; done
      for acc in 4 64; do echo "async 2 $acc $WT $SR"; done
    )" ;;
  kudu) CONFIGS="$KUDU_LINES" ;;
  *) die "MATRIX must be default, quick or kudu, got '$MATRIX'" ;;
esac
mapfile -t CONFIG_LIST <<<"$CONFIGS"

# ------------------------------------------------------------ the binary
if [[ -z "$RPC_BENCH" ]]; then
  RPC_BENCH="$DEFAULT_BENCH"
  if [[ ! -x "$RPC_BENCH" ]]; then
    echo "benchmarks.sh: $RPC_BENCH is missing; building it with scripts/build.sh" >&2
    bash "$ROOT/scripts/build.sh" >&2
  fi
fi
[[ -x "$RPC_BENCH" ]] || die "rpc-bench not found or not executable: $RPC_BENCH"
RPC_BENCH="$(cd "$(dirname "$RPC_BENCH")" && pwd)/$(basename "$RPC_BENCH")"

if [[ -z "$RESULTS_DIR" ]]; then
  RESULTS_DIR="$ROOT/results/bench-$(date +%Y%m%d-%H%M%S)"
fi
mkdir -p "$RESULTS_DIR"
RESULTS_DIR="$(cd "$RESULTS_DIR" && pwd)"

# ------------------------------------------------------------ curve mode
if [[ $CURVE_MODE -eq 1 ]]; then
  before_args=()
  if [[ -n "$BEFORE_BENCH" ]]; then
    [[ -x "$BEFORE_BENCH" ]] || die "--before: not an executable: $BEFORE_BENCH"
    before_args=(--before "$BEFORE_BENCH")
  fi
  exec python3 "$ROOT/scripts/latency_curve.py" --rpc-bench "$RPC_BENCH" "${before_args[@]}" \
    --results-dir "$RESULTS_DIR" --run-seconds "$RUN_SECONDS" --points "$CURVE_POINTS"
fi

# ------------------------------------------------------------ fleet mode
if [[ $FLEET_MODE -eq 1 ]]; then
  exec python3 "$ROOT/scripts/fleet_bench.py" --rpc-bench "$RPC_BENCH" --results-dir "$RESULTS_DIR"
fi

# --------------------------------------------------------- overload mode
if [[ $OVERLOAD_MODE -eq 1 ]]; then
  PLOT_PY="$ROOT/scripts/overload-plot.py"
  if [[ "${OVERLOAD_QUICK:-0}" == 1 ]]; then
    OVERLOAD_SECONDS="${OVERLOAD_SECONDS:-1}"
    OVERLOAD_LOADS="${OVERLOAD_LOADS:-0.5 2}"
    OVERLOAD_QUEUES="${OVERLOAD_QUEUES:-1000}"
    OVERLOAD_HANDLERS="${OVERLOAD_HANDLERS:-20:50}"
    OVERLOAD_BURST="${OVERLOAD_BURST-1:0.8,1:4,1:0.8}"
    OVERLOAD_CAPACITY_SECONDS="${OVERLOAD_CAPACITY_SECONDS:-1}"
    OVERLOAD_DEFAULTS_LOADS="${OVERLOAD_DEFAULTS_LOADS-0.5 2}"
  fi
  OVERLOAD_DEFAULTS_LOADS="${OVERLOAD_DEFAULTS_LOADS-1 4}"
  OVERLOAD_SECONDS="${OVERLOAD_SECONDS:-3}"
  OVERLOAD_LOADS="${OVERLOAD_LOADS:-0.5 1 1.5 2 4}"
  OVERLOAD_QUEUES="${OVERLOAD_QUEUES:-50 1000 100000}"
  OVERLOAD_HANDLERS="${OVERLOAD_HANDLERS:-20:50 1000:20}"
  OVERLOAD_BURST="${OVERLOAD_BURST-5:0.8,10:4,10:0.8}"
  OVERLOAD_CAPACITY_SECONDS="${OVERLOAD_CAPACITY_SECONDS:-2}"
  OVERLOAD_MAX_LAG_US="${OVERLOAD_MAX_LAG_US:-1000}"
  SERVER_FLAGS="${SERVER_FLAGS:-}"
  SERVER_ADDRESS="${SERVER_ADDRESS:-}"
  SERVER_PID="${SERVER_PID:-}"
  CLIENT_FLAGS="${CLIENT_FLAGS:-}"
  POSNUM='^([0-9]+\.?[0-9]*|\.[0-9]+)$'
  [[ "$OVERLOAD_SECONDS" =~ $POSNUM ]] && awk -v s="$OVERLOAD_SECONDS" 'BEGIN { exit !(s > 0) }' ||
    die "OVERLOAD_SECONDS must be a positive number, got '$OVERLOAD_SECONDS'"
  [[ "$OVERLOAD_CAPACITY_SECONDS" =~ $POSNUM ]] &&
    awk -v s="$OVERLOAD_CAPACITY_SECONDS" 'BEGIN { exit !(s > 0) }' ||
    die "OVERLOAD_CAPACITY_SECONDS must be a positive number, got '$OVERLOAD_CAPACITY_SECONDS'"
  [[ "$OVERLOAD_MAX_LAG_US" =~ ^[1-9][0-9]*$ && "$OVERLOAD_MAX_LAG_US" -le 1000000 ]] ||
    die "OVERLOAD_MAX_LAG_US must be from 1 to 1000000, got '$OVERLOAD_MAX_LAG_US'"
  read -ra LOADS <<<"$OVERLOAD_LOADS"
  read -ra QUEUES <<<"$OVERLOAD_QUEUES"
  read -ra HANDLERS <<<"$OVERLOAD_HANDLERS"
  [[ ${#LOADS[@]} -ge 1 && ${#LOADS[@]} -le 50 ]] || die "OVERLOAD_LOADS: 1 to 50 loads, got '$OVERLOAD_LOADS'"
  for l in "${LOADS[@]}"; do
    [[ "$l" =~ $POSNUM ]] && awk -v s="$l" 'BEGIN { exit !(s > 0 && s <= 100) }' ||
      die "OVERLOAD_LOADS: '$l' is not a load above 0 and at most 100 (times C)"
  done
  [[ ${#HANDLERS[@]} -ge 1 && ${#HANDLERS[@]} -le 10 ]] || die "OVERLOAD_HANDLERS: 1 to 10 pairs, got '$OVERLOAD_HANDLERS'"
  for h in "${HANDLERS[@]}"; do
    [[ "$h" =~ ^[0-9]+:[1-9][0-9]*$ ]] ||
      die "OVERLOAD_HANDLERS: '$h' is not HANDLER_US:DEADLINE_MS (e.g. 20:50)"
  done
  if [[ -n "$SERVER_ADDRESS" ]]; then
    [[ -z "$SERVER_FLAGS" ]] || die "SERVER_FLAGS are for the server this script starts; with SERVER_ADDRESS set them on yours"
    [[ -z "$SERVER_PID" || "$SERVER_PID" =~ ^[1-9][0-9]*$ ]] || die "SERVER_PID must be a process id, got '$SERVER_PID'"
    QUEUES=(external)
  else
    [[ -z "$SERVER_PID" ]] || die "SERVER_PID goes with SERVER_ADDRESS (a server this script did not start)"
    [[ ${#QUEUES[@]} -ge 1 && ${#QUEUES[@]} -le 10 ]] || die "OVERLOAD_QUEUES: 1 to 10 lengths, got '$OVERLOAD_QUEUES'"
    for q in "${QUEUES[@]}"; do
      [[ "$q" =~ ^[1-9][0-9]*$ && "$q" -le 1000000 ]] ||
        die "OVERLOAD_QUEUES: '$q' is not a queue length from 1 to 1000000"
    done
  fi
  BURST_PHASES=""
  if [[ -n "$OVERLOAD_BURST" ]]; then
    IFS=, read -ra bphases <<<"$OVERLOAD_BURST"
    [[ ${#bphases[@]} -ge 1 && ${#bphases[@]} -le 20 ]] || die "OVERLOAD_BURST: 1 to 20 phases"
    for p in "${bphases[@]}"; do
      [[ "$p" =~ ^([0-9]+\.?[0-9]*):([0-9]+\.?[0-9]*)$ ]] &&
        awk -v s="${BASH_REMATCH[1]}" -v l="${BASH_REMATCH[2]}" 'BEGIN { exit !(s > 0 && s <= 600 && l > 0 && l <= 100) }' ||
        die "OVERLOAD_BURST: '$p' is not SECONDS:LOAD (seconds up to 600, load above 0 up to 100)"
    done
    BURST_PHASES="$OVERLOAD_BURST"
  fi
  declare -A CAPACITY_GIVEN=()
  for hc in ${OVERLOAD_CAPACITY:-}; do
    [[ "$hc" =~ ^([0-9]+):([0-9]+\.?[0-9]*)$ ]] ||
      die "OVERLOAD_CAPACITY: '$hc' is not HANDLER_US:CALLS_PER_SECOND (e.g. 20:23000)"
    CAPACITY_GIVEN[${BASH_REMATCH[1]}]="${BASH_REMATCH[2]}"
  done
  read -ra SERVER_EXTRA <<<"$SERVER_FLAGS"
  read -ra DLOADS <<<"$OVERLOAD_DEFAULTS_LOADS"
  for l in "${DLOADS[@]}"; do
    awk -v l="$l" 'BEGIN { exit !(l + 0 > 0 && l + 0 <= 100) }' ||
      die "OVERLOAD_DEFAULTS_LOADS: '$l' is not a load above 0 and at most 100 (times C)"
  done
  DEFAULTS_SERVER="$(dirname "$RPC_BENCH")/defaults-server"
  if [[ -n "$SERVER_ADDRESS" ]]; then
    DLOADS=()  # no server of ours
  elif [[ ${#DLOADS[@]} -gt 0 && ! -x "$DEFAULTS_SERVER" ]]; then
    echo "benchmarks.sh: no $DEFAULTS_SERVER beside rpc-bench: skipping the defaults cells" \
         "(OVERLOAD_DEFAULTS_LOADS)" >&2
    DLOADS=()
  fi
  read -ra CLIENT_EXTRA <<<"$CLIENT_FLAGS"
  OVERLOAD_CLIENT="${OVERLOAD_CLIENT:-}"
  if [[ -n "$OVERLOAD_CLIENT" ]]; then
    [[ -x "$OVERLOAD_CLIENT" ]] || die "OVERLOAD_CLIENT is not an executable: $OVERLOAD_CLIENT"
    CLIENT_BIN="$OVERLOAD_CLIENT"
    echo "benchmarks.sh: client: $CLIENT_BIN (OVERLOAD_CLIENT)" >&2
  else
    CLIENT_BIN="$RPC_BENCH"
  fi

  SERVER_PIN=()
  CLIENT_PIN=()
  if command -v taskset >/dev/null && [[ "$(nproc)" -ge 2 ]]; then
    SERVER_PIN=(taskset -c 0)
    CLIENT_PIN=(taskset -c 1)
    echo "benchmarks.sh: server on CPU 0, client on CPU 1 (taskset)" >&2
  else
    echo "benchmarks.sh: NOT pinning server and client to CPUs ($(command -v taskset >/dev/null ||
      echo 'no taskset'; [[ "$(nproc)" -ge 2 ]] || echo "$(nproc) CPU")): they share the CPUs," \
      "so C and the cells measure both" >&2
  fi
  CLK_TCK="$(getconf CLK_TCK)"
  OCSV="$RESULTS_DIR/overload.csv"
  RAW="$RESULTS_DIR/overload-raw"
  SRV_DIR="$RESULTS_DIR/overload-servers"
  rm -f "$OCSV" "$RESULTS_DIR"/burst-*.csv
  mkdir -p "$RAW" "$SRV_DIR"

  OSERVER_PID=""  # the server this script started, if running
  stop_server() {
    [[ -n "$OSERVER_PID" ]] || return 0
    kill -TERM "$OSERVER_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 100); do  # up to 10 s
      kill -0 "$OSERVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$OSERVER_PID" 2>/dev/null; then
      echo "benchmarks.sh: server $OSERVER_PID ignored SIGTERM for 10 s; killing it" >&2
      kill -KILL "$OSERVER_PID" 2>/dev/null || true
    fi
    wait "$OSERVER_PID" 2>/dev/null || true
    OSERVER_PID=""
  }
  trap stop_server EXIT

  # start_server QUEUE HANDLER_US [defaults]: sets OSERVER_PID and ADDR.
  # With "defaults", the server is defaults-server (the public API's
  # defaults but for the queue length) rather than rpc-bench's own.
  start_server() {
    local q="$1" h="$2" out="$SRV_DIR/h$2-q$1"
    if [[ "${3:-}" == defaults ]]; then
      out="$SRV_DIR/defaults-h$2-q$1"
      : >"$out.out"
      "${SERVER_PIN[@]}" "$DEFAULTS_SERVER" -listen 127.0.0.1:0 -queue_length "$q" \
        >"$out.out" 2>"$out.err" </dev/null &
    else
      : >"$out.out"
      "${SERVER_PIN[@]}" "$RPC_BENCH" -server_only -listen 127.0.0.1:0 -server_reactors 1 \
        -worker_threads 1 --rpc_service_queue_length "$q" "${SERVER_EXTRA[@]}" \
        >"$out.out" 2>"$out.err" </dev/null &
    fi
    OSERVER_PID=$!
    ADDR=""
    local i
    for i in $(seq 1 100); do  # up to 10 s
      ADDR="$(sed -n 's/^Listening on \(.*\)$/\1/p' "$out.out")"
      [[ -n "$ADDR" ]] && break
      kill -0 "$OSERVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    if [[ -z "$ADDR" ]]; then
      cat "$out.err" >&2
      die "the server (queue $q) did not start; its output is in $out.err"
    fi
  }
  # cpu_ticks PID: utime + stime of PID, or "-" (the fields after the
  # command's closing parenthesis: state is 3rd, utime the 14th of the line).
  cpu_ticks() {
    [[ -n "$1" && -r /proc/$1/stat ]] || { echo -; return; }
    sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
  }
  peak_rss_kb() {
    [[ -n "$1" && -r /proc/$1/status ]] || { echo ""; return; }
    awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"
  }
  # client NAME SECONDS ARGS...: one client run (rpc-bench, or OVERLOAD_CLIENT),
  # bounded in time; its stdout in $RAW/NAME.json, stderr in $RAW/NAME.err.
  client() {
    local name="$1" secs="$2"
    shift 2
    local limit
    limit="$(awk -v s="$secs" 'BEGIN { printf "%d", s * 2 + 60 }')"
    set +e
    timeout -k 5 "$limit" "${CLIENT_PIN[@]}" "$CLIENT_BIN" -server_address "$ADDR" -output=json \
      "$@" "${CLIENT_EXTRA[@]}" >"$RAW/$name.json" 2>"$RAW/$name.err" </dev/null
    local rc=$?
    set -e
    [[ $rc -eq 0 ]] || echo "  client exit $rc: $(tail -n 2 "$RAW/$name.err" | tr '\n' ' ')" >&2
  }
  scaled_schedule() {  # scaled_schedule "S:L,S:L" C -> "S:RATE,S:RATE"
    awk -v spec="$1" -v c="$2" 'BEGIN { n = split(spec, p, ","); out = "";
      for (i = 1; i <= n; i++) { split(p[i], f, ":"); r = f[2] * c; if (r < 1) r = 1;
        out = out (i > 1 ? "," : "") f[1] ":" sprintf("%.0f", r) } print out }'
  }

  # run_cell LOAD [defaults]: one cell (a load times C, or "burst") against
  # the server at ADDR (PID_NOW), with h, d, q and C set; its row appended
  # to overload.csv, server=defaults for defaults-server's cells.
  run_cell() {
    local load="$1" kind="${2:-rpc-bench}" prefix=""
    [[ $kind == defaults ]] && prefix="defaults-"
    local schedule secs name series rate before after received_before received_after ts ticks
    local handler_cpu valid sflags="$SERVER_FLAGS"
    [[ $kind == defaults ]] && sflags=""  # SERVER_FLAGS are rpc-bench's
    if [[ $load == burst ]]; then
      schedule="$(scaled_schedule "$BURST_PHASES" "$C")"
      secs="$(awk -v spec="$BURST_PHASES" 'BEGIN { n = split(spec, p, ","); t = 0;
              for (i = 1; i <= n; i++) { split(p[i], f, ":"); t += f[1] } print t }')"
      name="${prefix}burst-h$h-q$q"
      series=(--series "$RESULTS_DIR/burst-q$q.csv")
    else
      rate="$(awk -v l="$load" -v c="$C" 'BEGIN { r = l * c; if (r < 1) r = 1; printf "%.0f", r }')"
      schedule="$OVERLOAD_SECONDS:$rate"
      secs="$OVERLOAD_SECONDS"
      name="${prefix}cell-h$h-q$q-l$load"
      series=(--series "$RAW/$name.csv")
    fi
    RUNS=$((RUNS + 1))
    echo "[$RUNS] ${prefix}server, handler ${h}us, deadline ${d}ms, queue $q, load $load: -rate_schedule $schedule" >&2
    before="$(cpu_ticks "$PID_NOW")"
    received_before="$(python3 "$PLOT_PY" received "$ADDR")"
    ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    client "$name" "$secs" -rate_schedule "$schedule" -arrivals poisson -seed "$RUNS" \
      -handler_us "$h" -call_timeout_ms "$d" -window_ms 100 \
      -max_start_lag_us "$OVERLOAD_MAX_LAG_US"
    sleep "$CELL_PAUSE"  # the server drains what it still holds
    after="$(cpu_ticks "$PID_NOW")"
    received_after="$(python3 "$PLOT_PY" received "$ADDR")"
    ticks=-
    [[ $before != - && $after != - ]] && ticks=$((after - before))
    handler_cpu=0
    [[ $HANDLER_BURNS == 1 ]] && handler_cpu="$h"
    valid="$(python3 "$PLOT_PY" row --csv "$OCSV" "${series[@]}" timestamp="$ts" \
      handler_us="$h" deadline_ms="$d" queue_length="$q" server_flags="$sflags" \
      capacity="$C" load="$load" server_cpu_ticks="$ticks" clk_tck="$CLK_TCK" \
      handler_cpu_us="$handler_cpu" server_peak_rss_kb="$(peak_rss_kb "$PID_NOW")" \
      client_flags="$CLIENT_FLAGS" server_received_before="$received_before" \
      server_received_after="$received_after" server="$kind" <"$RAW/$name.json")"
    echo "  valid: $valid" >&2
    if [[ $valid == run_failed ]]; then FAILED=$((FAILED + 1)); fi
  }

  FAILED=0
  RUNS=0
  CELL_PAUSE=1
  declare -A CAPS=()
  burst_done=0
  if [[ -n "$SERVER_ADDRESS" ]]; then
    HANDLER_BURNS=0  # Kudu's Sleep sleeps
  elif [[ " $SERVER_FLAGS " == *" -handler=sleep "* || " $SERVER_FLAGS " == *" --handler=sleep "* ]]; then
    HANDLER_BURNS=0
  else
    HANDLER_BURNS=1
  fi
  echo "benchmarks.sh: overload: handlers ${HANDLERS[*]} (us:deadline ms), queues ${QUEUES[*]}," \
       "loads ${LOADS[*]} x C, ${OVERLOAD_SECONDS}s cells, burst '${OVERLOAD_BURST}'; in $RESULTS_DIR" >&2
  for hd in "${HANDLERS[@]}"; do
    h="${hd%%:*}"
    d="${hd##*:}"
    C=""
    for q in "${QUEUES[@]}"; do
      if [[ -n "$SERVER_ADDRESS" ]]; then
        ADDR="$SERVER_ADDRESS"
        PID_NOW="$SERVER_PID"
      else
        start_server "$q" "$h"
        PID_NOW="$OSERVER_PID"
      fi
      if [[ -z "$C" ]]; then
        # A few calls in flight keep the one worker busy while each waits
        # well under the queue delay target.
        inflight=$((2500 / (h > 0 ? h : 1)))
        ((inflight < 2)) && inflight=2
        ((inflight > 48)) && inflight=48
        echo "[capacity] handler ${h}us: closed loop, $inflight in flight, ${OVERLOAD_CAPACITY_SECONDS}s" >&2
        client "capacity-h$h" "$OVERLOAD_CAPACITY_SECONDS" -mode async -client_threads 2 \
          -async_call_concurrency "$inflight" -handler_us "$h" -call_timeout_ms 10000 \
          -warmup_seconds 0.3 -run_seconds "$OVERLOAD_CAPACITY_SECONDS"
        C="$(python3 "$PLOT_PY" capacity <"$RAW/capacity-h$h.json")"
        if awk -v c="$C" 'BEGIN { exit !(c > 0) }'; then
          # Under overload the server reads and answers calls in larger
          # batches, cheaper per call: an open loop at twice the closed
          # loop's rate may be answered faster still.
          rate2="$(awk -v c="$C" 'BEGIN { printf "%.0f", 2 * c }')"
          echo "  closed loop: $C calls/s; open loop at $rate2/s, deadline ${d}ms" >&2
          sleep "$CELL_PAUSE"
          client "capacity-open-h$h" "$OVERLOAD_CAPACITY_SECONDS" \
            -rate_schedule "$OVERLOAD_CAPACITY_SECONDS:$rate2" -handler_us "$h" -call_timeout_ms "$d"
          C2="$(python3 "$PLOT_PY" capacity <"$RAW/capacity-open-h$h.json")"
          C="$(awk -v a="$C" -v b="$C2" 'BEGIN { print (b > a ? b : a) }')"
        fi
        if [[ -n "${CAPACITY_GIVEN[$h]:-}" ]]; then
          echo "  measured $C calls/s; OVERLOAD_CAPACITY says ${CAPACITY_GIVEN[$h]}" >&2
          C="${CAPACITY_GIVEN[$h]}"
        fi
        if ! awk -v c="$C" 'BEGIN { exit !(c > 0) }'; then
          echo "benchmarks.sh: no calls answered in the capacity run of the ${h}us handler;" \
               "skipping it" >&2
          FAILED=$((FAILED + 1))
          stop_server
          break
        fi
        echo "  C = $C calls/s" >&2
        sleep "$CELL_PAUSE"
      fi
      cells=()
      for l in "${LOADS[@]}"; do cells+=("$l"); done
      [[ -n "$BURST_PHASES" && "$hd" == "${HANDLERS[0]}" ]] && cells+=(burst)
      for load in "${cells[@]}"; do
        run_cell "$load"
      done
      [[ -n "$SERVER_ADDRESS" ]] || stop_server
    done
    CAPS[$h]="$C"
  done
  # defaults-server's cells: the same handlers, queues and C, on a server
  # with the public API's defaults (issue 48, item 4).
  if [[ ${#DLOADS[@]} -gt 0 ]]; then
    for hd in "${HANDLERS[@]}"; do
      h="${hd%%:*}"
      d="${hd##*:}"
      C="${CAPS[$h]:-}"
      [[ -n "$C" ]] || continue  # its capacity run failed
      for q in "${QUEUES[@]}"; do
        start_server "$q" "$h" defaults
        PID_NOW="$OSERVER_PID"
        for load in "${DLOADS[@]}"; do
          run_cell "$load" defaults
        done
        stop_server
      done
    done
  fi
  trap - EXIT

  [[ -s "$OCSV" ]] || die "no cell ran; see $RAW"
  BURST_PHASES="$BURST_PHASES" python3 "$PLOT_PY" summarize "$RESULTS_DIR"
  NO_PLOTS=0
  if command -v gnuplot >/dev/null; then
    if gnuplot "$RESULTS_DIR/overload-plots.gp" 2> >(grep -v '^Warning: empty [xy] range' >&2); then
      echo "plots: $(tr '\n' ' ' <"$RESULTS_DIR/overload-pngs.txt")" >&2
    else
      echo "benchmarks.sh: gnuplot failed; overload-plots.gp is in $RESULTS_DIR" >&2
      NO_PLOTS=1
    fi
  else
    echo "benchmarks.sh: gnuplot is missing, so no plots (apt-get install -y gnuplot-nox;" \
         "then: gnuplot $RESULTS_DIR/overload-plots.gp)" >&2
    NO_PLOTS=1
  fi
  echo "results: $OCSV, $RESULTS_DIR/overload-summary.md" >&2
  if [[ $FAILED -gt 0 ]]; then
    echo "benchmarks.sh: $FAILED runs failed; see $RAW" >&2
    exit 1
  fi
  [[ $NO_PLOTS == 0 ]] || exit 1
  exit 0
fi

# ------------------------------------------------------------ peers mode
if [[ $PEERS_MODE -eq 1 ]]; then
  [[ -f "$PEERS_DIR/run-all.sh" ]] ||
    die "--peers: no run-all.sh in $PEERS_DIR (set PEERS_DIR to the shared/peers folder)"
  [[ "$RUN_SECONDS" =~ ^[1-9][0-9]*$ ]] ||
    die "--peers: run-all.sh takes whole seconds; RUN_SECONDS=$RUN_SECONDS"
  echo "benchmarks.sh: peers comparison (builds the gRPC peer first) into $RESULTS_DIR" >&2
  OSPREY_BENCH="$RPC_BENCH" PEERS="osprey grpc limit" REPS="$NUM_SAMPLES" \
    RUN_SECONDS="$RUN_SECONDS" RAW_DIR="$RESULTS_DIR/peers-raw" \
    bash "$PEERS_DIR/run-all.sh" | tee "$RESULTS_DIR/peers.csv"
  python3 "$PEERS_DIR/summarize.py" "$RESULTS_DIR/peers.csv" | tee "$RESULTS_DIR/peers-summary.md"
  exit 0
fi

CSV="$RESULTS_DIR/results.csv"
HEADER="timestamp,mode,client_threads,async_call_concurrency,worker_threads,server_reactors,payload_bytes,run_seconds,reqs_per_sec,user_us_per_req,sys_us_per_req,ctx_switches_per_req,p50_us,p99_us,p999_us,max_us,errors"
if [[ ! -s "$CSV" ]]; then
  echo "$HEADER" >"$CSV"
elif [[ "$(head -n 1 "$CSV")" != "$HEADER" ]]; then
  die "$CSV exists with another header; use a new RESULTS_DIR"
fi

# Seconds one run may take: both the measured time and slow start-up.
LIMIT="$(awk -v s="$RUN_SECONDS" 'BEGIN { printf "%d", s * 2 + 60 }')"
TOTAL=$((NUM_SAMPLES * ${#CONFIG_LIST[@]}))
echo "benchmarks.sh: $TOTAL runs (${#CONFIG_LIST[@]} configurations x $NUM_SAMPLES samples," \
     "${RUN_SECONDS}s each), matrix $MATRIX, results in $RESULTS_DIR" >&2

FAILED=0
n=0
for sample in $(seq 1 "$NUM_SAMPLES"); do
  for config in "${CONFIG_LIST[@]}"; do
    read -r mode ct acc wt sr <<<"$config"
    args=(-mode "$mode" -output=json -run_seconds "$RUN_SECONDS" -payload_bytes "$PAYLOAD_BYTES"
          -client_threads "$ct" -worker_threads "$wt" -server_reactors "$sr")
    [[ "$acc" != - ]] && args+=(-async_call_concurrency "$acc")
    n=$((n + 1))
    echo "[$n/$TOTAL] sample $sample: rpc-bench ${args[*]}" >&2
    ts="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    set +e
    out="$(timeout -k 5 "$LIMIT" "$RPC_BENCH" "${args[@]}" 2>"$RESULTS_DIR/last-run.err")"
    rc=$?
    set -e
    [[ -z "$out" ]] || printf '%s\n' "$out" >>"$RESULTS_DIR/raw.jsonl"
    # A run with failed calls still reports (exit 1, errors > 0): keep its row.
    if ! row="$(printf '%s\n' "$out" | python3 -c '
import json, sys
ts, mode = sys.argv[1], sys.argv[2]
lines = [l for l in sys.stdin.read().splitlines() if l.strip()]
if len(lines) != 1:
    sys.exit(1)
r = json.loads(lines[0])
if r["mode"] != mode:
    sys.exit(1)
lat = r["latency_us"]
print(",".join(str(v) for v in [
    ts, r["mode"], r["client_threads"], r["async_call_concurrency"], r["worker_threads"],
    r["server_reactors"], r["payload_bytes"], r["run_seconds"], r["reqs_per_sec"],
    r["user_cpu_us_per_req"], r["sys_cpu_us_per_req"], r["ctx_switches_per_req"],
    lat["p50"], lat["p99"], lat["p99.9"], lat["max"], r["errors"]]))
' "$ts" "$mode" 2>/dev/null)"; then
      FAILED=$((FAILED + 1))
      echo "  run failed (exit $rc): $(tail -n 3 "$RESULTS_DIR/last-run.err")" >&2
      cat "$RESULTS_DIR/last-run.err" >>"$RESULTS_DIR/failures.log"
      [[ "$acc" == - ]] && acc=""
      row="$ts,$mode,$ct,$acc,$wt,$sr,$PAYLOAD_BYTES,$RUN_SECONDS,,,,,,,,,run_failed"
    elif [[ $rc -ne 0 ]]; then
      FAILED=$((FAILED + 1))
      echo "  run had failed calls (exit $rc): $(tail -n 1 "$RESULTS_DIR/last-run.err")" >&2
      cat "$RESULTS_DIR/last-run.err" >>"$RESULTS_DIR/failures.log"
    fi
    echo "$row" >>"$CSV"
  done
done
rm -f "$RESULTS_DIR/last-run.err"

# ------------------------------------------- medians, plot data, plots
python3 - "$CSV" "$RESULTS_DIR" <<'EOF'
import csv, os, statistics, sys

csv_path, out_dir = sys.argv[1], sys.argv[2]
KEY = ["mode", "client_threads", "async_call_concurrency", "worker_threads",
       "server_reactors", "payload_bytes", "run_seconds"]
METRICS = ["reqs_per_sec", "user_us_per_req", "sys_us_per_req", "ctx_switches_per_req",
           "p50_us", "p99_us", "p999_us"]
groups, failed = {}, {}
with open(csv_path) as f:
    for row in csv.DictReader(f):
        # Sync ignores -async_call_concurrency; failed rows carry the flags as given.
        if row["mode"] == "sync":
            row["async_call_concurrency"] = "-"
        row["run_seconds"] = format(float(row["run_seconds"]), "g")
        key = tuple(row[k] for k in KEY)
        g = groups.setdefault(key, {m: [] for m in METRICS})
        if row["reqs_per_sec"] == "" or row["errors"] != "0":
            failed[key] = failed.get(key, 0) + 1
            continue
        for m in METRICS:
            g[m].append(float(row[m]))

def med(vals, fmt):
    return format(statistics.median(vals), fmt) if vals else "-"

cols = ["mode", "client", "conc", "workers", "reactors", "payload", "secs", "n", "failed",
        "reqs/sec median [min..max]", "user us", "sys us", "cpu us", "ctxsw",
        "p50 us", "p99 us", "p99.9 us"]
rows, medians = [], []
for key, g in groups.items():
    mode, ct, acc, wt, sr, pb, secs = key
    r = g["reqs_per_sec"]
    cpu = [u + s for u, s in zip(g["user_us_per_req"], g["sys_us_per_req"])]
    rows.append([mode, ct, acc, wt, sr, pb, secs, str(len(r)),
                 str(failed.get(key, 0)),
                 f"{statistics.median(r):.0f} [{min(r):.0f}..{max(r):.0f}]" if r else "-",
                 med(g["user_us_per_req"], ".2f"), med(g["sys_us_per_req"], ".2f"),
                 med(cpu, ".2f"), med(g["ctx_switches_per_req"], ".2f"),
                 med(g["p50_us"], ".0f"), med(g["p99_us"], ".0f"), med(g["p999_us"], ".0f")])
    if r:
        medians.append((key, statistics.median(r), statistics.median(g["user_us_per_req"]),
                        statistics.median(g["sys_us_per_req"]), statistics.median(cpu)))

widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c)
          for i, c in enumerate(cols)]
line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths)).rstrip()
table = "\n".join([line(cols), line(["-" * w for w in widths])] + [line(r) for r in rows])
print(table)
with open(os.path.join(out_dir, "summary.txt"), "w") as f:
    f.write(table + "\n")

# Plot data: one series per configuration family. Sync: x = client threads,
# one series per (workers, reactors, payload). Async: x = call concurrency,
# one series per (client reactors, workers, reactors, payload).
series = {}
for (key, rps, user, sys_, cpu) in medians:
    mode, ct, acc, wt, sr, pb, secs = key
    if mode == "sync":
        x, name = int(ct), f"workers {wt}, reactors {sr}"
    else:
        x, name = int(acc), f"{ct} clients, workers {wt}, reactors {sr}"
    if pb != "0":
        name += f", payload {pb}"
    if len({k[6] for k, *_ in medians}) > 1:
        name += f", {secs}s"
    series.setdefault((mode, name), []).append((x, rps, user, sys_, cpu))

data_dir = os.path.join(out_dir, "plot-data")
os.makedirs(data_dir, exist_ok=True)
for f in os.listdir(data_dir):
    os.remove(os.path.join(data_dir, f))
plots = {"sync": [], "async": []}
for i, ((mode, name), pts) in enumerate(series.items()):
    path = os.path.join(data_dir, f"{mode}-{i}.dat")
    with open(path, "w") as f:
        f.write("# x reqs_per_sec user_us sys_us cpu_us\n")
        for p in sorted(pts):
            f.write(" ".join(str(v) for v in p) + "\n")
    plots[mode].append((path, name))

def plot_cmd(mode, cols):
    items = []
    for color, (path, name) in enumerate(plots[mode], start=1):
        for col, label, dash in cols:
            title = f"{name}{label}".replace('"', "'")
            items.append(f'"{path}" using 1:{col} with linespoints linecolor {color} '
                         f'dashtype {dash} pointtype 7 title "{title}"')
    return "plot " + ", \\\n     ".join(items) if items else 'plot NaN notitle'

gp = [
    "set datafile commentschars '#'",
    "set logscale x 2",
    "set grid",
    "set key top left font ',9'",
    "set yrange [0:*]",
    "set offsets graph 0.05, graph 0.05, graph 0.1, 0",
]
for out, ylabel, cols, title in [
    ("reqs_per_sec.png", "requests/sec (median)", [(2, "", 1)], "requests/sec"),
    ("cpu_per_req.png", "CPU us per request (median, whole process)",
     [(5, ": user+sys", 1), (3, ": user", 2)], "CPU per request"),
]:
    gp += [
        "set terminal pngcairo size 1400,560 noenhanced",
        f"set output '{os.path.join(out_dir, out)}'",
        f"set multiplot layout 1,2 title 'rpc-bench {title}'",
        "set title 'sync'", "set xlabel 'client threads'", f"set ylabel '{ylabel}'",
        plot_cmd("sync", cols),
        "set title 'async'", "set xlabel 'async call concurrency'",
        plot_cmd("async", cols),
        "unset multiplot", "set output",
    ]
with open(os.path.join(out_dir, "plots.gp"), "w") as f:
    f.write("\n".join(gp) + "\n")
EOF

NO_PLOTS=0
if command -v gnuplot >/dev/null; then
  # A single-point series (Kudu's command line) draws fine; drop that warning.
  if gnuplot "$RESULTS_DIR/plots.gp" 2> >(grep -v '^Warning: empty [xy] range' >&2); then
    echo "plots: $RESULTS_DIR/reqs_per_sec.png $RESULTS_DIR/cpu_per_req.png" >&2
  else
    echo "benchmarks.sh: gnuplot failed; plots.gp is in $RESULTS_DIR" >&2
    NO_PLOTS=1
  fi
else
  echo "benchmarks.sh: gnuplot is missing though install-deps.sh ran, so no plots" \
       "(apt-get install -y gnuplot-nox; then: gnuplot $RESULTS_DIR/plots.gp)" >&2
  NO_PLOTS=1
fi
echo "results: $CSV" >&2
if [[ $FAILED -gt 0 ]]; then
  echo "benchmarks.sh: $FAILED of $TOTAL runs failed; see $RESULTS_DIR/failures.log" >&2
  exit 1
fi
[[ $NO_PLOTS == 0 ]] || exit 1
