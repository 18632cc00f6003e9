#!/usr/bin/python3
"""gemmctl end to end against the real daemon: ping, info, stats, gemm with .npy files written
by numpy (every dtype, C and Fortran order, transposes, alpha/beta with C, batches) checked with
numpy against float64, verify, bench, --json, --help, and the exit codes; the integer gemm
(--dtype i8): verify bit-exact (alpha and beta that wrap in 32 bits included), gemm of |i1 files
with <i4 C or bias (and ReLU) checked exactly against int64 numpy wrapped to int32, bench, and
its misuse refused unsent; the complex gemm (--dtype c64, c128, <c8 / <c16 files, complex
--alpha / --beta); the fp8 gemm (--dtype e4m3, e5m2): verify PASS with the scales,
alpha and beta on odd sizes, gemm of |u1 files (fp8 bytes from gemmd.fp8) in every transpose with
a <f4 C or bias (and GELU), checked against float64 within the fp8 bound, bench, and its misuse
refused unsent.
  test_gemmctl.py --gemmd PATH --gemmctl PATH
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

import gemmd_harness as h

# gemmd.fp8 (the Python package beside this tree) makes and reads the fp8 bytes
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "python"))
from gemmd import fp8  # noqa: E402

ARGS = None
EXIT_OK, EXIT_SERVER, EXIT_USAGE, EXIT_CONNECT = 0, 1, 2, 3


def gemmctl(*argv, addr=None, env=None):
    cmd = [ARGS.gemmctl] + (["--connect", addr] if addr else []) + list(argv)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120, env=env)
    h.sanitizer_report(proc.stderr) and print(proc.stderr)
    assert not h.sanitizer_report(proc.stderr), "sanitizer report from gemmctl:\n" + proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def expect(rc_out_err, code, what):
    rc, out, err = rc_out_err
    assert rc == code, "%s: exit %d, expected %d\nstdout: %s\nstderr: %s" % (what, rc, code, out,
                                                                            err)
    return out, err


def test_ping_info_stats(ctx):
    with h.Daemon(ctx.gemmd) as d:
        addr = d.address("unix")
        out, _ = expect(gemmctl("ping", addr=addr), EXIT_OK, "ping")
        assert "pong" in out, out
        out, _ = expect(gemmctl("--json", "ping", addr=addr), EXIT_OK, "ping --json")
        assert json.loads(out)["ok"] is True
        # GEMMD_ADDRESS is the default address
        env = dict(os.environ, GEMMD_ADDRESS=addr)
        out, _ = expect(gemmctl("--json", "info", env=env), EXIT_OK, "info --json")
        info = json.loads(out)
        assert info["backend"] == "cpu" and "version" in info, info
        out, _ = expect(gemmctl("info", addr=addr), EXIT_OK, "info")
        assert "backend: cpu" in out, out
        out, _ = expect(gemmctl("--json", "stats", addr=addr), EXIT_OK, "stats --json")
        assert isinstance(json.loads(out), dict)
        expect(gemmctl("stats", addr=addr), EXIT_OK, "stats")


def test_tcp(ctx):
    """tcp:HOST:PORT with a name and an IPv4 address, and tcp:[::1]:PORT where IPv6 works."""
    v6 = h.ipv6_loopback_works()
    with h.Daemon(ctx.gemmd, tcp=True, tcp6=v6) as d:
        addr = d.address("tcp")
        expect(gemmctl("ping", addr=addr), EXIT_OK, "ping " + addr)
        expect(gemmctl("ping", addr="tcp:localhost:%d" % d.tcp_port), EXIT_OK, "ping localhost")
        out, _ = expect(gemmctl("--json", "verify", "--m", "70", "--n", "3", "--k", "9",
                                addr=addr), EXIT_OK, "verify over tcp")
        assert json.loads(out)["result"] == "PASS", out
        if v6:
            addr6 = d.address("tcp6")
            assert addr6.startswith("tcp:["), addr6
            expect(gemmctl("ping", addr=addr6), EXIT_OK, "ping " + addr6)


def save(path, arr, fortran=False):
    np.save(path, np.asfortranarray(arr) if fortran else np.ascontiguousarray(arr))


def random_stored(rng, shape, dtype):
    """(array to save, its float64 values) for dtype; bf16 goes out as <u2 bits."""
    vals = h.round_to(rng.uniform(-1, 1, size=shape), dtype)
    if dtype == "bf16":
        return h.f32_to_bf16_bits(vals.astype(np.float32)), vals
    return vals.astype({"f32": "<f4", "f64": "<f8", "f16": "<f2"}[dtype]), vals


def load_values(path, dtype):
    arr = np.load(path)
    if dtype == "bf16":
        return h.bf16_bits_to_f32(arr.view(np.uint16)).astype(np.float64)
    return arr.astype(np.float64)


def run_gemm_case(d, tmp, rng, m, n, k, dtype, trans_a=False, trans_b=False, alpha=1.0,
                  beta=0.0, batch=None, fortran=False, use_c=False):
    lead = (batch,) if batch else ()
    a_shape = lead + ((k, m) if trans_a else (m, k))
    b_shape = lead + ((n, k) if trans_b else (k, n))
    a, av = random_stored(rng, a_shape, dtype)
    b, bv = random_stored(rng, b_shape, dtype)
    save(os.path.join(tmp, "a.npy"), a, fortran)
    save(os.path.join(tmp, "b.npy"), b, fortran)
    argv = ["gemm", "--a", os.path.join(tmp, "a.npy"), "--b", os.path.join(tmp, "b.npy"),
            "--out", os.path.join(tmp, "out.npy"), "--alpha", repr(alpha)]
    if beta is None:   # --c without --beta: beta is 1
        beta = 1.0
    else:
        argv += ["--beta", repr(beta)]
    cv = None
    if use_c or beta != 0.0:
        c, cv = random_stored(rng, lead + (m, n), dtype)
        save(os.path.join(tmp, "c.npy"), c)
        argv += ["--c", os.path.join(tmp, "c.npy")]
    if trans_a:
        argv.append("--trans-a")
    if trans_b:
        argv.append("--trans-b")
    if dtype == "bf16":
        argv += ["--dtype", "bf16"]
    what = "gemm %dx%dx%d %s trans %d%d alpha %g beta %g batch %s fortran %s" % (
        m, n, k, dtype, trans_a, trans_b, alpha, beta, batch, fortran)
    out, _ = expect(gemmctl("--json", *argv, addr=d.address("unix")), EXIT_OK, what)
    report = json.loads(out)
    assert report["ok"] and report["m"] == m and report["n"] == n and report["k"] == k, report
    result = load_values(os.path.join(tmp, "out.npy"), dtype)
    h.assert_close(result, av, bv, cv, alpha, beta, trans_a, trans_b, dtype, what)


def test_gemm_files(ctx):
    with h.Daemon(ctx.gemmd) as d, tempfile.TemporaryDirectory() as tmp:
        rng = ctx.rng
        for dtype in ("f32", "f64", "f16", "bf16"):
            run_gemm_case(d, tmp, rng, 7, 5, 3, dtype)
            run_gemm_case(d, tmp, rng, 33, 17, 65, dtype, trans_a=True, alpha=-1.5)
        run_gemm_case(d, tmp, rng, 1, 1, 1, "f32")
        run_gemm_case(d, tmp, rng, 19, 23, 29, "f32", trans_b=True, beta=0.5)
        run_gemm_case(d, tmp, rng, 8, 9, 10, "f32", beta=None, use_c=True)
        run_gemm_case(d, tmp, rng, 19, 23, 29, "f64", trans_a=True, trans_b=True, alpha=2.0,
                      beta=-1.0)
        # Fortran order: 2-D operands go out with the trans flag flipped, 3-D ones reordered
        run_gemm_case(d, tmp, rng, 12, 9, 14, "f32", fortran=True)
        run_gemm_case(d, tmp, rng, 12, 9, 14, "f64", trans_a=True, fortran=True)
        run_gemm_case(d, tmp, rng, 6, 5, 4, "f32", batch=3, fortran=True)
        run_gemm_case(d, tmp, rng, 10, 11, 12, "f16", batch=4, trans_b=True, beta=0.25)
        # bfloat16 from a '|V2' file (ml_dtypes' descr), written back as |V2
        a, av = random_stored(rng, (4, 6), "bf16")
        b, bv = random_stored(rng, (6, 3), "bf16")
        np.save(os.path.join(tmp, "a.npy"), a.view("V2"))
        np.save(os.path.join(tmp, "b.npy"), b.view("V2"))
        expect(gemmctl("gemm", "--a", os.path.join(tmp, "a.npy"), "--b", os.path.join(tmp, "b.npy"),
                       "--out", os.path.join(tmp, "out.npy"), addr=d.address("unix")),
               EXIT_OK, "gemm bf16 |V2")
        out = np.load(os.path.join(tmp, "out.npy"))
        assert out.dtype.str == "|V2", out.dtype
        h.assert_close(load_values(os.path.join(tmp, "out.npy"), "bf16"), av, bv, None, 1.0, 0.0,
                       False, False, "bf16", "gemm bf16 |V2")


def test_gemm_epilogue(ctx):
    """--bias and --activation: gelu(A B + bias) and relu(...) in f32 and bf16 against float64;
    --bias with --c, a bias of the wrong length and an unknown activation exit 2 unsent."""
    with h.Daemon(ctx.gemmd) as d, tempfile.TemporaryDirectory() as tmp:
        p = lambda name: os.path.join(tmp, name)  # noqa: E731
        for dtype, act, batch in (("f32", "gelu", None), ("bf16", "relu", 3), ("f64", None, None)):
            lead = (batch,) if batch else ()
            a, av = random_stored(ctx.rng, lead + (13, 7), dtype)
            b, bv = random_stored(ctx.rng, lead + (7, 11), dtype)
            bias, biasv = random_stored(ctx.rng, (11,), dtype)
            for name, arr in (("a", a), ("b", b), ("bias", bias)):
                save(p(name + ".npy"), arr)
            argv = ["gemm", "--a", p("a.npy"), "--b", p("b.npy"), "--bias", p("bias.npy"),
                    "--out", p("out.npy")] + (["--dtype", "bf16"] if dtype == "bf16" else [])
            if act:
                argv += ["--activation", act]
            expect(gemmctl(*argv, addr=d.address("unix")), EXIT_OK, "gemm --bias %s" % dtype)
            ref = np.matmul(av, bv) + biasv
            if act == "relu":
                ref = np.maximum(ref, 0.0)
            elif act == "gelu":
                ref = 0.5 * ref * (1.0 + np.vectorize(math.erf)(ref / math.sqrt(2.0)))
            got = load_values(p("out.npy"), dtype)
            scale = np.matmul(np.abs(av), np.abs(bv)) + np.abs(biasv) + np.abs(ref)
            assert got.shape == ref.shape, (got.shape, ref.shape)
            assert (np.abs(got - ref) <= h.tolerance(dtype, 7) * 1.2 * scale).all(), (dtype, act)
        save(p("c.npy"), np.ones((13, 11), "<f8"))  # a and b are f64 from the last case
        save(p("bias5.npy"), np.ones(5, "<f8"))
        dead = "unix:" + p("nobody.sock")
        base = ["gemm", "--a", p("a.npy"), "--b", p("b.npy"), "--out", p("o2.npy")]
        for extra, why in ((["--bias", p("bias5.npy")], "n = 11 values"),
                           (["--bias", p("bias.npy"), "--c", p("c.npy")], "no --c"),
                           (["--activation", "tanh"], "relu, gelu")):
            _, err = expect(gemmctl(*(base + extra), addr=dead), EXIT_USAGE, " ".join(extra))
            assert why in err, (extra, err)


def test_gemm_rejects_before_sending(ctx):
    """Bad inputs exit 2 without connecting: the address is a dead socket, which would be 3."""
    with tempfile.TemporaryDirectory() as tmp:
        dead = "unix:" + os.path.join(tmp, "nobody.sock")
        p = lambda name: os.path.join(tmp, name)  # noqa: E731
        np.save(p("a34.npy"), np.ones((3, 4), "<f4"))
        np.save(p("b56.npy"), np.ones((5, 6), "<f4"))
        np.save(p("b46.npy"), np.ones((4, 6), "<f4"))
        np.save(p("b46d.npy"), np.ones((4, 6), "<f8"))
        np.save(p("big.npy"), np.ones((4, 6), ">f4"))
        np.save(p("c22.npy"), np.ones((2, 2), "<f4"))
        np.save(p("i2.npy"), np.ones((4, 6), "<i2"))
        np.save(p("u2.npy"), np.ones((4, 6), "<u2"))
        np.save(p("b3d.npy"), np.ones((2, 4, 6), "<f4"))
        cases = [
            (["--a", p("a34.npy"), "--b", p("b56.npy")], "shapes do not match"),
            (["--a", p("a34.npy"), "--b", p("b46d.npy")], "same dtype"),
            (["--a", p("a34.npy"), "--b", p("big.npy")], "big-endian"),
            (["--a", p("a34.npy"), "--b", p("i2.npy")], "unsupported dtype '<i2'"),
            (["--a", p("u2.npy"), "--b", p("u2.npy")], "--dtype bf16"),
            (["--a", p("a34.npy"), "--b", p("b3d.npy")], "both 3-D"),
            (["--a", p("a34.npy"), "--b", p("b46.npy"), "--c", p("c22.npy"), "--beta", "1"],
             "C must be"),
            (["--a", p("a34.npy"), "--b", p("b46.npy"), "--beta", "1"], "needs --c"),
            (["--a", p("missing.npy"), "--b", p("b46.npy")], "No such file"),
            (["--a", p("a34.npy"), "--b", p("b46.npy"), "--precision", "sloppy"], "exact or fast"),
        ]
        for argv, why in cases:
            _, err = expect(gemmctl("gemm", *argv, "--out", p("out.npy"), addr=dead), EXIT_USAGE,
                            " ".join(argv))
            assert why in err, "%s: %r lacks %r" % (argv, err, why)
            assert not os.path.exists(p("out.npy"))
        # an --out that cannot be written is found before anything is sent (exit 4, not 3)
        _, err = expect(gemmctl("gemm", "--a", p("a34.npy"), "--b", p("b46.npy"), "--out",
                                p("no/such/dir/out.npy"), addr=dead), 4, "unwritable --out")
        assert "cannot write" in err, err


def test_verify_and_bench(ctx):
    with h.Daemon(ctx.gemmd) as d:
        addr = d.address("unix")
        out, _ = expect(gemmctl("verify", addr=addr), EXIT_OK, "verify")
        assert "PASS" in out, out
        for dtype in ("f64", "f16", "bf16"):
            out, _ = expect(gemmctl("--json", "verify", "--m", "17", "--n", "1", "--k", "40",
                                    "--dtype", dtype, addr=addr), EXIT_OK, "verify " + dtype)
            report = json.loads(out)
            assert report["result"] == "PASS" and report["error"] <= report["tolerance"], report
        out, _ = expect(gemmctl("--json", "bench", "--m", "8", "--n", "9", "--k", "10",
                                "--requests", "40", "--concurrency", "6", addr=addr),
                        EXIT_OK, "bench --json")
        report = json.loads(out)
        assert report["requests"] == 40 and report["tflops"] > 0 and report["gbps"] > 0, report
        lat = report["latency_ms"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"], lat
        out, _ = expect(gemmctl("bench", "--m", "4", "--n", "4", "--k", "4", "--requests", "5",
                                "--dtype", "f16", addr=addr), EXIT_OK, "bench")
        assert "TFLOP/s" in out and "GB/s" in out and "p99" in out, out
        # --shm: the matrices stay in shared memory; only framing crosses the socket
        with h.Client(addr) as watcher:
            before = watcher.call("stats")["bytes_in"]
            out, _ = expect(gemmctl("--json", "bench", "--shm", "--m", "64", "--n", "64", "--k",
                                    "64", "--requests", "20", "--concurrency", "3", addr=addr),
                            EXIT_OK, "bench --shm")
            assert json.loads(out)["requests"] == 20, out
            sent = watcher.call("stats")["bytes_in"] - before
            assert sent < 20 * 64 * 64 * 4, "bench --shm sent %d bytes" % sent
            # --resident-b: B crosses the socket once, A with every request
            before = watcher.call("stats")["bytes_in"]
            out, _ = expect(gemmctl("--json", "bench", "--resident-b", "--m", "8", "--n", "64",
                                    "--k", "64", "--requests", "20", addr=addr),
                            EXIT_OK, "bench --resident-b")
            assert json.loads(out)["requests"] == 20, out
            sent = watcher.call("stats")["bytes_in"] - before
            assert 21 * 8 * 64 * 4 < sent < 2 * 64 * 64 * 4 + 20 * (8 * 64 * 4 + 512), \
                "bench --resident-b sent %d bytes" % sent
            assert watcher.call("stats")["resident_put_total"] >= 1
    # --shm over TCP: refused, exit 1
    with h.Daemon(ctx.gemmd, tcp=True) as d:
        _, err = expect(gemmctl("bench", "--shm", "--m", "4", "--n", "4", "--k", "4",
                                addr=d.address("tcp")), EXIT_SERVER, "bench --shm over TCP")
        assert "Unix socket" in err, err
    # a size over the daemon's limits is refused from its info before anything is sent:
    # exit 2, naming the limit and its config key (issue 31)
    with h.Daemon(ctx.gemmd, config={"limits": {"max_dim": 100}}) as d:
        out, err = expect(gemmctl("--json", "verify", "--m", "200", addr=d.address("unix")),
                          EXIT_USAGE, "verify over the limit")
        report = json.loads(out)
        assert "100" in report["error"]["message"], report
        assert "limits.max_dim" in report["error"]["message"], report


CASTS = (("f32", "bf16"), ("f32", "f16"), ("f64", "bf16"), ("f64", "f16"))


def test_out_dtype(ctx):
    """--out-dtype f16|bf16: verify of the four casts on odd sizes (PASS against the reference
    rounded to the out dtype, the tolerance grown by its half ulp), gemm with .npy files (c and
    the bias in the out dtype, bf16 as |V2 or <u2 bits, the result written in the out dtype)
    checked with the harness's check_cast, bench; every misuse exits 2 unsent."""
    with h.Daemon(ctx.gemmd) as d, tempfile.TemporaryDirectory() as tmp:
        addr = d.address("unix")
        p = lambda name: os.path.join(tmp, name)  # noqa: E731
        for dtype, out in CASTS:
            out_json, _ = expect(gemmctl("--json", "verify", "--m", "37", "--n", "29", "--k",
                                         "41", "--dtype", dtype, "--out-dtype", out, addr=addr),
                                 EXIT_OK, "verify %s -> %s" % (dtype, out))
            report = json.loads(out_json)
            assert report["result"] == "PASS" and report["out_dtype"] == out, report
            assert 0 <= report["error"] <= report["tolerance"], report
            plain = json.loads(expect(gemmctl("--json", "verify", "--m", "37", "--n", "29",
                                              "--k", "41", "--dtype", dtype, addr=addr),
                                      EXIT_OK, "verify " + dtype)[0])
            assert plain["out_dtype"] == dtype and plain["tolerance"] < report["tolerance"], \
                (plain, report)
        text, _ = expect(gemmctl("verify", "--dtype", "f64", "--out-dtype", "bf16", addr=addr),
                         EXIT_OK, "verify text")
        assert "f64 -> bf16" in text and "PASS" in text, text
        # gemm: f32 A, B with an f16 C; f64 with a bf16 bias row as <u2 bits (written back as
        # <u2); f32 alone to bf16 (|V2)
        for dtype, out, c_form in (("f32", "f16", "c"), ("f64", "bf16", "bias"),
                                   ("f32", "bf16", None)):
            a, av = random_stored(ctx.rng, (19, 13), dtype)
            b, bv = random_stored(ctx.rng, (17, 13), dtype)   # stored n x k: --trans-b
            save(p("a.npy"), a)
            save(p("b.npy"), b)
            argv = ["--json", "gemm", "--a", p("a.npy"), "--b", p("b.npy"), "--trans-b",
                    "--out", p("out.npy"), "--out-dtype", out, "--alpha", "-1.5"]
            cv, beta = None, 0.0
            if c_form is not None:
                shape = (19, 17) if c_form == "c" else (17,)
                cv = h.round_once(ctx.rng.uniform(-1, 1, shape), out)
                bits = h.half_bits(cv, out)
                save(p("c.npy"), bits.view("<f2") if out == "f16" else bits)
                argv += ["--" + c_form, p("c.npy")] + (["--beta", "0.5"] if c_form == "c" else
                                                       ["--activation", "relu"])
                beta = 0.5 if c_form == "c" else 1.0
            report = json.loads(expect(gemmctl(*argv, addr=addr), EXIT_OK, " ".join(argv))[0])
            assert report["dtype"] == dtype and report["out_dtype"] == out, report
            got = np.load(p("out.npy"))
            assert got.dtype.str == {"f16": "<f2", "bf16": "<u2" if c_form else "|V2"}[out], \
                (out, c_form, got.dtype)
            ref = h.ref_gemm(av, bv, cv, -1.5, beta, False, True)
            scale = 1.5 * np.abs(av) @ np.abs(bv).T + (np.abs(beta * cv) if cv is not None else 0)
            if c_form == "bias":
                ref = np.maximum(ref, 0.0)
            h.check_cast(got.view(np.uint16), ref, scale, dtype, out, 13,
                         "gemm %s -> %s %s" % (dtype, out, c_form))
        bench = json.loads(expect(gemmctl("--json", "bench", "--m", "16", "--n", "24", "--k",
                                          "8", "--requests", "10", "--out-dtype", "bf16",
                                          addr=addr), EXIT_OK, "bench --out-dtype")[0])
        assert bench["out_dtype"] == "bf16" and bench["requests"] == 10, bench
        # misuse: exit 2, nothing sent (a dead address would make it 3)
        dead = "unix:" + p("nobody.sock")
        save(p("a16.npy"), np.ones((3, 4), "<f2"))
        save(p("b16.npy"), np.ones((4, 5), "<f2"))
        save(p("a32.npy"), np.ones((3, 4), "<f4"))
        save(p("b32.npy"), np.ones((4, 5), "<f4"))
        save(p("c32.npy"), np.ones((3, 5), "<f4"))
        for argv, why in (
                (["verify", "--dtype", "f16", "--out-dtype", "f32"],
                 "a f16 gemm cannot return f32"),
                (["verify", "--out-dtype", "f64"], "cannot return f64"),
                (["verify", "--out-dtype", "f8"], "--out-dtype takes"),
                (["bench", "--dtype", "bf16", "--out-dtype", "f16"], "cannot return f16"),
                (["gemm", "--a", p("a16.npy"), "--b", p("b16.npy"), "--out", p("o.npy"),
                  "--out-dtype", "bf16"], "a f16 gemm cannot return bf16"),
                (["gemm", "--a", p("a32.npy"), "--b", p("b32.npy"), "--c", p("c32.npy"),
                  "--out", p("o.npy"), "--out-dtype", "f16"], "--c must hold <f2")):
            _, err = expect(gemmctl(*argv, addr=dead), EXIT_USAGE, " ".join(argv))
            assert why in err, (argv, err)
            assert not os.path.exists(p("o.npy"))


