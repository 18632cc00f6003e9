#!/usr/bin/python3
"""The output cast (proto/PROTOCOL.md, "The output cast", header key "out_dtype"): an f32 or f64
gemm asked for its result in f16 or bf16 computes in its dtype, epilogue included, and rounds
each result element once, last, to nearest even; c (beta's input, or the bias row) comes in the
out dtype too. Checked on raw msgpack requests against a float64 reference rounded once to the
out dtype (bit patterns within one ulp of it where the compute error is well below that ulp, and
every element within the compute dtype's tolerance plus one ulp of the out dtype): the four
casts on odd shapes, transposes, alpha and beta with c in the out dtype, NaN-poisoned c where
it is not read, batches, bias rows with ReLU / GELU, ties and f64 values that a detour through
f32 would round wrongly, overflow to infinity; out_hdr names the out dtype, info lists the
feature; a pipelined burst of one shape with the out dtype varying per request; the result
into a shared-memory region (poisoned, nothing past the result touched); c as a resident handle
(put with the out dtype; the input dtype refused); every misuse answered INVALID_ARGUMENT with
the connection still serving. Runs on the harness's backend (GEMMD_TEST_BACKEND)."""
import os
import sys

import msgpack
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402
from test_epilogue import check as check_close, expected  # noqa: E402
from test_epilogue import problem as epilogue_problem  # noqa: E402
from test_resident import put  # noqa: E402
from test_shm import (Region, expect_error, expect_split, gemm_into,  # noqa: E402
                      split_region)

RESULT_DTYPE = {"i8": "i32", "e4m3": "f32", "e5m2": "f32"}  # what a gemm returns uncast
CASTS = (("f32", "bf16"), ("f32", "f16"), ("f64", "bf16"), ("f64", "f16"))
ACTS = (None, "relu", "gelu", "gelu_tanh")

# ---------------------------------------------------------------------------------------------
# requests


def params(hdr, a, b, c=None):
    """[hdr, a, b(, c)]: a and b in hdr's dtype, c in its out dtype (an i8 gemm's: i32, an fp8
    gemm's: f32); a dict (a region or handle reference) or bytes go as they are. test_i8.py and
    test_fp8.py send through it too."""
    out = hdr.get("out_dtype", RESULT_DTYPE.get(hdr["dtype"], hdr["dtype"]))
    p = [hdr]
    for x, dtype in ((a, hdr["dtype"]), (b, hdr["dtype"]), (c, out)):
        if x is not None:
            p.append(x if isinstance(x, dict) else h.to_wire(x, dtype))
    return p


def send(client, hdr, a, b, c=None):
    msgid = client._take_msgid(None)
    client.send_raw(msgpack.packb([0, msgid, "gemm", params(hdr, a, b, c)], use_bin_type=True))
    return msgid


def reply_of(client, msgid, hdr):
    """(out_hdr, the result's bytes, or None when it went into a region, and its shape: (m, n),
    or (batch, m, n)); raises RpcError. test_i8.py and test_fp8.py read replies through it too."""
    reply = client.result_of(client.wait(msgid))
    assert isinstance(reply, list) and len(reply) == 2, h._short(reply)
    out_hdr, data = reply
    batch = hdr.get("batch", 1)
    return out_hdr, data, (hdr["m"], hdr["n"]) if batch == 1 else (batch, hdr["m"], hdr["n"])


def result(client, msgid, hdr):
    """(out_hdr, result as out-dtype bit patterns shaped (m, n) or (batch, m, n)), or raises
    RpcError."""
    out_hdr, data, shape = reply_of(client, msgid, hdr)
    if data is None:   # written into a region
        return out_hdr, None
    assert len(data) == int(np.prod(shape)) * 2, "%d result bytes for %s" % (len(data), shape)
    return out_hdr, np.frombuffer(data, "<u2").reshape(shape)


def in_flight(client, requests, collect, depth=24):
    """Sends each (hdr, a, b, c) of requests, `depth` of them in flight at a time (the daemon's
    default allows 64), and hands each to collect(msgid, hdr, a, b, c) in the order sent, once
    the request `depth` later is out. test_i8.py and test_fp8.py pipeline through it too."""
    sent = []
    for hdr, a, b, c in requests:
        sent.append((send(client, hdr, a, b, c), hdr, a, b, c))
        if len(sent) == depth:
            collect(*sent.pop(0))
    for entry in sent:
        collect(*entry)


