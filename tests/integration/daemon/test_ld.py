#!/usr/bin/python3
"""Leading dimensions (proto/PROTOCOL.md, "Leading dimensions", the "ld" feature): lda, ldb, ldc
for operands and results in a shared-memory region, so a submatrix is used where it lies.
Submatrices of larger row-major arrays in a region (odd strides, odd offsets into the array, the
transposes, f32 / f64 / c64 / c128, batches of strided entries, beta 0 with NaN in C not read
and beta != 0 with C updated in place), each against float64 (complex128) with every byte of
the arrays outside the submatrix checked unchanged. Every misuse answered INVALID_ARGUMENT (an
ld with a payload sent in the message or a resident handle, an ld below the row length, ldc
without out or with c elsewhere, other dtypes and the epilogue, a strided extent past the
region's end, an extent whose size overflows) on a connection that goes on serving. Both
backends: the GPU one packs each operand on the device with a 2D copy and writes C's rows back
where they lie, also from a region it has not registered (yet)."""
import itertools
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402
from test_shm import Region, gemm_refs  # noqa: E402

# Each entry of a batch with leading dimensions starts rows * ld elements after the previous
# one (PROTOCOL.md): the tests' batches have no rows between their entries.

NP = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128}
U = {"f32": 2.0 ** -24, "f64": 2.0 ** -53, "c64": 2.0 ** -24, "c128": 2.0 ** -53}


class Arena:
    """A registered region with row-major arrays placed in it, as NumPy views."""

    def __init__(self, client, size):
        self.region = Region(size).register(client)
        self.used = 0

    def array(self, shape, dtype, fill):
        itemsize = np.dtype(NP[dtype]).itemsize
        count = int(np.prod(shape))
        offset = (self.used + 63) // 64 * 64
        self.used = offset + count * itemsize
        arr = np.frombuffer(self.region.map, NP[dtype], count, offset).reshape(shape)
        arr[...] = fill
        return arr, offset

    def ref(self, offset):
        return {"region": self.region.id, "offset": offset}

    def close(self):
        try:
            self.region.close()
        except BufferError:   # NumPy views of it still live: the mapping goes with them
            os.close(self.region.fd)


def random(rng, shape, dtype):
    x = rng.uniform(-1, 1, shape)
    if dtype in ("c64", "c128"):
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(NP[dtype])


def sub(arena, rng, dtype, batch, rows, cols, extra_rows, extra_cols):
    """A batch of rows x cols submatrices at row 1 and column extra_cols // 2 of a larger array
    (each entry rows + extra_rows rows of cols + extra_cols): (the whole array, the submatrix
    view, its reference, its ld and the batch stride in elements)."""
    ld = cols + extra_cols
    whole, offset = arena.array((batch, rows + extra_rows, ld), dtype,
                                random(rng, (batch, rows + extra_rows, ld), dtype))
    r0, c0 = (1 if extra_rows else 0), extra_cols // 2
    view = whole[:, r0:r0 + rows, c0:c0 + cols]
    start = offset + (r0 * ld + c0) * whole.itemsize
    return whole, view, arena.ref(start), ld


def check(got, ref, bound, dtype, k, what):
    tol = 8 * (k + 4) * U[dtype] * bound + 1e-300
    err = np.abs(got.astype(np.complex128) - ref)
    assert np.all(np.isfinite(got)) and np.all(err <= tol), \
        "%s: error %.3g of the tolerance" % (what, float(np.max(err / tol)))


