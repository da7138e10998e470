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
cmake -S tests/install-consumer -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" -j "$(nproc)" >/dev/null
"$tmp/build/consumer"