def i8_reference(a, b, c, alpha, beta, trans_a=False, trans_b=False, relu=False):
    """act(alpha op(a) op(b) + beta c) in int64 (wrapping mod 2^64 keeps the low 32 bits), then
    the low 32 bits as int32, then ReLU."""
    opa = np.swapaxes(a, -1, -2) if trans_a else a
    opb = np.swapaxes(b, -1, -2) if trans_b else b
    acc = np.int64(alpha) * np.matmul(opa.astype(np.int64), opb.astype(np.int64))
    if beta:
        acc = acc + np.int64(beta) * c.astype(np.int64)
    out = (acc & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    return np.maximum(out, 0) if relu else out


def test_i8(ctx):
    """--dtype i8: verify PASS bit-exact (error 0, tolerance 0) on odd sizes, with alpha and
    beta that wrap; gemm of int8 .npy files (|i1, C and Fortran order, transposes, a batch) with
    an int32 C or bias row, the <i4 result equal to numpy's; bench; misuse exits 2 unsent."""
    with h.Daemon(ctx.gemmd) as d, tempfile.TemporaryDirectory() as tmp:
        addr = d.address("unix")
        p = lambda name: os.path.join(tmp, name)  # noqa: E731
        for m, n, k, alpha, beta in ((37, 29, 53, 1, 0), (1, 1, 1, -1, 0), (64, 3, 200, -7, 3),
                                     (33, 17, 4099, 2147483647, -2147483648)):
            argv = ["--json", "verify", "--dtype", "i8", "--m", str(m), "--n", str(n),
                    "--k", str(k), "--alpha", str(alpha), "--beta", str(beta)]
            report = json.loads(expect(gemmctl(*argv, addr=addr), EXIT_OK, " ".join(argv))[0])
            assert report["result"] == "PASS" and report["error"] == 0, report
            assert report["tolerance"] == 0 and report["out_dtype"] == "i32", report
        text, _ = expect(gemmctl("verify", "--dtype", "i8", addr=addr), EXIT_OK, "verify text")
        assert "i8 -> i32" in text and "largest difference 0" in text and "PASS" in text, text
        rng = ctx.rng
        for trans_a, trans_b, batch, fortran, form in ((False, False, None, False, "c"),
                                                       (True, True, None, True, None),
                                                       (False, True, 3, False, "bias"),
                                                       (True, False, 2, True, "c")):
            m, n, k = 19, 23, 29
            lead = (batch,) if batch else ()
            a = rng.integers(-128, 128, lead + ((k, m) if trans_a else (m, k)), dtype=np.int8)
            b = rng.integers(-128, 128, lead + ((n, k) if trans_b else (k, n)), dtype=np.int8)
            save(p("a.npy"), a, fortran)
            save(p("b.npy"), b, fortran)
            argv = ["--json", "gemm", "--a", p("a.npy"), "--b", p("b.npy"), "--out",
                    p("out.npy"), "--alpha", "-300000", "--dtype", "i8"]
            argv += (["--trans-a"] if trans_a else []) + (["--trans-b"] if trans_b else [])
            c, beta, relu = None, 0, form == "bias"
            if form == "c":
                c = rng.integers(-2**31, 2**31, lead + (m, n), dtype=np.int64).astype("<i4")
                beta = 5
                save(p("c.npy"), c)
                argv += ["--c", p("c.npy"), "--beta", "5"]
            elif form == "bias":
                c = rng.integers(-2**20, 2**20, (n,), dtype=np.int64).astype("<i4")
                beta = 1
                save(p("c.npy"), c)
                argv += ["--bias", p("c.npy"), "--activation", "relu"]
            what = " ".join(argv)
            report = json.loads(expect(gemmctl(*argv, addr=addr), EXIT_OK, what)[0])
            assert report["dtype"] == "i8" and report["out_dtype"] == "i32", report
            got = np.load(p("out.npy"))
            assert got.dtype.str == "<i4" and got.shape == lead + (m, n), (what, got.dtype)
            want = i8_reference(a, b, c, -300000, beta, trans_a, trans_b, relu)
            assert np.array_equal(got, want), "%s: %d elements differ" % (
                what, int((got != want).sum()))
        bench = json.loads(expect(gemmctl("--json", "bench", "--dtype", "i8", "--m", "16", "--n",
                                          "24", "--k", "8", "--requests", "10", "--resident-b",
                                          addr=addr), EXIT_OK, "bench i8")[0])
        assert bench["dtype"] == "i8" and bench["out_dtype"] == "i32", bench
        assert bench["requests"] == 10, bench
        # misuse: exit 2, nothing sent (a dead address would make it 3)
        dead = "unix:" + p("nobody.sock")
        save(p("a8.npy"), np.ones((3, 4), np.int8))
        save(p("b8.npy"), np.ones((4, 5), np.int8))
        save(p("c8.npy"), np.ones((3, 5), np.int8))
        save(p("a32.npy"), np.ones((3, 4), "<i4"))
        save(p("b32.npy"), np.ones((4, 5), "<i4"))
        save(p("f32.npy"), np.ones((4, 5), "<f4"))
        gemm8 = ["gemm", "--a", p("a8.npy"), "--b", p("b8.npy"), "--out", p("o.npy")]
        for argv, why in (
                (["verify", "--dtype", "i8", "--alpha", "1.5"], "integers within int32"),
                (["verify", "--dtype", "i8", "--beta", "4294967296"], "integers within int32"),
                (["verify", "--dtype", "i8", "--out-dtype", "f16"], "an i8 gemm returns i32"),
                (["verify", "--dtype", "i32"], "no gemm takes int32"),
                (["bench", "--dtype", "i32"], "no gemm takes int32"),
                (gemm8 + ["--alpha", "0.5"], "integers within int32"),
                (gemm8 + ["--activation", "gelu"], "relu or none"),
                (gemm8 + ["--out-dtype", "f32"], "cannot return f32"),
                (gemm8 + ["--c", p("c8.npy")], "--c must hold <i4 too, not |i1"),
                (gemm8 + ["--dtype", "f32"], "--dtype f32 but the files hold |i1"),
                (["gemm", "--a", p("a32.npy"), "--b", p("b32.npy"), "--out", p("o.npy")],
                 "no gemm takes int32"),
                (["gemm", "--a", p("a8.npy"), "--b", p("f32.npy"), "--out", p("o.npy")],
                 "same dtype")):
            _, err = expect(gemmctl(*argv, addr=dead), EXIT_USAGE, " ".join(argv))
            assert why in err, (argv, err)
            assert not os.path.exists(p("o.npy"))


FP8 = {"e4m3": (fp8.to_e4m3, fp8.from_e4m3), "e5m2": (fp8.to_e5m2, fp8.from_e5m2)}


def fp8_stored(rng, shape, dtype):
    """(the fp8 bytes to save as |u1, their float64 values): uniform in [-1, 1) rounded."""
    to, values = FP8[dtype]
    codes = to(rng.uniform(-1, 1, shape))
    return codes, values(codes).astype(np.float64)


def fp8_check(got, av, bv, cv, alpha, beta, trans_a, trans_b, gelu, what):
    """got against act(alpha op(a) op(b) + beta c) in float64 (alpha with the scales), within
    2^-10 sum |alpha a b| + 2^-22 |x| (times GELU's slope) + the smallest normal f32."""
    opa = np.swapaxes(av, -1, -2) if trans_a else av
    opb = np.swapaxes(bv, -1, -2) if trans_b else bv
    x = alpha * np.matmul(opa, opb) + (beta * cv if beta else 0.0)
    bound = 2.0 ** -10 * abs(alpha) * np.matmul(np.abs(opa), np.abs(opb)) + 2.0 ** -22 * np.abs(x)
    if gelu:
        x = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        bound = bound * 1.13
    err = np.abs(got.astype(np.float64) - x)
    assert got.dtype == np.float32 and got.shape == x.shape, (what, got.dtype, got.shape)
    assert np.all(err <= bound + 2.0 ** -126), "%s: error %g over the fp8 bound" % (
        what, float((err - bound).max()))


def fp8_verify(addr):
    """verify PASS for both formats: odd sizes, scales, alpha and beta, a bf16 result."""
    for dtype, m, n, k, extra in (
            ("e4m3", 37, 29, 53, []),
            ("e5m2", 1, 1, 1, ["--scale-a", "0.5", "--scale-b", "3"]),
            ("e4m3", 64, 3, 200, ["--alpha", "-2", "--beta", "0.75", "--scale-a", "0.125"]),
            ("e5m2", 33, 17, 4099, ["--alpha", "0.5", "--beta", "-1", "--scale-b", "16"]),
            ("e4m3", 19, 23, 29, ["--out-dtype", "bf16", "--beta", "1", "--scale-a", "4"])):
        argv = ["--json", "verify", "--dtype", dtype, "--m", str(m), "--n", str(n), "--k",
                str(k)] + extra
        report = json.loads(expect(gemmctl(*argv, addr=addr), EXIT_OK, " ".join(argv))[0])
        assert report["result"] == "PASS" and report["error"] <= 1, report
        assert report["tolerance"] == 1 and report["dtype"] == dtype, report
        assert report["out_dtype"] == ("bf16" if "bf16" in extra else "f32"), report
    text, _ = expect(gemmctl("verify", "--dtype", "e5m2", "--scale-a", "2", addr=addr), EXIT_OK,
                     "verify text")
    assert "e5m2 -> f32" in text and "fp8 bound" in text and "PASS" in text, text


def fp8_gemm_files(rng, addr, p):
    """gemm of |u1 files in every transpose, C and Fortran order, a batch, with a <f4 C and
    beta, or a <f4 bias row and GELU, and the scales."""
    m, n, k = 19, 23, 29
    for dtype, trans_a, trans_b, batch, fortran, form in (
            ("e4m3", False, False, None, False, "c"), ("e5m2", True, True, None, True, None),
            ("e4m3", False, True, 3, False, "bias"), ("e5m2", True, False, 2, True, "c")):
        lead = (batch,) if batch else ()
        a, av = fp8_stored(rng, lead + ((k, m) if trans_a else (m, k)), dtype)
        b, bv = fp8_stored(rng, lead + ((n, k) if trans_b else (k, n)), dtype)
        save(p("a.npy"), a, fortran)
        save(p("b.npy"), b, fortran)
        argv = ["--json", "gemm", "--a", p("a.npy"), "--b", p("b.npy"), "--out", p("out.npy"),
                "--alpha", "-1.5", "--dtype", dtype, "--scale-a", "0.25", "--scale-b", "8"]
        argv += (["--trans-a"] if trans_a else []) + (["--trans-b"] if trans_b else [])
        cv, beta = None, 0.0
        if form == "c":
            cv, beta = rng.uniform(-4, 4, lead + (m, n)).astype("<f4"), 0.5
            save(p("c.npy"), cv)
            argv += ["--c", p("c.npy"), "--beta", "0.5"]
        elif form == "bias":
            cv, beta = rng.uniform(-4, 4, (n,)).astype("<f4"), 1.0
            save(p("c.npy"), cv)
            argv += ["--bias", p("c.npy"), "--activation", "gelu"]
        what = " ".join(argv)
        report = json.loads(expect(gemmctl(*argv, addr=addr), EXIT_OK, what)[0])
        assert report["dtype"] == dtype and report["out_dtype"] == "f32", report
        got = np.load(p("out.npy"))
        cv64 = None if cv is None else cv.astype(np.float64)
        fp8_check(got, av, bv, cv64, -1.5 * 0.25 * 8, beta, trans_a, trans_b, form == "bias",
                  what)


def fp8_misuse(p):
    """Exit 2, nothing sent (a dead address would make it 3)."""
    dead = "unix:" + p("nobody.sock")
    save(p("a8.npy"), fp8.to_e4m3(np.ones((3, 4))))
    save(p("b8.npy"), fp8.to_e4m3(np.ones((4, 5))))
    save(p("c8.npy"), fp8.to_e4m3(np.ones((3, 5))))
    save(p("f32.npy"), np.ones((4, 5), "<f4"))
    gemm8 = ["gemm", "--a", p("a8.npy"), "--b", p("b8.npy"), "--out", p("o.npy")]
    for argv, why in (
            (["verify", "--dtype", "f32", "--scale-a", "2"], "only an e4m3 or e5m2 gemm"),
            (["verify", "--dtype", "i8", "--scale-b", "0.5"], "only an e4m3 or e5m2 gemm"),
            (["verify", "--dtype", "e4m3", "--alpha", "1e300", "--scale-a", "1e300"],
             "not finite"),
            (["verify", "--dtype", "e5m2", "--out-dtype", "f64"], "cannot return f64"),
            (["verify", "--dtype", "e4m3", "--scale-a", "inf"], "finite number"),
            (["bench", "--dtype", "e4m3", "--out-dtype", "e4m3"], "cannot return e4m3"),
            (gemm8, "pass --dtype e4m3 or e5m2"),
            (gemm8 + ["--dtype", "bf16"], "pass --dtype e4m3 or e5m2"),
            (gemm8 + ["--dtype", "e4m3", "--c", p("c8.npy")], "--c must hold <f4 too, not |u1"),
            (gemm8 + ["--dtype", "e4m3", "--out-dtype", "i32"], "cannot return i32"),
            (["gemm", "--a", p("f32.npy"), "--b", p("f32.npy"), "--dtype", "e4m3", "--out",
              p("o.npy")], "--dtype e4m3 but the files hold <f4"),
            (["gemm", "--a", p("a8.npy"), "--b", p("f32.npy"), "--dtype", "e4m3", "--out",
              p("o.npy")], "same dtype")):
        _, err = expect(gemmctl(*argv, addr=dead), EXIT_USAGE, " ".join(argv))
        assert why in err, (argv, err)
        assert not os.path.exists(p("o.npy"))


def test_fp8(ctx):
    """--dtype e4m3 and e5m2: verify, gemm of |u1 files, bench, misuse."""
    with h.Daemon(ctx.gemmd) as d, tempfile.TemporaryDirectory() as tmp:
        addr = d.address("unix")
        p = lambda name: os.path.join(tmp, name)  # noqa: E731
        fp8_verify(addr)
        fp8_gemm_files(ctx.rng, addr, p)
        bench = json.loads(expect(gemmctl("--json", "bench", "--dtype", "e5m2", "--m", "16",
                                          "--n", "24", "--k", "8", "--requests", "10",
                                          "--resident-b", addr=addr), EXIT_OK, "bench e5m2")[0])
        assert bench["dtype"] == "e5m2" and bench["out_dtype"] == "f32", bench
        fp8_misuse(p)


def test_complex(ctx):
    """--dtype c64 / c128: verify PASS with complex --alpha / --beta; gemm of <c8 / <c16 files
    (C and Fortran order, c) against complex128; bench; a complex --alpha on f32 and a malformed
    one refused unsent (usage)."""
    with h.Daemon(ctx.gemmd) as d, tempfile.TemporaryDirectory() as tmp:
        addr = d.address("unix")
        p = lambda name: os.path.join(tmp, name)  # noqa: E731
        for dtype, m, n, k, extra in (("c64", 37, 29, 53, []),
                                      ("c128", 1, 1, 1, ["--alpha", "2j"]),
                                      ("c64", 64, 3, 200, ["--alpha", "-2+0.5j", "--beta", "1-1j"]),
                                      ("c128", 33, 17, 99, ["--beta", "0.75"])):
            argv = ["--json", "verify", "--dtype", dtype, "--m", str(m), "--n", str(n), "--k",
                    str(k)] + extra
            report = json.loads(expect(gemmctl(*argv, addr=addr), EXIT_OK, " ".join(argv))[0])
            assert report["result"] == "PASS" and report["dtype"] == dtype, report
        for np_dtype, fortran in ((np.complex64, False), (np.complex128, True)):
            rng = ctx.rng
            a = (rng.uniform(-1, 1, (13, 7)) + 1j * rng.uniform(-1, 1, (13, 7))).astype(np_dtype)
            b = (rng.uniform(-1, 1, (7, 11)) + 1j * rng.uniform(-1, 1, (7, 11))).astype(np_dtype)
            c = (rng.uniform(-1, 1, (13, 11)) + 1j * rng.uniform(-1, 1, (13, 11))).astype(np_dtype)
            save(p("a.npy"), a, fortran), save(p("b.npy"), b), save(p("c.npy"), c, fortran)
            expect(gemmctl("gemm", "--a", p("a.npy"), "--b", p("b.npy"), "--c", p("c.npy"),
                           "--alpha", "0.5-2j", "--beta", "1j", "--out", p("o.npy"), addr=addr),
                   EXIT_OK, "gemm %s" % np_dtype.__name__)
            got = np.load(p("o.npy"))
            want = (0.5 - 2j) * (a.astype(complex) @ b) + 1j * c
            tol = 1e-5 if np_dtype == np.complex64 else 1e-13
            assert got.dtype == np_dtype and np.max(np.abs(got - want)) < tol * 10, (got, want)
        bench = json.loads(expect(gemmctl("--json", "bench", "--dtype", "c128", "--m", "16",
                                          "--n", "24", "--k", "8", "--requests", "10",
                                          addr=addr), EXIT_OK, "bench c128")[0])
        assert bench["dtype"] == "c128", bench
        expect(gemmctl("verify", "--dtype", "f32", "--alpha", "1+1j", addr=addr), EXIT_USAGE,
               "complex alpha on f32")
        expect(gemmctl("verify", "--dtype", "c64", "--beta", "1+j", addr=addr), EXIT_USAGE,
               "malformed beta")


def test_usage_and_exit_codes(ctx):
    with tempfile.TemporaryDirectory() as tmp:
        dead = "unix:" + os.path.join(tmp, "nobody.sock")
        expect(gemmctl(), EXIT_USAGE, "no command")
        expect(gemmctl("frobnicate"), EXIT_USAGE, "unknown command")
        expect(gemmctl("--bogus", "ping"), EXIT_USAGE, "unknown option")
        expect(gemmctl("ping", "extra"), EXIT_USAGE, "ping with an argument")
        expect(gemmctl("gemm", "--a", "x.npy"), EXIT_USAGE, "gemm without --b/--out")
        expect(gemmctl("bench", "--m", "0"), EXIT_USAGE, "bench --m 0")
        expect(gemmctl("verify", "--dtype", "f8"), EXIT_USAGE, "verify --dtype f8")
        expect(gemmctl("ping", addr="tcp:nohost"), EXIT_USAGE, "malformed address")
        _, err = expect(gemmctl("ping", addr=dead), EXIT_CONNECT, "dead socket")
        assert "cannot connect" in err and "nobody.sock" in err, err
        out, _ = expect(gemmctl("--json", "info", addr=dead), EXIT_CONNECT, "dead socket --json")
        report = json.loads(out)
        assert report["ok"] is False and report["exit"] == 3, report
        assert report["error"]["kind"] == "connection", report
        out, _ = expect(gemmctl("--help"), EXIT_OK, "--help")
        assert "exit status" in out and "3  connection error" in out, out
        for command in ("ping", "info", "stats", "gemm", "bench", "verify"):
            out, _ = expect(gemmctl(command, "--help"), EXIT_OK, command + " --help")
            assert out.startswith("usage: gemmctl") and command in out, out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--gemmctl", required=True)
    ARGS, rest = parser.parse_known_args()
    sys.exit(h.main([test_ping_info_stats, test_tcp, test_gemm_files, test_gemm_epilogue,
                     test_gemm_rejects_before_sending,
                     test_verify_and_bench, test_out_dtype, test_i8, test_fp8, test_complex,
                     test_usage_and_exit_codes],
                    [sys.argv[0]] + rest))
