#!/usr/bin/python3
"""The integer gemm (proto/PROTOCOL.md, "The integer gemm"): dtype "i8" multiplies int8 matrices
into int32, alpha * op(A) * op(B) + beta * C0 in 32-bit arithmetic that wraps, C0 (c, or the
bias row) and the result i32. Checked bit for bit on raw msgpack requests against numpy's int64
product wrapped to 32 bits: odd shapes and the shapes the GPU's kernel 17 takes (k a multiple of
16), every transpose (17 copies the operands that are not K-major first), alpha and beta that
wrap, c poisoned where it is not read, batches, a broadcast B, bias rows with ReLU; large
problems through the GPU's staging chunks; i8 and f32 requests in flight together (the small
lane batches by dtype); operands and the result in a shared-memory region, tall enough for the
GPU's row blocks, and split between two devices; resident i8 operands and an i32 c; every
misuse answered INVALID_ARGUMENT with the connection still serving. Runs on the harness's
backend (GEMMD_TEST_BACKEND)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402
from test_out_dtype import in_flight, reply_of, send  # noqa: E402  (c goes as i32)
from test_resident import put  # noqa: E402
from test_shm import (Region, expect_error, expect_split, gemm_into,  # noqa: E402
                      split_region)

I32_MIN, I32_MAX = -2 ** 31, 2 ** 31 - 1

# ---------------------------------------------------------------------------------------------
# problems and the exact reference


def problem(ctx, m, n, k, trans_a=False, trans_b=False, alpha=1, beta=0, batch=None,
            bias=False, relu=False, broadcast_b=False):
    """(hdr, a, b, c): int8 operands over the whole range, as stored; c an int32 C (beta != 0),
    a bias row of n (bias), else None."""
    lead = (batch,) if batch else ()
    a = ctx.rng.integers(-128, 128, lead + ((k, m) if trans_a else (m, k)), dtype=np.int8)
    b_lead = () if broadcast_b else lead
    b = ctx.rng.integers(-128, 128, b_lead + ((n, k) if trans_b else (k, n)), dtype=np.int8)
    hdr = {"m": m, "n": n, "k": k, "dtype": "i8", "trans_a": trans_a, "trans_b": trans_b,
           "alpha": alpha}
    c = None
    if batch:
        hdr["batch"] = batch
    if broadcast_b:
        hdr["broadcast_b"] = True
    if relu:
        hdr["activation"] = "relu"
    if bias:
        hdr["bias"], hdr["beta"] = True, beta or 1
        c = ctx.rng.integers(I32_MIN, I32_MAX, (n,), dtype=np.int64).astype(np.int32)
    elif beta:
        hdr["beta"] = beta
        c = ctx.rng.integers(I32_MIN, I32_MAX, lead + (m, n), dtype=np.int64).astype(np.int32)
    return hdr, a, b, c


def expected(hdr, a, b, c):
    """The exact result: int64 products, alpha and beta wrapped to 32 bits, ReLU."""
    a64 = a.astype(np.int64)
    b64 = b.astype(np.int64)
    if hdr["trans_a"]:
        a64 = np.swapaxes(a64, -1, -2)
    if hdr["trans_b"]:
        b64 = np.swapaxes(b64, -1, -2)
    acc = np.matmul(a64, b64)
    v = np.int64(hdr["alpha"]) * acc   # |alpha| < 2^31, |acc| < 2^31: no int64 overflow
    beta = hdr.get("beta", 0)
    if beta:
        v = v + np.int64(beta) * c.astype(np.int64)
    out = (v & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    if hdr.get("activation") == "relu":
        out = np.maximum(out, 0)
    return out


def result(client, msgid, hdr):
    """(out_hdr, the int32 result shaped (m, n) or (batch, m, n), or None when in a region)."""
    out_hdr, data, shape = reply_of(client, msgid, hdr)
    return out_hdr, None if data is None else h.from_wire(data, "i32", shape)


def gemm(client, hdr, a, b, c=None):
    return result(client, send(client, hdr, a, b, c), hdr)


def check(got, want, what):
    if got.shape != want.shape:
        raise AssertionError("%s: shape %s, want %s" % (what, got.shape, want.shape))
    bad = np.argwhere(got != want)
    if len(bad):
        i = tuple(bad[0])
        raise AssertionError("%s: %d of %d elements differ; first at %s: %d, want %d" %
                             (what, len(bad), got.size, i, got[i], want[i]))


def run_checked(ctx, client, m, n, k, **kw):
    hdr, a, b, c = problem(ctx, m, n, k, **kw)
    what = "i8 %dx%dx%d %r" % (m, n, k, kw)
    out_hdr, got = gemm(client, hdr, a, b, c)
    h.check_out_hdr(out_hdr, m, n, "i32", kw.get("batch") or 1, what)
    want = expected(hdr, a, b, c)
    check(got, want.reshape(got.shape), what)
    return out_hdr


# ---------------------------------------------------------------------------------------------
# tests


def test_features(ctx):
    with ctx.daemon() as d, d.connect() as client:
        info = client.call("info")
        assert "i8" in info["features"], info["features"]
        assert "i8" in info["dtypes"] and "i32" in info["dtypes"], info["dtypes"]


def test_every_form(ctx):
    """Every transpose on an odd shape and on one kernel 17 takes; scalars that wrap."""
    scalars = ((1, 0), (-3, 2), (I32_MAX, I32_MIN), (7, -1))
    with ctx.daemon() as d, d.connect() as client:
        for shape in ((37, 29, 53), (64, 128, 128), (130, 132, 144)):
            for t in range(4):
                alpha, beta = scalars[t]
                run_checked(ctx, client, *shape, trans_a=bool(t & 1), trans_b=bool(t & 2),
                            alpha=alpha, beta=beta)
        run_checked(ctx, client, 1, 1, 1)
        run_checked(ctx, client, 9, 11, 13, batch=5, beta=3, trans_a=True)
        run_checked(ctx, client, 24, 16, 32, batch=3, trans_b=True, alpha=-2)
        run_checked(ctx, client, 24, 16, 32, batch=4, broadcast_b=True, trans_b=True)
        run_checked(ctx, client, 9, 11, 13, batch=3, broadcast_b=True, trans_a=True, beta=-1)


def test_poisoned_c_not_read(ctx):
    """beta 0 with a c of garbage sent anyway: the result does not depend on it."""
    with ctx.daemon() as d, d.connect() as client:
        hdr, a, b, _ = problem(ctx, 40, 36, 48, trans_b=True, alpha=5)
        junk = np.full((40, 36), -1, dtype=np.int32)
        _, got = gemm(client, dict(hdr, beta=0), a, b, junk)
        check(got, expected(hdr, a, b, None), "beta 0 with c sent")


def test_epilogue(ctx):
    """The bias row (times beta) and ReLU, in the 32-bit arithmetic."""
    with ctx.daemon() as d, d.connect() as client:
        for t in range(4):
            run_checked(ctx, client, 37, 29, 53, bias=True, relu=True, trans_a=bool(t & 1),
                        trans_b=bool(t & 2), alpha=-3)
            run_checked(ctx, client, 64, 64, 64, relu=True, beta=2, trans_b=bool(t & 1))
        run_checked(ctx, client, 130, 132, 144, bias=True, beta=-7, trans_b=True, batch=3)
        run_checked(ctx, client, 19, 23, 11, bias=True, relu=True, batch=4)


def test_large(ctx):
    """Past the GPU's small lane and through several staging chunks of the result."""
    with ctx.daemon() as d, d.connect() as client:
        run_checked(ctx, client, 1100, 900, 320, trans_b=True, beta=3, relu=True)
        run_checked(ctx, client, 700, 1300, 208, batch=2, alpha=-1)


