#!/usr/bin/python3
"""One pipelining connection uses every GPU: its jobs go to the least-loaded device one by one,
not all to the device of its first job, and its replies stay whole and right whatever device
answers first, also when results leave in many chunks (4 KiB staging).

Meant for gemmd_fake with FAKE_CUDA_DEVICES=2 (label integration; there both devices must
serve) and for real GPUs (label gpu; with one GPU it checks the replies only). Exits 77 with
"SKIP: no CUDA device" where gemmd --backend gpu finds none."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_gpu_e2e as e2e  # noqa: E402  (its path set-up, daemon config and probe)

h = e2e.h


def _pipeline(ctx, client, count, staging_chunked):
    jobs, blob = [], bytearray()
    for i in range(count):
        m, n, k = (int(x) for x in ctx.rng.integers(40, 300, 3))
        dtype = ("f32", "f64")[i % 2]
        a, b = h.random_operands(ctx.rng, m, n, k, dtype)
        hdr = {"m": m, "n": n, "k": k, "dtype": dtype, "alpha": 0.5 + i}
        jobs.append((100 + i, hdr, a, b))
        blob += h.Client.pack_gemm(100 + i, hdr, a, b)
    sender = h.send_in_background(client, bytes(blob))
    seen = {}
    for msgid, hdr, a, b in jobs:
        out_hdr, out = client.gemm_result(msgid, hdr, timeout=120)
        h.assert_close(out, a, b, None, hdr["alpha"], 0.0, False, False, hdr["dtype"],
                       "pipelined %d (%s staging)" % (msgid, staging_chunked))
        seen[out_hdr["device"]] = seen.get(out_hdr["device"], 0) + 1
    sender.join(60)
    assert sender.error is None, sender.error
    return seen


def test_one_connection_uses_every_device(ctx):
    for staging in ("4KiB", "64MiB"):
        with e2e.gpu_daemon(ctx, gpu={"staging_bytes": staging}) as d, \
                d.connect(timeout=120) as client:
            ngpu = len(e2e.devices_of(client.call("info")))
            seen = _pipeline(ctx, client, 24, staging)
            assert client.call("ping") == "pong"
        print("  %s staging: jobs per device %s (of %d devices)" % (staging, seen, ngpu))
        if ngpu > 1:
            assert len(seen) == ngpu, "one connection used only %s of %d devices" % (
                sorted(seen), ngpu)


if __name__ == "__main__":
    sys.exit(e2e.gpu_main([test_one_connection_uses_every_device]))