def gemm(client, hdr, a, b, c=None):
    return result(client, send(client, hdr, a, b, c), hdr)


def problem(ctx, m, n, k, dtype, out, bias=False, act=None, **kw):
    """(hdr, a, b, c) of a random gemm cast to out: c is a bias row of n (beta 1 unless given),
    a full C in the out dtype when beta is given, else NaN (never read)."""
    return epilogue_problem(ctx, m, n, k, dtype, bias, act, out=out, **kw)


def run_checked(ctx, client, m, n, k, dtype, out, **kw):
    hdr, a, b, c = problem(ctx, m, n, k, dtype, out, **kw)
    what = "gemm %dx%dx%d %s -> %s %r" % (m, n, k, dtype, out, kw)
    out_hdr, got = gemm(client, hdr, a, b, c)
    batch = kw.get("batch")
    h.check_out_hdr(out_hdr, m, n, out, batch or 1, what)
    ref, scale = expected(a, b, c, hdr)
    if batch == 1:
        ref, scale = ref[0], scale[0]
    h.check_cast(got, ref, scale, dtype, out, k, what)


# ---------------------------------------------------------------------------------------------
# tests


def test_features(ctx):
    with ctx.daemon() as d, d.connect() as client:
        features = client.call("info")["features"]
        if "out_dtype" not in features:
            raise AssertionError("info's features lack \"out_dtype\": %r" % (features,))


def test_every_cast_and_form(ctx):
    with ctx.daemon() as d, d.connect() as client:
        for dtype, out in CASTS:
            for i, (ta, tb) in enumerate(((False, False), (True, False), (False, True),
                                          (True, True))):
                run_checked(ctx, client, 37, 29, 41, dtype, out, trans_a=ta, trans_b=tb,
                            alpha=(1.0, -1.5, 0.75, 2.0)[i])
            run_checked(ctx, client, 37, 29, 41, dtype, out, alpha=0.5, beta=-0.75)
            run_checked(ctx, client, 33, 65, 17, dtype, out, trans_b=True, beta=2.0)
            run_checked(ctx, client, 1, 1, 1, dtype, out)
            run_checked(ctx, client, 9, 11, 13, dtype, out, batch=5, beta=0.5, trans_a=True)
            run_checked(ctx, client, 9, 11, 13, dtype, out, batch=3)
            run_checked(ctx, client, 4, 3, 2, dtype, out, batch=1)   # a batch of one


def test_epilogue(ctx):
    """The bias row and the activation before the one rounding."""
    with ctx.daemon() as d, d.connect() as client:
        for dtype, out in CASTS:
            for j, act in enumerate(ACTS):
                run_checked(ctx, client, 37, 29, 41, dtype, out, bias=True, act=act,
                            trans_a=bool(j & 1), trans_b=bool(j & 2), alpha=1.25)
                run_checked(ctx, client, 19, 23, 11, dtype, out, act=act, beta=-0.5)
            run_checked(ctx, client, 19, 23, 11, dtype, out, bias=True, act="gelu", batch=3,
                        beta=-0.5)


def test_large(ctx):
    """Past the GPU's small lane and through several staging chunks of the result."""
    with ctx.daemon() as d, d.connect() as client:
        run_checked(ctx, client, 1100, 900, 300, "f32", "bf16", bias=True, act="gelu",
                    trans_b=True)
        run_checked(ctx, client, 700, 1300, 200, "f64", "f16", batch=2, beta=0.5)


def one(client, dtype, out, x, y=1.0, alpha=1.0):
    """The bits of the 1x1x1 gemm alpha * x * y cast to out."""
    hdr = {"m": 1, "n": 1, "k": 1, "dtype": dtype, "out_dtype": out, "alpha": float(alpha)}
    out_hdr, got = gemm(client, hdr, np.array([[x]]), np.array([[y]]))
    h.check_out_hdr(out_hdr, 1, 1, out, 1, "1x1x1 %s -> %s" % (dtype, out))
    return int(got[0, 0])


