#!/usr/bin/env bash
# Separate network stacks ("hosts") on one machine, for tests and the
# cross-host benchmark: Linux network namespaces joined by veth pairs to a
# bridge that lives in a namespace of its own, so the machine's own network
# is never touched. Host i of a set has address 198.18.0.i/24 (198.18.0.0/15
# is set aside for benchmarking, RFC 2544) on its eth0, and loopback.
# Needs root, iproute2 and nftables.
#
#   netns-hosts.sh check                 exit 0 if hosts can be made here, else
#                                        print the reason and exit 1
#   netns-hosts.sh up SET N              make hosts 1..N of SET (a short name,
#                                        unique to the caller: put its PID in it)
#   netns-hosts.sh name SET I            the namespace of host I (for ip netns exec)
#   netns-hosts.sh addr SET I            host I's address
#   netns-hosts.sh exec SET I CMD...     run CMD in host I
#   netns-hosts.sh drop SET I [J]        host I drops every packet to and from
#                                        host J (every host if J is omitted),
#                                        silently: no RST, no ICMP
#   netns-hosts.sh restore SET I         host I stops dropping
#   netns-hosts.sh link SET I down|up    take host I's link down or up
#   netns-hosts.sh down SET              remove every namespace of SET
#
# Every namespace of a set is named osprey-SET-*; `up` also removes sets
# whose name starts with a PID that no longer runs (left by a killed test).
set -euo pipefail

die() {
  echo "netns-hosts: $*" >&2
  exit 1
}

ns() { echo "osprey-$1-h$2"; }
switch_ns() { echo "osprey-$1-sw"; }
addr() { echo "198.18.0.$2"; }

check() {
  [[ $(id -u) == 0 ]] || { echo "needs root to make network namespaces"; return 1; }
  command -v ip > /dev/null || { echo "needs ip (Debian package iproute2)"; return 1; }
  command -v nft > /dev/null || { echo "needs nft (Debian package nftables)"; return 1; }
  local probe="osprey-probe-$$"
  if ! ip netns add "$probe" 2> /dev/null; then
    echo "cannot make network namespaces here (ip netns add failed)"
    return 1
  fi
  ip netns del "$probe"
}

# Sets left behind by a test that was killed before it could clean up.
reap_stale() {
  local n pid
  for n in $(ip netns list 2> /dev/null | awk '{print $1}' | grep '^osprey-[0-9]' || true); do
    pid=${n#osprey-}
    pid=${pid%%[!0-9]*}
    if [[ -n $pid ]] && ! kill -0 "$pid" 2> /dev/null; then ip netns del "$n" 2> /dev/null || true; fi
  done
}

up() {
  local set=$1 n=$2 sw i
  [[ $set =~ ^[A-Za-z0-9]{1,24}$ ]] || die "set name must be 1-24 letters or digits, got '$set'"
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || die "host count must be 1 to 200, got '$n'"
  reap_stale
  sw=$(switch_ns "$set")
  ip netns add "$sw"
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for ((i = 1; i <= n; i++)); do
    local h
    h=$(ns "$set" "$i")
    ip netns add "$h"
    ip -n "$h" link set lo up
    ip -n "$h" link add eth0 type veth peer name "p$i" netns "$sw"
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    ip -n "$h" addr add "$(addr "$set" "$i")/24" dev eth0
    ip -n "$h" link set eth0 up
  done
}

down() {
  local set=$1 n
  for n in $(ip netns list 2> /dev/null | awk '{print $1}' | grep "^osprey-$set-" || true); do
    ip netns del "$n" 2> /dev/null || true
  done
}

drop() {
  local set=$1 i=$2 j=${3:-} h match_in="" match_out=""
  h=$(ns "$set" "$i")
  if [[ -n $j ]]; then
    match_in="ip saddr $(addr "$set" "$j")"
    match_out="ip daddr $(addr "$set" "$j")"
  fi
  restore "$set" "$i"
  # Only eth0: the host's own loopback keeps working, as a real host's does.
  ip netns exec "$h" nft -f - << EOF
table inet osprey_drop {
  chain in { type filter hook input priority -300; policy accept; iifname "eth0" $match_in drop; }
  chain out { type filter hook output priority -300; policy accept; oifname "eth0" $match_out drop; }
}
EOF
}

restore() {
  local h
  h=$(ns "$1" "$2")
  ip netns exec "$h" nft delete table inet osprey_drop 2> /dev/null || true
}

[[ $# -ge 1 ]] || die "usage: see the comment at the top of $0"
cmd=$1
shift
case "$cmd" in
  check) check ;;
  up) [[ $# == 2 ]] || die "usage: up SET N"; up "$@" ;;
  name) [[ $# == 2 ]] || die "usage: name SET I"; ns "$@" ;;
  addr) [[ $# == 2 ]] || die "usage: addr SET I"; addr "$@" ;;
  exec)
    [[ $# -ge 3 ]] || die "usage: exec SET I CMD..."
    h=$(ns "$1" "$2")
    shift 2
    exec ip netns exec "$h" "$@"
    ;;
  drop)
    [[ $# == 2 || $# == 3 ]] || die "usage: drop SET I [J]"
    drop "$@"
    ;;
  restore) [[ $# == 2 ]] || die "usage: restore SET I"; restore "$@" ;;
  link)
    [[ $# == 3 && ($3 == up || $3 == down) ]] || die "usage: link SET I down|up"
    ip -n "$(ns "$1" "$2")" link set eth0 "$3"
    ;;
  down) [[ $# == 1 ]] || die "usage: down SET"; down "$@" ;;
  *) die "unknown command '$cmd'" ;;
esac
