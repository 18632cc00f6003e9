#!/usr/bin/python3
"""bench/blas.py - libgemmd_blas and libgemmclient's automatic scratch region on a GPU box.

Starts its own gemmd (the binary given, on the GPU backend by default) and writes a Markdown
table to --out:
  1. NumPy a @ b at 4096^3 (f32, f64, c64, c128) through the library (LD_PRELOAD, default
     settings) beside NumPy on the CPU BLAS alone (all cores), in the same run, median of 7
     after a warm-up;
  1b. the same products as NumPy's matmul makes them, cblas_?gemm (row-major) by ctypes, through
     the library and straight on the CPU BLAS (--cpu-lib, Debian's OpenBLAS by default): what
     a program on the system BLAS gets where the machine's NumPy does not link libblas.so.3
     (a pip wheel's NumPy carries its own OpenBLAS under other names, which no LD_PRELOAD
     reaches);
  2. 64 processes each calling sgemm_ at 1024^3 at once (ctypes on the library, a common
     start time): median and slowest call, and their ratio (the target: within 3x);
  3. gemmctl bench --m 4096 --n 4096 --k 4096 with default options (the scratch region),
     beside the scratch region in 4 pipelined bands (GEMMD_SCRATCH_PIECES=4, experimental),
     --shm (operands already shared) and --concurrency 2 (the socket), over sizes
     256 ... 8192 (f32).
It measures; it asserts nothing.
  bench/blas.py --gemmd build/daemon/gemmd --lib build/blas/libgemmd_blas.so \
                --gemmctl build/client/gemmctl --out $OUT/blas.md [--backend gpu]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import gemmd_harness as h  # noqa: E402

# The children's first lines: N, DTYPE, REPS from argv, and two random n x n operands.
OPERANDS = r"""
import ctypes, sys, time, json, numpy as np
n, dt, reps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(1)
def mk():
    x = rng.standard_normal((n, n))
    if dt.startswith("complex"):
        x = x + 1j * rng.standard_normal((n, n))
    return x.astype(dt)
a, b = mk(), mk()
"""

NUMPY_CHILD = OPERANDS + r"""
c = a @ b
ts = []
for _ in range(reps):
    t = time.perf_counter(); c = a @ b; ts.append(time.perf_counter() - t)
print(json.dumps(ts))
"""

SGEMM_CHILD = r"""
import ctypes, sys, time, json, numpy as np
lib = ctypes.CDLL(sys.argv[1])
n, start = int(sys.argv[2]), float(sys.argv[3])
a = np.random.default_rng(2).standard_normal((n, n)).astype(np.float32)
b = a.copy(); c = np.zeros_like(a)
I = ctypes.c_int; F = ctypes.c_float; P = ctypes.c_void_p
nn, one, zero = I(n), F(1.0), F(0.0)
def call():
    lib.sgemm_(b"N", b"N", ctypes.byref(nn), ctypes.byref(nn), ctypes.byref(nn), ctypes.byref(one),
               P(a.ctypes.data), ctypes.byref(nn), P(b.ctypes.data), ctypes.byref(nn),
               ctypes.byref(zero), P(c.ctypes.data), ctypes.byref(nn), ctypes.c_size_t(1),
               ctypes.c_size_t(1))
call()
while time.time() < start:
    time.sleep(0.001)
ts = []
for _ in range(3):
    t = time.perf_counter(); call(); ts.append(time.perf_counter() - t)
print(json.dumps(ts))
"""

CBLAS_CHILD = OPERANDS + r"""
lib = ctypes.CDLL(sys.argv[4])
c = np.zeros_like(a)
P, I = ctypes.c_void_p, ctypes.c_int
name = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}[dt]
fn = getattr(lib, "cblas_%sgemm" % name)
if name in "sd":
    S = ctypes.c_float if name == "s" else ctypes.c_double
    one, zero = S(1.0), S(0.0)
else:
    one = np.array([1.0], dtype=dt); zero = np.array([0.0], dtype=dt)
    one, zero = P(one.ctypes.data), P(zero.ctypes.data)
def call():  # CblasRowMajor 101, CblasNoTrans 111, as NumPy's matmul
    fn(I(101), I(111), I(111), I(n), I(n), I(n), one, P(a.ctypes.data), I(n),
       P(b.ctypes.data), I(n), zero, P(c.ctypes.data), I(n))
call()
ts = []
for _ in range(reps):
    t = time.perf_counter(); call(); ts.append(time.perf_counter() - t)
