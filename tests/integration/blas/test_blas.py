#!/usr/bin/python3
"""test_blas.py - libgemmd_blas against a real gemmd: the C entry points (test_cblas), then the
reference BLAS test programs of Debian's libblas-test (xblat3s, d, c, z, each fed its
?blat3.in) through LD_PRELOAD with GEMMD_BLAS_OFFLOAD_MIN=0: every GEMM line PASSED, error
exits included, and the daemon's stats count the gemms of every kind (complex ones as
gemmd's c64 / c128, BLAS's 'C' as trans and conj).

  test_blas.py --gemmd build/daemon/gemmd --lib build/blas/libgemmd_blas.so --cblas BIN
Exit 0 pass, 1 fail, 77 skip (no libblas-test: then only test_cblas runs... and passes).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import gemmd_harness as h

BLAS_TEST_DIRS = ["/usr/lib/x86_64-linux-gnu/blas", "/usr/lib/blas", "/usr/share/doc/libblas-test"]
GEMM_CALLS = 17496  # the GEMM computational calls xblat3 makes with Debian's ?blat3.in


def gemm_count(daemon):
    client = daemon.connect()
    try:
        return client.call("stats")["requests"]["gemm"]
    finally:
        client.close()


def find_xblat3(kind):
    for d in BLAS_TEST_DIRS:
        prog, inp = os.path.join(d, "xblat3" + kind), os.path.join(d, kind + "blat3.in")
        if os.access(prog, os.X_OK) and os.path.exists(inp):
            return prog, inp
    return None, None


def run_xblat3(kind, env):
    """Runs xblat3<kind>; returns the GEMM lines of its summary or raises."""
    prog, inp = find_xblat3(kind)
    with tempfile.TemporaryDirectory() as tmp:
        with open(inp) as f:
            p = subprocess.run([prog], stdin=f, capture_output=True, text=True, env=env,
                               cwd=tmp, timeout=900)
        out_path = os.path.join(tmp, kind + "blat3.out")
        text = open(out_path).read() if os.path.exists(out_path) else p.stdout
    lines = [l.strip() for l in text.splitlines() if "GEMM" in l]
    bad = [l for l in text.splitlines()
           if "FAIL" in l or "SUSPECT" in l or "ERROR" in l.replace("ERROR-EXITS", "")]
    want = ["%sGEMM  PASSED THE TESTS OF ERROR-EXITS" % kind.upper(),
            "%sGEMM  PASSED THE COMPUTATIONAL TESTS ( %d CALLS)" % (kind.upper(), GEMM_CALLS)]
    if p.returncode != 0 or bad or any(w not in lines for w in want):
        raise AssertionError("xblat3%s: rc %d, GEMM lines %s, bad lines %s, stderr %s"
                             % (kind, p.returncode, lines, bad[:5], p.stderr[-1500:]))
    return p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmd")
    ap.add_argument("--lib", required=True)
    ap.add_argument("--cblas", required=True)
    args, _ = ap.parse_known_args()
    gemmd = h.find_gemmd(sys.argv)
    with h.Daemon(gemmd) as d:
        env = dict(os.environ, GEMMD_ADDRESS=d.address(), GEMMD_BLAS_OFFLOAD_MIN="0",
                   GEMMD_BLAS_STRICT="1")
        before = gemm_count(d)
        p = subprocess.run([args.cblas], capture_output=True, text=True, env=env, timeout=600)
        if p.returncode != 0:
            raise AssertionError("test_cblas failed:\n" + p.stdout + p.stderr[-4000:])
        assert gemm_count(d) > before, "test_cblas's gemms never reached the daemon"
        print("test_cblas: ok (%d gemms on the daemon)" % (gemm_count(d) - before))
        if h.sanitized(gemmd):
            print("skip: xblat3 under LD_PRELOAD of a sanitized library")
            return 0
        if find_xblat3("s")[0] is None:
            print("skip: no libblas-test (xblat3s) installed")
            return 77
        env["LD_PRELOAD"] = os.path.abspath(args.lib)
        env["GEMMD_BLAS_STATS"] = "1"
        for kind in "sdcz":
            before = gemm_count(d)
            err = run_xblat3(kind, env)
            reached = gemm_count(d) - before
            # quick returns (alpha 0, k 0, m or n 0) stay local: the rest reach gemmd
            assert reached >= GEMM_CALLS // 3, "xblat3%s: only %d gemms reached the daemon" % (
                kind, reached)
            print("xblat3%s: GEMM passed, %d gemms on the daemon; %s" % (kind, reached, err.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
