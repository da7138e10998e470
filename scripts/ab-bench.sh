#!/usr/bin/env bash
# Two rpc-bench binaries as one, for ../shared/peers/run-all.sh: set
# OSPREY_BENCH to this script and list the peer "osprey" twice in PEERS, and
# for every (mode, config, repetition) the first run is $AB_BEFORE and the
# second $AB_AFTER, interleaved with the other peers in one run. Each run's
# binary is logged to $AB_LOG (default /tmp/ab-bench.log) and named on
# stderr, which run-all.sh folds into the report it parses.
set -euo pipefail
: "${AB_BEFORE:?set AB_BEFORE to the rpc-bench to measure first}"
: "${AB_AFTER:?set AB_AFTER to the rpc-bench to measure second}"
log="${AB_LOG:-/tmp/ab-bench.log}"
state="${AB_STATE:-/tmp/ab-bench.state}"
key="$(printf '%s' "$*" | md5sum | cut -c1-16)"
count=$(( $(grep -c "^$key\$" "$state" 2>/dev/null || true) ))
echo "$key" >> "$state"
if (( count % 2 == 0 )); then which=before bin="$AB_BEFORE"; else which=after bin="$AB_AFTER"; fi
echo "$which $*" >> "$log"
echo "ab-bench: $which ($bin)" >&2
exec "$bin" "$@"
