#!/bin/sh
# Installs the Debian packages gemmd needs to build and test. Idempotent: packages
# already present are left alone. Run as root; otherwise it prints the command.
set -eu

GEMMD_DEBS="build-essential cmake ninja-build pkg-config git \
  libuv1-dev libmsgpack-dev libyaml-dev check libsubunit-dev \
  libopenblas-dev libsystemd-dev systemd libmicrohttpd-dev prometheus \
  python3 python3-msgpack python3-numpy python3-scipy python3-pytest \
  python3-venv python3-pip python3-setuptools python3-wheel clang libclang-rt-14-dev \
  groff-base man-db procps dpkg-dev file haproxy libblas-test libblas3 gfortran"

missing=""
for pkg in $GEMMD_DEBS; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $pkg"
  fi
done

if [ -z "$missing" ]; then
  echo "install-deps: all packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing:$missing"
  echo "run as root:  apt-get update && apt-get install -y --no-install-recommends$missing"
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends $missing
