#!/usr/bin/env bash
# Interop with a live Apache Kudu RPC stack, every setting, both ways:
#
#   scripts/kudu-interop.sh KUDU_PEER_BUILD
#
# KUDU_PEER_BUILD is the build folder of ../shared/peers/kudu (its build.sh;
# default /tmp/kudu-peer/build): kudu-calc-server and kudu-calc-client, built
# from Kudu's own source. Osprey's binaries come from ${BUILD_DIR:-build}
# (scripts/build.sh). What runs, each cell asserted against Kudu's rules
# (docs/interop.md): a pairing is refused only when one side requires TLS and
# the other disables it, and then fast and with a clear message; every other
# pairing negotiates what the rules say and makes every call.
#
#   1. Kudu client {disabled,optional,required} x loopback encryption {off,on}
#      -> Osprey server (rpc-bench -server_only) {disabled,optional,required}
#   2. Osprey client (rpc-bench) {disabled,optional,required} x {off,on}
#      -> Kudu server {disabled,optional,required} x {off,on}
#   3. both directions again between two network-namespace hosts
#      (scripts/netns-hosts.sh; needs root), where TLS is full without any
#      loopback flag; Kudu's server binds 127.0.0.1 only, so socat forwards
#      its host's address to it
#   4. exactly-once: Kudu's client replays AddExactlyOnce against rpc-bench's
#      server; Osprey's tracked calls with retries, through a proxy cutting
#      connections, against Kudu's AddExactlyOnce (Kudu's running total must
#      grow by exactly the number of calls)
#   5. against Kudu's server, clear and full TLS: deadlines, a full queue
#      (ServiceUnavailable, then retried), ERROR_NO_SUCH_METHOD/SERVICE,
#      request sidecars, 8 MiB each way
#   6. Kerberos with a KDC of its own (MIT krb5kdc on loopback): Osprey
#      client with a ticket -> Kudu server with a keytab at required, and
#      Kudu client -> Osprey server, clear, TLS authentication-only and full
#      TLS (channel bindings checked by each client); Kudu's exactly-once
#      client; refusals without a ticket both ways and for a wrong principal
#   7. tokens: scripts/kudu-token-issuer.cc, built against the peer, issues an
#      authentication token with Kudu's own TokenSigner (as a Kudu master
#      does); token-auth-test's KuduIssuedTokenTest presents it to an Osprey
#      server whose KuduTokenVerifier holds Kudu's exported public key, and a
#      copy with one bit changed
#   8. cli: the osprey command against Kudu's server with Kudu's own
#      rtest.proto (from the peer's Kudu source): list, describe, calls in
#      JSON and text format, a request sidecar, an exactly-once method, a
#      server error, a timeout, full TLS, a refusal, and "no reflection on
#      this server; give --proto" without the .proto
#   9. drain: scripts/kudu-drain-client.cc, built against the peer, holds a
#      call on an Osprey server that SIGTERM then drains, and calls Add on it
#      and a second server with the retry rule of Kudu's clients: the
#      draining server answers ERROR_UNAVAILABLE ("did not run"), which
#      Kudu's clients retry; the call goes to the other server; the held
#      call is answered and the server exits 0
#  10. trusted subnets: each side trusting only 10.0.0.0/8 (Kudu's
#      --trusted_subnets; rpc-bench's flag of that name) refuses the other's
#      loopback client in the clear and by SASL PLAIN over TLS, fast and
#      saying why
#
# KUDU_COMMIT names the Kudu commit the peer was built from (build.sh prints
# it), for the summary line.
#
# One line per cell ("PASS ..." or "FAIL ..."), then the matrices as
# Markdown tables (for docs/interop.md) and a summary. Exit 1 if any cell is
# wrong, 2 if the peer build is missing. Every process it starts it ends by
# PID; every call loop is bounded.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KUDU="${1:-${KUDU_PEER_BUILD:-/tmp/kudu-peer/build}}"
BUILD_DIR="${BUILD_DIR:-build}"
BENCH="$BUILD_DIR/tools/rpc-bench/rpc-bench"
CLIENT="$BUILD_DIR/tests/kudu-interop-client"
for f in "$KUDU/kudu-calc-server" "$KUDU/kudu-calc-client"; do
  [[ -x $f ]] || {
    echo "kudu-interop: $f not found: build the Kudu peer first (../shared/peers/kudu/build.sh)" >&2
    exit 2
  }
done
for f in "$BENCH" "$CLIENT"; do
  [[ -x $f ]] || { echo "kudu-interop: $f not found: run scripts/build.sh first" >&2; exit 2; }
done

tmp=$(mktemp -d)
pids=()
netns_set=""
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null; done
  [[ -n $netns_set ]] && bash scripts/netns-hosts.sh down "$netns_set" 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
# A signal ends the script through its EXIT trap too, so that the servers
# and the KDC it started go with it.
trap "exit 130" INT TERM

passed=0
failed=0
declare -A table  # "matrix|row|column" -> what was seen
pass() {
  echo "PASS $*"
  passed=$((passed + 1))
}
fail() {
  echo "FAIL $*"
  failed=$((failed + 1))
}

# --- the rules --------------------------------------------------------------

# What a pairing must do (docs/interop.md): refused, clear,
# tls-authentication-only or tls-encrypted. A side lists
# TLS_AUTHENTICATION_ONLY when it has TLS, sees a loopback peer and does not
# encrypt loopback.
expect() {
  local cenc=$1 cel=$2 senc=$3 sel=$4 cloop=$5 sloop=$6
  if [[ $cenc == required && $senc == disabled ]]; then echo refused; return; fi
  if [[ $senc == required && $cenc == disabled ]]; then echo refused; return; fi
  if [[ $cenc == disabled || $senc == disabled ]]; then echo clear; return; fi
  if [[ $cloop == 1 && $cel == 0 && $sloop == 1 && $sel == 0 ]]; then
    echo tls-authentication-only
  else
    echo tls-encrypted
  fi
}

el_flag() { [[ $1 == 1 ]] && echo --rpc_encrypt_loopback_connections; }
label() { [[ $2 == 1 ]] && echo "$1 EL" || echo "$1"; }

# --- servers ------------------------------------------------------------------

