#!/usr/bin/python3
"""The gemm epilogue (proto/PROTOCOL.md, header keys "bias" and "activation"): c as one bias row
added (times beta) to every row of every batch entry, then ReLU, GELU or its tanh form on each
element; checked against a float64 reference in every dtype with odd shapes, transposes, alpha,
beta and batches, with NaN-poisoned c where c is not read; a pipelined burst of one shape with
the epilogue varying per request (the GPU backend's small lane batches by shape: a batch must
never mix epilogues); the bias as a resident handle; every misuse answered INVALID_ARGUMENT with
the connection still serving. Runs on the harness's backend (GEMMD_TEST_BACKEND)."""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402
from test_resident import put  # noqa: E402
from test_shm import Region, expect_error, gemm_refs  # noqa: E402

DTYPES = ("f32", "f64", "f16", "bf16")
ACTS = (None, "relu", "gelu", "gelu_tanh")
_erf = np.vectorize(math.erf)


def activate(x, act):
    if act == "relu":
        return np.maximum(x, 0.0)
    if act == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    if act == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
    return x


def expected(a, b, c, hdr):
    """(reference, scale): act(alpha op(a) op(b) + beta c0) in float64, c0 the bias row or c;
    scale the same sum over absolute values (what rounding errors scale with)."""
    ta, tb = hdr.get("trans_a", False), hdr.get("trans_b", False)
    alpha, beta = hdr.get("alpha", 1.0), hdr.get("beta", 0.0)
    ref = h.ref_gemm(a, b, c, alpha, beta, ta, tb)  # a bias row broadcasts over rows and entries
    opa = np.swapaxes(a, -1, -2) if ta else a
    opb = np.swapaxes(b, -1, -2) if tb else b
    scale = abs(alpha) * np.matmul(np.abs(opa), np.abs(opb))
    if beta != 0.0:
        scale = scale + abs(beta) * np.abs(np.asarray(c, np.float64))
    act = hdr.get("activation")
    return activate(ref, act), scale * (1.13 if act in ("gelu", "gelu_tanh") else 1.0)


def check(out, ref, scale, dtype, k, what):
    out = np.asarray(out, np.float64)
    assert out.shape == ref.shape, "%s: shape %s, expected %s" % (what, out.shape, ref.shape)
    assert np.isfinite(out).all(), "%s: non-finite elements (an unwritten element or NaN c)" % what
    # f16/bf16: the product is rounded before the activation, which rounds again: one more
    # rounding of the result's own size
    limit = h.tolerance(dtype, k) * (scale + np.abs(ref)) + h.SUBNORMAL_SPACING[dtype]
    err = np.abs(out - ref)
    if (err > limit).any():
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(err / limit), err.shape))
        raise AssertionError("%s: %d elements off (worst at %s: got %r, expected %r)" % (
            what, int((err > limit).sum()), idx, out[idx], ref[idx]))


def problem(ctx, m, n, k, dtype, bias, act, trans_a=False, trans_b=False, alpha=1.0, beta=None,
            batch=None, out=None):
    """(hdr, a, b, c) of a random gemm with the epilogue asked: with bias, c is one row of n and
    beta defaults to 1; without, c is a full C when beta is given, else NaN (never read). out:
    the header's out_dtype (test_out_dtype.py), c's dtype then."""
    a, b = h.random_operands(ctx.rng, m, n, k, dtype, trans_a, trans_b, batch)
    lead = (batch,) if batch else ()
    hdr = {"m": m, "n": n, "k": k, "dtype": dtype, "trans_a": trans_a, "trans_b": trans_b,
           "alpha": float(alpha)}
    if out:
        hdr["out_dtype"] = out
    if batch:
        hdr["batch"] = batch
    if act:
        hdr["activation"] = act
    if bias:
        hdr["bias"] = True
        hdr["beta"] = float(1.0 if beta is None else beta)
        c = h.round_once(ctx.rng.uniform(-1.0, 1.0, (n,)), out or dtype)
    elif beta:
        hdr["beta"] = float(beta)
        c = h.round_once(ctx.rng.uniform(-1.0, 1.0, lead + (m, n)), out or dtype)
    else:
        hdr["beta"] = 0.0
        c = np.full(lead + (m, n), np.nan)
    return hdr, a, b, c


def run_checked(ctx, client, m, n, k, dtype, bias, act, **kw):
    hdr, a, b, c = problem(ctx, m, n, k, dtype, bias, act, **kw)
    what = "gemm %dx%dx%d %s bias=%s act=%s %r" % (m, n, k, dtype, bias, act, kw)
    out_hdr, out = client.gemm(hdr, a, b, c)
    batch = kw.get("batch")
    h.check_out_hdr(out_hdr, m, n, dtype, batch or 1, what)
    ref, scale = expected(a, b, c, hdr)
    if batch == 1:
        ref, scale = ref[0], scale[0]
    check(out, ref, scale, dtype, k, what)


def test_features(ctx):
    with ctx.daemon() as d, d.connect() as client:
        assert "epilogue" in client.call("info")["features"]


