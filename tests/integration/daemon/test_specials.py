#!/usr/bin/python3
"""IEEE special values through a gemm: infinities and NaNs in A, B and c come out as IEEE
arithmetic makes them, element by element, never as a finite number or the wrong infinity.

For f32 (exact and fast), f64, f16 and bf16, every transpose: A holds +inf against a zero of B
(NaN there, an infinity of B's sign elsewhere in the row), a NaN (a NaN row), -inf and +inf in
one row (NaN where B's two signs agree, an infinity where they differ), and a quarter of the
dtype's largest finite value (large finite products); B holds +inf in one column. A second
request adds beta with c holding an infinity and a NaN. The reference is numpy's einsum in
float64 (plain loops, not a BLAS); finite elements are checked against the dtype's tolerance of
their magnitude, and the daemon still serves afterwards. Then one request with the special
values among five plain ones of its shape, all in flight at once (which the GPU backend's
small-job lane may batch together): the plain ones come back finite and right. Runs on the harness's backend
(GEMMD_TEST_BACKEND)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402

M, N, K = 9, 7, 13
LARGEST = {"f32": float(np.finfo(np.float32).max), "f64": float(np.finfo(np.float64).max),
           "f16": 65504.0, "bf16": 3.3895313892515355e38}
MODES = (("f32", None), ("f32", "fast"), ("f64", None), ("f16", None), ("bf16", None))


def operands(rng, dtype):
    """op(A) (M x K) and op(B) (K x N) with the special values in place, as float64 values the
    dtype holds exactly."""
    a = h.round_to(rng.uniform(-1.0, 1.0, (M, K)), dtype)
    b = h.round_to(rng.uniform(0.25, 1.0, (K, N)) * rng.choice([-1.0, 1.0], (K, N)), dtype)
    a[0, 2] = np.inf
    b[2, 0] = 0.0                      # inf * 0: NaN at (0, 0)
    b[2, 3], b[2, 4] = -0.5, 0.5       # -inf at (0, 3), +inf at (0, 4)
    a[1, 3] = np.nan
    a[2, 4], a[2, 5] = -np.inf, np.inf  # NaN where b[4, j] and b[5, j] have one sign
    a[3, 6] = h.round_to(LARGEST[dtype] / 4, dtype)
    b[7, 1] = np.inf                   # column 1: infinities (NaN where a[i, 7] is 0: never)
    return a, b


def reference(a, b, c, alpha, beta):
    with np.errstate(invalid="ignore", over="ignore"):
        out = alpha * np.einsum("ik,kj->ij", a, b, optimize=False)
        scale = abs(alpha) * np.einsum("ik,kj->ij", np.abs(a), np.abs(b), optimize=False)
        if c is not None:
            out = out + beta * c
            scale = scale + abs(beta) * np.abs(c)
    return out, scale


def check(out, ref, scale, dtype, what):
    out = np.asarray(out, dtype=np.float64)
    wrong = []
    for idx in np.ndindex(ref.shape):
        want, got = ref[idx], out[idx]
        if np.isnan(want):
            ok = np.isnan(got)
        elif np.isinf(want):
            ok = got == want
        else:
            limit = h.tolerance(dtype, K) * scale[idx] + h.SUBNORMAL_SPACING[dtype]
            ok = np.isfinite(got) and abs(got - want) <= limit
        if not ok:
            wrong.append("%s: got %r, expected %r" % (idx, got, want))
    assert not wrong, "%s: %d elements wrong: %s" % (what, len(wrong), "; ".join(wrong[:6]))
    # every class is there, so the test tests what it says
    assert np.isnan(ref).any() and np.isposinf(ref).any() and np.isneginf(ref).any(), what


def test_special_values(ctx):
    with ctx.daemon() as d, d.connect() as client:
        for dtype, precision in MODES:
            for trans_a in (False, True):
                for trans_b in (False, True):
                    a, b = operands(ctx.rng, dtype)
                    hdr = {"m": M, "n": N, "k": K, "dtype": dtype, "trans_a": trans_a,
                           "trans_b": trans_b}
                    if precision:
                        hdr["precision"] = precision
                    sent_a, sent_b = (a.T if trans_a else a), (b.T if trans_b else b)
                    what = "%s%s %s%s" % (dtype, " fast" if precision else "",
                                          "T" if trans_a else "N", "T" if trans_b else "N")
                    poison = np.full((M, N), np.nan)  # beta 0: c is not read
                    _, out = client.gemm(hdr, sent_a, sent_b, poison)
                    check(out, *reference(a, b, None, 1.0, 0.0), dtype, what)

                    c = h.round_to(ctx.rng.uniform(-1.0, 1.0, (M, N)), dtype)
                    c[5, 5], c[6, 4] = -np.inf, np.nan
                    beta_hdr = dict(hdr, alpha=-2.0, beta=0.5)
                    _, out = client.gemm(beta_hdr, sent_a, sent_b, c)
                    check(out, *reference(a, b, c, -2.0, 0.5), dtype, what + " alpha -2 beta 0.5")
        h.check_gemm(client, ctx.rng, 9, 9, 9, "f32")


def test_specials_beside_plain_jobs(ctx):
    with ctx.daemon() as d, d.connect() as client:
        for dtype in ("f32", "f64", "f16", "bf16"):
            hdr = {"m": M, "n": N, "k": K, "dtype": dtype}
            jobs = []
            for i in range(6):
                if i == 2:
                    a, b = operands(ctx.rng, dtype)
                else:
                    a, b = h.random_operands(ctx.rng, M, N, K, dtype)
                jobs.append((client.send_gemm(hdr, a, b), a, b))
            for i, (msgid, a, b) in enumerate(jobs):
                _, out = client.gemm_result(msgid, hdr)
                what = "%s job %d of 6 in flight" % (dtype, i)
                if i == 2:
                    check(out, *reference(a, b, None, 1.0, 0.0), dtype, what)
                else:
                    h.assert_close(out, a, b, None, 1.0, 0.0, False, False, dtype, what)


if __name__ == "__main__":
    sys.exit(h.main([test_special_values, test_specials_beside_plain_jobs]))
