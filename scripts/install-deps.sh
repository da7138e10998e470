#!/usr/bin/env bash
# Installs the Debian packages Osprey builds against, only those missing.
# Idempotent: a machine that has them all runs no apt-get at all.
set -euo pipefail

packages=(
  cmake g++ make ninja-build
  # The executables link with lld when it is there (OSPREY_USE_LLD).
  lld
  libprotobuf-dev protobuf-compiler libprotoc-dev
  libgflags-dev libgoogle-glog-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libhttp-parser-dev nlohmann-json3-dev prometheus-cpp-dev
  # The osprey command line tool parses its subcommands and flags with CLI11.
  libcli11-dev
  # Kerberos: the library links MIT's GSS-API; the tests run a real KDC.
  libkrb5-dev krb5-kdc krb5-admin-server krb5-user
  # The observability tests check /metrics and /rpcz with the real tools.
  prometheus python3-prometheus-client chromium python3-pil curl
  # Registration and discovery (issue 50): the library speaks etcd's gateway
  # with libcurl; the tests run a real etcd.
  libcurl4-openssl-dev etcd-server
  # The cross-host tests make network namespaces and drop packets.
  iproute2 nftables
  # scripts/benchmarks.sh draws its plots (and its test checks them).
  gnuplot-nox
)
# clang builds the sanitizer and fuzz targets and checks formatting in CI; it
# is optional elsewhere.
if [[ "${OSPREY_WITH_CLANG:-0}" == 1 ]]; then
  packages+=(clang libclang-rt-14-dev clang-format-14)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) != 0 ]]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
