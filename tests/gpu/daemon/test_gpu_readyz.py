#!/usr/bin/python3
"""/readyz on gemmd_fake: 200 while its one fake GPU serves; after a sticky device fault (the
fake CUDA runtime faults a kernel whose alpha is 666) the device is out of service, /readyz
answers 503 "no device in service", /healthz still 200, and the metrics say so. A result
computed before the fault and still waiting in staging for its client to read it is delivered
whole. Only for gemmd_fake (FAKE_CUDA_DEVICES=1): a real GPU computes alpha 666 like any
other."""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
import test_gpu_e2e as e2e  # noqa: E402
import metrics_util as mu  # noqa: E402

h = e2e.h


def fault_the_device(client):
    """A gemm whose kernel faults the fake device (alpha 666): answered with an error."""
    a = np.ones((8, 8), np.float32)
    try:
        client.gemm({"m": 8, "n": 8, "k": 8, "dtype": "f32", "alpha": 666.0}, a, a)
        raise AssertionError("a faulting kernel returned a result")
    except h.RpcError as exc:
        assert exc.code in ("UNAVAILABLE", "INTERNAL"), exc


def test_readyz_after_device_fault(ctx):
    port = h.free_tcp_port()
    config = {"metrics": {"listen": "tcp:127.0.0.1:%d" % port}}
    with e2e.gpu_daemon(ctx, config=config) as d, d.connect(timeout=60) as client:
        assert mu.http_get(port, "/readyz")[:2] == (200, "ready\n")
        fault_the_device(client)
        h.wait_until(lambda: mu.http_get(port, "/readyz")[0] == 503, 10 * ctx.scale,
                     "/readyz to answer 503 with the only device out of service")
        assert mu.http_get(port, "/readyz")[1] == "not ready: no device in service\n"
        assert mu.http_get(port, "/healthz")[0] == 200
        samples = mu.parse(mu.http_get(port, "/metrics")[1])
        assert mu.value(samples, "gemmd_device_in_service", device="cuda:0") == 0
        assert mu.value(samples, "gemmd_draining") == 0


def test_fault_while_a_result_waits_unread(ctx):
    """The device faults while another client's whole result sits posted in staging, unread
    (gpu.staging_hold_ms keeps it there): that client still gets its result, right, and the
    daemon goes on (it answered the job FAILED after its last chunk, and died on its own
    assertion, before the fix)."""
    gpu = {"small_job_bytes": 0, "staging_bytes": "8MiB", "staging_hold_ms": 5000}
    with e2e.gpu_daemon(ctx, gpu=gpu) as d, d.connect(timeout=60) as slow, \
            d.connect(timeout=60) as other:
        a, b = h.random_operands(ctx.rng, 1024, 1024, 16, "f32")
        hdr = {"m": 1024, "n": 1024, "k": 16, "dtype": "f32"}
        msgid = slow.send_gemm(hdr, a, b)  # a 4 MiB result: more than the socket takes
        time.sleep(0.5 * ctx.scale)
        fault_the_device(other)
        out_hdr, c = slow.gemm_result(msgid, hdr, timeout=30)
        h.assert_close(c, a, b, None, 1.0, 0.0, False, False, "f32", "the result held unread")
        assert other.call("ping") == "pong"


if __name__ == "__main__":
    sys.exit(e2e.gpu_main([test_readyz_after_device_fault,
                           test_fault_while_a_result_waits_unread]))
