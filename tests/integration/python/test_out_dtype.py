"""gemm(..., out_dtype=) of gemmd.Client and gemmd.aio.Client against a real daemon (the output
cast, feature "out_dtype"): f32 and f64 gemms returning f16 or bf16 (float16, and bf16 as
ml_dtypes.bfloat16 or uint16 bit patterns) on odd shapes, transposes, alpha and beta with c in
the out dtype, batches, bias rows with ReLU / GELU, out= (poisoned, C and Fortran order), shared
memory (shm_array operands and out=, and the automatic scratch), c as a Resident; each against
the float64 reference rounded once to the out dtype (the harness's check_cast). The key is sent
only for a cast (a fake daemon reads the header), a reply naming another dtype is a
ProtocolError, and every misuse is refused before sending (TypeError / ValueError)."""

import asyncio

import msgpack
import numpy as np
import pytest

import gemmd
import gemmd.aio
import gemmd_harness as h
from conftest import read_request
from gemmd._arrays import Problem

CASTS = [("f32", "bf16"), ("f32", "f16"), ("f64", "bf16"), ("f64", "f16")]
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16,
      "bf16": gemmd.BFLOAT16 if gemmd.BFLOAT16 is not None else np.uint16}


def as_out(x, out):
    """float64 values (representable in out) as the array a caller passes for c or bias."""
    bits = h.half_bits(x, out)
    return bits.view(np.float16) if out == "f16" else bits.view(NP["bf16"])


def bits_of(result, out):
    """A result array (float16; bf16 as bfloat16 or uint16) as its 16-bit patterns."""
    allowed = (np.dtype(NP[out]),) + ((np.dtype(np.uint16),) if out == "bf16" else ())
    assert result.dtype in allowed, (result.dtype, out)
    return np.ascontiguousarray(result).view(np.uint16)


def reference(a, b, c, alpha, beta, trans_a, trans_b, act=None):
    """(act(alpha op(a) op(b) + beta c), scale) in float64; c may be a bias row."""
    ref = h.ref_gemm(a, b, c, alpha, beta, trans_a, trans_b)
    opa = np.swapaxes(a, -1, -2) if trans_a else a
    opb = np.swapaxes(b, -1, -2) if trans_b else b
    scale = abs(alpha) * np.matmul(np.abs(opa), np.abs(opb))
    if c is not None and beta:
        scale = scale + abs(beta) * np.abs(c)
    if act == "relu":
        ref = np.maximum(ref, 0.0)
    return ref, scale


def check(client, rng, m, n, k, dtype, out, trans_a=False, trans_b=False, alpha=1.0,
          beta=0.0, batch=None, out_order=None, bias=False, act=None, out_dtype=None):
    """One gemm cast to out (out_dtype: how it is named, default out's wire name)."""
    a, b = h.random_operands(rng, m, n, k, dtype, trans_a, trans_b, batch)
    lead = (batch,) if batch else ()
    c = None
    if bias:
        c = h.round_once(rng.uniform(-1, 1, (n,)), out)
    elif beta:
        c = h.round_once(rng.uniform(-1, 1, lead + (m, n)), out)
    dest = None
    if out_order:   # poisoned with NaN patterns: every element must be written
        dest = np.full(lead + (m, n), 0xFFFF, np.uint16).view(NP[out])
        dest = np.asfortranarray(dest) if out_order == "F" and not batch else dest
    kw = {"bias": as_out(c, out)} if bias else {}
    result = client.gemm(a.astype(NP[dtype]), b.astype(NP[dtype]),
                         None if bias or c is None else as_out(c, out), alpha=alpha,
                         beta=0.0 if bias else beta, trans_a=trans_a, trans_b=trans_b, out=dest,
                         activation=act, out_dtype=out if out_dtype is None else out_dtype,
                         **kw)
    if dest is not None:
        assert result is dest
    assert result.shape == lead + (m, n)
    ref, scale = reference(a, b, c, alpha, 1.0 if bias else beta, trans_a, trans_b, act)
    h.check_cast(bits_of(result, out), ref, scale, dtype, out, k,
                 "%dx%dx%d %s->%s ta=%s tb=%s alpha=%g beta=%g batch=%s out=%s bias=%s act=%s" %
                 (m, n, k, dtype, out, trans_a, trans_b, alpha, beta, batch, out_order, bias,
                  act))
    return result


@pytest.mark.parametrize("dtype,out", CASTS)
def test_every_cast_and_form(client, rng, dtype, out):
    for ta, tb in ((False, False), (True, False), (False, True), (True, True)):
        check(client, rng, 37, 29, 41, dtype, out, ta, tb, alpha=-1.25)
    check(client, rng, 33, 65, 17, dtype, out, alpha=0.5, beta=-0.75, out_order="C")
    check(client, rng, 12, 7, 5, dtype, out, False, True, beta=2.0, out_order="F")
    check(client, rng, 9, 11, 13, dtype, out, True, True, beta=1.5, batch=3, out_order="C")
    check(client, rng, 9, 11, 13, dtype, out, batch=5)
    check(client, rng, 1, 1, 1, dtype, out)


