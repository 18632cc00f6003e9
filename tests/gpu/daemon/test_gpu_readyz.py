#!/usr/bin/python3
"""/readyz on gemmd_fake: 200 while its one fake GPU serves; after a sticky device fault (the
fake CUDA runtime faults a kernel whose alpha is 666) the device is out of service, /readyz
answers 503 "no device in service", /healthz still 200, and the metrics say so. Only for
gemmd_fake (FAKE_CUDA_DEVICES=1): a real GPU computes alpha 666 like any other."""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
import test_gpu_e2e as e2e  # noqa: E402
import metrics_util as mu  # noqa: E402

h = e2e.h


def test_readyz_after_device_fault(ctx):
    port = h.free_tcp_port()
    config = {"metrics": {"listen": "tcp:127.0.0.1:%d" % port}}
    with e2e.gpu_daemon(ctx, config=config) as d, d.connect(timeout=60) as client:
        assert mu.http_get(port, "/readyz")[:2] == (200, "ready\n")
        a = np.ones((8, 8), np.float32)
        try:
            client.gemm({"m": 8, "n": 8, "k": 8, "dtype": "f32", "alpha": 666.0}, a, a)
            raise AssertionError("a faulting kernel returned a result")
        except h.RpcError as exc:
            assert exc.code in ("UNAVAILABLE", "INTERNAL"), exc
        h.wait_until(lambda: mu.http_get(port, "/readyz")[0] == 503, 10 * ctx.scale,
                     "/readyz to answer 503 with the only device out of service")
        assert mu.http_get(port, "/readyz")[1] == "not ready: no device in service\n"
        assert mu.http_get(port, "/healthz")[0] == 200
        samples = mu.parse(mu.http_get(port, "/metrics")[1])
        assert mu.value(samples, "gemmd_device_in_service", device="cuda:0") == 0
        assert mu.value(samples, "gemmd_draining") == 0


if __name__ == "__main__":
    sys.exit(e2e.gpu_main([test_readyz_after_device_fault]))
