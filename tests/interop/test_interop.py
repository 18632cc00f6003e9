#!/usr/bin/python3
"""Interop of proto/ with Debian's python3-msgpack (and numpy for the matrices).

    /usr/bin/python3 test_interop.py PATH/TO/interop_proto

1. Bytes from the C encoders (interop_proto encode) decode in Python to the
   expected values: a gemm request with a, b, c, a ping, an error reply, a
   gemm reply.
2. Requests Python encodes (method as str and as bin, ints of several widths,
   float32 and int alpha, numpy payloads, a notification, an unknown method)
   decode in C (interop_proto decode) to the expected headers and payloads.
"""
import subprocess
import sys

import msgpack
import numpy as np

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def pattern(n, letter):
    return ((np.arange(n, dtype=np.uint64) * 31 + ord(letter)) & 0xFF).astype(np.uint8).tobytes()


def fnv1a(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def c_to_python(tool):
    out = subprocess.run([tool, "encode"], check=True, capture_output=True).stdout
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(out)
    msgs = list(unpacker)
    check(len(msgs) == 4, "C encoder: 4 messages, got %d" % len(msgs))
    if len(msgs) != 4:
        return
    req, ping, err, reply = msgs
    check(req[:3] == [0, 1, "gemm"], "gemm request envelope: %r" % (req[:3],))
    hdr, a, b, c = req[3]
    want = {"m": 3, "n": 5, "k": 7, "dtype": "f64", "trans_a": True, "trans_b": False,
            "alpha": 0.25, "beta": -1.5, "batch": 2, "precision": "fast", "timeout_ms": 250}
    check(hdr == want, "gemm header: %r" % (hdr,))
    # a is stored k x m (trans_a), b k x n, c m x n; batch 2, f64
    check(isinstance(a, bytes) and a == pattern(2 * 7 * 3 * 8, "a"), "a payload")
    check(isinstance(b, bytes) and b == pattern(2 * 7 * 5 * 8, "b"), "b payload")
    check(isinstance(c, bytes) and c == pattern(2 * 3 * 5 * 8, "c"), "c payload")
    A = np.frombuffer(a, dtype="<f8").reshape(2, 7, 3)
    check(A.shape == (2, 7, 3), "a reshapes as batch x k x m")
    check(ping == [0, 2, "ping", []], "ping: %r" % (ping,))
    check(err == [1, 3, {"code": "UNIMPLEMENTED", "message": 'method "frob" is not implemented'}, None],
          "error reply: %r" % (err,))
    check(reply[:3] == [1, 4, None], "gemm reply envelope: %r" % (reply[:3],))
    out_hdr, cout = reply[3]
    check(out_hdr == {"m": 4, "n": 6, "dtype": "f32", "batch": 1, "device": "cuda:0",
                      "kernel": "tiled16",
                      "timings": {"queue_us": 10, "transfer_in_us": 20, "compute_us": 30,
                                  "transfer_out_us": 40}}, "out_hdr: %r" % (out_hdr,))
    check(np.frombuffer(cout, dtype="<f4").shape == (24,), "c of the reply is 4x6 f32")
    check(cout == pattern(96, "c"), "c payload of the reply")


def python_to_c(tool):
    rng = np.random.default_rng()
    stream = bytearray()
    expected = []
    packer = msgpack.Packer(use_bin_type=True)
    single = msgpack.Packer(use_bin_type=True, use_single_float=True)

    # 1. method as str, small ints, float64 alpha, numpy f32 payloads with c
    a = rng.standard_normal((7, 3), dtype=np.float32)
    b = rng.standard_normal((3, 5), dtype=np.float32)
    c = rng.standard_normal((7, 5), dtype=np.float32)
    hdr = {"m": 7, "n": 5, "k": 3, "dtype": "f32", "alpha": 1.25, "beta": 0.5}
    stream += packer.pack([0, 10, "gemm", [hdr, a.tobytes(), b.tobytes(), c.tobytes()]])
    expected += ["REQUEST 10 gemm m=7 n=5 k=3 dtype=f32 trans_a=0 trans_b=0 alpha=1.25 beta=0.5 "
                 "batch=1 precision=exact timeout_ms=-1 has_c=1"]
    expected += ["PAYLOAD 10 %s %d %s" % (n, len(x), fnv1a(x))
                 for n, x in (("a", a.tobytes()), ("b", b.tobytes()), ("c", c.tobytes()))]
    expected += ["END 10"]

    # 2. method as bin, ints in uint8/uint16/uint32 widths, float32 alpha, negative int beta,
    #    transposes, f64 and a batch, msgid at uint32's top
    m, n, k, batch = 200, 1, 300, 2
    a = rng.standard_normal((batch, k, m)).astype("<f8")  # trans_a: stored k x m
    b = rng.standard_normal((batch, n, k)).astype("<f8")  # trans_b: stored n x k
    c = rng.standard_normal((batch, m, n)).astype("<f8")
    hdr = {"m": m, "n": n, "k": k, "batch": batch, "dtype": "f64", "trans_a": True,
           "trans_b": True, "alpha": 0.5, "beta": -3, "precision": "exact", "timeout_ms": 70000}
    stream += single.pack([0, 2**32 - 1, b"gemm", [hdr, a.tobytes(), b.tobytes(), c.tobytes()]])
    expected += ["REQUEST 4294967295 gemm m=200 n=1 k=300 dtype=f64 trans_a=1 trans_b=1 alpha=0.5 "
                 "beta=-3 batch=2 precision=exact timeout_ms=70000 has_c=1"]
    expected += ["PAYLOAD 4294967295 %s %d %s" % (nm, len(x), fnv1a(x))
                 for nm, x in (("a", a.tobytes()), ("b", b.tobytes()), ("c", c.tobytes()))]
    expected += ["END 4294967295"]

    # 3. bf16 as raw uint16 words, no c
    a = rng.integers(0, 65535, size=(2, 2), dtype="<u2")
    b = rng.integers(0, 65535, size=(2, 2), dtype="<u2")
    stream += packer.pack([0, 11, "gemm", [{"m": 2, "n": 2, "k": 2, "dtype": "bf16"},
                                           a.tobytes(), b.tobytes()]])
    expected += ["REQUEST 11 gemm m=2 n=2 k=2 dtype=bf16 trans_a=0 trans_b=0 alpha=1 beta=0 "
                 "batch=1 precision=exact timeout_ms=-1 has_c=0"]
    expected += ["PAYLOAD 11 %s 8 %s" % (nm, fnv1a(x)) for nm, x in (("a", a.tobytes()), ("b", b.tobytes()))]
    expected += ["END 11"]

    # 4. the simple methods, as str and bin, and notifications
    stream += packer.pack([0, 12, "ping", []]) + packer.pack([0, 13, b"info", []])
    stream += packer.pack([0, 65536, "stats", []])
    expected += ["REQUEST 12 ping", "END 12", "REQUEST 13 info", "END 13", "REQUEST 65536 stats",
                 "END 65536"]
    stream += packer.pack([2, "ping", []]) + packer.pack([2, b"shutdown_now", [1, 2]])
    expected += ["NOTIFICATION ping", "END 0", "NOTIFICATION ?", "END 0"]

    # 5. an unknown method, an unknown key, a payload of the wrong length: each answered
    stream += packer.pack([0, 14, "frob", []])
    expected += ['REJECT 14 UNIMPLEMENTED method "frob" is not implemented']
    stream += packer.pack([0, 15, "gemm", [{"m": 1, "n": 1, "k": 1, "dtype": "f32", "tile": 64},
                                           b"\0" * 4, b"\0" * 4]])
    expected += ['REJECT 15 INVALID_ARGUMENT hdr: unknown key "tile"']
    stream += packer.pack([0, 16, "gemm", [{"m": 2, "n": 2, "k": 2, "dtype": "f32"},
                                           b"\0" * 12, b"\0" * 16]])
    expected += ["REQUEST 16 gemm m=2 n=2 k=2 dtype=f32 trans_a=0 trans_b=0 alpha=1 beta=0 "
                 "batch=1 precision=exact timeout_ms=-1 has_c=0",
                 "REJECT 16 INVALID_ARGUMENT a: expected 16 bytes, got 12"]
    stream += packer.pack([0, 17, "ping", []])
    expected += ["REQUEST 17 ping", "END 17"]

    res = subprocess.run([tool, "decode"], input=bytes(stream), capture_output=True)
    got = res.stdout.decode().splitlines()
    check(res.returncode == 0, "interop_proto decode exit status %d: %s" % (res.returncode, res.stderr))
    for i, (g, w) in enumerate(zip(got, expected)):
        check(g == w, "line %d:\n   got  %s\n   want %s" % (i + 1, g, w))
    check(len(got) == len(expected), "%d lines, expected %d" % (len(got), len(expected)))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    c_to_python(sys.argv[1])
    python_to_c(sys.argv[1])
    print("interop: %s" % ("FAILED (%d)" % len(FAILURES) if FAILURES else "ok"))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
