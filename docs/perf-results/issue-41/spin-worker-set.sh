#!/usr/bin/env bash
# Server reactor iterations per call, b sync, for spin and worker-read switches.
set -u
B=${RPC_BENCH:-build/tools/rpc-bench/rpc-bench}
port=17330
get() { curl -s http://127.0.0.1:$1/metrics | awk -v k="$2" 'index($0,k)==1 {s+=$NF} END {print s+0}'; }
for rep in 1 2 3; do
for spin in 50 0; do
for wr in true false; do
  port=$((port+1))
  $B -server_only -listen 127.0.0.1:$port -server_reactors 1 -worker_threads 1 -spin_before_sleep_us $spin -worker_reads=$wr > /dev/null 2>&1 &
  pid=$!
  for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/healthz && break; sleep 0.1; done
  it0=$(get $port 'osprey_reactor_loop_lag_seconds_count')
  c0=$(get $port 'osprey_server_calls_total{method="kudu.rpc_test.CalculatorService.Add"')
  out=$($B -server_address 127.0.0.1:$port -mode sync -run_seconds 3 -client_threads 1 -spin_before_sleep_us $spin 2>&1)
  it1=$(get $port 'osprey_reactor_loop_lag_seconds_count')
  c1=$(get $port 'osprey_server_calls_total{method="kudu.rpc_test.CalculatorService.Add"')
  wrr=$(get $port 'osprey_worker_read_requests_total')
  kill $pid; wait $pid 2>/dev/null
  rps=$(echo "$out" | awk '/Reqs\/sec/ {print $2}')
  echo "rep=$rep spin=$spin worker_reads=$wr calls=$((c1-c0)) reactor_iterations=$((it1-it0)) per_call=$(awk -v a=$((it1-it0)) -v b=$((c1-c0)) 'BEGIN{printf "%.3f", a/b}') worker_read_requests=$wrr reqs_per_sec=$rps"
done; done; done
