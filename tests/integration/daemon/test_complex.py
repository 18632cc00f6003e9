#!/usr/bin/python3
"""The complex gemm (proto/PROTOCOL.md, "Complex dtypes", the "complex" feature): c64 and c128
operands, complex alpha and beta (alpha_im, beta_im), conj_a / conj_b, against a float64 complex
reference (NumPy complex128). Every trans / conj combination on odd shapes with complex alpha and
beta, beta 0 with NaN in c not read, batches and a broadcast B, operands and the result in a
shared-memory region, a resident operand (put); every misuse (the complex keys on a real dtype,
the epilogue, an out_dtype) answered INVALID_ARGUMENT on a connection that goes on serving. Runs
on the harness's backend (GEMMD_TEST_BACKEND)."""
import itertools
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402
from test_resident import put  # noqa: E402
from test_shm import Region, expect_error, gemm_refs  # noqa: E402

U = {"c64": 2.0 ** -24, "c128": 2.0 ** -53}  # unit roundoff of the parts


def crandom(rng, shape, dtype):
    """Random complex values in the unit square, rounded to dtype's parts."""
    x = rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)
    return x.astype(h._NUMPY[dtype]).astype(np.complex128)


def op(x, trans, conj):
    x = np.swapaxes(x, -1, -2) if trans else x
    return np.conj(x) if conj else x


def reference(a, b, c, alpha, beta, ta, tb, ca, cb):
    """(alpha op(a) op(b) + beta c, a bound on each element's magnitudes) in complex128."""
    pa, pb = op(a, ta, ca), op(b, tb, cb)
    ref = alpha * np.einsum("...ik,...kj->...ij", pa, pb)
    bound = abs(alpha) * np.einsum("...ik,...kj->...ij", np.abs(pa), np.abs(pb))
    if c is not None and beta != 0:
        ref = ref + beta * c
        bound = bound + abs(beta) * np.abs(c)
    return ref, bound


def check(out, ref, bound, dtype, k, what):
    assert np.all(np.isfinite(out)), "%s: non-finite elements (c read where beta is 0?)" % what
    err = np.abs(out.astype(np.complex128) - ref)
    tol = 8 * (k + 4) * U[dtype] * bound + 1e-300
    worst = float(np.max(err / tol))
    assert worst <= 1.0, "%s: error %.3g of the tolerance" % (what, worst)


def hdr_of(m, n, k, dtype, ta, tb, ca, cb, alpha, beta, **more):
    hdr = {"m": m, "n": n, "k": k, "dtype": dtype, "trans_a": ta, "trans_b": tb,
           "alpha": alpha.real, "beta": beta.real}
    if alpha.imag:
        hdr["alpha_im"] = alpha.imag
    if beta.imag:
        hdr["beta_im"] = beta.imag
    if ca:
        hdr["conj_a"] = True
    if cb:
        hdr["conj_b"] = True
    hdr.update(more)
    return hdr


def stored(m, n, k, ta, tb, batch=None):
    lead = () if batch is None else (batch,)
    return lead + ((k, m) if ta else (m, k)), lead + ((n, k) if tb else (k, n))


def test_features(ctx):
    with ctx.daemon() as d, d.connect() as client:
        info = client.call("info")
        assert "complex" in info["features"], info["features"]
        assert {"c64", "c128"} <= set(info["dtypes"]), info["dtypes"]


def test_every_form(ctx):
    with ctx.daemon() as d, d.connect() as client:
        for dtype in ("c64", "c128"):
            for ta, tb, ca, cb in itertools.product((False, True), repeat=4):
                m, n, k = (int(v) for v in ctx.rng.integers(1, 40, 3))
                sa, sb = stored(m, n, k, ta, tb)
                a, b = crandom(ctx.rng, sa, dtype), crandom(ctx.rng, sb, dtype)
                what = "%s %dx%dx%d ta %d tb %d ca %d cb %d" % (dtype, m, n, k, ta, tb, ca, cb)
                # beta 0: c is poisoned and must not be read
                alpha = complex(*ctx.rng.uniform(-2, 2, 2))
                poison = np.full((m, n), np.nan + 1j * np.nan)
                hdr = hdr_of(m, n, k, dtype, ta, tb, ca, cb, alpha, 0j)
                _, out = client.gemm(hdr, a, b, poison)
                check(out, *reference(a, b, None, alpha, 0, ta, tb, ca, cb), dtype, k, what)
                # complex beta with c; a purely imaginary beta too
                for beta in (complex(*ctx.rng.uniform(-2, 2, 2)), 0.5j):
                    c = crandom(ctx.rng, (m, n), dtype)
                    hdr = hdr_of(m, n, k, dtype, ta, tb, ca, cb, alpha, beta)
                    _, out = client.gemm(hdr, a, b, c)
                    check(out, *reference(a, b, c, alpha, beta, ta, tb, ca, cb), dtype, k,
                          what + " beta %s" % beta)


