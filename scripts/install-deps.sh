#!/usr/bin/env bash
# Installs the Debian packages Osprey needs, only those missing.
# Idempotent: a machine that has them all runs no apt-get at all.
#   install-deps.sh               what building and testing need
#   install-deps.sh --build-only  what building needs (scripts/build.sh);
#                                 the tests' tools (a KDC, etcd, Chromium,
#                                 Prometheus...) come with the full call,
#                                 which scripts/run-tests.sh makes before
#                                 the tests run
# Calls that overlap (.ci/run installs the tests' tools while it builds)
# take turns: the second waits for the first's apt-get, then finds nothing
# missing. A call that finds nothing missing takes no turn at all.
set -euo pipefail

build_packages=(
  cmake g++ make ninja-build
  # The executables link with lld when it is there (OSPREY_USE_LLD).
  lld
  libprotobuf-dev protobuf-compiler libprotoc-dev
  libgflags-dev libgoogle-glog-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libhttp-parser-dev nlohmann-json3-dev prometheus-cpp-dev
  # The osprey command line tool parses its subcommands and flags with CLI11.
  libcli11-dev
  # Kerberos: the library links MIT's GSS-API.
  libkrb5-dev
  # Registration and discovery (issue 50): the library speaks etcd's gateway
  # with libcurl.
  libcurl4-openssl-dev
)
test_packages=(
  # Kerberos: the tests run a real KDC.
  krb5-kdc krb5-admin-server krb5-user
  # The observability tests check /metrics and /rpcz with the real tools.
  prometheus python3-prometheus-client chromium python3-pil curl
  # The registry tests run a real etcd.
  etcd-server
  # The cross-host tests make network namespaces and drop packets.
  iproute2 nftables
  # scripts/benchmarks.sh draws its plots (and its test checks them).
  gnuplot-nox
)
# clang builds the sanitizer and fuzz targets and checks formatting in CI; it
# is optional elsewhere.
if [[ "${OSPREY_WITH_CLANG:-0}" == 1 ]]; then
  build_packages+=(clang libclang-rt-14-dev clang-format-14)
fi

case "${1:-}" in
  --build-only) packages=("${build_packages[@]}") ;;
  "") packages=("${build_packages[@]}" "${test_packages[@]}") ;;
  *) echo "usage: install-deps.sh [--build-only]" >&2; exit 2 ;;
esac

missing_packages() {
  missing=()
  for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
}

missing_packages
if ((${#missing[@]} == 0)); then
  exit 0
fi
# The turn is a lock on a file every user can read (flock needs no write
# access), whichever user made it first.
lock=/tmp/osprey-install-deps.lock
[[ -e $lock ]] || : >>"$lock"
exec 9<"$lock"
flock 9
missing_packages  # again: a call before ours may have installed them
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) != 0 ]]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Waits for another program's apt-get or dpkg rather than failing.
$SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
