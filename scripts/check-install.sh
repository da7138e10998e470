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
for bin in rpc-bench protoc-gen-osprey; do
  [[ -x "$tmp/prefix/bin/$bin" ]] || { echo "check-install: $bin was not installed" >&2; exit 1; }
done
# The installed benchmark runs on its own.
"$tmp/prefix/bin/rpc-bench" -run_seconds 0.2 -client_threads 1 -async_call_concurrency 2 \
  -mode async >/dev/null
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