# split_prefix [HOST_PREFIX...] -- ARGS...: PREFIX gets what runs a command
# in a host (ip netns exec ...; nothing on this one), REST the arguments.
split_prefix() {
  PREFIX=()
  while [[ $1 != -- ]]; do
    PREFIX+=("$1")
    shift
  done
  shift
  REST=("$@")
}

# start_kudu_server NAME [HOST_PREFIX...] -- FLAGS...: Kudu's server on a free
# port; sets srv_addr and srv_pid.
start_kudu_server() {
  local name=$1
  shift
  split_prefix "$@"
  local prefix=("${PREFIX[@]}")
  set -- "${REST[@]}"
  "${prefix[@]}" "$KUDU/kudu-calc-server" 0 --run_seconds=600 "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" &
  srv_pid=$!
  pids+=("$srv_pid")
  wait_for_line "$tmp/$name.out" '^LISTENING ' "$name"
  srv_addr=$(awk '/^LISTENING /{print $2; exit}' "$tmp/$name.out")
}

# start_osprey_server NAME LISTEN [HOST_PREFIX...] -- FLAGS...: rpc-bench
# -server_only; sets srv_addr, srv_pid and metrics_addr (its HTTP address).
start_osprey_server() {
  local name=$1 listen=$2
  shift 2
  split_prefix "$@"
  local prefix=("${PREFIX[@]}")
  set -- "${REST[@]}"
  # Its pages on an address of their own: a server that requires encryption
  # or authentication serves none on its RPC port.
  "${prefix[@]}" "$BENCH" -server_only -listen "$listen" -http_listen "${listen%:*}:0" "$@" \
    > "$tmp/$name.out" 2> "$tmp/$name.err" &
  srv_pid=$!
  pids+=("$srv_pid")
  wait_for_line "$tmp/$name.out" '^Listening on ' "$name"
  srv_addr=$(awk '/^Listening on /{print $3; exit}' "$tmp/$name.out")
  wait_for_line "$tmp/$name.out" '^Metrics at http://' "$name"
  metrics_addr=$(sed -n 's|^Metrics at http://\([^/]*\)/metrics.*$|\1|p' "$tmp/$name.out" | head -1)
}

wait_for_line() {
  local file=$1 pattern=$2 name=$3 i
  for i in $(seq 1 200); do
    grep -q "$pattern" "$file" 2> /dev/null && return 0
    sleep 0.1
  done
  echo "kudu-interop: server $name did not start:" >&2
  cat "$file" "${file%.out}.err" >&2
  exit 1
}

stop_server() {
  kill "$1" 2> /dev/null
  wait "$1" 2> /dev/null
}

# --- cells --------------------------------------------------------------------

# The Osprey server's count of inbound negotiations, by what they agreed:
# "clear auth-only encrypted", from its /metrics (at metrics_addr).
negotiated_counts() {
  local addr=$1
  shift
  "$@" curl -s --max-time 5 "http://$addr/metrics" | awk '
    /^osprey_connections_negotiated_total\{direction="inbound"/ {
      if ($0 ~ /security="clear"/) c = $2
      if ($0 ~ /security="tls_authentication_only"/) a = $2
      if ($0 ~ /security="tls_encrypted"/) e = $2
    }
    END { printf "%d %d %d\n", c, a, e }'
}

# kudu_client_cell MATRIX ROW COL EXPECT ADDR [HOST_PREFIX...] -- FLAGS...
# The Kudu client runs in the host of HOST_PREFIX (ip netns exec ...), the
# Osprey server's metrics are read from the same host.
kudu_client_cell() {
  local matrix=$1 row=$2 col=$3 want=$4 addr=$5
  shift 5
  split_prefix "$@"
  local prefix=("${PREFIX[@]}")
  set -- "${REST[@]}"
  local out=$tmp/cell.out err=$tmp/cell.err got start took rc before after
  before=$(negotiated_counts "$metrics_addr" "${prefix[@]}")
  start=$(date +%s.%N)
  timeout 60 "${prefix[@]}" "$KUDU/kudu-calc-client" "$addr" 20 --call_timeout_ms=10000 "$@" \
    > "$out" 2> "$err"
  rc=$?
  took=$(echo "$(date +%s.%N) - $start" | bc)
  after=$(negotiated_counts "$metrics_addr" "${prefix[@]}")
  # What the server agreed with this client: the one counter that grew.
  local c0 a0 e0 c1 a1 e1
  read -r c0 a0 e0 <<< "$before"
  read -r c1 a1 e1 <<< "$after"
  local seen=none
  ((c1 > c0)) && seen=clear
  ((a1 > a0)) && seen=tls-authentication-only
  ((e1 > e0)) && seen=tls-encrypted
  local data_path=plaintext
  grep -q '^TRANSPORT .* tls ' "$err" && data_path=tls
  if grep -q '^DONE calls=20 failures=0' "$out" && [[ $rc == 0 ]]; then
    got=$seen
    # Kudu's client must agree: TLS on its data path only when encrypted.
    local server_tls=0 client_tls=0
    [[ $seen == tls-encrypted ]] && server_tls=1
    [[ $data_path == tls ]] && client_tls=1
    if ((server_tls != client_tls)); then
      got="$seen on the server but $data_path on Kudu's data path"
    fi
  elif [[ $seen == none ]]; then
    got=refused
  else
    got="calls failed after negotiating $seen"
  fi
  table["$matrix|$row|$col"]=$got
  local what="$matrix: Kudu client $row -> Osprey server $col: expected $want"
  if [[ $got != "$want" ]]; then
    fail "$what, got $got ($(grep -m1 -hE 'DONE|rror|refused' "$out" "$err" | head -c 300))"
  elif [[ $got == refused ]]; then
    local why
    why=$(grep -m1 -ohiE '(not authorized|unauthorized).*' "$err" "$out" | head -c 300)
    if [[ -z $why ]] || (($(echo "$took > 5" | bc))); then
      fail "$what, refused but not fast and clear (${took}s: ${why:-no reason given})"
    else
      pass "$what: refused in ${took}s ($why)"
    fi
  else
    pass "$what: 20 calls ok, Kudu's data path $data_path"
  fi
}

# osprey_client_cell MATRIX ROW COL EXPECT ADDR [HOST_PREFIX...] -- FLAGS...
osprey_client_cell() {
  local matrix=$1 row=$2 col=$3 want=$4 addr=$5
  shift 5
  split_prefix "$@"
  local prefix=("${PREFIX[@]}")
  set -- "${REST[@]}"
  local out=$tmp/cell.out err=$tmp/cell.err got start took rc
  start=$(date +%s.%N)
  timeout 60 "${prefix[@]}" "$BENCH" -server_address "$addr" -mode both -run_seconds 0.3 \
    -client_threads 2 -async_call_concurrency 8 "$@" > "$out" 2> "$err"
  rc=$?
  took=$(echo "$(date +%s.%N) - $start" | bc)
  local negotiated
  negotiated=$(grep -m1 '^Encryption:' "$out" | sed -E 's/.*\(negotiated ([^;]*);.*/\1/')
  case $negotiated in
    clear) got=clear ;;
    "TLS (authentication only)") got=tls-authentication-only ;;
    "TLS (encrypted)") got=tls-encrypted ;;
    *) got=refused ;;
  esac
  [[ $rc == 0 || $got == refused ]] || got="$got, but rpc-bench exited $rc"
  table["$matrix|$row|$col"]=$got
  local what="$matrix: Osprey client $row -> Kudu server $col: expected $want"
  if [[ $got != "$want" ]]; then
    fail "$what, got $got ($(head -c 300 "$err"))"
  elif [[ $got == refused ]]; then
    local why
    why=$(grep -m1 -iE 'TLS' "$err" | head -c 300)
    if [[ -z $why ]] || (($(echo "$took > 5" | bc))); then
      fail "$what, refused but not fast and clear (${took}s: ${why:-$(head -c 200 "$err")})"
    else
      pass "$what: refused in ${took}s (${why#rpc-bench: })"
    fi
  else
    local calls
    calls=$(grep -c '^Reqs/sec:' "$out")
    pass "$what: sync and async ran ($calls reports), rpc-bench says 'negotiated $negotiated'"
  fi
}

