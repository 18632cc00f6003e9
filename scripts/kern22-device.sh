#!/bin/bash
# kern22-device.sh - kernel 22 (dmma_f64_tma, f64 on the FP64 tensor cores fed by TMA) on the GPU
# machine, in under 8 minutes: the kernels-only build (tests/gpu/standalone: CUDA and OpenBLAS,
# from .deps where the machine lacks it; carry [".deps"]) of just test_gpu_kernels and
# bench_kernels, then, each step under `timeout` and within what is left of the 8 minutes:
#   1. test_gpu_kernels --registry                      (the selector's rules for 22)
#   2. test_gpu_kernels --f64 --kernel dmma_f64_tma     (22 and each of its configurations
#      against float64 and cuBLAS: ragged even shapes, every transpose, alpha/beta, batches,
#      poisoned C)
#   3. bench_kernels --variants, $K22_VARIANTS one by one (the wide and 128x96 tiles against
#      their _db (two fragment sets), _g16 (16 tile-rows a walk group) and the 128x80 tile)
#   4. bench_kernels --dtype f64 --kernel dmma_f64_tma,dmma16_f64 (22 beside 10, each row against
#      cuBLAS at its best: 1024^3 to 8192^3, 1000x1200x800, 8192x8192x64, batch 64 x 256^3)
#   5. compute-sanitizer memcheck, then racecheck, over test_gpu_kernels --f64 --quick
#   6. if ncu is there and time is left: one 4096^3 launch of 22 (test_gpu_kernels --bench)
# Logs go to $OUT (build-k22/out when unset): env.log build.log registry.log f64-tests.log
# bench-f64-variants.log bench-f64.log memcheck.log racecheck.log ncu.log summary.txt; the
# summary is printed last. Knobs: K22_JOBS (build jobs, 16), K22_BUDGET (seconds for all, 460),
# K22_VARIANTS (step 3's list), GEMMD_TEST_CASE_TIMEOUT (30: a case still running after that
# many seconds, a kernel that never returns, is named and exits 1).
set -uo pipefail
export GEMMD_TEST_CASE_TIMEOUT=${GEMMD_TEST_CASE_TIMEOUT:-30}
cd "$(dirname "$0")/.." || exit 1
NAME=kern22-device.sh
OUT=${OUT:-$PWD/build-k22/out}
BUDGET=${K22_BUDGET:-460} # seconds for everything, leaving room under 8 minutes for the start and the summary
# the configurations step 3 times, each at 1024^3 to 8192^3, 1000x1200x800 and 8192x8192x64
K22_VARIANTS=${K22_VARIANTS:-dmma_f64_tma_128x128,dmma_f64_tma_128x128_db,dmma_f64_tma_128x128_g16,dmma_f64_tma_128x128_db_g16,dmma_f64_tma_128x96,dmma_f64_tma_128x96_db,dmma_f64_tma_128x80,dmma_f64_tma_128x80_db,dmma_f64_tma_128x128_4wg}
BUILD=$PWD/build-k22
JOBS=${K22_JOBS:-16}
# shellcheck source=scripts/kern-device-steps.sh
. scripts/kern-device-steps.sh
kern_build 270 || exit 1

step registry.log "test_gpu_kernels --registry" 20 "$tests" --registry
step f64-tests.log "test_gpu_kernels --f64 --kernel dmma_f64_tma" 120 \
  "$tests" --f64 --kernel dmma_f64_tma
if [ -n "$bench" ]; then
  step bench-f64-variants.log "bench_kernels --variants, 22's tiles against their _db, _g16, 128x80" 150 \
    "$bench" --variants --markdown --dtype f64 --kernel "$K22_VARIANTS"
  step bench-f64.log "bench_kernels --dtype f64, 22 beside 10" 90 \
    "$bench" --dtype f64 --markdown --kernel dmma_f64_tma,dmma16_f64
else
  note "bench: bench_kernels was not built"
fi
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  step "$tool.log" "compute-sanitizer $tool, --f64 --quick" 40 \
    "$sanitizer" --tool "$tool" --error-exitcode 1 "$tests" --f64 --quick --kernel dmma_f64_tma
done
ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if [ -x "$ncu_bin" ] && [ $((BUDGET - ($(date +%s) - start))) -gt 40 ]; then
  # the first 22 launch of the f64 row: its 4096^3 warm-up; tensor pipe, LSU, bank conflicts, stalls
  step ncu.log "ncu, one 4096^3 launch of 22" 60 "$ncu_bin" --kernel-name regex:dmma_tma_gemm \
    --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section WarpStateStats --section LaunchStats --section Occupancy \
    "$tests" --bench --size 4096 --kernel dmma_f64_tma
else
  note "ncu: skipped (not installed, or no time left)"
fi

echo
echo "================ summary ================"
cat "$summary"
echo "--- 22's cases (test_gpu_kernels --f64): failures, then the totals"
grep -E "FAIL|FATAL" "$OUT/registry.log" "$OUT/f64-tests.log" | head -20
grep -E "cases, .* failed" "$OUT/f64-tests.log"
for tool in memcheck racecheck; do
  echo "--- $tool"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FATAL|cases, .* failed" "$OUT/$tool.log" | tail -3
done
# the table, or (a run cut short before it) the rows as they came
for log in bench-f64-variants.log bench-f64.log; do
  [ -f "$OUT/$log" ] || continue
  echo "--- $log"
  if grep -qE "^\|" "$OUT/$log"; then grep -E "^\|" "$OUT/$log" | tail -30; else grep -E "TFLOP/s" "$OUT/$log" | tail -30; fi
done
if [ -f "$OUT/ncu.log" ]; then
  echo "--- ncu (4096^3)"
  grep -E "Duration|SM Busy|Issue Slots Busy|Executed Ipc A|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|Bank Conflicts|Registers Per|Achieved Occupancy|Stall|ncu: |==ERROR==|==PROF==" \
    "$OUT/ncu.log" | head -25
fi
echo "total $(elapsed)"