def test_pipelined_mixed(ctx):
    """One shape, i8 and f32 requests in flight together: each reply is its own request's, in
    its own dtype (the GPU's small lane batches only jobs of one dtype)."""
    def collect(msgid, hdr, a, b, c):
        out_hdr, data, shape = reply_of(client, msgid, hdr)
        if hdr["dtype"] == "i8":
            h.check_out_hdr(out_hdr, 48, 40, "i32", 1, "msgid %d" % msgid)
            check(h.from_wire(data, "i32", shape), expected(hdr, a, b, c), "msgid %d" % msgid)
        else:
            h.check_out_hdr(out_hdr, 48, 40, "f32", 1, "msgid %d" % msgid)
            h.assert_close(h.from_wire(data, "f32", shape), a, b, None, 1.0, 0.0, False, False,
                           "f32", "msgid %d" % msgid)

    def requests():
        for i in range(96):
            if i % 3 == 2:
                a = ctx.rng.uniform(-1, 1, (48, 32)).astype(np.float32)
                b = ctx.rng.uniform(-1, 1, (32, 40)).astype(np.float32)
                yield {"m": 48, "n": 40, "k": 32, "dtype": "f32"}, a, b, None
            else:
                yield problem(ctx, 48, 40, 32, trans_b=i % 2 == 0, beta=3 if i % 4 == 0 else 0)

    with ctx.daemon() as d, d.connect() as client:
        in_flight(client, requests(), collect)


