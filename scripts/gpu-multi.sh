#!/bin/bash
# gpu-multi.sh BUILD OUT - every GPU of the box (scripts/gpu-run.sh multi runs it after the build):
#
#   1. bench_hostbw: pinned host<->device GB/s of each GPU alone and all at once, summed per NUMA
#      node, and GPU to GPU where peer access is allowed    -> OUT/bench-hostbw.log
#   2. ctest daemon_gpu_multi (test_gpu_multi.py: splits and replicas against float64 on the
#      real GPUs)                                          -> OUT/multi-tests.log
#   3. for N in GPU_MULTI_COUNTS (default "1 2 4 8", those the box has): a gemmd of this build
#      on GPUs 0..N-1 (gpu.split_min_rows 2048), and bench_multi against it:
#        split     8192^3 and 16384^3 f32 (and 32768^3 bf16 with 8 GPUs or GPU_MULTI_BIG=1),
#                  one gemm at a time in shared memory, split across the N GPUs
#        resident  one client keeping 16 gemms of 4096^3 f32 in flight, B resident
#        mixed     64 clients of 256, 1024, 2048 and 4096^3 f32 over the socket
#      (GPU_MULTI_MODES picks among them)                  -> OUT/bench-multi.log
#   4. the speedup of each row over its one-GPU run, against the issue's targets
#                                                          -> OUT/bench-multi-speedups.log
# Each step is limited to GPU_RUN_BENCH_TIMEOUT seconds (240); one GPU count takes about two
# minutes, so where one call may run 10 minutes, give each call a few counts (GPU_MULTI_COUNTS,
# 1 among them: the speedups are over the one-GPU rows of the same call) and skip steps 1 and 2
# after the first call (GPU_MULTI_PROBES=0). The last lines printed are the
# speedup table. GPU_MULTI_NGPU overrides the GPU count nvidia-smi gives (a dry run over
# gemmd_fake: FAKE_CUDA_DEVICES=4 GPU_MULTI_NGPU=4, with build/daemon/gemmd that binary).
set -uo pipefail
build=$1
out=$2
step_timeout=${GPU_RUN_BENCH_TIMEOUT:-240}
counts=${GPU_MULTI_COUNTS:-"1 2 4 8"}
modes=${GPU_MULTI_MODES:-"split resident mixed"}
ngpu=${GPU_MULTI_NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
multi=$(find "$build/bench" -maxdepth 2 -type f -perm -u+x -name bench_multi | head -1)
hostbw=$(find "$build/bench" -maxdepth 2 -type f -perm -u+x -name bench_hostbw | head -1)
gemmd=$build/daemon/gemmd
log=$out/bench-multi.log
: >"$log"
echo "gpu-multi: $ngpu GPUs; counts $counts; modes $modes"

if [ "${GPU_MULTI_PROBES:-1}" = 0 ]; then
  echo "hostbw and tests: skipped (GPU_MULTI_PROBES=0)"
elif [ -n "$hostbw" ]; then
  timeout "$step_timeout" "$hostbw" --bytes 1024 --reps 5 >"$out/bench-hostbw.log" 2>&1
  echo "hostbw: rc $?"
  grep RESULT "$out/bench-hostbw.log"
else
  echo "hostbw: no bench_hostbw in this build"
fi

if [ "${GPU_MULTI_PROBES:-1}" != 0 ]; then
  GEMMD_TEST_BACKEND=gpu timeout "$step_timeout" ctest --test-dir "$build" -R '^daemon_gpu_multi$' \
    -V --timeout "$step_timeout" >"$out/multi-tests.log" 2>&1
  echo "tests: daemon_gpu_multi rc $?"
  grep -E "^[0-9]+: (PASS|FAIL|  )|tests passed|tests failed" "$out/multi-tests.log" | tail -12
fi

if [ -z "$multi" ] || [ ! -x "$gemmd" ]; then
  echo "bench: no bench_multi or gemmd in this build"
  exit 1
fi

# A gemmd on GPUs 0..n-1 with room for a 32768^3 bf16 gemm in shared memory (6 GiB of regions,
# each operand 2 GiB: over the default operand, message, shm and budget limits; an operand in a
# region counts against max_message_bytes as if sent).
start_gemmd() {
  local n=$1 dir=$2
  cat >"$dir/gemmd.yaml" <<EOF
listen:
  - unix:$dir/gemmd.sock
backend: gpu
log_level: info
limits:
  max_operand_bytes: 4294967295
  max_message_bytes: 13GiB
queue:
  max_jobs: 1024
  memory_budget: 64GiB
shm:
  max_bytes_per_connection: 16GiB
  max_bytes_total: 64GiB
  gpu_register_max_bytes: 64GiB
resident:
  max_bytes_per_connection: 4GiB
  max_bytes_total: 8GiB
gpu:
  devices: [$(seq -s, 0 $((n - 1)))]
  memory_bytes: 48GiB
  split_min_rows: 2048
  split_max_parts: 8
EOF
  "$gemmd" --config "$dir/gemmd.yaml" >"$dir/gemmd.log" 2>&1 &
  gemmd_pid=$!
  for _ in $(seq 300); do
    [ -S "$dir/gemmd.sock" ] || ! kill -0 "$gemmd_pid" 2>/dev/null && break
    sleep 0.2
  done
}

bench() {
  echo "== $n GPUs: bench_multi $*" | tee -a "$log"
  timeout "$step_timeout" "$multi" --connect "unix:$dir/gemmd.sock" "$@" 2>&1 | tee -a "$log" |
    grep -E "^RESULT|bench_multi:"
}

for n in $counts; do
  [ "$n" -le "$ngpu" ] || continue
  dir=$(mktemp -d)
  start_gemmd "$n" "$dir"
  for mode in $modes; do
    case $mode in
    split)
      bench --mode split --size 8192 --reps 5
      bench --mode split --size 16384 --reps 3
      if [ "$ngpu" -ge 8 ] || [ "${GPU_MULTI_BIG:-0}" = 1 ]; then
        bench --mode split --size 32768 --dtype bf16 --reps 2
      fi
      ;;
    resident) bench --mode resident --size 4096 --depth 16 --requests 400 ;;
    mixed) bench --mode mixed --clients 64 --sizes 256,1024,2048,4096 --requests 2000 ;;
    esac
  done
  kill "$gemmd_pid" 2>/dev/null
  wait "$gemmd_pid" 2>/dev/null
  grep -E "split|warn|error" "$dir/gemmd.log" | tail -5 >>"$log"
  rm -rf "$dir"
