#!/usr/bin/python3
"""test_blas_numpy.py - Debian's NumPy on libgemmd_blas, against NumPy without it.

Each part runs NumPy in a child process with the library loaded one way or the other, and
a real gemmd (GEMMD_BLAS_OFFLOAD_MIN=0: every gemm goes to it):
  preload     LD_PRELOAD=libgemmd_blas.so: a @ b in f32, f64, c64, c128 (complex as gemmd's
              c64 / c128), C and Fortran order, transposed views, slices, odd sizes, against
              the same products computed here without the library; Debian's SciPy's own BLAS
              wrappers (scipy.linalg.blas.?gemm: Fortran sgemm_ and friends, with alpha, beta,
              C and every transpose) and a SciPy LU solve; the daemon's stats count them
  as-libblas  the library standing in for libblas.so.3 (a directory on LD_LIBRARY_PATH whose
              libblas.so.3 is it: what the Debian alternative does, without touching the
              system), so that every other BLAS routine NumPy calls goes through the
              forwarding stubs: the same products, plus a dot, a solve (LAPACK on top)
  fork        multiprocessing workers (fork) multiplying at once after the parent did
  stopped     the daemon stopped mid-run: the products stay right (CPU fallback), one warning
  alternative (--alternative, ctest blas_alternative, label package) the real Debian
              alternative (update-alternatives --install/--set), only as root with
              GEMMD_SYSTEM_TESTS=1 like tests/package; the previous choice is restored
  test_blas_numpy.py --gemmd build/daemon/gemmd --lib build/blas/libgemmd_blas.so
Exit 0 pass, 1 fail, 77 skip (a sanitized build: the library is not preloadable then).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

import gemmd_harness as h
from test_blas import gemm_count as gemms

ALT_LINK = "/usr/lib/x86_64-linux-gnu/libblas.so.3"
ALT_NAME = "libblas.so.3-x86_64-linux-gnu"
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def random_matrix(rng, dt, *shape):
    """Normal values of dtype dt (complex: normal real and imaginary parts)."""
    x = rng.standard_normal(shape)
    if np.issubdtype(dt, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dt)


def cases(seed=7):
    """(name, a, b) operand pairs in every layout NumPy hands BLAS."""
    rng = np.random.default_rng(seed)
    out = []
    for dt in DTYPES:
        def mk(*shape):
            return random_matrix(rng, dt, *shape)
        big, big2 = mk(70, 90), mk(90, 90)
        out += [
            ("%s-c" % dt.__name__, mk(33, 47), mk(47, 29)),
            ("%s-f" % dt.__name__, np.asfortranarray(mk(31, 20)), np.asfortranarray(mk(20, 45))),
            ("%s-mixed" % dt.__name__, mk(64, 17), np.asfortranarray(mk(17, 65))),
            ("%s-transposed" % dt.__name__, mk(40, 30).T, mk(50, 40).T),
            ("%s-slices" % dt.__name__, big[3:60, 5:80], big2[2:77, 10:70]),
            ("%s-strided" % dt.__name__, big[::2, ::3][:, :20], big2[::3, 1::2][:20, :]),
            ("%s-vector" % dt.__name__, mk(1, 40), mk(40, 37)),
            ("%s-large" % dt.__name__, mk(300, 257), mk(257, 190)),
        ]
    return out


def child_products(path):
    """Runs in the child: every case's a @ b, saved."""
    res = {name: a @ b for name, a, b in cases()}
    a = np.random.default_rng(3).standard_normal((50, 50))
    res["solve"] = np.linalg.solve(a + 50 * np.eye(50), np.ones(50))
    res["dot"] = np.array(np.dot(a[0], a[1]))
    res.update(scipy_products())
    np.savez(path, **res)


def scipy_cases(seed=9):
    """(name, routine letter, alpha, beta, a, b, c, trans_a, trans_b) for SciPy's ?gemm."""
    rng = np.random.default_rng(seed)
    out = []
    for letter, dt in zip("sdcz", DTYPES):
        def mk(*shape):
            return np.asfortranarray(random_matrix(rng, dt, *shape))
        cplx = np.issubdtype(dt, np.complexfloating)
        for ta, tb in ((0, 0), (1, 0), (0, 1), (2 if cplx else 1, 1)):
            m, n, k = 37, 29, 61
            a = mk(k, m) if ta else mk(m, k)
            b = mk(n, k) if tb else mk(k, n)
            alpha, beta = (1.5 - 0.5j, 0.25 + 1j) if cplx else (1.5, 0.25)
            out.append(("scipy-%sgemm-%d%d" % (letter, ta, tb), letter, alpha, beta, a, b,
                        mk(m, n), ta, tb))
    return out