def test_through_shared_memory(ctx):
    """a, b and c in a region, the result written into it (poisoned first, the bytes after it
    untouched); the last problem is tall enough for the GPU backend's row blocks."""
    with ctx.daemon() as d, d.connect() as client:
        if "shm" not in client.call("info")["features"]:
            raise h.Skip("no shared memory on this connection")
        region = Region(16 << 20).register(client)
        try:
            for (m, n, k), kw in (((300, 257, 70), {"beta": 3}),
                                  ((64, 64, 64), {"bias": True, "relu": True, "trans_b": True}),
                                  ((37, 29, 41), {"batch": 3}),
                                  ((4608, 256, 64), {"beta": -2, "trans_b": True})):
                hdr, a, b, c = problem(ctx, m, n, k, **kw)
                refs = [region.put(a, "i8"), region.put(b, "i8")]
                if c is not None:
                    refs.append(region.put(c, "i32"))
                what = "shm i8 %dx%dx%d %r" % (m, n, k, kw)
                out_hdr, dest = gemm_into(region, hdr, m * n * kw.get("batch", 1) * 4, b"\x5a",
                                          lambda: result(client, send(client, hdr, *refs), hdr),
                                          what)
                h.check_out_hdr(out_hdr, m, n, "i32", kw.get("batch", 1), what)
                shape = (kw["batch"], m, n) if "batch" in kw else (m, n)
                got = region.read(dest, "i32", shape)
                check(got, expected(hdr, a, b, c).reshape(shape), what)
        finally:
            region.close()


def test_split_in_row_blocks(ctx):
    """On two GPU devices (real or the fake's): an i8 gemm in a region, tall enough to be split
    by rows between both and for the parent's rows to run in row blocks."""
    with split_region(ctx) as setup:
        if setup is None:
            return
        client, region = setup
        m, n, k = 8704, 16, 32
        hdr, a, b, c = problem(ctx, m, n, k, beta=5, trans_b=True)
        refs = [region.put(a, "i8"), region.put(b, "i8"), region.put(c, "i32")]
        dest = region.take(m * n * 4)
        hdr["out"] = dest
        out_hdr = expect_split(client, lambda: result(client, send(client, hdr, *refs), hdr)[0])
        what = "split i8 %dx%dx%d" % (m, n, k)
        h.check_out_hdr(out_hdr, m, n, "i32", 1, what)
        check(region.read(dest, "i32", (m, n)), expected(hdr, a, b, c), what)


def test_resident(ctx):
    """a and b put as i8, c as i32; a c put as i8 is refused, naming the i32 it needs."""
    with ctx.daemon() as d, d.connect() as client:
        hdr, a, b, c = problem(ctx, 37, 29, 48, beta=-3, trans_b=True)
        ha, hb, hc = put(client, a, "i8"), put(client, b, "i8"), put(client, c, "i32")
        _, got = gemm(client, hdr, {"handle": ha}, {"handle": hb}, {"handle": hc})
        check(got, expected(hdr, a, b, c), "resident a, b, c")
        wrong = put(client, c.astype(np.int8), "i8")
        msg = expect_error("INVALID_ARGUMENT", gemm, client, hdr, a, b, {"handle": wrong},
                           what="c put as i8")
        assert "i32" in msg, msg
        for x in (ha, hb, hc, wrong):
            assert client.call("free", [x]) is None


def test_misuse(ctx):
    with ctx.daemon() as d, d.connect() as client:
        hdr, a, b, c = problem(ctx, 8, 6, 4, beta=1)
        cases = [
            ("a fractional alpha", dict(hdr, alpha=0.5), c, "alpha, beta: an i8 gemm takes"),
            ("a fractional beta", dict(hdr, beta=1.5), c, "alpha, beta"),
            ("alpha past int32", dict(hdr, alpha=2.0 ** 31), c, "alpha, beta"),
            ("gelu", dict(hdr, activation="gelu"), c, "activation: an i8 gemm takes none or relu"),
            ("out_dtype f32", dict(hdr, out_dtype="f32"), c, "out_dtype: a i8 gemm cannot"),
            ("dtype i32", dict(hdr, dtype="i32", beta=0), None, "dtype: i32 is a result dtype"),
            ("c of int8 bytes", hdr, h.to_wire(c.astype(np.int8), "i8"), "c: expected 192 bytes"),
            ("a bias row of int8 bytes", dict(hdr, bias=True), h.to_wire(c[0].astype(np.int8),
                                                                          "i8"),
             "c: expected 24 bytes"),
        ]
        for what, bad_hdr, bad_c, needle in cases:
            msg = expect_error("INVALID_ARGUMENT", gemm, client, bad_hdr, a, b, bad_c, what=what)
            assert needle in msg, "%s: %r" % (what, msg)
        _, got = gemm(client, dict(hdr, out_dtype="i32"), a, b, c)  # i32 named: no cast
        check(got, expected(hdr, a, b, c), "out_dtype i32")
        run_checked(ctx, client, 8, 6, 4, beta=1)  # the connection still serves


TESTS = [test_features, test_every_form, test_poisoned_c_not_read, test_epilogue, test_large,
         test_pipelined_mixed, test_through_shared_memory, test_split_in_row_blocks,
         test_resident, test_misuse]

if __name__ == "__main__":
    sys.exit(h.main(TESTS))
