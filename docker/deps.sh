#!/usr/bin/env bash
# Installs what delayd needs to build and test, from Debian 12's packages.
# Used by the README's first command, by .ci/run and by the Dockerfile, so all
# three build with the same packages. Idempotent; uses sudo when not root.
# DELAYD_DEPS=build installs only what building delayd and delayctl needs
# (the Dockerfile's build stage).
set -euo pipefail

packages=(
  # toolchain
  cmake ninja-build g++ pkg-config
  # libraries
  libasio-dev libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev
  protobuf-compiler libspdlog-dev libcli11-dev librocksdb-dev libssl-dev
  prometheus-cpp-dev libboost-dev libsimdjson-dev libpq-dev libhowardhinnant-date-dev tzdata
  libcurl4-openssl-dev
  # rebuilds (the Dockerfile's build stage keeps its cache in a cache mount)
  ccache
)
if [ "${DELAYD_DEPS:-all}" != build ]; then
  packages+=(
    # tests and benchmarks
    libgtest-dev libgmock-dev libbenchmark-dev openssl curl
    # fuzz targets: clang with libFuzzer
    clang libclang-rt-14-dev
    # the other-language client tests: Debian's Python gRPC; Node.js, whose
    # gRPC packages come from npm (tests/clients/node/package-lock.json)
    python3-grpcio python3-protobuf nodejs
    # the Python library's install test: a venv over Debian's grpcio
    python3-venv python3-setuptools
    # the Debian package: cpack's dependencies from dpkg-shlibdeps
    dpkg-dev
    # the metrics test scrapes delayd with a real Prometheus
    prometheus
    # the PostgreSQL store's tests start their own servers
    postgresql-15
    # the web console's test drives Debian's Chromium with Playwright
    # (tests/console/package-lock.json)
    chromium
  )
  # Node.js from elsewhere (e.g. NodeSource) brings its own npm; Debian's
  # nodejs needs Debian's npm.
  command -v npm >/dev/null || packages+=(npm)
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
  --no-install-recommends "${missing[@]}"
