#!/usr/bin/python3
"""Every GEMM form of protocol v1 through the real daemon (cpu backend), each element checked
against a float64 reference: odd sizes, all four transposes, alpha and beta (with c), batch,
the four dtypes, and one large-ish f32 case; plus the fields of out_hdr."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402

DTYPES = ("f32", "f64", "f16", "bf16")
ODD_SIZES = ((1, 1, 1), (7, 7, 7), (1, 7, 3), (7, 1, 3), (3, 7, 1), (33, 17, 65),
             (127, 129, 63))
TRANSPOSES = ((False, False), (True, False), (False, True), (True, True))


def with_daemon(fn):
    def run(ctx):
        with ctx.daemon() as d, d.connect() as client:
            fn(ctx, d, client)
    run.__name__ = fn.__name__
    return run


@with_daemon
def test_odd_sizes_every_dtype(ctx, d, client):
    for dtype in DTYPES:
        for m, n, k in ODD_SIZES:
            h.check_gemm(client, ctx.rng, m, n, k, dtype)


@with_daemon
def test_transposes_every_dtype(ctx, d, client):
    for dtype in DTYPES:
        for trans_a, trans_b in TRANSPOSES:
            h.check_gemm(client, ctx.rng, 33, 17, 65, dtype, trans_a, trans_b)
            h.check_gemm(client, ctx.rng, 1, 7, 3, dtype, trans_a, trans_b)


@with_daemon
def test_alpha_beta(ctx, d, client):
    for dtype in DTYPES:
        # beta 0: c full of NaN is sent and must be ignored
        h.check_gemm(client, ctx.rng, 17, 33, 9, dtype, alpha=0.5)
        h.check_gemm(client, ctx.rng, 17, 33, 9, dtype, alpha=-1.25, beta=0.75)
        h.check_gemm(client, ctx.rng, 17, 33, 9, dtype, True, True, alpha=2.0, beta=-1.0)
        # alpha 0: the result is beta * c
        h.check_gemm(client, ctx.rng, 7, 5, 3, dtype, alpha=0.0, beta=1.0)
        # beta 0 without any c sent at all
        h.check_gemm(client, ctx.rng, 7, 5, 3, dtype, alpha=3.0, poison_c=False)


@with_daemon
def test_batch(ctx, d, client):
    for dtype in DTYPES:
        for trans_a, trans_b in TRANSPOSES:
            h.check_gemm(client, ctx.rng, 7, 9, 5, dtype, trans_a, trans_b, batch=3)
        h.check_gemm(client, ctx.rng, 13, 11, 17, dtype, alpha=0.75, beta=0.5, batch=3)
        h.check_gemm(client, ctx.rng, 1, 1, 1, dtype, batch=5)
        h.check_gemm(client, ctx.rng, 13, 11, 17, dtype, batch=1)  # explicit default


@with_daemon
def test_header_options(ctx, d, client):
    # precision "fast" may only change the kernel on a GPU (TF32): the cpu backend stays exact
    if h.TEST_BACKEND == "cpu":
        h.check_gemm(client, ctx.rng, 33, 17, 65, "f32", extra={"precision": "fast"})
    h.check_gemm(client, ctx.rng, 33, 17, 65, "f64", extra={"precision": "exact"})
    # a generous timeout_ms is no reason to fail
    h.check_gemm(client, ctx.rng, 33, 17, 65, "f32", extra={"timeout_ms": 60000})


@with_daemon
def test_scalar_encodings(ctx, d, client):
    """Any msgpack-RPC client must work: alpha and beta packed as float32 (use_single_float)
    or as integers (what many encoders write for 2.0) mean the same numbers."""
    a, b = h.random_operands(ctx.rng, 9, 7, 5, "f64")
    c = ctx.rng.uniform(-1, 1, (9, 7))
    packer = h.msgpack.Packer(use_single_float=True, use_bin_type=True)
    for msgid, (alpha, beta) in enumerate(((2, -1), (0.5, 0.25), (-3, 0)), start=100):
        hdr = {"m": 9, "n": 7, "k": 5, "dtype": "f64", "alpha": alpha, "beta": beta}
        params = [hdr, h.to_wire(a, "f64"), h.to_wire(b, "f64"), h.to_wire(c, "f64")]
        client.send_raw(packer.pack([0, msgid, "gemm", params]))
        _, out = client.gemm_result(msgid, hdr)
        h.assert_close(out, a, b, c if beta else None, alpha, beta, False, False, "f64",
                       "alpha %r beta %r packed as %s" % (alpha, beta, type(alpha).__name__))


@with_daemon
def test_out_hdr(ctx, d, client):
    out_hdr = h.check_gemm(client, ctx.rng, 5, 3, 4, "bf16", batch=2)
    want = "cpu" if h.TEST_BACKEND == "cpu" else "cuda:"
    if not str(out_hdr.get("device")).startswith(want):
        raise AssertionError("%s backend: out_hdr device %r, expected %r..." % (
            h.TEST_BACKEND, out_hdr.get("device"), want))
    for dtype in DTYPES:
        out_hdr = h.check_gemm(client, ctx.rng, 2, 3, 4, dtype)
        assert out_hdr["dtype"] == dtype


@with_daemon
def test_many_batches(ctx, d, client):
    h.check_gemm(client, ctx.rng, 3, 2, 5, "f32", True, False, alpha=0.5, beta=1.5, batch=300)
    h.check_gemm(client, ctx.rng, 2, 3, 1, "bf16", False, True, batch=129)


# (x, what 1 + x rounds to): ties go to the even neighbour
ROUNDING = {
    "bf16": [(2.0**-9, 1.0), (3 * 2.0**-9, 1 + 2.0**-7), (2.0**-8, 1.0),
             (3 * 2.0**-8, 1 + 2.0**-6)],
    "f16": [(2.0**-12, 1.0), (3 * 2.0**-12, 1 + 2.0**-10), (2.0**-11, 1.0),
            (3 * 2.0**-11, 1 + 2.0**-9)],
}


@with_daemon
def test_f16_bf16_round_to_nearest(ctx, d, client):
    """f16/bf16 accumulate in f32; the f32 sum goes back to the dtype rounding to nearest
    (ties to even), as every IEEE conversion does: row i computes 1 + x_i exactly in f32."""
    for dtype, cases in ROUNDING.items():
        xs = np.array([x for x, _ in cases] + [-x for x, _ in cases])
        want = np.array([r for _, r in cases] + [-r for _, r in cases])
        a = np.stack([np.where(xs > 0, 1.0, -1.0), xs], axis=1)  # m x 2
        b = np.ones((2, 1))
        assert (h.round_to(a, dtype) == a).all() and (h.round_to(want, dtype) == want).all()
        _, out = client.gemm({"m": len(xs), "n": 1, "k": 2, "dtype": dtype}, a, b)
        got = out[:, 0].astype(np.float64)
        if not (got == want).all():
            i = int(np.argmax(got != want))
            raise AssertionError("%s: 1 + %r came back as %r, round-to-nearest-even gives %r "
                                 "(all: %r)" % (dtype, xs[i], got[i], want[i], got))


@with_daemon
def test_large_f32(ctx, d, client):
    m, n, k = (300, 200, 250) if ctx.quick else (1000, 800, 1200)
    h.check_gemm(client, ctx.rng, m, n, k, "f32", alpha=0.5, beta=2.0)


if __name__ == "__main__":
    sys.exit(h.main([test_odd_sizes_every_dtype, test_transposes_every_dtype, test_alpha_beta,
                     test_batch, test_header_options, test_scalar_encodings, test_out_hdr,
                     test_many_batches, test_f16_bf16_round_to_nearest, test_large_f32]))
