#!/bin/sh
# Builds gemmd and runs the whole test suite (README's test command).
#   scripts/test.sh [BUILD_DIR]      default BUILD_DIR: build
# Tests labelled gpu skip with a message where no GPU is found.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}

if [ "$(id -u)" -eq 0 ]; then
  scripts/install-deps.sh
else
  scripts/install-deps.sh || { echo "test.sh: install the packages above first" >&2; exit 1; }
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 600