want = a[:64].astype(np.complex128) @ b.astype(np.complex128)
err = float(np.abs(c[:64] - want).max() / (np.abs(a[:64]) @ np.abs(b)).max())
print(json.dumps([ts, err]))
"""

CPU_BLAS = ["/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
            "/opt/deps/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"]


def cblas_rows(lib, cpu_lib, env, n):
    rows = []
    for dt in ["float32", "float64", "complex64", "complex128"]:
        res = {}
        for how, path in (("libgemmd_blas", lib), ("CPU BLAS", cpu_lib)):
            p = subprocess.run([sys.executable, "-c", CBLAS_CHILD, str(n), dt, "7", path],
                               env=env, capture_output=True, text=True, timeout=1200)
            if p.returncode != 0:
                res[how] = "failed: " + p.stderr.strip()[-200:]
                continue
            ts, err = json.loads(p.stdout.strip().splitlines()[-1])
            res[how] = "%s (err %.1e)" % (ms(statistics.median(ts)), err)
        rows.append("| %s | %s | %s |" % (dt, res.get("libgemmd_blas"), res.get("CPU BLAS")))
    return rows


def ms(x):
    return "%.1f" % (x * 1e3)


def numpy_rows(lib, env, n):
    rows = []
    for dt in ["float32", "float64", "complex64", "complex128"]:
        res = {}
        for how, extra in (("OpenBLAS", {}), ("libgemmd_blas", {"LD_PRELOAD": lib})):
            p = subprocess.run([sys.executable, "-c", NUMPY_CHILD, str(n), dt, "7"],
                               env=dict(env, **extra), capture_output=True, text=True,
                               timeout=1200)
            if p.returncode != 0:
                res[how] = "failed: " + p.stderr.strip()[-200:]
                continue
            res[how] = ms(statistics.median(json.loads(p.stdout.strip().splitlines()[-1])))
            if how == "libgemmd_blas" and p.stderr.strip():
                res["note"] = p.stderr.strip().splitlines()[-1][:160]
        rows.append("| %s | %s | %s | %s |" % (dt, res.get("libgemmd_blas"), res.get("OpenBLAS"),
                                             res.get("note", "")))
    return rows


def many_processes(lib, env, procs, n):
    start = time.time() + 20
    ps = [subprocess.Popen([sys.executable, "-c", SGEMM_CHILD, lib, str(n), str(start)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for _ in range(procs)]
    per = []
    errors = 0
    for p in ps:
        out, err = p.communicate(timeout=1200)
        if p.returncode != 0:
            errors += 1
            continue
        per.append(max(json.loads(out.strip().splitlines()[-1])))
    if not per:
        return "| %d x sgemm_ %d^3 | all failed | | |" % (procs, n)
    med, worst = statistics.median(per), max(per)
    return "| %d x sgemm_ %d^3 at once | %s | %s | %.2f (%d failed) |" % (
        procs, n, ms(med), ms(worst), worst / med, errors)


def gemmctl_bench(gemmctl, addr, n, extra, env=None):
    p = subprocess.run([gemmctl, "--connect", addr, "--json", "bench", "--m", str(n), "--n",
                        str(n), "--k", str(n), "--requests", "20"] + extra,
                       capture_output=True, text=True, timeout=1200,
                       env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        return "failed"
    return "%.2f" % json.loads(p.stdout)["latency_ms"]["p50"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmd", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--gemmctl", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--backend", default="gpu")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--cpu-lib", default=next((p for p in CPU_BLAS if os.path.exists(p)),
                                              CPU_BLAS[0]),
                    help="the CPU BLAS for the cblas rows (default: Debian's OpenBLAS)")
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--sizes", default="256,512,1024,2048,4096,8192",
                    help="the gemmctl bench sizes (m = n = k), comma-separated")
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    lines = ["# libgemmd_blas and the automatic scratch region (bench/blas.py)", "",
             "backend %s, %d CPUs, %s" % (args.backend, os.cpu_count(),
                                        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())), ""]
    config = {"shm": {"max_bytes_total": "16GiB", "max_bytes_per_connection": "4GiB"},
              "queue": {"memory_budget": "32GiB"}}
    with h.Daemon(os.path.abspath(args.gemmd), backend=args.backend, config=config) as d:
        env = dict(os.environ, GEMMD_ADDRESS=d.address())
        lines += ["## NumPy a @ b at %d^3, median of 7 (ms)" % args.n, "",
                  "| dtype | through libgemmd_blas | NumPy on OpenBLAS | note |",
                  "| --- | ---: | ---: | --- |"]
        lines += numpy_rows(lib, env, args.n)
        lines += ["", "## cblas_?gemm at %d^3 by ctypes, row-major as NumPy calls it, median of 7 "
                  "(ms; err: max |err| / (|A||B|) of 64 rows against complex128)" % args.n, "",
                  "| dtype | through libgemmd_blas | the CPU BLAS alone (%s) |" % args.cpu_lib,
                  "| --- | ---: | ---: |"]
        lines += cblas_rows(lib, args.cpu_lib, env, args.n)
        lines += ["", "## Many processes at once (ms per call)", "",
                  "| what | median | slowest | slowest / median |", "| --- | ---: | ---: | ---: |",
                  many_processes(lib, env, args.procs, 1024), ""]
        lines += ["## gemmctl bench, f32, p50 latency of 20 (ms)", "",
                  "| m = n = k | default (scratch region) | scratch, 4 bands (GEMMD_SCRATCH_PIECES=4) "
                  "| --shm | --concurrency 2 (socket) |",
                  "| ---: | ---: | ---: | ---: | ---: |"]
        for n in [int(x) for x in args.sizes.split(",")]:
            lines.append("| %d | %s | %s | %s | %s |" % (
                n, gemmctl_bench(args.gemmctl, d.address(), n, []),
                gemmctl_bench(args.gemmctl, d.address(), n, [], {"GEMMD_SCRATCH_PIECES": "4"}),
                gemmctl_bench(args.gemmctl, d.address(), n, ["--shm"]),
                gemmctl_bench(args.gemmctl, d.address(), n, ["--concurrency", "2"])))
    text = "\n".join(lines) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
