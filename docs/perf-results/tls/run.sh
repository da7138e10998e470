#!/usr/bin/env bash
# TLS cost (docs/performance.md): configs b, d and d with 64 KiB payloads, with and
# without -enable_encryption, 3 repetitions interleaved. One CSV line per run:
# config,encryption,repetition,<rpc-bench JSON>.
set -u
B="${RPC_BENCH:-build/tools/rpc-bench/rpc-bench}"  # from the project root
for rep in 1 2 3; do
  for cfg in b d d64k; do
    case $cfg in
      b) args="-server_reactors 1 -worker_threads 1 -client_threads 1 -async_call_concurrency 1";;
      d) args="-server_reactors 2 -worker_threads 2 -client_threads 2 -async_call_concurrency 200";;
      d64k) args="-server_reactors 2 -worker_threads 2 -client_threads 2 -async_call_concurrency 200 -payload_bytes 65536";;
    esac
    for enc in 0 1; do
      extra=""; [[ $enc == 1 ]] && extra="-enable_encryption"
      timeout 60 $B $args $extra -run_seconds 3 -output=json 2>/dev/null | sed "s/^/$cfg,$enc,$rep,/"
    done
  done
done
