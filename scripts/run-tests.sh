#!/usr/bin/env bash
# Sets up a fresh machine, builds, and runs the whole test suite with CTest.
# BUILD_DIR and extra CMake arguments (e.g. -DOSPREY_SANITIZE=thread) select
# other builds; .ci/run uses that for the sanitizer runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/build.sh "$@"
# The tests' tools (a KDC, etcd, Chromium, Prometheus...); build.sh
# installed only what building needs.
bash scripts/install-deps.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" --timeout 300
