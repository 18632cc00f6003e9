#!/usr/bin/python3
"""One connection, a gemm whose result leaves in many chunks (4 KiB staging), and small requests
(ping, info, a refused gemm) sent while that result is being written: every reply must arrive
whole, none inside another. The GPU backend is the one that hands a result to the session in
several chunks, so this is where the session's reply ordering shows.

Exits 77 with "SKIP: no CUDA device" where gemmd --backend gpu finds none."""
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_gpu_e2e as e2e  # noqa: E402  (its path set-up, daemon config and probe)

h = e2e.h


def test_small_replies_during_chunked_result(ctx):
    with e2e.gpu_daemon(ctx, gpu={"staging_bytes": 4096}) as d, d.connect(timeout=60) as client:
        for round_ in range(3):
            m = n = k = 400  # C of 1.25 MiB: 313 chunks of 4 KiB
            a, b = h.random_operands(ctx.rng, m, n, k, "f64")
            hdr = {"m": m, "n": n, "k": k, "dtype": "f64"}
            gemm_id = 1000 + round_
            client.send_raw(h.Client.pack_gemm(gemm_id, hdr, a, b))
            client.sock.recv(1, socket.MSG_PEEK)  # the result has started to arrive
            small = []
            for i in range(6):
                msgid = 2000 + 10 * round_ + i
                method = ("ping", "info", "stats")[i % 3]
                client.request(method, msgid=msgid)
                small.append(msgid)
                time.sleep(0.001)
            out_hdr, out = client.gemm_result(gemm_id, hdr, timeout=60)
            h.assert_close(out, a, b, None, 1.0, 0.0, False, False, "f64",
                           "gemm %d with small replies around it" % gemm_id)
            for msgid in small:
                reply = client.wait(msgid, timeout=30)
                assert reply.error is None, reply


if __name__ == "__main__":
    sys.exit(e2e.gpu_main([test_small_replies_during_chunked_result]))