encs=(disabled optional required)
# KUDU_INTEROP_ONLY="loopback trusted-subnets exactly-once semantics netns kerberos tokens cli
# drain": a subset.
only="${KUDU_INTEROP_ONLY:-loopback trusted-subnets exactly-once semantics netns kerberos tokens cli drain}"
section() { [[ " $only " == *" $1 "* ]]; }

# --- 1 and 2: on loopback -------------------------------------------------------

if section loopback; then
echo "== Kudu client -> Osprey server (loopback)"
for senc in "${encs[@]}"; do
  start_osprey_server "osprey-$senc" 127.0.0.1:0 -- --rpc_encryption="$senc"
  for cenc in "${encs[@]}"; do
    for cel in 0 1; do
      kudu_client_cell loopback-kudu-client "$(label "$cenc" "$cel")" "$senc" \
        "$(expect "$cenc" "$cel" "$senc" 0 1 1)" "$srv_addr" -- \
        --rpc_encryption="$cenc" $(el_flag "$cel")
    done
  done
  stop_server "$srv_pid"
done

echo "== Osprey client -> Kudu server (loopback)"
for senc in "${encs[@]}"; do
  for sel in 0 1; do
    start_kudu_server "kudu-$senc-$sel" -- --rpc_encryption="$senc" $(el_flag "$sel")
    for cenc in "${encs[@]}"; do
      for cel in 0 1; do
        osprey_client_cell loopback-osprey-client "$(label "$cenc" "$cel")" "$(label "$senc" "$sel")" \
          "$(expect "$cenc" "$cel" "$senc" "$sel" 1 1)" "$srv_addr" -- \
          --rpc_encryption="$cenc" $(el_flag "$cel")
      done
    done
    stop_server "$srv_pid"
  done
done

fi

# --- 10: trusted subnets, both ways ---------------------------------------------

# refusal_cell WHAT WANT PROGRAM ARGS...: PROGRAM must fail within 5 s, with
# WANT (an extended regular expression) on its output.
refusal_cell() {
  local what=$1 want=$2 start took rc why
  shift 2
  start=$(date +%s.%N)
  timeout 60 "$@" > "$tmp/cell.out" 2> "$tmp/cell.err"
  rc=$?
  took=$(echo "$(date +%s.%N) - $start" | bc)
  why=$(grep -m1 -ohE "$want" "$tmp/cell.out" "$tmp/cell.err" | head -c 300)
  if [[ $rc == 0 ]]; then
    fail "$what: let in ($(head -c 200 "$tmp/cell.out"))"
  elif [[ -z $why ]] || (($(echo "$took > 5" | bc))); then
    fail "$what: refused (exit $rc, ${took}s) but not fast with /$want/: $(head -c 300 "$tmp/cell.err")"
  else
    pass "$what: refused in ${took}s ($why)"
  fi
}

# Each side trusting only 10.0.0.0/8, so that a loopback peer is outside:
# a clear client and a SASL PLAIN client over TLS are refused, saying why.
if section trusted-subnets; then
echo "== trusted subnets (Kudu's --trusted_subnets=10.0.0.0/8)"
start_osprey_server osprey-trusted 127.0.0.1:0 -- --rpc_encryption=optional -trusted_subnets=10.0.0.0/8
refusal_cell "trusted subnets: Kudu client (disabled) -> Osprey server" \
  'unencrypted connections from 127\.0\.0\.1 are refused[^;]*' \
  "$KUDU/kudu-calc-client" "$srv_addr" 5 --rpc_encryption=disabled
refusal_cell "trusted subnets: Kudu client (optional EL, SASL PLAIN) -> Osprey server" \
  'SASL PLAIN \(a user name the client chose\) from 127\.0\.0\.1 is refused[^;]*' \
  "$KUDU/kudu-calc-client" "$srv_addr" 5 --rpc_encryption=optional --rpc_encrypt_loopback_connections
stop_server "$srv_pid"
start_kudu_server kudu-trusted -- --rpc_encryption=optional --trusted_subnets=10.0.0.0/8
refusal_cell "trusted subnets: Osprey client (disabled) -> Kudu server" \
  'unencrypted connections from publicly routable IPs are prohibited' \
  "$BENCH" -server_address "$srv_addr" -run_seconds 0.3 --rpc_encryption=disabled
