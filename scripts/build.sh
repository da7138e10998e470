#!/usr/bin/env bash
# Installs missing dependencies, then configures and builds Osprey (Release)
# in ${BUILD_DIR:-build}. Extra arguments go to the CMake configure step.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-deps.sh --build-only
BUILD_DIR="${BUILD_DIR:-build}"
# A new build directory uses Ninja: CMake's Makefiles compile no object of a
# target before the libraries it links are built, which left a CPU idle for
# minutes of the suite's build; Ninja only waits to link. A directory made
# before keeps its generator.
generator=()
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
