#!/usr/bin/python3
"""cpu_vs_numpy.py: one client's f32 gemm through gemmd's CPU backend (default config) beside
NumPy in-process on the same cores, for bench/RESULTS.md (issue 31). A program, not a test.

For each size (default 1024, 2048): NumPy's a @ b; and through a gemmd it starts (config/
gemmd.yaml, --backend cpu): the operands over the socket (auto_shm off), the Python client's
default gemm (operands of 1 MiB and up copied into its shared-memory scratch), and operands
already in shared memory (shm_array), with the daemon's compute_us beside each. Medians of
--reps calls, after warm-up; the whole set is repeated --rounds times, alternating, and the
median of the rounds' medians printed with the load average before and after.

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, which slow OpenBLAS on some machines, are removed
from this process's environment (and so from NumPy's and the daemon's) unless --keep-env.

  PYTHONPATH=python bench/cpu_vs_numpy.py [--gemmd build/daemon/gemmd] [--sizes 1024,2048]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def numpy_ms(np, s, reps):
    a = np.random.rand(s, s).astype(np.float32)
    b = np.random.rand(s, s).astype(np.float32)
    for _ in range(3):
        a @ b
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return median(ts) * 1e3


def gemmd_ms(np, gemmd, addr, s, reps, mode):
    a = np.random.rand(s, s).astype(np.float32)
    b = np.random.rand(s, s).astype(np.float32)
    with gemmd.Client(addr, auto_shm=(mode == "default")) as c:
        if mode == "shm":
            xa, xb, xo = c.shm_array((s, s)), c.shm_array((s, s)), c.shm_array((s, s))
            xa[:] = a
            xb[:] = b
        else:
            xa, xb, xo = a, b, np.empty((s, s), np.float32)
        total, compute = [], []
        for i in range(reps + 2):
            t0 = time.perf_counter()
            if mode == "default":
                c.gemm(xa, xb, out=xo)
                report = None
            else:
                f = c.submit(xa, xb, out=xo)
                f.result()
                report = f.report
            if i >= 2:
                total.append(time.perf_counter() - t0)
                if report:
                    compute.append(report["timings"]["compute_us"] / 1e3)
        return median(total) * 1e3, (median(compute) if compute else float("nan"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gemmd", default=os.path.join(REPO, "build", "daemon", "gemmd"))
    parser.add_argument("--sizes", default="1024,2048")
    parser.add_argument("--reps", type=int, default=0, help="calls a median (default by size)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep-env", action="store_true")
    args = parser.parse_args()
    if not args.keep_env:
        for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            os.environ.pop(var, None)
    import numpy as np   # after the environment is set: OpenBLAS reads it when loaded
    sys.path.insert(0, os.path.join(REPO, "python"))
    import gemmd
    tmp = tempfile.mkdtemp(prefix="cpu-vs-numpy-")
    addr = "unix:" + os.path.join(tmp, "gemmd.sock")
    daemon = subprocess.Popen([args.gemmd, "--config", os.path.join(REPO, "config", "gemmd.yaml"),
                               "--backend", "cpu", "--listen", addr, "--log-level", "warn"])
    try:
        for _ in range(100):
            try:
                with gemmd.Client(addr) as c:
                    info = c.info()
                break
            except gemmd.Error:
                time.sleep(0.1)
        load0 = os.getloadavg()[0]
        sizes = [int(x) for x in args.sizes.split(",")]
        rows = {s: {k: [] for k in ("numpy", "socket", "socket_c", "default", "shm", "shm_c")}
                for s in sizes}
        for _ in range(args.rounds):
            for s in sizes:
                reps = args.reps or max(5, int(2e10 / (2 * s ** 3)))
                rows[s]["numpy"].append(numpy_ms(np, s, reps))
                t, c = gemmd_ms(np, gemmd, addr, s, reps, "socket")
                rows[s]["socket"].append(t)
                rows[s]["socket_c"].append(c)
                rows[s]["default"].append(gemmd_ms(np, gemmd, addr, s, reps, "default")[0])
                t, c = gemmd_ms(np, gemmd, addr, s, reps, "shm")
                rows[s]["shm"].append(t)
                rows[s]["shm_c"].append(c)
        load1 = os.getloadavg()[0]
        print("cpu_vs_numpy: %s, %d cores, load %.2f -> %.2f, %d rounds; %s" % (
            info["devices"][0]["name"], os.cpu_count(), load0, load1, args.rounds,
            "OPENBLAS_* kept" if args.keep_env else "OPENBLAS_CORETYPE/L2_SIZE unset"))
        print()
        print("| size | NumPy ms | socket ms (compute) | Python default gemm ms | shm ms (compute) "
              "| socket / NumPy | shm / NumPy |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for s in sizes:
            r = {k: median(v) for k, v in rows[s].items()}
            print("| %d³ | %.2f | %.2f (%.2f) | %.2f | %.2f (%.2f) | %.2fx | %.2fx |" % (
                s, r["numpy"], r["socket"], r["socket_c"], r["default"], r["shm"], r["shm_c"],
                r["socket"] / r["numpy"], r["shm"] / r["numpy"]))
    finally:
        daemon.terminate()
        daemon.wait()


if __name__ == "__main__":
    main()
