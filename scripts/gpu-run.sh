#!/bin/bash
# gpu-run.sh [all|build|tests|daemon|load|bench|e2e|multi|clients] - the one script for the GPU machine (default: all).
#
#   build  build only (build-gpu/), for runs of one's own afterwards
#   tests  build, then `ctest -L gpu` (kernel tests, sanitizers, the daemon's and the Python
#          client's GPU tests)
#   daemon build, then the daemon's whole integration suite on the GPU backend
#          (GEMMD_TEST_BACKEND=gpu ctest -L integration -R daemon_)
#   load   build, then the load-and-fault suite on the GPU backend
#          (GEMMD_TEST_BACKEND=gpu ctest -L load; GEMMD_LOAD_SCALE passes through); not in all
#   bench  build, then the kernel baseline (test_gpu_kernels --bench) and bench/kernels
#   e2e    build, then bench/e2e (the daemon end to end), and its 4096 and 8192 rows again with
#          gpu.shm_pieces 1 (shared-memory gemms at once, not in row blocks); on two GPUs or
#          more, 8192 and 16384 whole and split across two (gpu.split_min_rows 2048); then
#          bench_cuda_ipc (operands in the client's GPU memory) against a gemmd on defaults
#   multi  build, then scripts/gpu-multi.sh: host bandwidth per GPU and NUMA node (bench_hostbw),
#          test_gpu_multi.py on the real GPUs, and bench_multi on 1, 2, 4 and 8 GPUs (one gemm
#          split across them, a client pipelining by a resident B, 64 clients of mixed sizes)
#          with each row's speedup against the issue's targets; not in all. Logs:
#          bench-hostbw.log multi-tests.log bench-multi.log bench-multi-speedups.log
#   clients build, then what callers without our API get: bench/python_autoshm.py (plain NumPy
#          arrays through the automatic scratch region, beside the socket and shm_array, with the
#          box's copy bandwidth), bench/blas.py (libgemmd_blas: NumPy and cblas_?gemm at 4096^3
#          beside the CPU BLAS, 64 processes at once, gemmctl bench by size), bench_kernels'
#          f32 (kernel 21), c64 and c128 rows, and bench/e2e's 4096^3 and 8192^3; not in all.
#          Logs: bench-autoshm.log bench-blas.log bench-kernels-clients.log bench-e2e-clients.log
#   all    all of the above but load, multi and clients
#
# Where the machine lacks the build dependencies (libmsgpack, OpenBLAS, Check, ...), the .deb
# files in .deps/ (made by scripts/gpu-deps.sh; carry [".deps"]) are unpacked into /opt/deps (never into /) and pkg-config
# and the loader are pointed there. If the whole tree does not configure or its GPU kernel test
# does not build, the kernels-only project (tests/gpu/standalone) is built instead, so the
# kernels can still be checked and timed; the summary says so.
#
# Logs go to $OUT (the device tool's output folder; build-gpu/out when unset), at most 10 files:
# env.log build.log gpu-tests.log bench-baseline.log bench-kernels.log bench-e2e.log
# bench-e2e-variants.log bench-cuda-ipc.log bench-cuda-ipc-gemmd.log summary.txt
# (daemon-gpu.log and load-gpu.log for those modes).
# A short summary is printed last. Here (no GPU) it works too: the GPU tests skip.
# Knobs: GPU_RUN_JOBS (16), GPU_RUN_TEST_TIMEOUT / GPU_RUN_BENCH_TIMEOUT (seconds per step,
# 420 / 240), GEMMD_COMMIT (shown when .git did not travel).
set -uo pipefail
mode=${1:-all}
case $mode in all | build | tests | daemon | load | bench | e2e | multi | clients) ;; *)
  echo "usage: $0 [all|build|tests|daemon|load|bench|e2e|multi]" >&2
  exit 2
  ;;
