#!/usr/bin/python3
"""The fp8 gemm (proto/PROTOCOL.md, "The fp8 gemm"): dtypes "e4m3" and "e5m2" multiply 8-bit
float matrices into f32, alpha * scale_a * scale_b * op(A) * op(B) + beta * C0, C0 (c, or the
bias row) and the result f32 (or cast to bf16). Checked on raw msgpack requests against a float64
reference built from the formats' own definition (sign, exponent, mantissa; not the daemon's
converter), each element within fp8's accumulation bound of its magnitude: odd shapes and the
shapes the GPU's kernel 19 takes, every transpose, scales, batches, a broadcast B, the bias row
with ReLU / GELU, the bf16 cast; large problems through the GPU's staging; jobs of one shape but
different scales in flight together (the small lane must not batch them as one); operands and
the result in a shared-memory region, split between two devices; resident fp8 operands; every
misuse answered INVALID_ARGUMENT with the connection still serving. Runs on the harness's
backend (GEMMD_TEST_BACKEND)."""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402
from test_out_dtype import in_flight, reply_of, send  # noqa: E402  (c goes as f32)
from test_resident import put  # noqa: E402
from test_shm import (Region, expect_error, expect_split, gemm_into,  # noqa: E402
                      split_region)

FORMATS = {"e4m3": (3, 7), "e5m2": (2, 15)}  # mantissa bits, exponent bias


def decode_table(dtype):
    """The value of each of the 256 codes (NaN for NaN and infinity codes: never sent)."""
    mant_bits, bias = FORMATS[dtype]
    table = np.full(256, np.nan)
    for code in range(256):
        exp, mant = (code & 0x7F) >> mant_bits, code & ((1 << mant_bits) - 1)
        special = code & 0x7F == 0x7F if dtype == "e4m3" else exp == 31
        if special:
            continue
        mag = (mant * 2.0 ** (1 - bias - mant_bits) if exp == 0 else
               (1 + mant / 2.0 ** mant_bits) * 2.0 ** (exp - bias))
        table[code] = -mag if code & 0x80 else mag
    return table


TABLES = {dtype: decode_table(dtype) for dtype in FORMATS}
# 2^-9 of each element's magnitude: Hopper's fp8 tensor cores sum with fewer bits than f32
# (measured up to 2^-11.5 at k = 1040); the CPU is exact to f32's rounding
BOUND = 2.0 ** -9

# ---------------------------------------------------------------------------------------------
# problems and the reference


def codes(ctx, dtype, shape):
    """Random finite codes of magnitude at most 4 (subnormals and both zeros among them)."""
    table = TABLES[dtype]
    pool = np.flatnonzero(np.abs(table) <= 4)
    return pool[ctx.rng.integers(0, len(pool), shape)].astype(np.uint8)


def problem(ctx, dtype, m, n, k, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, batch=None,
            bias=False, act=None, broadcast_b=False, scale_a=None, scale_b=None):
    """(hdr, a, b, c): fp8 codes as stored; c an f32 C (beta != 0), a bias row of n (bias), else
    None."""
    lead = (batch,) if batch else ()
    a = codes(ctx, dtype, lead + ((k, m) if trans_a else (m, k)))
    b = codes(ctx, dtype, (() if broadcast_b else lead) + ((n, k) if trans_b else (k, n)))
    hdr = {"m": m, "n": n, "k": k, "dtype": dtype, "trans_a": trans_a, "trans_b": trans_b,
           "alpha": alpha}
    for key, value in (("batch", batch), ("activation", act), ("scale_a", scale_a),
                       ("scale_b", scale_b)):
        if value:
            hdr[key] = value
    if broadcast_b:
        hdr["broadcast_b"] = True
    c = None
    if bias:
        hdr["bias"], hdr["beta"] = True, beta or 1.0
        c = ctx.rng.uniform(-1, 1, (n,)).astype(np.float32)
    elif beta:
        hdr["beta"] = beta
        c = ctx.rng.uniform(-1, 1, lead + (m, n)).astype(np.float32)
    return hdr, a, b, c