@pytest.mark.parametrize("dtype,out", CASTS)
def test_epilogue(client, rng, dtype, out):
    check(client, rng, 37, 29, 41, dtype, out, bias=True, act="relu", alpha=0.75)
    check(client, rng, 19, 23, 11, dtype, out, True, False, bias=True, batch=3, out_order="C")
    check(client, rng, 19, 23, 11, dtype, out, beta=0.5, act="relu")


def test_ways_to_name_it(client, rng):
    """A wire name, a NumPy dtype (or its name), uint16 for bf16 bits; its own dtype (by name
    or NumPy dtype) is no cast: nothing sent, the result in a's dtype."""
    for named, out in (("f16", "f16"), (np.float16, "f16"), (np.dtype("float16"), "f16"),
                       ("float16", "f16"), ("bf16", "bf16"), (np.uint16, "bf16")):
        result = check(client, rng, 8, 6, 4, "f32", out, out_dtype=named)
        want = np.uint16 if named is np.uint16 else NP[out]
        assert result.dtype == want, (named, result.dtype)
    a = np.ones((3, 4), np.float32)
    for same in ("f32", np.float32, "float32"):
        problem = Problem(a, a.T, None, 1.0, 0.0, False, False, "exact", out_dtype=same)
        assert "out_dtype" not in problem.hdr and problem.out_np_dtype == np.float32
        got = client.gemm(a, a.T, out_dtype=same)
        assert got.dtype == np.float32 and (got == 4.0).all()
    half = np.ones((3, 4), np.float16)
    got = client.gemm(half, half.T, out_dtype="f16")
    assert got.dtype == np.float16 and (got == 4.0).all()


def test_submit_report_and_large(client, rng, quick):
    """A large one (several staging chunks on a GPU); submit()'s report names the out dtype."""
    m, n, k = (300, 200, 64) if quick else (1100, 900, 300)
    a, b = h.random_operands(rng, m, n, k, "f32")
    future = client.submit(a.astype(np.float32), b.astype(np.float32), out_dtype="bf16")
    result = future.result()
    assert future.report["dtype"] == "bf16"
    ref, scale = reference(a, b, None, 1.0, 0.0, False, False)
    h.check_cast(bits_of(result, "bf16"), ref, scale, "f32", "bf16", k, "large bf16")


def test_shared_memory(client, rng):
    """Operands, c and out= in shared memory; and the automatic scratch (operands of 1 MiB and
    more are staged in a region of the client's, the result read back from it)."""
    if "shm" not in client.features:
        pytest.skip("no shared memory on this connection")
    m, n, k = 65, 47, 33
    a, b = h.random_operands(rng, m, n, k, "f32")
    c = h.round_once(rng.uniform(-1, 1, (m, n)), "f16")
    sa, sb = client.shm_array((m, k), np.float32), client.shm_array((k, n), np.float32)
    sc, sout = client.shm_array((m, n), np.float16), client.shm_array((m, n), np.float16)
    sa[...], sb[...], sc[...] = a, b, c
    sout.view(np.uint16)[...] = 0xFFFF
    future = client.submit(sa, sb, sc, beta=-0.5, out=sout, out_dtype="f16")
    assert future.result() is sout
    assert future.report["out"]["bytes"] == m * n * 2
    ref, scale = reference(a, b, c, 1.0, -0.5, False, False)
    h.check_cast(sout.view(np.uint16), ref, scale, "f32", "f16", k, "shm f16")
    m, n, k = 600, 500, 400     # staged: 3.5 MB of operands
    a, b = h.random_operands(rng, m, n, k, "f64")
    before = client.stats()["bytes_in"]
    got = client.gemm(a, b, out_dtype="bf16")
    assert client.stats()["bytes_in"] - before < 64 << 10, "the operands crossed the socket"
    ref, scale = reference(a, b, None, 1.0, 0.0, False, False)
    h.check_cast(bits_of(got, "bf16"), ref, scale, "f64", "bf16", k, "staged bf16")


def test_resident_c(client, rng):
    a, b = h.random_operands(rng, 20, 30, 10, "f32")
    c = h.round_once(rng.uniform(-1, 1, (20, 30)), "bf16")
    handle = client.put(as_out(c, "bf16"))
    got = client.gemm(a.astype(np.float32), b.astype(np.float32), handle, beta=0.5,
                      out_dtype="bf16")
    ref, scale = reference(a, b, c, 1.0, 0.5, False, False)
    h.check_cast(bits_of(got, "bf16"), ref, scale, "f32", "bf16", 10, "c by handle")
    wrong = client.put(c.astype(np.float32))
    with pytest.raises(TypeError, match="out_dtype bf16"):
        client.gemm(a.astype(np.float32), b.astype(np.float32), wrong, beta=0.5,
                    out_dtype="bf16")
    client.free(handle)
    client.free(wrong)


