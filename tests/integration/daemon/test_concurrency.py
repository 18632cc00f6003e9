#!/usr/bin/python3
"""Many clients at once, each on its own connection with a few requests of its own; every
answer is checked, and the daemon still serves afterwards."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402

DTYPES = ("f32", "f64", "f16", "bf16")


def test_32_clients(ctx):
    seeds = ctx.rng.integers(0, 2**32, size=32)
    with ctx.daemon(config={"cpu": {"threads": 2}}) as d:

        def client_body(i):
            rng = np.random.default_rng(int(seeds[i]))  # one generator per thread
            with d.connect() as client:
                assert client.call("ping") == "pong"
                for j in range(4):
                    m, n, k = (int(x) for x in rng.integers(1, 90, size=3))
                    h.check_gemm(client, rng, m, n, k, DTYPES[(i + j) % 4],
                                 trans_a=bool(j & 1), trans_b=bool(i & 1),
                                 beta=0.25 if j == 3 else 0.0, batch=2 if j == 2 else None)

        h.run_threads(client_body, 32)
        with d.connect() as client:
            # A reply counts in gemm_ok when its loop sees the write finish, which can come
            # after the client has read it; a fresh connection may be served by another loop
            # thread, so the last few counts are waited for, not expected at once.
            def counted():
                ok = h.dig(client.call("stats"), "gemm_ok")
                return ok is None or ok >= 32 * 4
            h.wait_until(counted, 10.0, "stats.gemm_ok to reach 128 after 128 gemms")
            h.check_gemm(client, ctx.rng, 9, 9, 9, "f32")


def test_pipelined_clients(ctx):
    """16 clients, each writing 8 requests before reading any reply."""
    seeds = ctx.rng.integers(0, 2**32, size=16)
    with ctx.daemon(config={"cpu": {"threads": 2}}) as d:

        def client_body(i):
            rng = np.random.default_rng(int(seeds[i]))
            with d.connect() as client:
                sent = []
                for j in range(8):
                    dtype = DTYPES[j % 4]
                    m, n, k = (int(x) for x in rng.integers(1, 60, size=3))
                    a, b = h.random_operands(rng, m, n, k, dtype)
                    hdr = {"m": m, "n": n, "k": k, "dtype": dtype}
                    sent.append((client.send_gemm(hdr, a, b), hdr, a, b))
                for msgid, hdr, a, b in reversed(sent):
                    _, out = client.gemm_result(msgid, hdr)
                    h.assert_close(out, a, b, None, 1.0, 0.0, False, False, hdr["dtype"],
                                   "client %d msgid %d" % (i, msgid))

        h.run_threads(client_body, 16)


if __name__ == "__main__":
    sys.exit(h.main([test_32_clients, test_pipelined_clients]))