def scipy_op(x, t):
    return x if t == 0 else (x.T if t == 1 else x.conj().T)


def scipy_products():
    """SciPy's BLAS wrappers and an LU solve, where Debian's SciPy is installed."""
    try:
        import scipy.linalg as sl
        from scipy.linalg import blas
    except ImportError:
        return {}
    res = {}
    for name, letter, alpha, beta, a, b, c, ta, tb in scipy_cases():
        gemm = getattr(blas, letter + "gemm")
        res[name] = gemm(alpha, a, b, beta=beta, c=c.copy(order="F"), trans_a=ta, trans_b=tb)
    a = np.random.default_rng(4).standard_normal((80, 80))
    res["scipy-solve"] = sl.solve(a + 80 * np.eye(80), np.ones(80))
    return res


def check_products(path):
    got = np.load(path)
    for name, a, b in cases():
        want = a.astype(np.complex128) @ b.astype(np.complex128)
        bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
        eps = np.finfo(a.dtype).eps
        err = np.abs(got[name] - want)
        assert got[name].dtype == (a @ b).dtype, name
        assert np.all(err <= 4 * eps * a.shape[1] * bound + 1e-30), \
            "%s: max error %g" % (name, (err / (bound + 1e-30)).max())
    a = np.random.default_rng(3).standard_normal((50, 50))
    assert np.allclose(got["solve"], np.linalg.solve(a + 50 * np.eye(50), np.ones(50)))
    assert np.allclose(got["dot"], np.dot(a[0], a[1]))
    check_scipy(got)


def check_scipy(got):
    names = [case[0] for case in scipy_cases()]
    if not any(name in got for name in names):
        print("no SciPy here: its part skipped")
        return
    for name, _, alpha, beta, a, b, c, ta, tb in scipy_cases():
        pa, pb = scipy_op(a, ta).astype(np.complex128), scipy_op(b, tb).astype(np.complex128)
        want = alpha * (pa @ pb) + beta * c.astype(np.complex128)
        bound = abs(alpha) * (np.abs(pa) @ np.abs(pb)) + abs(beta) * np.abs(c)
        eps = np.finfo(a.dtype).eps
        err = np.abs(got[name] - want)
        assert got[name].dtype == a.dtype, name
        assert np.all(err <= 4 * eps * (pa.shape[1] + 2) * bound + 1e-30), \
            "%s: max error %g" % (name, (err / (bound + 1e-30)).max())
    a = np.random.default_rng(4).standard_normal((80, 80))
    assert np.allclose(got["scipy-solve"], np.linalg.solve(a + 80 * np.eye(80), np.ones(80)))


def child_fork():
    import multiprocessing as mp
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((48, 80))
    _ = a @ a.T.copy()  # the parent holds a connection before it forks
    with mp.get_context("fork").Pool(6) as pool:
        errs = pool.map(_fork_work, range(24))
    assert max(errs) < 1e-4, errs
    print("fork: %d workers' products right" % len(errs))


def _fork_work(i):
    rng = np.random.default_rng(100 + i)
    a, b = rng.standard_normal((65, 33)), rng.standard_normal((33, 70))
    want = (a[:, :, None] * b[None, :, :]).sum(axis=1)
    err = float(np.abs(a @ b - want).max())
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    return max(err, float(np.abs(a32 @ b32 - want).max()) * 1e-3)


def child_stopped():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((90, 60)), rng.standard_normal((60, 70))
    want = (a[:, :, None] * b[None, :, :]).sum(axis=1)
    for _ in range(3):
        assert np.allclose(a @ b, want)
    print("ready", flush=True)
    sys.stdin.readline()  # the daemon is stopped now
    for _ in range(20):
        assert np.allclose(a @ b, want)
        assert np.allclose(a.astype(np.float32) @ b.astype(np.float32), want, atol=1e-3)
    print("done", flush=True)


def run_child(mode, env, tmp, extra=()):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode] + list(extra),
                       env=env, cwd=tmp, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError("%s child failed (%d):\n%s%s" % (mode, p.returncode, p.stdout,
                                                              p.stderr[-4000:]))
    return p


