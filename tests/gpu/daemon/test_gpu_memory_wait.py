#!/usr/bin/python3
"""A job that waits for device memory is the daemon's wait, not a stalled client: the session is
paused (the backend asked it to stop reading) and timeouts.request_ms must not run meanwhile.

The pool (gpu.memory_bytes) fits one job at a time. One job is timed alone first; request_ms is
then set to a quarter of that, and three clients send a job each at once: the second and third
wait for the first (and second) to finish computing, far longer than request_ms, and must still
get correct results. Meant for gemmd_fake (the fake CUDA runtime's GEMM is a slow host loop);
on a real GPU the jobs finish too fast to wait, and the test only checks the results.

Exits 77 with "SKIP: no CUDA device" where gemmd --backend gpu finds none."""
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_gpu_e2e as e2e  # noqa: E402  (its path set-up, daemon config and probe)

h = e2e.h

SIZE = 256  # f64: a, b and C of 512 KiB each
POOL = {"memory_bytes": "2MiB", "staging_bytes": "64KiB"}  # one job's 1.5 MiB at a time


def one_job(d, msgid, a, b):
    hdr = {"m": SIZE, "n": SIZE, "k": SIZE, "dtype": "f64"}
    with d.connect(timeout=120) as client:
        client.send_raw(h.Client.pack_gemm(msgid, hdr, a, b))
        _, out = client.gemm_result(msgid, hdr, timeout=120)
    h.assert_close(out, a, b, None, 1.0, 0.0, False, False, "f64", "job %d" % msgid)


def test_memory_wait_is_not_a_request_timeout(ctx):
    with e2e.gpu_daemon(ctx, gpu=POOL) as d:
        start = time.monotonic()
        one_job(d, 1, *h.random_operands(ctx.rng, SIZE, SIZE, SIZE, "f64"))
        alone_ms = (time.monotonic() - start) * 1000.0
    request_ms = max(20, int(alone_ms / 4))
    print("  one job alone: %.0f ms; timeouts.request_ms %d" % (alone_ms, request_ms))
    config = {"timeouts": {"request_ms": request_ms}}
    with e2e.gpu_daemon(ctx, gpu=POOL, config=config) as d:
        errors = []
        operands = [h.random_operands(ctx.rng, SIZE, SIZE, SIZE, "f64") for _ in range(3)]

        def client(i):
            try:
                one_job(d, 10 + i, *operands[i])
            except BaseException as exc:  # noqa: reported below
                errors.append("job %d: %s: %s" % (10 + i, type(exc).__name__, exc))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, "%s\n%s" % ("\n".join(errors), d.log_tail())
        assert "timeouts.request_ms" not in d.log(), d.log_tail()


if __name__ == "__main__":
    sys.exit(e2e.gpu_main([test_memory_wait_is_not_a_request_timeout]))