def test_rounding(ctx):
    """Nearest even at ties; f64 rounded straight to the out dtype (a value a hair above a
    tie, which a rounded f32 would turn into the tie and then round down); overflow to
    infinity of either sign, as a cast does."""
    cases = [
        ("f32", "bf16", 1 + 2.0**-8, 0x3F80),          # tie: down to even
        ("f32", "bf16", 1 + 3 * 2.0**-8, 0x3F82),      # tie: up to even
        ("f32", "bf16", -(1 + 2.0**-8 + 2.0**-20), 0xBF81),
        ("f32", "f16", 1 + 2.0**-11, 0x3C00),
        ("f32", "f16", 1 + 3 * 2.0**-11, 0x3C02),
        ("f64", "bf16", 1 + 2.0**-8 + 2.0**-30, 0x3F81),   # through f32: 0x3F80
        ("f64", "f16", 1 + 2.0**-11 + 2.0**-40, 0x3C01),   # through f32: 0x3C00
        ("f64", "bf16", -(1 + 2.0**-8 + 2.0**-30), 0xBF81),
        ("f64", "f16", 2.0**-24 * 0.5 + 2.0**-60, 0x0001),  # half the least subnormal, a hair up
        ("f32", "f16", 65519.0, 0x7BFF),               # below the halfway point: the largest
        ("f32", "f16", 65520.0, 0x7C00),               # halfway to 65536: inf (even)
        ("f32", "f16", -70000.0, 0xFC00),
        ("f64", "f16", 1e6, 0x7C00),
        ("f64", "bf16", 1e39, 0x7F80),                 # beyond f32 too
        ("f64", "bf16", -1e39, 0xFF80),
        ("f32", "bf16", 3.4e38, 0x7F80),               # beyond bf16's largest, 0x7F7F
    ]
    with ctx.daemon() as d, d.connect() as client:
        for dtype, out, x, want in cases:
            got = one(client, dtype, out, x)
            assert got == want, "%s -> %s of %r: 0x%04x, expected 0x%04x" % (
                dtype, out, x, got, want)
        # with alpha and a second factor, and beyond the range in the sum only
        assert one(client, "f32", "f16", 300.0, 300.0) == 0x7C00
        assert one(client, "f32", "bf16", 3.0, 0.5, alpha=-2.0) == 0xC040   # -3


def test_same_dtype_is_no_cast(ctx):
    """out_dtype naming the gemm's own dtype is the same as leaving it out (f16 and bf16 gemms
    included)."""
    with ctx.daemon() as d, d.connect() as client:
        for dtype in ("f32", "f64", "f16", "bf16"):
            h.check_gemm(client, ctx.rng, 21, 17, 13, dtype, alpha=0.5, beta=-1.0,
                         extra={"out_dtype": dtype})


def test_pipelined_mixed(ctx):
    """One shape, many requests in flight, the out dtype (and the epilogue) different from one
    to the next: each reply is its own request's, in its own dtype."""
    outs = (None, "bf16", "f16", "f32")

    def collect(msgid, hdr, a, b, c):
        cast = hdr.get("out_dtype", "f32")
        out_hdr, data, shape = reply_of(client, msgid, hdr)
        h.check_out_hdr(out_hdr, 48, 40, cast, 1, "msgid %d" % msgid)
        ref, scale = expected(a, b, c, hdr)
        if cast == "f32":
            check_close(h.from_wire(data, "f32", shape), ref, scale, "f32", 32,
                        "msgid %d %r" % (msgid, hdr))
        else:
            h.check_cast(np.frombuffer(data, "<u2").reshape(shape), ref, scale, "f32", cast,
                         32, "msgid %d %r" % (msgid, hdr))

    def requests():
        for i in range(96):
            out = outs[i % 4]
            hdr, a, b, c = problem(ctx, 48, 40, 32, "f32", out or "f32",
                                   beta=0.5 if i % 3 == 0 else 0.0,
                                   act="relu" if i % 5 == 0 else None)
            if out is None:
                del hdr["out_dtype"]
            yield hdr, a, b, c

    with ctx.daemon() as d, d.connect() as client:
        in_flight(client, requests(), collect)