def products(d, env, tmp, how):
    path = os.path.join(tmp, how + ".npz")
    before = gemms(d)
    p = run_child("products", env, tmp, [path])
    check_products(path)
    reached = gemms(d) - before
    # 8 real cases of each real dtype at least (a @ b of a transposed view may be a syrk), and
    # SciPy's 16 ?gemm calls where it is installed
    want = 12 + (16 if scipy_here() else 0)
    assert reached >= want, "%s: only %d gemms reached the daemon (want %d)" % (how, reached, want)
    print("%s: products right, %d gemms on the daemon; %s" % (how, reached, p.stderr.strip()))


def scipy_here():
    try:
        import scipy.linalg.blas  # noqa: F401
        return True
    except ImportError:
        return False


def alternative(d, env, tmp, lib):
    """True when it ran, False when it skipped."""
    if os.environ.get("GEMMD_SYSTEM_TESTS") != "1" or os.geteuid() != 0:
        print("skip alternative: needs root and GEMMD_SYSTEM_TESTS=1")
        return False
    q = subprocess.run(["update-alternatives", "--query", ALT_NAME], capture_output=True,
                       text=True)
    if q.returncode != 0:
        print("skip alternative: no %s alternative" % ALT_NAME)
        return False
    fields = dict(l.split(": ", 1) for l in q.stdout.splitlines() if ": " in l)
    status, value = fields.get("Status"), fields.get("Value")
    installed = os.path.join(tmp, "libgemmd_blas.so.1")
    subprocess.run(["cp", os.path.realpath(lib), installed], check=True)
    try:
        subprocess.run(["update-alternatives", "--install", ALT_LINK, ALT_NAME, installed, "1"],
                       check=True, capture_output=True)
        subprocess.run(["update-alternatives", "--set", ALT_NAME, installed], check=True,
                       capture_output=True)
        products(d, env, tmp, "alternative")
    finally:
        subprocess.run(["update-alternatives", "--remove", ALT_NAME, installed],
                       capture_output=True)
        if status == "manual" and value:
            subprocess.run(["update-alternatives", "--set", ALT_NAME, value], capture_output=True)
        else:
            subprocess.run(["update-alternatives", "--auto", ALT_NAME], capture_output=True)
    assert os.path.realpath(ALT_LINK) != os.path.realpath(installed), "alternative not restored"
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmd")
    ap.add_argument("--lib")
    ap.add_argument("--child")
    ap.add_argument("--alternative", action="store_true",
                    help="only the system-wide alternative (label package)")
    args, rest = ap.parse_known_args()
    if args.child == "products":
        return child_products(rest[0])
    if args.child == "fork":
        return child_fork()
    if args.child == "stopped":
        return child_stopped()
    gemmd = h.find_gemmd(sys.argv)
    if h.sanitized(gemmd):
        print("skip: the sanitized library cannot be preloaded into Python")
        return 77
    lib = os.path.abspath(args.lib)
    with tempfile.TemporaryDirectory() as tmp, h.Daemon(gemmd) as d:
        base = dict(os.environ, GEMMD_ADDRESS=d.address(), GEMMD_BLAS_OFFLOAD_MIN="0",
                    GEMMD_BLAS_STATS="1", GEMMD_BLAS_STRICT="1", OPENBLAS_NUM_THREADS="1")
        if args.alternative:
            return 0 if alternative(d, base, tmp, lib) else 77
        products(d, dict(base, LD_PRELOAD=lib), tmp, "preload")
        libdir = os.path.join(tmp, "libdir")
        os.mkdir(libdir)
        os.symlink(lib, os.path.join(libdir, "libblas.so.3"))
        products(d, dict(base, LD_LIBRARY_PATH=libdir), tmp, "as-libblas")
        before = gemms(d)
        p = run_child("fork", dict(base, LD_PRELOAD=lib), tmp)
        assert gemms(d) - before >= 24 * 2, "fork: the workers' gemms did not reach the daemon"
        print(p.stdout.strip())
    with tempfile.TemporaryDirectory() as tmp:
        d = h.Daemon(gemmd)
        d.start()
        env = dict(os.environ, GEMMD_ADDRESS=d.address(), GEMMD_BLAS_OFFLOAD_MIN="0",
                   LD_PRELOAD=lib, GEMMD_BLAS_RETRY_MS="0")
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", "stopped"],
                                 env=env, cwd=tmp, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready"
            d.stop()
            out, err = child.communicate("go\n", timeout=300)
        finally:
            if child.poll() is None:
                child.kill()
            d.cleanup()
        assert child.returncode == 0 and "done" in out, (child.returncode, out, err[-3000:])
        warnings = [l for l in err.splitlines() if "warning" in l]
        assert len(warnings) == 1, err
        print("stopped: products right on the CPU, one warning: " + warnings[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
