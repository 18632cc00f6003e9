#!/bin/bash
# kern21-device.sh - kernel 21 (wgmma_f32x3, f32 exact on the TF32 tensor cores) on the GPU
# machine, in under 8 minutes: the kernels-only build (tests/gpu/standalone: CUDA and OpenBLAS,
# from .deps where the machine lacks it; carry [".deps"]) of just test_gpu_kernels and
# bench_kernels, then, each step under `timeout` and within what is left of the 8 minutes:
#   1. test_gpu_kernels --registry                     (the selector's rules for 21)
#   2. test_gpu_kernels --f32x3 --kernel wgmma_f32x3    (21 against float64 and cuBLAS on its
#      shapes, every transpose it takes, alpha/beta, poisoned C; IEEE specials; the accuracy
#      table against cuBLAS's SGEMM on uniform, normal, wide-exponent and cancelling inputs)
#   3. compute-sanitizer memcheck, racecheck, then synccheck, over test_gpu_kernels --f32x3 --quick
#   4. bench_kernels --dtype f32 --markdown             (auto: 21 where the selector gives it)
#   5. bench_kernels --variants --quick, 21 and its two-scratch variant (wgmma_f32x3_pipe)
#   6. bench_kernels --dtype f32 --quick --kernel simt_f32,simt_f32_splitk (02 / 09 beside it)
# Logs go to $OUT (build-k21/out when unset): env.log build.log registry.log f32x3-tests.log
# (and its accuracy table as f32x3-accuracy.md) memcheck.log racecheck.log synccheck.log
# bench-f32.log bench-f32-variants.log bench-f32-simt.log summary.txt; the summary is printed last. Knobs: K21_JOBS (build jobs, 16),
# GEMMD_TEST_CASE_TIMEOUT (30: test_gpu_kernels names a case still running after that many
# seconds, a kernel that never returns, and exits 1, inside each step's cap).
set -uo pipefail
export GEMMD_TEST_CASE_TIMEOUT=${GEMMD_TEST_CASE_TIMEOUT:-30}
cd "$(dirname "$0")/.." || exit 1
NAME=kern21-device.sh
OUT=${OUT:-$PWD/build-k21/out}
BUDGET=470 # seconds for everything, leaving room under 8 minutes for the start and the summary
BUILD=$PWD/build-k21
JOBS=${K21_JOBS:-16}
# shellcheck source=scripts/kern-device-steps.sh
. scripts/kern-device-steps.sh
kern_build 260 || exit 1

step registry.log "test_gpu_kernels --registry" 20 "$tests" --registry
step f32x3-tests.log "test_gpu_kernels --f32x3 --kernel wgmma_f32x3" 150 \
  "$tests" --f32x3 --kernel wgmma_f32x3
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
# synccheck: barriers reached by part of a warp or of their thread count, which would hang a
# kernel (the first run stopped before the specials, the first tiles that 21 recomputes)
for tool in memcheck racecheck synccheck; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  step "$tool.log" "compute-sanitizer $tool, --f32x3 --quick" 90 \
    "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 1 "$tests" --f32x3 --quick --kernel wgmma_f32x3
done
if [ -n "$bench" ]; then
  step bench-f32.log "bench_kernels --dtype f32 (auto)" 100 "$bench" --dtype f32 --markdown
  step bench-f32-variants.log "bench_kernels --variants --quick, 21 and 21 pipe" 60 \
    "$bench" --variants --quick --markdown --dtype f32 --kernel wgmma_f32x3,wgmma_f32x3_pipe
  step bench-f32-simt.log "bench_kernels --dtype f32 --quick, 02 and 09" 45 \
    "$bench" --dtype f32 --quick --markdown --kernel simt_f32,simt_f32_splitk
else
  note "bench: bench_kernels was not built"
fi

# The accuracy table as markdown, for scripts/results-tables.py (kept with the run's logs)
{
  echo "|err| / (|A| |B|) against float64, max / mean over the outputs, NN, same inputs for the three"
  echo
  echo "| inputs | shape | 21 max / mean | cuBLAS SGEMM max / mean | simt_f32 max / mean | 21 / cuBLAS | check |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  grep -E "^\| (uniform|normal|wide|cancel)" "$OUT/f32x3-tests.log" |
    sed -E 's/\| 21 /| /; s/\| cublas /| /; s/\| simt_f32 /| /; s/\| 21\/cublas /| /; s/ +\|/ |/g; s/\| (PASS|FAIL)(.*)$/| \1\2 |/'
} >"$OUT/f32x3-accuracy.md"

echo
echo "================ summary ================"
cat "$summary"
echo "--- 21's cases (test_gpu_kernels): failures, then the totals"
grep -E "FAIL|FATAL" "$OUT/f32x3-tests.log" | head -20
grep -E "cases, .* failed" "$OUT/f32x3-tests.log"
echo "--- the accuracy table (max / mean of |err| / (|A| |B|))"
grep -E "^\| (uniform|normal|wide|cancel)" "$OUT/f32x3-tests.log"
echo "--- specials: cuBLAS for comparison"
grep -E "^cublas/specials" "$OUT/f32x3-tests.log" | head -8
for tool in memcheck racecheck synccheck; do
  echo "--- $tool"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FATAL|cases, .* failed" "$OUT/$tool.log" | tail -3
done
for log in bench-f32.log bench-f32-variants.log bench-f32-simt.log; do
  [ -f "$OUT/$log" ] && { echo "--- $log (table)"; grep -E "^\|" "$OUT/$log" | tail -10; }
done
echo "total $(elapsed)"
