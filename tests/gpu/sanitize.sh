#!/bin/sh
# sanitize.sh TOOL SANITIZER TEST_BINARY
# Runs TEST_BINARY --quick under `compute-sanitizer --tool TOOL` and fails on any report.
# Exits 77 (ctest SKIP) when compute-sanitizer was not found or there is no CUDA device.
tool=$1 sanitizer=$2 binary=$3
if [ -z "$sanitizer" ] || [ ! -x "$sanitizer" ]; then
  echo "SKIP: compute-sanitizer not found (looked in the CUDA toolkit's bin)"
  exit 77
fi
# The binary itself says whether a device is there (77 and a SKIP line if not).
"$binary" --probe || exit $?
case $tool in
  memcheck) extra="--leak-check full" ;;
  *) extra="" ;;
esac
# shellcheck disable=SC2086
exec "$sanitizer" --tool "$tool" $extra --error-exitcode 1 "$binary" --quick