def test_aio(daemon, rng):
    async def main():
        async with gemmd.aio.Client(daemon.address()) as c:
            jobs = []
            for i, (dtype, out) in enumerate(CASTS * 3):
                a, b = h.random_operands(rng, 17 + i, 13, 11, dtype, i % 2 == 1)
                bias = h.round_once(rng.uniform(-1, 1, (13,)), out)
                jobs.append((dtype, out, a, b, bias, i % 2 == 1))
            results = await asyncio.gather(*(
                c.gemm(a.astype(NP[dtype]), b.astype(NP[dtype]), trans_a=ta, bias=as_out(bias, out),
                       activation="relu", out_dtype=out) for dtype, out, a, b, bias, ta in jobs))
            for (dtype, out, a, b, bias, ta), got in zip(jobs, results):
                ref, scale = reference(a, b, bias, 1.0, 1.0, ta, False, "relu")
                h.check_cast(bits_of(got, out), ref, scale, dtype, out, 11, "aio")
    asyncio.run(asyncio.wait_for(main(), 300))


def test_misuse_refused_before_sending(client):
    f32, f16 = np.ones((3, 4), np.float32), np.ones((3, 4), np.float16)
    with pytest.raises(TypeError, match="f16 gemm cannot return f32"):
        client.gemm(f16, f16.T, out_dtype="f32")
    with pytest.raises(TypeError, match="f32 gemm cannot return f64"):
        client.gemm(f32, f32.T, out_dtype=np.float64)
    with pytest.raises(TypeError, match="cannot return"):
        client.gemm(f16, f16.T, out_dtype="bf16")
    for bad in ("f8", np.int8, "int32", object()):
        with pytest.raises(TypeError, match="out_dtype"):
            client.gemm(f32, f32.T, out_dtype=bad)
    with pytest.raises(TypeError, match="c is float32"):
        client.gemm(f32, f32.T, np.ones((3, 3), np.float32), beta=1.0, out_dtype="f16")
    with pytest.raises(TypeError, match="bias is float32"):
        client.gemm(f32, f32.T, bias=np.ones(3, np.float32), out_dtype="bf16")
    with pytest.raises(TypeError, match="out is float32"):
        client.gemm(f32, f32.T, out=np.empty((3, 3), np.float32), out_dtype="bf16")
    with pytest.raises(TypeError, match="out is >f2"):
        client.gemm(f32, f32.T, out=np.empty((3, 3), ">f2"), out_dtype="f16")
    with pytest.raises(ValueError, match="shape"):
        client.gemm(f32, f32.T, out=np.empty((3, 4), np.float16), out_dtype="f16")
    assert client.in_flight == 0
    got = client.gemm(f32, f32.T, np.ones((3, 3), np.float16), beta=1.0, out_dtype="f16")
    assert got.dtype == np.float16 and (got == 5.0).all()   # the connection was never touched


def fake_gemm_server(fake_server, seen, reply_dtype=None):
    """A daemon that records each gemm header and answers with a result of zeros, its out_hdr
    naming reply_dtype (default: the request's out_dtype, else what its dtype returns: i32 for
    i8, f32 for e4m3 and e5m2, else itself). test_i8 and test_fp8 use it too."""
    def handler(conn):
        while True:
            msg = read_request(conn)
            if msg is None:
                return
            hdr = msg[3][0]
            seen.append(hdr)
            uncast = {"i8": "i32", "e4m3": "f32", "e5m2": "f32"}.get(hdr["dtype"], hdr["dtype"])
            dtype = reply_dtype or hdr.get("out_dtype", uncast)
            size = hdr["m"] * hdr["n"] * hdr.get("batch", 1) * h.DTYPES[dtype]
            out_hdr = {"m": hdr["m"], "n": hdr["n"], "dtype": dtype, "batch": 1,
                       "device": "fake", "kernel": "zeros", "timings": {}}
            conn.sendall(msgpack.packb([1, msg[1], None, [out_hdr, bytes(size)]],
                                       use_bin_type=True))
    return fake_server(handler)


def test_key_sent_only_for_a_cast(fake_server):
    seen = []
    server = fake_gemm_server(fake_server, seen)
    a = np.ones((2, 3), np.float32)
    with gemmd.Client(server.address, timeout=30, auto_shm=False) as client:
        assert client.gemm(a, a.T, out_dtype="bf16").dtype == NP["bf16"]
        assert client.gemm(a, a.T, out_dtype="f32").dtype == np.float32
        assert client.gemm(a, a.T).dtype == np.float32
        d = a.astype(np.float64)
        assert client.gemm(d, d.T, out_dtype=np.float16).dtype == np.float16
    assert [x.get("out_dtype") for x in seen] == ["bf16", None, None, "f16"]
    assert [x["dtype"] for x in seen] == ["f32", "f32", "f32", "f64"]


def test_reply_in_another_dtype_is_a_protocol_error(fake_server):
    """A reply whose out_hdr names the gemm's dtype, not the out dtype asked (its payload of the
    same bytes): refused, not read as bf16."""
    server = fake_gemm_server(fake_server, [], reply_dtype="f16")
    a = np.ones((2, 3), np.float32)
    with gemmd.Client(server.address, timeout=30, auto_shm=False) as client:
        with pytest.raises(gemmd.ProtocolError, match="dtype"):
            client.gemm(a, a.T, out_dtype="bf16")