def test_batches(ctx):
    with ctx.daemon() as d, d.connect() as client:
        for dtype, broadcast in itertools.product(("c64", "c128"), (False, True)):
            batch, m, n, k = 3, 17, 9, 23
            for ta, tb in ((False, False), (True, True)):
                sa, sb = stored(m, n, k, ta, tb, batch)
                a = crandom(ctx.rng, sa, dtype)
                b = crandom(ctx.rng, sb[1:] if broadcast else sb, dtype)
                c = crandom(ctx.rng, (batch, m, n), dtype)
                alpha, beta = 1 - 2j, -0.25 + 1j
                more = {"batch": batch}
                if broadcast:
                    more["broadcast_b"] = True
                hdr = hdr_of(m, n, k, dtype, ta, tb, True, False, alpha, beta, **more)
                _, out = client.gemm(hdr, a, b, c)
                ref = reference(a, b[None] if broadcast else b, c, alpha, beta, ta, tb, True,
                                False)
                check(out, *ref, dtype, k, "%s batch %d broadcast %s" % (dtype, batch, broadcast))


def test_region_and_resident(ctx):
    with ctx.daemon() as d, d.connect() as client:
        if "shm" not in client.call("info")["features"]:
            return
        region = Region(1 << 20).register(client)
        try:
            for dtype in ("c64", "c128"):
                m, n, k = 13, 11, 7
                a, b = crandom(ctx.rng, (k, m), dtype), crandom(ctx.rng, (k, n), dtype)
                c = crandom(ctx.rng, (m, n), dtype)
                ra, rb, rc = region.put(a, dtype), region.put(b, dtype), region.put(c, dtype)
                out_ref = region.take(m * n * h.DTYPES[dtype])
                region.map[out_ref["offset"]:out_ref["offset"] + m * n * h.DTYPES[dtype]] = \
                    b"\xff" * (m * n * h.DTYPES[dtype])  # poisoned (NaN)
                hdr = hdr_of(m, n, k, dtype, True, False, True, True, 2 + 1j, 1 - 1j,
                             out=out_ref)
                gemm_refs(client, hdr, ra, rb, rc)
                got = region.read(out_ref, dtype, (m, n))
                check(got, *reference(a, b, c, 2 + 1j, 1 - 1j, True, False, True, True), dtype,
                      k, dtype + " in a region")
                handle = put(client, b, dtype)
                hdr = hdr_of(m, n, k, dtype, True, False, False, True, 1j, 0j)
                _, out = client.gemm_result(client.send_gemm(hdr, a, b), hdr)
                result = gemm_refs(client, hdr, a, {"handle": handle})
                got = h.from_wire(result[1], dtype, (m, n))
                check(got, *reference(a, b, None, 1j, 0, True, False, False, True), dtype, k,
                      dtype + " resident b")
                check(out, *reference(a, b, None, 1j, 0, True, False, False, True), dtype, k,
                      dtype + " sent b")
        finally:
            region.close()


def test_misuse(ctx):
    with ctx.daemon() as d, d.connect() as client:
        a = np.ones((4, 3))
        b = np.ones((3, 5))
        base = {"m": 4, "n": 5, "k": 3}
        bad = [
            (dict(base, dtype="f32", alpha_im=1.0), "alpha_im on f32"),
            (dict(base, dtype="f64", beta_im=1.0), "beta_im on f64"),
            (dict(base, dtype="f32", conj_a=True), "conj_a on f32"),
            (dict(base, dtype="f16", conj_b=True), "conj_b on f16"),
            (dict(base, dtype="c64", activation="relu"), "activation on c64"),
            (dict(base, dtype="c128", out_dtype="f16"), "out_dtype on c128"),
            (dict(base, dtype="c64", alpha_im=float("inf")), "infinite alpha_im"),
            (dict(base, dtype="c64", conj_a=1), "conj_a not a bool"),
        ]
        for hdr, what in bad:
            expect_error("INVALID_ARGUMENT", client.gemm, hdr, a, b, what=what)
        # beta_im alone makes beta nonzero: c is required
        expect_error("INVALID_ARGUMENT", client.gemm, dict(base, dtype="c64", beta_im=1.0), a, b,
                     what="beta_im without c")
        expect_error("INVALID_ARGUMENT", client.gemm,
                     dict(base, dtype="c64", bias=True, beta=1.0), a, b, np.ones((1, 5)),
                     what="bias on c64")
        h.check_gemm(client, ctx.rng, 9, 9, 9, "f32")  # still serving


if __name__ == "__main__":
    sys.exit(h.main([test_features, test_every_form, test_batches, test_region_and_resident,
                     test_misuse]))