refusal_cell "trusted subnets: Osprey client (optional EL, SASL PLAIN) -> Kudu server" \
  'unauthenticated connections from publicly routable IPs are prohibited' \
  "$BENCH" -server_address "$srv_addr" -run_seconds 0.3 --rpc_encryption=optional \
  --rpc_encrypt_loopback_connections
stop_server "$srv_pid"
fi

# --- 4 and 5: exactly-once and semantics against Kudu's server -------------------

if section exactly-once; then
echo "== exactly-once"
for setting in "disabled 0" "required 1"; do
  read -r enc el <<< "$setting"
  start_osprey_server "osprey-eo-$enc" 127.0.0.1:0 -- --rpc_encryption="$enc" $(el_flag "$el")
  if timeout 120 "$KUDU/kudu-calc-client" "$srv_addr" 200 --exactly_once --rpc_encryption="$enc" \
    $(el_flag "$el") > "$tmp/eo.out" 2> "$tmp/eo.err" &&
    grep -q '^DONE exactly_once calls=200 replays_ok=200 failures=0' "$tmp/eo.out"; then
    pass "exactly-once: Kudu client -> Osprey server ($(label "$enc" "$el")): $(grep '^DONE' "$tmp/eo.out")"
  else
    fail "exactly-once: Kudu client -> Osprey server ($(label "$enc" "$el")): $(cat "$tmp/eo.out"; head -c 300 "$tmp/eo.err")"
  fi
  stop_server "$srv_pid"

  start_kudu_server "kudu-eo-$enc" -- --rpc_encryption="$enc" $(el_flag "$el") --worker_threads=4
  if timeout 300 "$CLIENT" exactly-once "$srv_addr" --calls=400 --rpc_encryption="$enc" \
    $(el_flag "$el") > "$tmp/c.out" 2>&1; then
    pass "exactly-once: Osprey client -> Kudu server ($(label "$enc" "$el")): $(grep '^PASS' "$tmp/c.out" | cut -d' ' -f3-)"
  else
    fail "exactly-once: Osprey client -> Kudu server ($(label "$enc" "$el")): $(grep -v '^PASS' "$tmp/c.out" | head -c 400)"
  fi
  stop_server "$srv_pid"
done

fi

# take_results CHECK SETTING: kudu-interop-client's PASS and FAIL lines
# in $tmp/c.out, as cells.
take_results() {
  local verdict rest
  while read -r verdict rest; do
    case $verdict in
      PASS) pass "semantics ($2): $rest" ;;
      FAIL) fail "semantics ($2): $rest" ;;
    esac
  done < "$tmp/c.out"
  grep -qE '^(PASS|FAIL)' "$tmp/c.out" || fail "semantics ($1): no result: $(head -c 300 "$tmp/c.out")"
}

if section semantics; then
echo "== semantics against Kudu's server"
for setting in "disabled 0" "required 1"; do
  read -r enc el <<< "$setting"
  start_kudu_server "kudu-sem-$enc" -- --rpc_encryption="$enc" $(el_flag "$el") --worker_threads=4
  for check in deadline no-such-method sidecars large; do
    timeout 120 "$CLIENT" "$check" "$srv_addr" --rpc_encryption="$enc" $(el_flag "$el") \
      > "$tmp/c.out" 2>&1
    take_results "$check" "$(label "$enc" "$el")"
  done
  stop_server "$srv_pid"
  start_kudu_server "kudu-queue-$enc" -- --rpc_encryption="$enc" $(el_flag "$el") \
    --worker_threads=1 --service_queue_length=1
  timeout 120 "$CLIENT" queue "$srv_addr" --rpc_encryption="$enc" $(el_flag "$el") > "$tmp/c.out" 2>&1
  take_results queue "$(label "$enc" "$el")"
  stop_server "$srv_pid"
done

fi

# --- 3: between network-namespace hosts -------------------------------------------

if section netns; then
echo "== between two network-namespace hosts"
if ! why=$(bash scripts/netns-hosts.sh check); then
  fail "netns: cannot make hosts here: $why"
