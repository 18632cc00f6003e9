"""gemmd.aio.Client: the same requests from an event loop, many in flight, huge replies,
and the same errors (lost connection, timeout, malformed reply) without hanging."""

import asyncio
import signal
import time

import msgpack
import numpy as np
import pytest

import gemmd
import gemmd.aio
import gemmd_harness as h
from conftest import drain, read_request


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 300))


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
def test_gather_many(daemon, rng, dtype):
    async def main():
        async with gemmd.aio.Client(daemon.address()) as c:
            assert await c.ping() > 0
            info = await c.info()
            assert info["backend"] and isinstance(await c.stats(), dict)
            assert isinstance(await c.features(), frozenset)
            jobs = []
            for i in range(24):
                m, n, k = 1 + i * 13 % 70, 1 + i * 7 % 50, 1 + i * 3 % 40
                a, b = h.random_operands(rng, m, n, k, dtype, i % 2 == 1, i % 3 == 1)
                jobs.append((a, b, i % 2 == 1, i % 3 == 1))
            np_dtype = {"f32": np.float32, "f64": np.float64, "f16": np.float16}[dtype]
            results = await asyncio.gather(*(
                c.gemm(a.astype(np_dtype), b.astype(np_dtype), alpha=-0.5, trans_a=ta,
                       trans_b=tb) for a, b, ta, tb in jobs))
            for (a, b, ta, tb), got in zip(jobs, results):
                h.assert_close(got.astype(np.float64), a, b, None, -0.5, 0.0, ta, tb, dtype,
                               "aio")
            assert c.in_flight == 0
    run(main())


def test_batch_beta_and_huge_reply(daemon, rng, quick):
    async def main():
        async with gemmd.aio.Client(daemon.address("tcp")) as c:
            a, b = h.random_operands(rng, 7, 9, 5, "f32", batch=4)
            cc = rng.standard_normal((4, 7, 9)).astype(np.float32)
            got = await c.gemm(a.astype(np.float32), b.astype(np.float32), cc, beta=2.0)
            h.assert_close(got, a, b, cc, 1.0, 2.0, False, False, "f32", "aio batch")
            m = 3000 if quick else 6000
            x = np.linspace(0, 1, m, dtype=np.float32).reshape(m, 1)
            out = np.full((m, m), np.nan, np.float32)
            assert await c.gemm(x, x.T, out=out) is out
            np.testing.assert_array_equal(out[::1001], (x @ x.T)[::1001])
    run(main())


def test_errors_and_cancel(daemon, rng):
    async def main():
        c = await gemmd.aio.Client.connect(daemon.address())
        f32 = np.ones((3, 3), np.float32)
        with pytest.raises(gemmd.Error) as info:
            await c.gemm(f32, f32, alpha=float("inf"))
        assert info.value.code == "INVALID_ARGUMENT"
        big = rng.standard_normal((2000, 2000)).astype(np.float32)
        task = asyncio.ensure_future(c.gemm(big, big))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        got = await c.gemm(f32, f32)          # the stream is still in step
        np.testing.assert_array_equal(got, f32 @ f32)
        await c.close()
        with pytest.raises(gemmd.ConnectionLost):
            await c.ping()
    run(main())


def test_daemon_killed_mid_request(fresh_daemon, rng):
    d = fresh_daemon(config={"cpu": {"threads": 1, "blas_threads": 1}})
    big = rng.standard_normal((2500, 2500))  # 300 MB to send for three: still going at the kill

    async def main():
        async with gemmd.aio.Client(d.address()) as c:
            tasks = [asyncio.ensure_future(c.gemm(big, big)) for _ in range(3)]
            # long enough for the sends to start, short enough that a GPU has not answered all
            await asyncio.sleep(0.02)
            d.proc.send_signal(signal.SIGKILL)
            start = time.monotonic()
            answered = [task for task in tasks if task.done()]
            assert len(answered) < len(tasks), "every request answered before the kill"
            lost = 0
            for task in tasks:
                if task in answered:
                    continue
                # A reply the daemon had written before the kill may still be read: a result
                # (checked), never a hang or another error; the rest are ConnectionLost.
                try:
                    np.testing.assert_allclose(await task, big @ big, rtol=1e-9, atol=1e-9)
                except gemmd.ConnectionLost:
                    lost += 1
            assert lost > 0, "no request was lost with the daemon"
            assert time.monotonic() - start < 10
    run(main())


def test_timeout_and_malformed(fake_server, tmp_path):
    silent = fake_server(drain)

    def garbage(conn):
        read_request(conn)
        conn.sendall(msgpack.packb([1, 99, None, None]) + b"\xc1")
        drain(conn)
    bad = fake_server(garbage)

    async def main():
        async with gemmd.aio.Client(silent.address) as c:
            start = time.monotonic()
            with pytest.raises(gemmd.Timeout):
                await c.ping(timeout=0.3)
            assert time.monotonic() - start < 5
        async with gemmd.aio.Client(bad.address) as c:
            with pytest.raises(gemmd.ProtocolError):
                await c.ping()
        with pytest.raises(gemmd.ConnectError):
            await gemmd.aio.Client.connect("unix:%s/none.sock" % tmp_path)
    run(main())
