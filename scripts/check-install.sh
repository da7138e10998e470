#!/usr/bin/env bash
# Installs the build in ${BUILD_DIR:-build} to a temporary prefix (never /usr:
# the config must find its own files there) and builds
# and runs tests/install-consumer against it: proves find_package(Osprey),
# Osprey::osprey and osprey_generate_rpc work for another project, that only
# the public headers are installed, that a service .proto importing Kudu's
# method options (kudu/rpc/rpc_header.proto) compiles, and that a project
# without CMake builds the same consumer with pkg-config and protoc-gen-osprey.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR="${BUILD_DIR:-build}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$BUILD_DIR" --prefix "$tmp/prefix" >/dev/null
for bin in rpc-bench protoc-gen-osprey osprey; do
  [[ -x "$tmp/prefix/bin/$bin" ]] || { echo "check-install: $bin was not installed" >&2; exit 1; }
done
# The installed benchmark runs on its own.
"$tmp/prefix/bin/rpc-bench" -run_seconds 0.2 -client_threads 1 -async_call_concurrency 2 \
  -mode async >/dev/null
# The installed osprey command calls the installed rpc-bench server through
# its reflection, and through rpc-bench's .proto, whose import of Kudu's
# method options it finds in the prefix's include directory by itself.
[[ -f "$tmp/prefix/share/bash-completion/completions/osprey" ]] ||
  { echo "check-install: osprey's bash completion was not installed" >&2; exit 1; }
: >"$tmp/server.out"  # the job may open it after the loop first reads it
"$tmp/prefix/bin/rpc-bench" -server_only -server_reactors 1 >"$tmp/server.out" 2>/dev/null &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do
  addr="$(sed -n 's/^Listening on //p' "$tmp/server.out")"
  [[ -n "$addr" ]] && break
  sleep 0.05
done
[[ -n "$addr" ]] || { echo "check-install: rpc-bench -server_only did not start" >&2; exit 1; }
for source in "" "--proto tools/rpc-bench/rpc_bench.proto -I tools/rpc-bench"; do
  # shellcheck disable=SC2086  # the flags are words
  out="$(timeout 30 "$tmp/prefix/bin/osprey" call "$addr" kudu.rpc_test.CalculatorService.Add \
    '{"x": 2, "y": 3}' $source)" ||
    { echo "check-install: the installed osprey call failed (${source:-reflection})" >&2; exit 1; }
  grep -q '"result": 5' <<<"$out" ||
    { echo "check-install: osprey call answered $out" >&2; exit 1; }
done
kill "$server_pid"
wait "$server_pid" || true

cmake -S tests/install-consumer -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" -j "$(nproc)" >/dev/null
"$tmp/build/consumer"

# Only the public API is installed: no transport or wire internals.
for internal in transport/connection.h transport/reactor.h wire/frame_decoder.h rpc/service_pool.h; do
  if [[ -e "$tmp/prefix/include/osprey/$internal" ]]; then
    echo "check-install: internal header osprey/$internal was installed" >&2
    exit 1
  fi
done

# The same consumer without CMake, through pkg-config and the plugin it names.
pc="$(find "$tmp/prefix" -name osprey.pc | head -n 1)"
[[ -n "$pc" ]] || { echo "check-install: no osprey.pc installed" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
plugin="$(pkg-config --variable=protoc_plugin osprey)"
[[ -x "$plugin" ]] || { echo "check-install: pkg-config names no plugin ($plugin)" >&2; exit 1; }
mkdir -p "$tmp/pc"
protoc --plugin=protoc-gen-osprey="$plugin" -I tests/install-consumer \
  -I"$(pkg-config --variable=proto_dir osprey)" \
  --cpp_out="$tmp/pc" --osprey_out="$tmp/pc" tests/install-consumer/echo.proto
# shellcheck disable=SC2046  # the flags are words
g++ -std=c++20 -o "$tmp/pc/consumer" tests/install-consumer/consumer.cc "$tmp/pc/echo.pb.cc" \
  "$tmp/pc/echo.osprey.cc" -I"$tmp/pc" $(pkg-config --cflags --libs osprey)
"$tmp/pc/consumer"