def expected(hdr, a, b, c):
    """(the float64 result, each element's magnitude sum |alpha s_a s_b a b| + |beta c0|)."""
    table = TABLES[hdr["dtype"]]
    a64, b64 = table[a], table[b]
    if hdr["trans_a"]:
        a64 = np.swapaxes(a64, -1, -2)
    if hdr["trans_b"]:
        b64 = np.swapaxes(b64, -1, -2)
    scale = hdr["alpha"] * hdr.get("scale_a", 1.0) * hdr.get("scale_b", 1.0)
    x = scale * np.matmul(a64, b64)
    mag = abs(scale) * np.matmul(np.abs(a64), np.abs(b64))
    beta = hdr.get("beta", 0.0)
    if beta:
        x = x + beta * c.astype(np.float64)
        mag = mag + abs(beta) * np.abs(c.astype(np.float64))
    act = hdr.get("activation")
    if act == "relu":
        x = np.maximum(x, 0)
    elif act == "gelu":
        x = 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))
    return x, mag


def result(client, msgid, hdr):
    """(out_hdr, the result as float shaped (m, n) or (batch, m, n), or None in a region)."""
    out_hdr, data, shape = reply_of(client, msgid, hdr)
    return out_hdr, None if data is None else h.from_wire(data, hdr.get("out_dtype", "f32"), shape)


def gemm(client, hdr, a, b, c=None):
    return result(client, send(client, hdr, a, b, c), hdr)


def check(got, want, what, out_dtype="f32"):
    ref, mag = want
    if got.shape != ref.shape:
        raise AssertionError("%s: shape %s, want %s" % (what, got.shape, ref.shape))
    rounding = 2.0 ** -8 if out_dtype == "bf16" else 2.0 ** -22  # the result's own rounding
    tol = BOUND * mag + rounding * np.abs(ref) + 1e-30
    err = np.abs(got.astype(np.float64) - ref)
    bad = np.argwhere(~(err <= tol))  # NaN fails too
    if len(bad):
        i = tuple(bad[0])
        raise AssertionError("%s: %d of %d elements off; first at %s: %r, want %r (tol %.3g)" %
                             (what, len(bad), got.size, i, got[i], ref[i], tol[i]))


def run_checked(ctx, client, dtype, m, n, k, **kw):
    hdr, a, b, c = problem(ctx, dtype, m, n, k, **kw)
    what = "%s %dx%dx%d %r" % (dtype, m, n, k, kw)
    out_hdr, got = gemm(client, hdr, a, b, c)
    h.check_out_hdr(out_hdr, m, n, "f32", kw.get("batch") or 1, what)
    ref, mag = expected(hdr, a, b, c)
    check(got, (ref.reshape(got.shape), mag.reshape(got.shape)), what)


# ---------------------------------------------------------------------------------------------
# tests


def test_features(ctx):
    with ctx.daemon() as d, d.connect() as client:
        info = client.call("info")
        assert "fp8" in info["features"], info["features"]
        assert "e4m3" in info["dtypes"] and "e5m2" in info["dtypes"], info["dtypes"]


def test_every_form(ctx):
    """Both formats, every transpose on an odd shape and on ones kernel 19 takes, with scales."""
    scalars = ((1.0, 0.0, None, None), (-0.75, 0.5, 0.25, None), (2.0, -1.0, 8.0, 0.0625),
               (0.5, 2.0, None, 3.0))
    with ctx.daemon() as d, d.connect() as client:
        for dtype in FORMATS:
            for shape in ((37, 29, 53), (64, 128, 128), (130, 132, 144)):
                for t in range(4):
                    alpha, beta, sa, sb = scalars[t]
                    run_checked(ctx, client, dtype, *shape, trans_a=bool(t & 1),
                                trans_b=bool(t & 2), alpha=alpha, beta=beta, scale_a=sa,
                                scale_b=sb)
            run_checked(ctx, client, dtype, 1, 1, 1)
            run_checked(ctx, client, dtype, 9, 11, 13, batch=5, beta=3.0, trans_a=True)
            run_checked(ctx, client, dtype, 24, 16, 32, batch=3, trans_b=True, scale_b=0.5)
            run_checked(ctx, client, dtype, 24, 16, 32, batch=4, broadcast_b=True, trans_b=True)
            run_checked(ctx, client, dtype, 9, 11, 13, batch=3, broadcast_b=True, trans_a=True,
                        beta=-1.0)


def test_poisoned_c_not_read(ctx):
    """beta 0 with a c of NaN sent anyway: every element finite and right."""
    with ctx.daemon() as d, d.connect() as client:
        hdr, a, b, _ = problem(ctx, "e4m3", 40, 36, 48, trans_b=True, alpha=5.0)
        junk = np.full((40, 36), np.nan, dtype=np.float32)
        _, got = gemm(client, dict(hdr, beta=0), a, b, junk)
        check(got, expected(hdr, a, b, None), "beta 0 with c sent")


