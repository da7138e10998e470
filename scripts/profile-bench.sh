#!/usr/bin/env bash
# Profiles one rpc-bench run (ours, or any binary taking Kudu's flags and
# printing Kudu's report, such as ../shared/peers' limit-bench) and writes a
# plain-text account of where its CPU goes to OUT:
#   - the benchmark's own report (calls/s, CPU and context switches per call);
#   - system calls per call, by name (perf's syscall tracepoints, a second run);
#   - perf record -e cpu-clock: share of samples by shared object, the top
#     symbols by self time, and the top symbols with their callees (children).
#
#   profile-bench.sh OUT BENCH [flags for BENCH...]
# e.g. profile-bench.sh /tmp/d-sync.txt build/tools/rpc-bench/rpc-bench \
#        -mode sync -server_reactors 2 -worker_threads 2 -client_threads 2
# -run_seconds defaults to 2 unless given. Needs linux-perf (installed if
# missing). Hardware counters are not needed: cpu-clock is a software event.
set -euo pipefail
out=${1:?usage: profile-bench.sh OUT BENCH [flags...]}
bench=${2:?usage: profile-bench.sh OUT BENCH [flags...]}
shift 2
flags=("$@")
[[ " ${flags[*]} " == *" -run_seconds "* ]] || flags+=(-run_seconds 2)
if ! command -v perf >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Calls/s times the measured window; the counts cover start-up too, which
# is a few thousand system calls against millions of calls.
seconds=2
for ((i = 0; i < ${#flags[@]}; i++)); do
  [[ ${flags[i]} == -run_seconds ]] && seconds=${flags[i + 1]}
done

perf stat -x, -e 'syscalls:sys_enter_*' -o "$tmp/stat" "$bench" "${flags[@]}" >"$tmp/report1" 2>&1
perf record -q -e cpu-clock -F 1999 --call-graph dwarf,16384 -o "$tmp/perf.data" \
  "$bench" "${flags[@]}" >"$tmp/report2" 2>&1

{
  echo "# $(basename "$bench") ${flags[*]}"
  echo "## the profiled run's report"
  grep -E 'Reqs/sec|CPU per req|Ctx Sw' "$tmp/report2" || true
  echo "## system calls per call (a run of its own under perf stat)"
  grep -E 'Reqs/sec' "$tmp/report1" || true
  reqs=$(awk -F: '/Reqs\/sec/ {gsub(/ /, "", $2); print $2; exit}' "$tmp/report1")
  awk -F, -v calls="$(awk -v r="${reqs:-0}" -v s="$seconds" 'BEGIN {print r * s}')" '
    $3 ~ /syscalls:sys_enter_/ && $1 + 0 > 0 {
      name = $3; sub(/.*sys_enter_/, "", name); n[name] = $1; total += $1 }
    END {
      if (calls <= 0) { print "no Reqs/sec in the report"; exit }
      printf "%-22s %8.2f\n", "all", total / calls
      for (k in n) if (n[k] / calls >= 0.01) printf "%-22s %8.2f\n", k, n[k] / calls
    }' "$tmp/stat" | sort -k2 -nr
  echo "## samples by shared object"
  perf report -i "$tmp/perf.data" --no-children --sort dso --stdio 2>/dev/null |
    grep -E '^ +[0-9]' | head -12 || true  # head closes the pipe early
  echo "## top symbols, self"
  perf report -i "$tmp/perf.data" --no-children --sort sym --stdio -g none 2>/dev/null |
    grep -E '^ +[0-9]' | head -40 || true  # head closes the pipe early
  echo "## top symbols with their callees (children)"
  perf report -i "$tmp/perf.data" --children --sort sym --stdio -g none 2>/dev/null |
    grep -E '^ +[0-9]' | head -60 || true  # head closes the pipe early
} >"$out"
echo "wrote $out" >&2