esac
cd "$(dirname "$0")/.." || exit 1
root=$PWD
OUT=${OUT:-$root/build-gpu/out}
mkdir -p "$OUT"
jobs=${GPU_RUN_JOBS:-16}
test_timeout=${GPU_RUN_TEST_TIMEOUT:-420}
bench_timeout=${GPU_RUN_BENCH_TIMEOUT:-240}
summary=$OUT/summary.txt
: >"$summary"
start=$(date +%s)
note() { echo "$*" | tee -a "$summary"; }
elapsed() { echo "$(($(date +%s) - start))s"; }

commit=${GEMMD_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
if git rev-parse HEAD >/dev/null 2>&1 && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="$commit+dirty"
fi

# ---- dependencies from .deps/ -------------------------------------------------------------
# shellcheck source=scripts/gpu-deps-env.sh
. scripts/gpu-deps-env.sh
# Debian's pure-Python msgpack (scripts/gpu-deps.sh puts it there) for the Python tests
[ -d .deps/python ] && export PYTHONPATH=$root/.deps/python${PYTHONPATH:+:$PYTHONPATH}

{
  echo "== gpu-run.sh $mode, commit $commit, $(date -u '+%Y-%m-%d %H:%M UTC')"
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  nvcc --version 2>&1 || echo "nvcc: not found"
  cmake --version | head -1
  for module in libuv msgpack yaml-0.1 openblas libsystemd check; do
    pkg-config --exists "$module" 2>/dev/null && echo "pkg-config $module: found" ||
      echo "pkg-config $module: MISSING"
  done
} 2>&1 | tee "$OUT/env.log"
gpu_name=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
note "gpu-run.sh $mode | commit $commit | device: ${gpu_name:-none} | deps: $deps"

# The Python tests need numpy and msgpack: the top level looks for /usr/bin/python3 first, which
# on the GPU machine has neither (its python3 on PATH does).
python_args=()
python=/usr/bin/python3
if ! /usr/bin/python3 -c 'import numpy, msgpack' >/dev/null 2>&1; then
  for py in $(type -a -P python3 2>/dev/null); do
    if "$py" -c 'import numpy, msgpack' >/dev/null 2>&1; then
      python_args=(-DGEMMD_PYTHON3="$py")
      python=$py
      note "python: /usr/bin/python3 lacks numpy or msgpack; tests use $py"
      break
    fi
  done
fi

# ---- build ---------------------------------------------------------------------------------
build=$root/build-gpu
built=full
{
  echo "== configure the whole tree ($(elapsed))"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGEMMD_BUILD_TESTS=ON \
    -DGEMMD_BUILD_BENCH=ON "${python_args[@]}" &&
    echo "== build, -j$jobs, keep going past failures ($(elapsed))" &&
    cmake --build "$build" -j "$jobs" -- -k 0
} >"$OUT/build.log" 2>&1
full_rc=$?
if [ ! -x "$build/tests/gpu/test_gpu_kernels" ]; then
  built=standalone
  build=$root/build-gpu-standalone
  {
    echo "== the whole tree did not give tests/gpu/test_gpu_kernels: kernels-only build ($(elapsed))"
    cmake -S "$root/tests/gpu/standalone" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
      cmake --build "$build" -j "$jobs"
  } >>"$OUT/build.log" 2>&1
fi
if [ ! -x "$build/tests/gpu/test_gpu_kernels" ]; then
  note "build: FAILED (no test_gpu_kernels); last lines of build.log:"
  tail -30 "$OUT/build.log" | tee -a "$summary"
  exit 1
fi
if [ "$built" = full ]; then
  [ $full_rc -eq 0 ] && note "build: whole tree OK ($(elapsed))" ||
    note "build: whole tree built with FAILURES (rc $full_rc, see build.log); GPU kernel test built ($(elapsed))"
else
  note "build: whole tree FAILED (see build.log); kernels-only build OK ($(elapsed))"
fi
grep -E "error:|Error|FAILED:" "$OUT/build.log" | head -8 | tee -a "$summary"

# ---- tests ---------------------------------------------------------------------------------
if [ "$mode" = all ] || [ "$mode" = tests ]; then
  echo "== ctest -L gpu ($(elapsed))"
  # -V: every test's whole output goes to the log (the sanitizers' reports included, on a pass).
  timeout "$test_timeout" ctest --test-dir "$build" -L gpu -V -j 3 \
    --timeout "$test_timeout" 2>&1 | tee "$OUT/gpu-tests.log" | grep -E "Test +#|tests passed|tests failed| FAIL|SKIP|ERROR SUMMARY|RACECHECK SUMMARY"
  note "tests: ctest -L gpu rc ${PIPESTATUS[0]} ($(elapsed))"
  grep -E "Test +#|tests passed|tests failed" "$OUT/gpu-tests.log" | tee -a "$summary"
fi

if [ "$mode" = all ] || [ "$mode" = daemon ]; then
  echo "== daemon integration suite on the GPU backend ($(elapsed))"
  # the gemmd_fake tests run the GPU backend over a fake runtime: nothing to learn here
  GEMMD_TEST_BACKEND=gpu timeout "$test_timeout" ctest --test-dir "$build" -L integration \
    -R '^daemon_' -E '^daemon_fake' -j 4 --output-on-failure --timeout "$test_timeout" \
    >"$OUT/daemon-gpu.log" 2>&1
  note "daemon: integration suite with GEMMD_TEST_BACKEND=gpu rc $? ($(elapsed))"
  grep -E "Test +#|tests passed|tests failed" "$OUT/daemon-gpu.log" | tee -a "$summary"
fi

if [ "$mode" = load ]; then
  echo "== load-and-fault suite on the GPU backend ($(elapsed))"
  # one test at a time (RUN_SERIAL): each measures the daemon's memory. -V: the passing
  # tests' "LOAD <test> key=value" figure lines go to the log too.
  GEMMD_TEST_BACKEND=gpu timeout "$test_timeout" ctest --test-dir "$build" -L load -V \
    --timeout "$test_timeout" >"$OUT/load-gpu.log" 2>&1
  note "load: ctest -L load with GEMMD_TEST_BACKEND=gpu rc $? ($(elapsed))"
  grep -E "Test +#|tests passed|tests failed|^[0-9]+: LOAD " "$OUT/load-gpu.log" | tee -a "$summary"
fi

# A program run with a time limit, its output in $OUT/$log; a missing program is noted.
run_step() {
  local log=$1 label=$2
  shift 2
  echo "== $label ($(elapsed))"
  timeout "$bench_timeout" "$@" 2>&1 | tee "$OUT/$log"
  note "$label: rc ${PIPESTATUS[0]} ($(elapsed))"
}

# Finds an executable that bench/CMakeLists.txt builds (bench_kernels, bench_e2e) by name.
find_bench() {
  find "$build/bench" -maxdepth 3 -type f -perm -u+x -name "$1" 2>/dev/null | sort | head -1
}

# ---- benchmarks ----------------------------------------------------------------------------
if [ "$mode" = all ] || [ "$mode" = bench ]; then
  run_step bench-baseline.log "bench: tiled16 and every kernel vs cuBLAS, 4096^3" \
    "$build/tests/gpu/test_gpu_kernels" --bench --size 4096
  bench_kernels=$(find_bench '*kernels*')
  if [ -n "$bench_kernels" ]; then
    run_step bench-kernels.log "bench: ${bench_kernels#"$root"/}" "$bench_kernels" --markdown
  else
    note "bench: no bench/kernels program in this build"
  fi
fi
if [ "$mode" = all ] || [ "$mode" = e2e ]; then
  bench_e2e=$(find_bench '*e2e*')
  if [ -n "$bench_e2e" ]; then
    run_step bench-e2e.log "bench: ${bench_e2e#"$root"/}" "$bench_e2e"
    # the same shared-memory gemms run at once (no row blocks), to weigh gpu.shm_pieces; and
    # with two GPUs or more, 8192^3 and 16384^3 whole on one GPU and split across two
    variants="\"$bench_e2e\" --shm-pieces 1 --sizes 4096,8192"
    if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
      variants="$variants; \"$bench_e2e\" --sizes 8192,16384 --reps 3"
      variants="$variants; \"$bench_e2e\" --sizes 8192,16384 --reps 3 --split-min-rows 2048"
    fi
    run_step bench-e2e-variants.log "bench: ${bench_e2e#"$root"/} variants" bash -c "$variants"
  else
    note "e2e: no bench/e2e program in this build"
  fi
  # operands in the client's GPU memory (CUDA IPC), against a gemmd of this build on defaults
  bench_ipc=$(find_bench bench_cuda_ipc)
  if [ -n "$bench_ipc" ] && [ -x "$build/daemon/gemmd" ]; then
    ipc_dir=$(mktemp -d)
    printf 'listen:\n  - unix:%s/gemmd.sock\nbackend: gpu\nlog_level: warn\n' "$ipc_dir" \
      >"$ipc_dir/gemmd.yaml"
    "$build/daemon/gemmd" --config "$ipc_dir/gemmd.yaml" >"$OUT/bench-cuda-ipc-gemmd.log" 2>&1 &
    ipc_pid=$!
    for _ in $(seq 150); do
      [ -S "$ipc_dir/gemmd.sock" ] || ! kill -0 "$ipc_pid" 2>/dev/null && break
      sleep 0.2
    done
    run_step bench-cuda-ipc.log "bench: ${bench_ipc#"$root"/}" "$bench_ipc" \
      --connect "unix:$ipc_dir/gemmd.sock"
    kill "$ipc_pid" 2>/dev/null
    wait "$ipc_pid" 2>/dev/null
    rm -rf "$ipc_dir"
  fi
fi

if [ "$mode" = clients ]; then
  run_step bench-autoshm.log "bench: python_autoshm (plain NumPy arrays, default path)" \
    "$python" "$root/bench/python_autoshm.py" --gemmd "$build/daemon/gemmd" --out "$OUT/autoshm.md"
  run_step bench-blas.log "bench: blas.py (libgemmd_blas, gemmctl bench)" \
    "$python" "$root/bench/blas.py" --gemmd "$build/daemon/gemmd" \
    --lib "$build/blas/libgemmd_blas.so" --gemmctl "$build/client/gemmctl" \
    --out "$OUT/blas.md"
  bench_kernels=$(find_bench '*kernels*')
  [ -n "$bench_kernels" ] && run_step bench-kernels-clients.log "bench: f32, c64, c128 rows" \
    bash -c "for d in f32 c64 c128; do \"$bench_kernels\" --markdown --dtype \$d; done"
  bench_e2e=$(find_bench '*e2e*')
  [ -n "$bench_e2e" ] && run_step bench-e2e-clients.log "bench: e2e 4096 and 8192" \
    "$bench_e2e" --sizes 4096,8192
fi

if [ "$mode" = multi ]; then
  echo "== every GPU of the box: scripts/gpu-multi.sh ($(elapsed))"
  "$root/scripts/gpu-multi.sh" "$build" "$OUT" 2>&1 | tee "$OUT/multi.log"
  note "multi: rc ${PIPESTATUS[0]} ($(elapsed))"
  [ -f "$OUT/bench-multi-speedups.log" ] && tee -a "$summary" <"$OUT/bench-multi-speedups.log"
fi

# ---- summary, last -------------------------------------------------------------------------
echo
echo "================ summary ================"
cat "$summary"
for log in bench-baseline.log bench-kernels.log bench-e2e.log bench-e2e-variants.log \
  bench-cuda-ipc.log; do
  [ -f "$OUT/$log" ] && { echo "--- $log (tail)"; tail -20 "$OUT/$log"; }
done
echo "total $(elapsed)"