def test_epilogue(ctx):
    """The bias row (times beta), ReLU and GELU, and the result cast to bf16."""
    with ctx.daemon() as d, d.connect() as client:
        for t in range(4):
            dtype = ("e4m3", "e5m2")[t % 2]
            run_checked(ctx, client, dtype, 37, 29, 53, bias=True, act="gelu",
                        trans_a=bool(t & 1), trans_b=bool(t & 2), alpha=-0.5, scale_a=2.0)
            run_checked(ctx, client, dtype, 64, 64, 64, act="relu", beta=2.0,
                        trans_b=bool(t & 1))
        run_checked(ctx, client, "e4m3", 130, 132, 144, bias=True, beta=-0.5, trans_b=True,
                    batch=3)
        for m, n, k in ((19, 23, 11), (128, 256, 96)):
            hdr, a, b, c = problem(ctx, "e4m3", m, n, k, trans_b=True, beta=0.5, scale_b=0.25)
            hdr["out_dtype"] = "bf16"
            c = h.bf16_bits_to_f32(h.f32_to_bf16_bits(c))  # c as the bf16 it is sent as
            out_hdr, got = gemm(client, hdr, a, b, c)
            h.check_out_hdr(out_hdr, m, n, "bf16", 1, "bf16 cast")
            check(got, expected(hdr, a, b, c), "%dx%dx%d cast to bf16" % (m, n, k), "bf16")


def test_large(ctx):
    """Past the GPU's small lane and through several staging chunks of the result."""
    with ctx.daemon() as d, d.connect() as client:
        run_checked(ctx, client, "e4m3", 1100, 900, 320, trans_b=True, beta=3.0, act="gelu")
        run_checked(ctx, client, "e5m2", 700, 1300, 208, batch=2, alpha=-1.0, scale_a=0.5)


def test_pipelined_scales(ctx):
    """One shape in flight many times over, with scales that differ between the requests and
    the same alpha: each reply is its own request's (the small lane batches jobs whose products
    are scaled alike only), f32 requests of the shape among them."""
    def collect(msgid, hdr, a, b, c):
        _, got = result(client, msgid, hdr)
        if hdr["dtype"] == "f32":
            h.assert_close(got, a, b, None, 1.0, 0.0, False, False, "f32", "msgid %d" % msgid)
        else:
            check(got, expected(hdr, a, b, c), "msgid %d %r" % (msgid, hdr.get("scale_a")))

    def requests():
        for i in range(96):
            if i % 5 == 4:
                a = ctx.rng.uniform(-1, 1, (48, 32)).astype(np.float32)
                b = ctx.rng.uniform(-1, 1, (32, 40)).astype(np.float32)
                yield {"m": 48, "n": 40, "k": 32, "dtype": "f32"}, a, b, None
            else:
                yield problem(ctx, "e4m3", 48, 40, 32, trans_b=True,
                              scale_a=(0.5, 1.0, 2.0, 4.0)[i % 4], beta=1.0 if i % 3 == 0 else 0.0)

    with ctx.daemon() as d, d.connect() as client:
        in_flight(client, requests(), collect)


def test_through_shared_memory(ctx):
    """a, b and c in a region, the result written into it (the bytes after it untouched); the
    last problem is tall enough for the GPU backend's row blocks."""
    with ctx.daemon() as d, d.connect() as client:
        if "shm" not in client.call("info")["features"]:
            raise h.Skip("no shared memory on this connection")
        region = Region(16 << 20).register(client)
        try:
            for (m, n, k), kw in (((300, 257, 70), {"beta": 3.0, "scale_a": 0.5}),
                                  ((64, 64, 64), {"bias": True, "act": "relu", "trans_b": True}),
                                  ((37, 29, 41), {"batch": 3, "dtype": "e5m2"}),
                                  ((4608, 256, 64), {"beta": -2.0, "trans_b": True})):
                dtype = kw.pop("dtype", "e4m3")
                hdr, a, b, c = problem(ctx, dtype, m, n, k, **kw)
                refs = [region.put(a, dtype), region.put(b, dtype)]
                if c is not None:
                    refs.append(region.put(c, "f32"))
                what = "shm %s %dx%dx%d %r" % (dtype, m, n, k, kw)
                _, dest = gemm_into(region, hdr, m * n * kw.get("batch", 1) * 4, b"\xff",  # NaN
                                    lambda: result(client, send(client, hdr, *refs), hdr), what)
                shape = (kw["batch"], m, n) if "batch" in kw else (m, n)
                ref, mag = expected(hdr, a, b, c)
                check(region.read(dest, "f32", shape), (ref.reshape(shape), mag.reshape(shape)),
                      what)
        finally:
            region.close()