else
  if ! command -v socat > /dev/null; then
    apt-get update -qq > /dev/null && apt-get install -y -qq socat > /dev/null
  fi
  netns_set="$$kudu"
  bash scripts/netns-hosts.sh up "$netns_set" 2 > /dev/null
  h1=(ip netns exec "$(bash scripts/netns-hosts.sh name "$netns_set" 1)")
  h2=(ip netns exec "$(bash scripts/netns-hosts.sh name "$netns_set" 2)")
  host1=$(bash scripts/netns-hosts.sh addr "$netns_set" 1)
  for senc in "${encs[@]}"; do
    start_osprey_server "ns-osprey-$senc" "$host1:0" "${h1[@]}" -- --rpc_encryption="$senc"
    for cenc in "${encs[@]}"; do
      kudu_client_cell netns-kudu-client "$cenc" "$senc" "$(expect "$cenc" 0 "$senc" 0 0 0)" \
        "$srv_addr" "${h2[@]}" -- --rpc_encryption="$cenc"
    done
    stop_server "$srv_pid"
  done
  for senc in "${encs[@]}"; do
    start_kudu_server "ns-kudu-$senc" "${h1[@]}" -- --rpc_encryption="$senc"
    port=${srv_addr##*:}
    "${h1[@]}" socat "TCP-LISTEN:$port,bind=$host1,fork,reuseaddr" "TCP:127.0.0.1:$port" &
    fwd_pid=$!
    pids+=("$fwd_pid")
    sleep 0.3
    for cenc in "${encs[@]}"; do
      # The Kudu server sees socat's loopback connection; the client does not
      # see a loopback peer, so it never lists TLS_AUTHENTICATION_ONLY.
      osprey_client_cell netns-osprey-client "$cenc" "$senc" "$(expect "$cenc" 0 "$senc" 0 0 1)" \
        "$host1:$port" "${h2[@]}" -- --rpc_encryption="$cenc"
    done
    stop_server "$fwd_pid"
    stop_server "$srv_pid"
  done
fi
fi

# --- 6: Kerberos, with a KDC of its own ---------------------------------------------

# A throw-away MIT KDC on 127.0.0.1 in realm OSPREYINTEROP.TEST under $tmp/kdc,
# principals alice, kudu/127.0.0.1 and other/127.0.0.1 with keytabs, alice
# kinit'ed; exports KRB5_CONFIG, KRB5_KDC_PROFILE, KRB5CCNAME for what follows.
# ignore_acceptor_hostname, as Kudu's MiniKdc: Kudu's server checks at start
# that it can accept for kudu/<its FQDN>, which a loopback realm lacks.
kdc_start() {
  kdc=$tmp/kdc
  mkdir -p "$kdc"
  local realm=OSPREYINTEROP.TEST port i p
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  printf '%s\n' "[kdcdefaults]" "  kdc_listen = 127.0.0.1:$port" "  kdc_tcp_listen = 127.0.0.1:$port" \
    "[realms]" "  $realm = {" "    database_name = $kdc/principal" "    key_stash_file = $kdc/stash" \
    "    acl_file = $kdc/kadm5.acl" "  }" "[logging]" "  kdc = FILE:$kdc/kdc.log" > "$kdc/kdc.conf"
  printf '%s\n' "[libdefaults]" "  default_realm = $realm" "  dns_lookup_kdc = false" \
    "  dns_lookup_realm = false" "  dns_canonicalize_hostname = false" "  rdns = false" \
    "  udp_preference_limit = 1" "  ignore_acceptor_hostname = true" "[realms]" "  $realm = {" "    kdc = 127.0.0.1:$port" "  }" \
    > "$kdc/krb5.conf"
  : > "$kdc/kadm5.acl"
  export KRB5_CONFIG=$kdc/krb5.conf KRB5_KDC_PROFILE=$kdc/kdc.conf KRB5CCNAME=FILE:$kdc/ccache
  export KRB5RCACHEDIR=$kdc
  unset KRB5_KTNAME KRB5_CLIENT_KTNAME
  /usr/sbin/kdb5_util create -s -r "$realm" -P master -W > "$kdc/setup.log" 2>&1 || return 1
  /usr/sbin/krb5kdc -n -r "$realm" >> "$kdc/setup.log" 2>&1 &
  pids+=($!)
  for i in $(seq 1 100); do
    (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null && break
    sleep 0.1
  done
  for p in alice kudu/127.0.0.1 other/127.0.0.1; do
    /usr/sbin/kadmin.local -r "$realm" -q "addprinc -randkey $p" >> "$kdc/setup.log" 2>&1 &&
      /usr/sbin/kadmin.local -r "$realm" -q "ktadd -k $kdc/${p%%/*}.keytab $p" \
        >> "$kdc/setup.log" 2>&1 || return 1
  done
  kinit -kt "$kdc/alice.keytab" alice >> "$kdc/setup.log" 2>&1 || return 1
  KRB_REALM=$realm
}

# inbound_gssapi ADDR: the Osprey server's count of Kerberos-authenticated
# inbound connections.
inbound_gssapi() {
  curl -s --max-time 5 "http://$1/metrics" |
    awk '/^osprey_connections_authenticated_total\{direction="inbound",method="gssapi"\}/ {print $2}'
}

# refused_check WHAT WANT_REGEX SECONDS OUT ERR RC: refused (RC != 0), within
# SECONDS, saying WANT_REGEX.
refused_check() {
  local what=$1 want=$2 took=$3 out=$4 err=$5 rc=$6 why
  why=$(grep -m1 -ohE "$want" "$out" "$err" | head -c 200)
  if [[ $rc == 0 ]]; then
    fail "$what: expected a refusal, it succeeded"
  elif [[ -z $why ]] || (($(echo "$took > 5" | bc))); then
    fail "$what: refused, but not fast and clear (${took}s: $(grep -m1 -hiE 'error|fail' "$err" "$out" | head -c 300))"
  else
    pass "$what: refused in ${took}s ($why)"
  fi
}

elapsed_since() { echo "$(date +%s.%N) - $1" | bc; }

if section kerberos; then
  if [[ ! -x /usr/sbin/krb5kdc || ! -x /usr/sbin/kadmin.local ]] || ! command -v kinit > /dev/null; then
    echo "kudu-interop: kerberos section skipped: needs krb5-kdc krb5-admin-server krb5-user" >&2
  elif ! kdc_start; then
    fail "kerberos: the KDC did not start: $(tail -5 "$tmp/kdc/setup.log")"
  else
    krb_flags=(--rpc_authentication=required --keytab_file="$kdc/kudu.keytab" --principal=kudu/127.0.0.1)
    authn_line="AUTHN user=alice principal=alice@$KRB_REALM method=SASL/GSSAPI"
    # Osprey client with alice's ticket -> Kudu server with its keytab.
    for cenc in disabled optional "required EL"; do
      senc=${cenc% EL}
      [[ $senc == disabled ]] && senc=optional # Kudu's default; TLS is then the client's choice
      sflags=(--rpc_encryption="$senc")
      cflags=(--rpc_encryption="${cenc% EL}")
      if [[ $cenc == *EL ]]; then
        sflags+=(--rpc_encrypt_loopback_connections)
        cflags+=(--rpc_encrypt_loopback_connections)
      fi
      start_kudu_server kudu-krb -- "${krb_flags[@]}" "${sflags[@]}"
      timeout 60 "$BENCH" -server_address "$srv_addr" -mode both -run_seconds 0.3 -client_threads 2 \
        -async_call_concurrency 8 --rpc_authentication=required "${cflags[@]}" \
        > "$tmp/cell.out" 2> "$tmp/cell.err"
      rc=$?
      sleep 0.2
      seen=$(grep -c "$authn_line" "$tmp/kudu-krb.err")
      neg=$(grep -m1 '^Encryption:' "$tmp/cell.out" | sed -E 's/.*\(negotiated ([^;]*);.*/\1/')
      what="kerberos: Osprey client (ticket; $cenc) -> Kudu server (keytab, required; ${sflags[*]})"
      if [[ $rc == 0 ]] && grep -q '^Errors:           0$' "$tmp/cell.out" && ((seen > 0)); then
        pass "$what: both modes ran, negotiated $neg; Kudu authenticated alice@$KRB_REALM by SASL/GSSAPI on $seen connections"
      else
        fail "$what: rc $rc, $seen GSSAPI connections on Kudu's side ($(head -c 300 "$tmp/cell.err"))"
      fi
      stop_server "$srv_pid"
    done
    # Kudu client with alice's ticket -> Osprey server with its keytab.
    start_osprey_server osprey-krb 127.0.0.1:0 -- "${krb_flags[@]}" --rpc_encryption=optional
    for cenc in disabled optional "required EL"; do
      cflags=(--rpc_encryption="${cenc% EL}")
      [[ $cenc == *EL ]] && cflags+=(--rpc_encrypt_loopback_connections)
      before=$(inbound_gssapi "$metrics_addr")
      timeout 60 "$KUDU/kudu-calc-client" "$srv_addr" 20 --call_timeout_ms=10000 \
        --rpc_authentication=required "${cflags[@]}" > "$tmp/cell.out" 2> "$tmp/cell.err"
      rc=$?
      after=$(inbound_gssapi "$metrics_addr")
      tls=$(grep -m1 -o 'tls=[^ ]*' "$tmp/cell.err")
      what="kerberos: Kudu client (ticket; $cenc) -> Osprey server (keytab, required; optional TLS)"
      if [[ $rc == 0 ]] && grep -q '^DONE calls=20 failures=0' "$tmp/cell.out" &&
        grep -q 'sasl_mech=GSSAPI' "$tmp/cell.err" && ((after > before)); then
        pass "$what: 20 calls ok, Kudu says sasl_mech=GSSAPI $tls; Osprey counted $((after - before)) GSSAPI connection(s)"
      else
        fail "$what: rc $rc ($(grep -m1 -hE 'DONE|rror' "$tmp/cell.out" "$tmp/cell.err" | head -c 300))"
      fi
    done
    timeout 60 "$KUDU/kudu-calc-client" "$srv_addr" 20 --rpc_authentication=required --exactly_once \
      > "$tmp/cell.out" 2> "$tmp/cell.err"
    if grep -q '^DONE exactly_once calls=20 replays_ok=20 failures=0' "$tmp/cell.out"; then
      pass "kerberos: Kudu's exactly-once client (ticket) -> Osprey server: 20 calls, 20 replays answered from the tracker"
    else
      fail "kerberos: Kudu's exactly-once client -> Osprey server: $(head -c 300 "$tmp/cell.out")"
    fi
    # Refusals: no ticket, both ways; a service principal the KDC lacks; a
    # server whose keytab lacks the principal asked for.
    start=$(date +%s.%N)
    KRB5CCNAME=FILE:$kdc/no-such-cache timeout 60 "$KUDU/kudu-calc-client" "$srv_addr" 20 \
      --rpc_authentication=required > "$tmp/cell.out" 2> "$tmp/cell.err"
    rc=$?
    refused_check "kerberos: Kudu client without a ticket -> Osprey server (required)" \
      '[^:]*Kerberos credentials[^.]*' "$(elapsed_since "$start")" "$tmp/cell.out" "$tmp/cell.err" $rc
    stop_server "$srv_pid"
    start_kudu_server kudu-krb -- "${krb_flags[@]}"
    start=$(date +%s.%N)
    KRB5CCNAME=FILE:$kdc/no-such-cache timeout 60 "$BENCH" -server_address "$srv_addr" \
      -run_seconds 0.2 --rpc_authentication=required > "$tmp/cell.out" 2> "$tmp/cell.err"
    rc=$?
    refused_check "kerberos: Osprey client without a ticket -> Kudu server (required)" \
      'no Kerberos ticket: run kinit[^)]*' "$(elapsed_since "$start")" "$tmp/cell.out" "$tmp/cell.err" $rc
    start=$(date +%s.%N)
    timeout 60 "$BENCH" -server_address "$srv_addr" -run_seconds 0.2 --rpc_authentication=required \
      --sasl_protocol_name=nosuch > "$tmp/cell.out" 2> "$tmp/cell.err"
    rc=$?
    refused_check "kerberos: Osprey client asking for nosuch/127.0.0.1 -> Kudu server" \
      "the KDC does not know the server's principal[^)]*" "$(elapsed_since "$start")" \
      "$tmp/cell.out" "$tmp/cell.err" $rc
    stop_server "$srv_pid"
    start_osprey_server osprey-krb-other 127.0.0.1:0 -- --rpc_authentication=required \
      --keytab_file="$kdc/other.keytab" --principal=other/127.0.0.1
    start=$(date +%s.%N)
    timeout 60 "$KUDU/kudu-calc-client" "$srv_addr" 20 --rpc_authentication=required \
      > "$tmp/cell.out" 2> "$tmp/cell.err"
    rc=$?
    refused_check "kerberos: Kudu client asking for kudu/127.0.0.1 -> Osprey server keyed for other/127.0.0.1" \
      'Kerberos authentication of the client[^(]*' "$(elapsed_since "$start")" \
      "$tmp/cell.out" "$tmp/cell.err" $rc
    stop_server "$srv_pid"
  fi
fi

# build_against_kudu KUDU_SOURCE SOURCE OUTPUT: a program of ours built
# against the peer's own libraries and headers (Kudu's RPC, security and
# test service), as Kudu's own binaries are.
build_against_kudu() {
  local ksrc=$1 source=$2 output=$3
  g++ -std=c++17 -O1 -pthread -fno-strict-aliasing -Wno-deprecated-declarations \
    -D__STDC_FORMAT_MACROS -DKUDU_HEADERS_USE_SHORT_STATUS_MACROS=1 -DKUDU_HEADERS_USE_RICH_SLICE=1 \
    -DKUDU_HEADERS_NO_STUBS=1 -DKUDU_STATIC_DEFINE -I"$KUDU/gen" -I"$ksrc" \
    -I"$(sed -n 's/^kudu_anchor_SOURCE_DIR:[A-Z]*=//p' "$KUDU/CMakeCache.txt")/stubs" \
    "$source" -o "$output" "$KUDU/librtest_krpc.a" "$KUDU/libkudu_core.a" \
    "$KUDU/libbase_proto.a" "$KUDU/libgutil.a" -lsasl2 -lgssapi_krb5 -lkrb5 -lk5crypto -lcom_err \
    -lev -lssl -lcrypto -lprotobuf -lglog -lgflags -lunwind -lz -ldl -lrt
}

# --- 7: tokens Kudu's own TokenSigner issued ---------------------------------------

if section tokens; then
  echo "== tokens from Kudu's TokenSigner -> Osprey server (KuduTokenVerifier)"
  ksrc=$(sed -n 's/^KUDU_SRC:[A-Z]*=//p' "$KUDU/CMakeCache.txt" 2> /dev/null)
  token_test="$BUILD_DIR/tests/token-auth-test"
  if [[ -z $ksrc || ! -f $ksrc/kudu/security/token_signer.h || ! -f $KUDU/libkudu_core.a ]]; then
    fail "tokens: no Kudu source or libkudu_core.a behind $KUDU (KUDU_SRC in its CMakeCache.txt)"
  elif [[ ! -x $token_test ]]; then
    fail "tokens: $token_test not found: run scripts/build.sh first"
  elif ! build_against_kudu "$ksrc" scripts/kudu-token-issuer.cc "$tmp/kudu-token-issuer" \
    > "$tmp/issuer.log" 2>&1; then
    fail "tokens: scripts/kudu-token-issuer.cc did not build against $KUDU: $(head -c 300 "$tmp/issuer.log")"
  else
    mkdir -p "$tmp/tokens"
    if ! issued=$("$tmp/kudu-token-issuer" "$tmp/tokens" kudu-token-user 600 2>&1); then
      fail "tokens: Kudu's TokenSigner issued nothing: $issued"
    else
      OSPREY_KUDU_TOKEN_DIR="$tmp/tokens" OSPREY_KUDU_TOKEN_USER=kudu-token-user \
        timeout 120 "$token_test" --gtest_filter='KuduIssuedTokenTest.*' > "$tmp/tokens.out" 2>&1
      for t in ATokenKudusSignerIssuedAuthenticatesItsUser AKudusTokenChangedByOneBitIsRefused; do
        what="tokens: $t (${issued#ISSUED })"
        if grep -q "^\[       OK \] KuduIssuedTokenTest.$t" "$tmp/tokens.out"; then
          pass "$what"
        else
          fail "$what: $(grep -m3 -E 'Failure|SKIPPED|error' "$tmp/tokens.out")"
        fi
      done
    fi
  fi
fi

# --- 8: the osprey command against Kudu's server, with Kudu's .proto ---------------

# cli_check WHAT RC PATTERN -- OSPREY_ARGS...: runs osprey; passes if it exits
# RC with PATTERN (a fixed string) in its stdout or stderr.
cli_check() {
  local what=$1 want_rc=$2 pattern=$3
  shift 4
  local out rc
  out=$(timeout 60 "$OSPREY" "$@" 2>&1 < /dev/null)
  rc=$?
  if [[ $rc == "$want_rc" ]] && grep -qF -- "$pattern" <<< "$out"; then
    pass "cli: $what"
  else
    fail "cli: $what: exit $rc (wanted $want_rc), output: $(head -c 400 <<< "$out")"
  fi
}

if section cli; then
  echo "== the osprey command -> Kudu server, with Kudu's rtest.proto"
  OSPREY="$BUILD_DIR/tools/osprey/osprey"
  ksrc=$(sed -n 's/^KUDU_SRC:[A-Z]*=//p' "$KUDU/CMakeCache.txt" 2> /dev/null)
  if [[ ! -x $OSPREY ]]; then
    fail "cli: $OSPREY not found: run scripts/build.sh first"
  elif [[ -z $ksrc || ! -f $ksrc/kudu/rpc/rtest.proto ]]; then
    fail "cli: no Kudu source with kudu/rpc/rtest.proto behind $KUDU (KUDU_SRC in its CMakeCache.txt)"
  else
    calc=kudu.rpc_test.CalculatorService
    kproto=(--proto "$ksrc/kudu/rpc/rtest.proto" -I "$ksrc")
    start_kudu_server kudu-cli -- --rpc_encryption=disabled
    a=$srv_addr
    cli_check "list with rtest.proto" 0 "  rpc AddExactlyOnce(kudu.rpc_test.ExactlyOnceRequestPB)" -- \
      list "$a" "${kproto[@]}"
    cli_check "describe a message of rtest.proto" 0 "message SendTwoStringsRequestPB {" -- \
      describe "$a" kudu.rpc_test.SendTwoStringsRequestPB "${kproto[@]}"
    cli_check "call Add, JSON" 0 '"result": 42' -- call "$a" "$calc.Add" '{"x": 20, "y": 22}' "${kproto[@]}"
    cli_check "call Add, text format" 0 "result: 7" -- \
      call "$a" "$calc.Add" 'x: 3 y: 4' --format text "${kproto[@]}"
    cli_check "call WhoAmI as another user" 0 '"real_user": "cli-user"' -- \
      call "$a" "$calc.WhoAmI" --user cli-user "${kproto[@]}"
    printf 'a request sidecar for Kudu' > "$tmp/cli-sidecar"
    cli_check "call Echo with a request sidecar" 0 '"data": "with a sidecar"' -- \
      call "$a" "$calc.Echo" '{"data": "with a sidecar"}' --sidecar "$tmp/cli-sidecar" "${kproto[@]}"
    cli_check "call AddExactlyOnce (track_rpc_result) with --repeat 3" 0 '"current_val": 15' -- \
      call "$a" "$calc.AddExactlyOnce" '{"value_to_add": 5}' --repeat 3 "${kproto[@]}"
    cli_check "a request missing a required field is refused before it is sent" 2 \
      "the request does not match kudu.rpc_test.AddRequestPB (JSON): missing field y" -- \
      call "$a" "$calc.Add" '{"x": 1}' "${kproto[@]}"
    cli_check "an application error: its message and its detail, decoded with rtest.proto" 1 \
      'its detail (kudu.rpc_test.CalculatorError.app_error_ext): {"extra_error_data":"some application-specific error data"}' -- \
      call "$a" "$calc.Sleep" '{"sleep_micros": 1, "return_app_error": true}' "${kproto[@]}"
    cli_check "a service the .proto has and the server lacks: the server's code" 1 \
      "the server answered ERROR_" -- \
      call "$a" osprey.rpc_test.CalculatorService.Add '{"x": 1, "y": 2}' --proto tests/rpc_test.proto -I tests
    cli_check "a timeout" 1 "Timed out: $calc.Sleep RPC to $a timed out after 0.300s" -- \
      call "$a" "$calc.Sleep" '{"sleep_micros": 3000000}' --timeout 0.3 "${kproto[@]}"
    cli_check "no .proto: no reflection on a Kudu server" 1 "no reflection on this server; give --proto" -- \
      list "$a"
    cli_check "a refusal: TLS required of a server without it" 1 "TLS" -- \
      call "$a" "$calc.Add" '{"x": 1, "y": 2}' --rpc_encryption required "${kproto[@]}"
    stop_server "$srv_pid"
    start_kudu_server kudu-cli-tls -- --rpc_encryption=required --rpc_encrypt_loopback_connections
    cli_check "call Add over full TLS" 0 '"result": 42' -- \
      call "$srv_addr" "$calc.Add" '{"x": 40, "y": 2}' --rpc_encryption required \
      --rpc_encrypt_loopback_connections "${kproto[@]}"
    stop_server "$srv_pid"
  fi
fi
# --- 9: a Kudu client and a draining Osprey server ----------------------------------

if section drain; then
  echo "== Kudu client -> a draining Osprey server (SIGTERM), then another"
  ksrc=$(sed -n 's/^KUDU_SRC:[A-Z]*=//p' "$KUDU/CMakeCache.txt" 2> /dev/null)
  if [[ -z $ksrc || ! -f $KUDU/librtest_krpc.a ]]; then
    fail "drain: no Kudu source or librtest_krpc.a behind $KUDU (KUDU_SRC in its CMakeCache.txt)"
  elif ! build_against_kudu "$ksrc" scripts/kudu-drain-client.cc "$tmp/kudu-drain-client" \
    > "$tmp/drain-client.log" 2>&1; then
    fail "drain: scripts/kudu-drain-client.cc did not build against $KUDU: $(head -c 300 "$tmp/drain-client.log")"
  else
    start_osprey_server drain-a 127.0.0.1:0 -- -server_reactors 1 -drain_grace_ms 5000
    a=$srv_addr a_pid=$srv_pid
    start_osprey_server drain-b 127.0.0.1:0 -- -server_reactors 1
    b=$srv_addr b_pid=$srv_pid
    # A Kudu call running on A when the drain begins (2 s), which keeps the
    # drain open and must be answered.
    "$tmp/kudu-drain-client" "$a" 0 2000000 > "$tmp/held.out" 2> "$tmp/held.err" &
    held_pid=$!
    pids+=("$held_pid")
    sleep 0.3
    kill -TERM "$a_pid"
    sleep 0.3
    timeout 60 "$tmp/kudu-drain-client" "$a,$b" 20 > "$tmp/drain.out" 2> "$tmp/drain.err"
    wait "$held_pid"
    wait "$a_pid"
    a_rc=$?
    refusal=$(grep -m1 '^RETRIED ' "$tmp/drain.out")
    if [[ $refusal == "RETRIED code=ERROR_UNAVAILABLE server=$a "*"did not run"* ]] &&
      grep -q '^DONE calls=20 failures=0 retried=1$' "$tmp/drain.out"; then
      pass "drain: a new call to the draining server is answered ERROR_UNAVAILABLE, which Kudu's clients retry; on the other server all 20 calls succeed (${refusal#RETRIED })"
    else
      fail "drain: expected one ERROR_UNAVAILABLE retried elsewhere and 20 calls: $(head -c 400 "$tmp/drain.out") $(head -c 200 "$tmp/drain.err")"
    fi
    if grep -q '^HELD ok' "$tmp/held.out"; then
      pass "drain: the Kudu call running when the drain began is answered"
    else
      fail "drain: the Kudu call running when the drain began: $(head -c 300 "$tmp/held.out" "$tmp/held.err")"
    fi
    if [[ $a_rc == 0 ]] && grep -q 'drained in' "$tmp/drain-a.err"; then
      pass "drain: the Osprey server exits 0 once drained ($(grep -o 'drained in [0-9]* ms' "$tmp/drain-a.err"))"
    else
      fail "drain: the Osprey server exited $a_rc: $(tail -c 300 "$tmp/drain-a.err")"
    fi
    stop_server "$b_pid"
  fi
fi

# --- the tables -------------------------------------------------------------------

print_table() {
  local matrix=$1 title=$2
  shift 2
  local cols=("$@") row col
  echo
  echo "$title"
  echo
  printf '| client ↓ / server → |'
  for col in "${cols[@]}"; do printf ' %s |' "$col"; done
  echo
  printf '|---|'
  for col in "${cols[@]}"; do printf -- '---|'; done
  echo
  local rows=()
  for row in disabled "disabled EL" optional "optional EL" required "required EL"; do
    [[ -n ${table["$matrix|$row|${cols[0]}"]:-} ]] && rows+=("$row")
  done
  for row in "${rows[@]}"; do
    printf '| %s |' "$row"
    for col in "${cols[@]}"; do printf ' %s |' "${table["$matrix|$row|$col"]:-}"; done
    echo
  done
}
print_table loopback-kudu-client "Kudu client -> Osprey server, loopback:" "${encs[@]}"
print_table loopback-osprey-client "Osprey client -> Kudu server, loopback:" \
  disabled "disabled EL" optional "optional EL" required "required EL"
print_table netns-kudu-client "Kudu client -> Osprey server, between hosts:" "${encs[@]}"
print_table netns-osprey-client "Osprey client -> Kudu server, between hosts:" "${encs[@]}"

echo
echo "kudu-interop: $((passed + failed)) checks, $passed passed, $failed wrong" \
  "(Kudu built from ${KUDU_COMMIT:-a commit not given: set KUDU_COMMIT} in $KUDU; Osprey" \
  "$(git rev-parse --short HEAD 2> /dev/null))"
((failed == 0))
