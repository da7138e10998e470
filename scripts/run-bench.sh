#!/usr/bin/env bash
# Sets up a fresh machine, builds, and runs rpc-bench at its defaults (sync,
# then async). Arguments are passed to rpc-bench, e.g. -run_seconds 3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/build.sh
exec build/tools/rpc-bench/rpc-bench "$@"
