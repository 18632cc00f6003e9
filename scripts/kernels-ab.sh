#!/bin/bash
# kernels-ab.sh [build|run|all] [BEFORE_SRC] - the GPU kernels before and after a change that must
# not change them (a move of code between files), on the GPU machine. Two calls of under 9
# minutes each (default all: both in one, where the builds are quick):
#   build  the kernels-only build (tests/gpu/standalone, as kern21-device.sh; carry [".deps"]
#          where the machine lacks OpenBLAS) of test_gpu_kernels and bench_kernels from
#          BEFORE_SRC (build-kab/before) and from this tree (build-kab/after);
#   run    with those builds:
#   1. test_gpu_kernels (after): every kernel against float64 and cuBLAS;
#   2. bench_kernels --quick --markdown, before, after, before, after (alternating, so that a
#      drift of the clocks shows as a difference between the two runs of one side);
#   3. bench_kernels --quick --small-batches --markdown, before then after.
# What to look for: the same "ours" column on both sides within the spread of one side's two
# runs (a move changes no instruction: scripts/kernels-objdiff.py shows, on any machine, that
# the two builds' sm_90a code is byte-for-byte the same), every row "ok", and
# test_gpu_kernels passing.
#
# BEFORE_SRC: a source tree of the base, e.g. made on the host beforehand with
#   git archive main | (mkdir -p shared/kab-before && tar -x -C shared/kab-before)
# (default: shared/kab-before; KAB_BASE=REV makes it here with git archive when .git is there).
# Logs go to $OUT (build-kab/out when unset): env.log build-before.log build-after.log
# tests-after.log bench-before-1.log bench-after-1.log bench-before-2.log bench-after-2.log
# small-before.log small-after.log summary.txt; the summary is printed last.
# Knobs: KAB_JOBS (build jobs, 16).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
OUT=${OUT:-$root/build-kab/out}
mkdir -p "$OUT"
summary=$OUT/summary.txt
: >"$summary"
start=$(date +%s)
budget=540 # seconds for everything, under the 10 minutes a command may take
# shellcheck source=scripts/device-steps.sh
. scripts/device-steps.sh

mode=${1:-all}
case $mode in build | run | all) ;; *) echo "usage: $0 [build|run|all] [BEFORE_SRC]" >&2; exit 2 ;; esac
before_src=${2:-$root/shared/kab-before}
if [ ! -d "$before_src/kernels" ] && [ -n "${KAB_BASE:-}" ] && git rev-parse --git-dir >/dev/null 2>&1; then
  mkdir -p "$before_src" && git archive "$KAB_BASE" | tar -x -C "$before_src"
fi
if [ ! -d "$before_src/kernels" ] || [ ! -f "$before_src/tests/gpu/standalone/CMakeLists.txt" ]; then
  note "kernels-ab.sh: no base tree at $before_src (see the opening comment)"
  exit 2
fi
before_src=$(cd "$before_src" && pwd)

# shellcheck source=scripts/gpu-deps-env.sh
. scripts/gpu-deps-env.sh
{
  echo "== kernels-ab.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), before: $before_src, deps: $deps"
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  nvcc --version 2>&1 | tail -2
} >"$OUT/env.log"
gpu_name=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
note "kernels-ab.sh | device: ${gpu_name:-none} | deps: $deps"

# build SIDE SRC: the standalone kernels build of SRC into build-kab/SIDE
build() {
  local side=$1 src=$2 dir=$root/build-kab/$1
  step "build-$side.log" "build $side (standalone: test_gpu_kernels bench_kernels)" 250 bash -c "
    cmake -S '$src/tests/gpu/standalone' -B '$dir' -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
    ninja -C '$dir' -j ${KAB_JOBS:-16} test_gpu_kernels bench_kernels"
}
if [ "$mode" != run ]; then
  build before "$before_src"
  build after "$root"
fi
[ "$mode" = build ] && { cat "$summary"; exit 0; }
bench_of() { find "$root/build-kab/$1/bench" -maxdepth 2 -type f -perm -u+x -name bench_kernels 2>/dev/null | head -1; }
bench_before=$(bench_of before)
bench_after=$(bench_of after)
tests_after=$root/build-kab/after/tests/gpu/test_gpu_kernels
if [ -z "$bench_before" ] || [ -z "$bench_after" ]; then
  note "build: bench_kernels missing (before: ${bench_before:-none}, after: ${bench_after:-none})"
  tail -15 "$OUT/build-before.log" "$OUT/build-after.log" | tee -a "$summary"
  exit 1
fi

[ -x "$tests_after" ] && step tests-after.log "test_gpu_kernels (after)" 150 "$tests_after"
for round in 1 2; do
  step "bench-before-$round.log" "bench_kernels --quick, before ($round)" 70 "$bench_before" --quick --markdown
  step "bench-after-$round.log" "bench_kernels --quick, after ($round)" 70 "$bench_after" --quick --markdown
done
step small-before.log "bench_kernels --quick --small-batches, before" 30 "$bench_before" --quick --small-batches --markdown
step small-after.log "bench_kernels --quick --small-batches, after" 30 "$bench_after" --quick --small-batches --markdown

echo
echo "================ summary ================"
cat "$summary"
echo "--- test_gpu_kernels (after): failures, then the totals"
grep -E "FAIL|FATAL" "$OUT/tests-after.log" 2>/dev/null | head -20
grep -E "cases, .* failed" "$OUT/tests-after.log" 2>/dev/null
for log in bench-before-1.log bench-after-1.log bench-before-2.log bench-after-2.log small-before.log small-after.log; do
  [ -f "$OUT/$log" ] && { echo "--- $log (table)"; grep -E "^\|" "$OUT/$log"; }
done
echo "total $(elapsed)"