def test_through_shared_memory(ctx):
    """a, b and c (in the out dtype) in a region, the result written into it: m n elements of
    the out dtype, NaN-poisoned first, and the bytes right after it untouched; the last problem
    is tall enough for the GPU backend's row blocks."""
    with ctx.daemon() as d, d.connect() as client:
        if "shm" not in client.call("info")["features"]:
            raise h.Skip("no shared memory on this connection")
        region = Region(16 << 20).register(client)
        try:
            for dtype, out, (m, n, k), kw in (("f32", "bf16", (300, 257, 70), {"beta": 0.5}),
                                              ("f64", "f16", (64, 65, 33),
                                               {"bias": True, "act": "relu"}),
                                              ("f32", "f16", (37, 29, 41), {"batch": 3}),
                                              # on the GPU: row blocks (gd_gpu_pieces.c), each
                                              # with its rows of the work area
                                              ("f32", "bf16", (4608, 256, 64), {"beta": 0.5})):
                hdr, a, b, c = problem(ctx, m, n, k, dtype, out, **kw)
                refs = [region.put(a, dtype), region.put(b, dtype)]
                if "beta" in kw or "bias" in kw:
                    refs.append(region.put(c, out))
                nbytes = m * n * kw.get("batch", 1) * 2
                what = "shm %s -> %s %r" % (dtype, out, kw)
                out_hdr, dest = gemm_into(region, hdr, nbytes, b"\xff",  # NaN in f16 and bf16
                                          lambda: result(client, send(client, hdr, *refs), hdr),
                                          what)
                h.check_out_hdr(out_hdr, m, n, out, kw.get("batch", 1), what)
                shape = (kw["batch"], m, n) if "batch" in kw else (m, n)
                off = dest["offset"]
                got = np.frombuffer(bytes(region.map[off:off + nbytes]), "<u2").reshape(shape)
                ref, scale = expected(a, b, c, hdr)
                h.check_cast(got, ref, scale, dtype, out, k, what)
        finally:
            region.close()


def test_split_in_row_blocks(ctx):
    """On two GPU devices (real or the fake's): a cast gemm in a region, tall enough to be split
    by rows between both (gpu.split_min_rows) and for the parent's rows to run in row blocks,
    each with its own rows of the work area: right, split and run in blocks."""
    with split_region(ctx) as setup:
        if setup is None:
            return
        client, region = setup
        m, n, k = 8704, 16, 24
        hdr, a, b, c = problem(ctx, m, n, k, "f32", "bf16", beta=0.5)
        refs = [region.put(a, "f32"), region.put(b, "f32"), region.put(c, "bf16")]
        nbytes = m * n * 2
        dest = region.take(nbytes)
        region.map[dest["offset"]:dest["offset"] + nbytes] = b"\xff" * nbytes
        hdr["out"] = dest
        out_hdr = expect_split(client, lambda: result(client, send(client, hdr, *refs), hdr)[0])
        what = "split %dx%dx%d f32 -> bf16" % (m, n, k)
        h.check_out_hdr(out_hdr, m, n, "bf16", 1, what)
        got = np.frombuffer(bytes(region.map[dest["offset"]:dest["offset"] + nbytes]),
                            "<u2").reshape(m, n)
        ref, scale = expected(a, b, c, hdr)
        h.check_cast(got, ref, scale, "f32", "bf16", k, what)


def test_resident_c(ctx):
    """c as a handle: put with the out dtype it serves; put with the gemm's own dtype it is
    refused, naming the dtype it needs."""
    with ctx.daemon() as d, d.connect() as client:
        for dtype, out in (("f32", "bf16"), ("f64", "f16")):
            hdr, a, b, c = problem(ctx, 37, 29, 41, dtype, out, beta=-0.5)
            handle = put(client, c, out)
            out_hdr, got = gemm(client, hdr, a, b, {"handle": handle})
            ref, scale = expected(a, b, c, hdr)
            h.check_cast(got, ref, scale, dtype, out, 41, "c by handle %s -> %s" % (dtype,
                                                                                   out))
            wrong = put(client, c, dtype)
            msg = expect_error("INVALID_ARGUMENT", gemm, client, hdr, a, b, {"handle": wrong},
                               what="c put as %s for a %s result" % (dtype, out))
            assert out in msg, msg
            bias_hdr, a, b, row = problem(ctx, 37, 29, 41, dtype, out, bias=True, act="gelu")
            row_handle = put(client, row.reshape(1, -1), out)
            out_hdr, got = gemm(client, bias_hdr, a, b, {"handle": row_handle})
            ref, scale = expected(a, b, row, bias_hdr)
            h.check_cast(got, ref, scale, dtype, out, 41, "bias by handle %s -> %s" % (dtype,
                                                                                      out))
            for x in (handle, wrong, row_handle):
                assert client.call("free", [x]) is None