def test_every_dtype_and_form(ctx):
    shapes = [(1, 1, 1), (7, 5, 3), (64, 64, 64), (33, 130, 17), (257, 65, 129)]
    with ctx.daemon() as d, d.connect() as client:
        for dtype in DTYPES:
            for i, (m, n, k) in enumerate(shapes):
                for j, act in enumerate(ACTS):
                    ta, tb = bool((i + j) & 1), bool((i + j) & 2)
                    run_checked(ctx, client, m, n, k, dtype, True, act, trans_a=ta, trans_b=tb,
                                alpha=0.75)
                    run_checked(ctx, client, m, n, k, dtype, False, act, trans_a=tb,
                                trans_b=ta, alpha=-1.5)
            for act in ACTS:  # batches: one bias row for every entry; c with beta; a batch of 1
                run_checked(ctx, client, 19, 23, 11, dtype, True, act, batch=3, beta=-0.5)
                run_checked(ctx, client, 19, 23, 11, dtype, False, act, batch=4, beta=0.5)
                run_checked(ctx, client, 40, 24, 8, dtype, True, act, batch=1)


def test_large(ctx):
    """Past the GPU's small lane and through several staging chunks of the result."""
    with ctx.daemon() as d, d.connect() as client:
        run_checked(ctx, client, 1100, 900, 300, "f32", True, "gelu", trans_b=True)
        run_checked(ctx, client, 700, 1300, 200, "bf16", True, "relu", batch=2)


def test_pipelined_mixed(ctx):
    """One shape, many requests in flight, the epilogue different from one to the next: each
    reply is its own request's."""
    dtype = "f32"

    def collect(entry):
        msgid, hdr, a, b, c = entry
        out_hdr, out = client.gemm_result(msgid, hdr)
        ref, scale = expected(a, b, c, hdr)
        check(out, ref, scale, dtype, 32, "msgid %d %r" % (msgid, hdr))

    with ctx.daemon() as d, d.connect() as client:
        sent = []
        for i in range(96):  # 24 in flight (the daemon's default allows 64)
            bias, act = bool(i % 3), ACTS[i % 4]
            hdr, a, b, c = problem(ctx, 48, 40, 32, dtype, bias, act,
                                   beta=0.5 if i % 6 == 0 else None)
            sent.append((client.send_gemm(hdr, a, b, c), hdr, a, b, c))
            if len(sent) == 24:
                collect(sent.pop(0))
        for entry in sent:
            collect(entry)


def test_bias_as_a_handle(ctx):
    with ctx.daemon() as d, d.connect() as client:
        for dtype in ("f32", "bf16"):
            hdr, a, b, c = problem(ctx, 37, 29, 13, dtype, True, "relu")
            handle = put(client, c.reshape(1, -1), dtype)
            out_hdr, data = gemm_refs(client, hdr, a, b, {"handle": handle})
            ref, scale = expected(a, b, c, hdr)
            check(h.from_wire(data, dtype, (37, 29)), ref, scale, dtype, 13, "bias by handle")
            wrong = put(client, np.zeros((2, 29)), dtype)  # two rows: not a bias row
            msg = expect_error("INVALID_ARGUMENT", gemm_refs, client, hdr, a, b,
                               {"handle": wrong}, what="a 2-row handle as the bias")
            assert "1 x 29" in msg, msg
            assert client.call("free", [handle]) is None
            assert client.call("free", [wrong]) is None


def test_through_shared_memory(ctx):
    """a, b and the bias row in a region, the result written into it (in place where the backend
    can: the CPU computes into the region, the GPU copies C there)."""
    with ctx.daemon() as d, d.connect() as client:
        if "shm" not in client.call("info")["features"]:
            raise h.Skip("no shared memory on this connection")
        region = Region(16 << 20).register(client)
        try:
            for dtype, (m, n, k) in (("f32", (300, 257, 70)), ("f16", (64, 64, 64))):
                hdr, a, b, c = problem(ctx, m, n, k, dtype, True, "gelu_tanh", alpha=2.0)
                refs = [region.put(x, dtype) for x in (a, b, c)]
                out = region.take(m * n * h.DTYPES[dtype])
                hdr["out"] = out
                out_hdr, data = gemm_refs(client, hdr, *refs)
                assert data is None and out_hdr["out"]["bytes"] == m * n * h.DTYPES[dtype], out_hdr
                ref, scale = expected(a, b, c, hdr)
                check(region.read(out, dtype, (m, n)), ref, scale, dtype, k, "shm " + dtype)
        finally:
            region.close()


def test_misuse(ctx):
    with ctx.daemon() as d, d.connect() as client:
        hdr, a, b, c = problem(ctx, 8, 6, 4, "f32", True, None)
        cases = [
            ("bias without c", dict(hdr), None, "c: required"),
            ("bias with beta 0", dict(hdr, beta=0.0), c, "bias"),
            ("a full C as the bias", dict(hdr), np.zeros((8, 6)), "c: expected 24 bytes"),
            ("unknown activation", dict(hdr, activation="tanh"), c, "activation"),
            ("activation not a str", dict(hdr, activation=1), c, "activation"),
            ("bias not a bool", dict(hdr, bias=1), c, "bias"),
        ]
        for what, bad_hdr, bad_c, needle in cases:
            msg = expect_error("INVALID_ARGUMENT", gemm_refs, client, bad_hdr, a, b, bad_c,
                               what=what)
            assert needle in msg, "%s: %r" % (what, msg)
        run_checked(ctx, client, 8, 6, 4, "f32", True, "gelu")  # the connection still serves


TESTS = [test_features, test_every_dtype_and_form, test_large, test_pipelined_mixed,
         test_bias_as_a_handle, test_through_shared_memory, test_misuse]

if __name__ == "__main__":
    sys.exit(h.main(TESTS))