done

# Speedups: each (mode, size, dtype) over its one-GPU row, beside the issue's targets.
awk '
  /^RESULT mode=/ {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    key = f["mode"] " " f["size"] " " f["dtype"]
    rate[key, f["devices"]] = f["gemm_per_s"]; dev[key, f["devices"]] = f["device"]
    if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
    counts[f["devices"]] = 1
  }
  END {
    target["split 16384 f32", 2] = 1.9; target["split 8192 f32", 2] = 1.75
    target["resident 4096 f32", 2] = 1.9; target["split 16384 f32", 4] = 3.6
    target["resident 4096 f32", 4] = 3.6; target["mixed 4096 f32", 4] = 3.5
    target["split 32768 bf16", 8] = 6.5
    print "| mode size dtype | GPUs | GEMM/s | speedup | target | device |"
    print "|---|---|---|---|---|---|"
    for (k = 1; k <= nk; k++) {
      key = order[k]
      for (n = 1; n <= 64; n++) {
        if (!((key, n) in rate)) continue
        base = (key, 1) in rate ? rate[key, 1] : 0
        sp = base > 0 ? sprintf("%.2fx", rate[key, n] / base) : "-"
        tg = (key, n) in target ? sprintf(">= %.2fx", target[key, n]) : ""
        printf "| %s | %d | %.2f | %s | %s | %s |\n", key, n, rate[key, n], sp, tg, dev[key, n]
      }
    }
  }' "$log" | tee "$out/bench-multi-speedups.log"