def test_misuse(ctx):
    with ctx.daemon() as d, d.connect() as client:
        hdr, a, b, c = problem(ctx, 8, 6, 4, "f32", "bf16", beta=1.0)
        f16 = dict(hdr, dtype="f16", out_dtype="f32")
        cases = [
            ("an f16 gemm asking f32", f16, c, "out_dtype: a f16 gemm cannot return f32"),
            ("an f32 gemm asking f64", dict(hdr, out_dtype="f64", beta=0.0), None, "out_dtype"),
            ("an f64 gemm asking f32", dict(hdr, dtype="f64", out_dtype="f32", beta=0.0), None,
             "out_dtype"),
            ("an f16 gemm asking bf16", dict(hdr, dtype="f16", beta=0.0), None, "out_dtype"),
            ("a bf16 gemm asking f16", dict(hdr, dtype="bf16", out_dtype="f16", beta=0.0), None,
             "out_dtype"),
            ("an unknown name", dict(hdr, out_dtype="f8"), h.to_wire(c, "bf16"),
             'out_dtype: "f8" is not one of'),
            ("not a str", dict(hdr, out_dtype=2), h.to_wire(c, "bf16"), "out_dtype"),
            ("c of f32 for a bf16 result", hdr, h.to_wire(c, "f32"), "c: expected 96 bytes"),
            ("a bias row of f32 for a bf16 result", dict(hdr, bias=True),
             h.to_wire(c[0], "f32"), "c: expected 12 bytes"),
            ("out_dtype given twice", None, None, "duplicate key"),
        ]
        for what, bad_hdr, bad_c, needle in cases:
            if bad_hdr is None:   # a header map with the key twice: packed by hand
                msg = expect_error("INVALID_ARGUMENT", send_duplicate_key, client,
                                   dict(hdr, beta=0.0), a, b, what=what)
            else:
                msg = expect_error("INVALID_ARGUMENT", gemm, client, bad_hdr, a, b, bad_c,
                                   what=what)
            assert needle in msg, "%s: %r" % (what, msg)
        run_checked(ctx, client, 8, 6, 4, "f32", "bf16", beta=1.0)  # the connection still serves


def send_duplicate_key(client, hdr, a, b):
    """hdr with "out_dtype" packed twice (a dict cannot hold it so)."""
    body = msgpack.packb(hdr, use_bin_type=True)
    extra = msgpack.packb("out_dtype", use_bin_type=True) + msgpack.packb("f16")
    size = len(hdr) + 1
    head = bytes([0x80 | size]) if size < 16 else b"\xde" + size.to_bytes(2, "big")
    old = 1 if len(hdr) < 16 else 3
    packed_hdr = head + body[old:] + extra
    msgid = client._take_msgid(None)
    data = (b"\x94" + msgpack.packb(0) + msgpack.packb(msgid) + msgpack.packb("gemm") +
            b"\x93" + packed_hdr + msgpack.packb(h.to_wire(a, hdr["dtype"]), use_bin_type=True) +
            msgpack.packb(h.to_wire(b, hdr["dtype"]), use_bin_type=True))
    client.send_raw(data)
    return client.result_of(client.wait(msgid))


TESTS = [test_features, test_every_cast_and_form, test_epilogue, test_large, test_rounding,
         test_same_dtype_is_no_cast, test_pipelined_mixed, test_through_shared_memory,
         test_split_in_row_blocks, test_resident_c, test_misuse]

if __name__ == "__main__":
    sys.exit(h.main(TESTS))
