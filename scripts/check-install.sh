#!/usr/bin/env bash
# Installs the build in ${BUILD_DIR:-build} to a temporary prefix and builds
# and runs tests/install-consumer against it: proves find_package(Osprey),
# Osprey::osprey and osprey_generate_rpc work for another project.
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
