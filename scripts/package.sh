#!/bin/sh
# Builds the Debian packages (gemmd, gemmctl, libgemmclientN, libgemmclient-dev, and
# python3-gemmclient when python/ is there) into BUILD_DIR, from a tree configured with the
# prefix /usr. Extra arguments go to cmake's configure step.
#   scripts/package.sh [BUILD_DIR [CMAKE_ARGS...]]     default BUILD_DIR: build-deb
# The GPU backend is built when nvcc is found (the packages then need the CUDA runtime
# libraries on the target, which no Debian package provides); -DGEMMD_WITH_CUDA=OFF builds a
# CPU-only package.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-deb}
[ $# -gt 0 ] && shift

scripts/install-deps.sh || { echo "package.sh: install the packages above first" >&2; exit 1; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
  -DGEMMD_BUILD_TESTS=OFF -DGEMMD_BUILD_BENCH=OFF "$@"
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target gemmd_installables
(cd "$build" && cpack -G DEB)
ls -1 "$build"/*.deb