def test_split_in_row_blocks(ctx):
    """On two GPU devices (real or the fake's): an fp8 gemm in a region, tall enough to be split
    by rows between both and for the parent's rows to run in row blocks."""
    with split_region(ctx) as setup:
        if setup is None:
            return
        client, region = setup
        m, n, k = 8704, 16, 32
        hdr, a, b, c = problem(ctx, "e4m3", m, n, k, beta=0.5, trans_b=True, scale_b=4.0)
        refs = [region.put(a, "e4m3"), region.put(b, "e4m3"), region.put(c, "f32")]
        dest = region.take(m * n * 4)
        hdr["out"] = dest
        expect_split(client, lambda: result(client, send(client, hdr, *refs), hdr)[0])
        check(region.read(dest, "f32", (m, n)), expected(hdr, a, b, c), "split e4m3")


def test_resident(ctx):
    """a and b put as e4m3, c as f32; a c put as e4m3 is refused, naming the f32 it needs."""
    with ctx.daemon() as d, d.connect() as client:
        hdr, a, b, c = problem(ctx, "e4m3", 37, 29, 48, beta=-3.0, trans_b=True, scale_a=0.5)
        ha, hb, hc = put(client, a, "e4m3"), put(client, b, "e4m3"), put(client, c, "f32")
        _, got = gemm(client, hdr, {"handle": ha}, {"handle": hb}, {"handle": hc})
        check(got, expected(hdr, a, b, c), "resident a, b, c")
        wrong = put(client, codes(ctx, "e4m3", c.shape), "e4m3")
        msg = expect_error("INVALID_ARGUMENT", gemm, client, hdr, a, b, {"handle": wrong},
                           what="c put as e4m3")
        assert "f32" in msg, msg
        for x in (ha, hb, hc, wrong):
            assert client.call("free", [x]) is None


def test_misuse(ctx):
    with ctx.daemon() as d, d.connect() as client:
        hdr, a, b, c = problem(ctx, "e4m3", 8, 6, 4, beta=1.0)
        f32 = {"m": 8, "n": 6, "k": 4, "dtype": "f32", "scale_a": 2.0}
        cases = [
            ("scales on an f32 gemm", f32, None,
             "scale_a, scale_b: only an e4m3 or e5m2 gemm takes per-tensor scales"),
            ("an infinite scale", dict(hdr, scale_b=float("inf")), c,
             "scale_a, scale_b: must be finite"),
            ("scales whose product overflows", dict(hdr, scale_a=1e300, scale_b=1e300), c,
             "scale_a, scale_b: must be finite"),
            ("a scale as a str", dict(hdr, scale_a="2"), c, "scale_a: must be a number"),
            ("out_dtype e4m3", dict(hdr, out_dtype="e4m3"), c, "out_dtype: a e4m3 gemm cannot"),
            ("an unknown format", dict(hdr, dtype="e3m4"), c.tobytes(),
             "dtype: \"e3m4\" is not one of"),
            ("c of fp8 bytes", hdr, codes(ctx, "e4m3", (8, 6)).tobytes(),
             "c: expected 192 bytes"),
        ]
        for what, bad_hdr, bad_c, needle in cases:
            a_, b_ = (np.zeros((8, 4), np.float32), np.zeros((4, 6), np.float32)) \
                if bad_hdr["dtype"] == "f32" else (a.tobytes(), b.tobytes())
            msg = expect_error("INVALID_ARGUMENT", gemm, client, bad_hdr, a_, b_, bad_c, what=what)
            assert needle in msg, "%s: %r" % (what, msg)
        _, got = gemm(client, dict(hdr, out_dtype="f32"), a, b, c)  # f32 named: no cast
        check(got, expected(hdr, a, b, c), "out_dtype f32")
        run_checked(ctx, client, "e5m2", 8, 6, 4, beta=1.0)  # the connection still serves


TESTS = [test_features, test_every_form, test_poisoned_c_not_read, test_epilogue, test_large,
         test_pipelined_scales, test_through_shared_memory, test_split_in_row_blocks,
         test_resident, test_misuse]

if __name__ == "__main__":
    sys.exit(h.main(TESTS))
