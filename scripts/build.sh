#!/usr/bin/env bash
# Installs missing dependencies, then configures and builds Osprey (Release)
# in ${BUILD_DIR:-build}. Extra arguments go to the CMake configure step.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-deps.sh
BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
