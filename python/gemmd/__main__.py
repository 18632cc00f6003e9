"""python3 -m gemmd: check a daemon from Python (gemmctl stays the command line tool).

    python3 -m gemmd [--connect ADDR] ping | info | stats | check [--dtype f32] [--size N]

info and stats print JSON; check multiplies random matrices on the daemon and compares the
result with NumPy's (i8: int8 in, int32 out, bit for bit; e4m3, e5m2: fp8 bytes in, float32
out, within 2^-10 of the sum of |a b|, what fp8 tensor cores keep). Exit status: 0 success, 1 an
error reply or a wrong result, 3 no connection (as gemmctl).
"""

import argparse
import json
import sys

import numpy as np

from . import Client, ConnectError, ConnectionLost, Error, fp8
from ._arrays import BFLOAT16

# dtype: (NumPy dtype, or the fp8 format; tolerance relative to sum |a b|, times sqrt(k) but
# for fp8, whose bound does not grow with k)
_DTYPES = {"f32": (np.float32, 1e-5), "f64": (np.float64, 1e-12), "f16": (np.float16, 1e-2),
           "bf16": (BFLOAT16, 5e-2), "i8": (np.int8, 0), "e4m3": ("e4m3", 2.0 ** -10),
           "e5m2": ("e5m2", 2.0 ** -10)}
_FP8 = {"e4m3": (fp8.to_e4m3, fp8.from_e4m3), "e5m2": (fp8.to_e5m2, fp8.from_e5m2)}


def _operands(rng, dtype, m, n, k):
    """(a, b as sent, their values as float64, gemm's keyword arguments)."""
    if dtype in _FP8:
        to, values = _FP8[dtype]
        a, b = to(rng.uniform(-1, 1, (m, k))), to(rng.uniform(-1, 1, (k, n)))
        return a, b, values(a).astype(np.float64), values(b).astype(np.float64), {"dtype": dtype}
    if dtype == np.int8:
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    else:
        a = rng.uniform(-1, 1, (m, k)).astype(dtype)
        b = rng.uniform(-1, 1, (k, n)).astype(dtype)
    return a, b, a.astype(np.float64), b.astype(np.float64), {}


def _check(client, dtype_name, size):
    dtype, tol = _DTYPES[dtype_name]
    if dtype is None:
        print("bf16 needs ml_dtypes (python3 -c 'import ml_dtypes')", file=sys.stderr)
        return 1
    rng = np.random.default_rng()
    m, n, k = size, size + 1, size + 2
    a, b, a64, b64, kwargs = _operands(rng, dtype, m, n, k)
    future = client.submit(a, b, **kwargs)
    c = future.result()
    want = a64 @ b64   # int8: exact, no wrap (k < 2^17)
    scale = np.abs(a64) @ np.abs(b64)
    err = np.abs(c.astype(np.float64) - want)
    grows = 1.0 if dtype in _FP8 else max(1.0, np.sqrt(k))
    ok = bool(np.all(err <= tol * grows * scale + 1e-30))
    print("%s %dx%dx%d %s on %s (%s): %s" % ("PASS" if ok else "FAIL", m, n, k, dtype_name,
                                             future.report.get("device"),
                                             future.report.get("kernel"),
                                             "max error %.3g" % float(err.max())))
    return 0 if ok else 1


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m gemmd", description=__doc__.split("\n")[0])
    parser.add_argument("--connect", metavar="ADDR",
                        help="unix:PATH or tcp:HOST:PORT; default $GEMMD_ADDRESS, then "
                             "unix:/run/gemmd/gemmd.sock")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("ping", help="round trip")
    sub.add_parser("info", help="the daemon's info map as JSON")
    sub.add_parser("stats", help="the daemon's stats map as JSON")
    check = sub.add_parser("check", help="random matrices on the daemon against NumPy")
    check.add_argument("--dtype", choices=sorted(_DTYPES), default="f32")
    check.add_argument("--size", type=int, default=257)
    args = parser.parse_args(argv)
    try:
        with Client(args.connect, timeout=args.timeout) as client:
            if args.command == "ping":
                print("pong (%.1f ms)" % (client.ping() * 1e3))
            elif args.command in ("info", "stats"):
                json.dump(getattr(client, args.command)(), sys.stdout, indent=2, default=repr)
                print()
            else:
                return _check(client, args.dtype, args.size)
    except (ConnectError, ConnectionLost) as exc:
        print("gemmd: %s" % exc.message, file=sys.stderr)
        return 3
    except Error as exc:
        print("gemmd: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