def strided_case(client, arena, rng, dtype, ta, tb, batch, beta, top=30):
    m, n, k = (int(v) for v in rng.integers(1, top, 3))
    extra = [int(v) for v in rng.integers(0, 7, 3)]   # odd strides, some packed
    sa = (k, m) if ta else (m, k)
    sb = (n, k) if tb else (k, n)
    # a batch's entries are batch * rows rows ld apart: no rows between entries
    rows_a, rows_c = (2, 3) if batch == 1 else (0, 0)
    wa, a, ra, lda = sub(arena, rng, dtype, batch, *sa, rows_a, extra[0])
    wb, b, rb, ldb = sub(arena, rng, dtype, batch, *sb, 0, extra[1])
    wc, c, rc, ldc = sub(arena, rng, dtype, batch, m, n, rows_c, extra[2] + 1)
    if beta == 0:
        c[...] = np.nan   # not read
    a0, b0, c0 = a.copy(), b.copy(), c.copy()
    whole_c = wc.copy()
    hdr = {"m": m, "n": n, "k": k, "dtype": dtype, "trans_a": ta, "trans_b": tb,
           "alpha": -1.5, "beta": beta, "lda": lda, "ldb": ldb, "ldc": ldc, "out": rc}
    if batch > 1:
        hdr["batch"] = batch
    what = "%s %dx%dx%d batch %d ta %d tb %d lda %d ldb %d ldc %d beta %g" % (
        dtype, m, n, k, batch, ta, tb, lda, ldb, ldc, beta)
    gemm_refs(client, hdr, ra, rb, rc if beta else None)
    pa = np.swapaxes(a0, -1, -2) if ta else a0
    pb = np.swapaxes(b0, -1, -2) if tb else b0
    pa, pb = pa.astype(np.complex128), pb.astype(np.complex128)
    ref = -1.5 * np.matmul(pa, pb)
    bound = 1.5 * np.matmul(np.abs(pa), np.abs(pb))
    if beta:
        ref = ref + beta * c0
        bound = bound + abs(beta) * np.abs(c0)
    check(c, ref, bound, dtype, k, what)
    # nothing of C's array but the submatrix was written; a and b unchanged
    mask = np.ones(wc.shape, bool)
    r0 = 1 if rows_c else 0
    mask[:, r0:r0 + m, (extra[2] + 1) // 2:(extra[2] + 1) // 2 + n] = False
    same = (wc[mask] == whole_c[mask]) | (np.isnan(wc[mask]) & np.isnan(whole_c[mask]))
    assert np.all(same), "%s: bytes of C's array outside the submatrix changed" % what
    assert np.array_equal(a, a0) and np.array_equal(b, b0), what


def test_feature(ctx):
    with ctx.daemon() as d, d.connect() as client:
        features = client.call("info")["features"]
        assert ("ld" in features) == ("shm" in features), features


def test_submatrices(ctx):
    with ctx.daemon() as d, d.connect() as client:
        if "shm" not in client.call("info")["features"]:
            return
        for dtype in ("f32", "f64", "c64", "c128"):
            arena = Arena(client, 12 << 20)
            try:
                for ta, tb in itertools.product((False, True), repeat=2):
                    for beta in (0.0, 0.75):
                        strided_case(client, arena, ctx.rng, dtype, ta, tb, 1, beta)
                strided_case(client, arena, ctx.rng, dtype, True, False, 3, 0.5)
                # past the GPU's small lane: the staging lane's 2D copies, whole tiles
                strided_case(client, arena, ctx.rng, dtype, False, True, 1, 0.25, top=300)
            finally:
                arena.close()


def test_misuse(ctx):
    with ctx.daemon() as d, d.connect() as client:
        if "shm" not in client.call("info")["features"]:
            return
        arena = Arena(client, 1 << 16)
        try:
            a, oa = arena.array((4, 8), "f32", 1.0)
            _, oc = arena.array((4, 8), "f32", 0.0)
            ra, rc = arena.ref(oa), arena.ref(oc)
            base = {"m": 4, "n": 5, "k": 3, "dtype": "f32"}
            b = np.ones((3, 5))
            cases = [
                ([dict(base, lda=8), b'\0' * 4 * 28, ra], "lda with a as a payload"),
                ([dict(base, ldb=8), ra, b'\0' * 4 * 23], "ldb with b as a payload"),
                ([dict(base, lda=2), ra, ra], "lda below k"),
                ([dict(base, ldc=8), ra, ra], "ldc without out"),
                ([dict(base, ldc=8, beta=1.0, out=rc), ra, ra, ra], "ldc with c elsewhere"),
                ([dict(base, dtype="f16", lda=8), ra, ra], "lda on f16"),
                ([dict(base, lda=8, activation="relu"), ra, ra], "lda with an activation"),
                ([dict(base, lda=8, out_dtype="bf16"), ra, ra], "lda with out_dtype"),
                ([dict(base, lda=1 << 14), ra, ra], "lda past the region's end"),
                ([dict(base, ldc=8, out=dict(rc, offset=oc + 2)), ra, ra], "unaligned out"),
            ]
            for params, what in cases:
                try:
                    raw(client, params)
                    raise AssertionError("%s: succeeded" % what)
                except h.RpcError as exc:
                    assert exc.code == "INVALID_ARGUMENT", "%s: %s" % (what, exc)
            try:  # an extent whose size overflows 64 bits: refused, never reserved
                raw(client, [dict(base, lda=(1 << 64) - 1), ra, ra])
                raise AssertionError("an overflowing lda succeeded")
            except h.RpcError as exc:
                assert exc.code in ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"), exc
            h.check_gemm(client, ctx.rng, 9, 9, 9, "f32")  # still serving
        finally:
            arena.close()


def raw(client, params):
    """A gemm of params as given: operands are bytes (sent) or reference maps."""
    import msgpack
    msgid = client._take_msgid(None)
    client.send_raw(msgpack.packb([0, msgid, "gemm", params], use_bin_type=True))
    return client.result_of(client.wait(msgid))


if __name__ == "__main__":
    sys.exit(h.main([test_feature, test_submatrices, test_misuse]))
