# shellcheck shell=bash
# kern-device-steps.sh - sourced (bash) by the one-kernel device scripts (kern21-device.sh,
# kern22-device.sh) from the repository's root: their timed steps within one budget, the
# environment log and the kernels-only build. Before sourcing set NAME (the script's name for
# the logs), OUT (the log folder), BUDGET (seconds for everything) and BUILD (the build folder).
# Takes note, elapsed, left and step from device-steps.sh; sources gpu-deps-env.sh; writes $OUT/env.log and the
# summary's first line; builds test_gpu_kernels and bench_kernels (step "build", cap $1 of
# kern_build; JOBS build jobs, 16) and sets tests and bench to the two programs ("" when absent).
mkdir -p "$OUT"
summary=$OUT/summary.txt
: >"$summary"
start=$(date +%s)
budget=$BUDGET
# shellcheck source=scripts/device-steps.sh
. scripts/device-steps.sh

# shellcheck source=scripts/gpu-deps-env.sh
. scripts/gpu-deps-env.sh
commit=${GEMMD_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  echo "== $NAME, commit $commit, $(date -u '+%Y-%m-%d %H:%M UTC'), deps: $deps"
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  nvcc --version 2>&1 | tail -2
} >"$OUT/env.log"
gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
note "$NAME | commit $commit | device: ${gpu_name:-none} | deps: $deps"

# kern_build CAP: the kernels-only build (tests/gpu/standalone) of the two programs; 1 (with the
# build log's tail in the summary) when test_gpu_kernels did not come out of it.
kern_build() {
  step build.log "build (standalone: test_gpu_kernels bench_kernels)" "$1" bash -c "
    cmake -S '$PWD/tests/gpu/standalone' -B '$BUILD' -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    ninja -C '$BUILD' -j ${JOBS:-16} test_gpu_kernels bench_kernels"
  tests=$BUILD/tests/gpu/test_gpu_kernels
  # shellcheck disable=SC2034 # read by the script that sources this
  bench=$(find "$BUILD/bench" -maxdepth 2 -type f -perm -u+x -name bench_kernels 2>/dev/null | head -1)
  if [ ! -x "$tests" ]; then
    note "build: no test_gpu_kernels; last lines of build.log:"
    tail -25 "$OUT/build.log" | tee -a "$summary"
    return 1
  fi
}
