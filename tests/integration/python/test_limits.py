"""Sizes the daemon cannot serve, refused by the client before anything is copied or sent
(issue 31): the error names the daemon's limit, its value, its config key and the way round it,
and a view (np.broadcast_to) is not made contiguous first."""

import asyncio
import resource
import time

import numpy as np
import pytest

import gemmd
import gemmd.aio

GIB = 1 << 30


def _huge_view():
    """8 GiB of float32 as a broadcast view: 16 KiB of memory."""
    return np.broadcast_to(np.ones((1, 1, 4096), np.float32), (128, 4096, 4096))


def _peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def test_view_over_max_operand_bytes(daemon):
    a, b = _huge_view(), np.ones((4096, 64), np.float32)
    before = _peak_mib()
    start = time.monotonic()
    with gemmd.Client(daemon.address()) as client:
        for call in (client.gemm, client.submit):
            with pytest.raises(gemmd.Error) as info:
                call(a, b)
            assert info.value.code == "RESOURCE_EXHAUSTED"
            message = info.value.message
            assert "a (bytes): 8589934592" in message, message
            assert "limits.max_operand_bytes" in message and "1073741824" in message, message
            assert "smaller batch" in message and "msgpack" not in message, message
        assert client.gemm(np.ones((8, 4), np.float32), np.ones((4, 2), np.float32))[0, 0] == 4
    # refused from the sizes: nothing was materialised (that took a minute and 10 GB)
    assert time.monotonic() - start < 30
    assert _peak_mib() - before < 512, "the view was copied: %d MiB more" % (_peak_mib() - before)


def test_aio_view_refused(daemon):
    async def main():
        async with gemmd.aio.Client(daemon.address()) as client:
            with pytest.raises(gemmd.Error) as info:
                await client.gemm(_huge_view(), np.ones((4096, 64), np.float32))
            return info.value.message
    message = asyncio.run(main())
    assert "limits.max_operand_bytes" in message, message


def test_dims_and_work(daemon):
    with gemmd.Client(daemon.address()) as client:
        limits = client.info()["limits"]
        n = limits["max_dim"] + 1
        with pytest.raises(gemmd.Error) as info:
            client.gemm(np.broadcast_to(np.ones((1, 1), np.float32), (n, 1024)),
                        np.ones((1024, 16), np.float32))
        assert "m: %d" % n in info.value.message and "limits.max_dim" in info.value.message


def test_message_over_limit_names_shared_memory(fresh_daemon):
    """Operands each within max_operand_bytes but together over max_message_bytes: the way
    round is shared memory (nothing crosses the socket) or a smaller batch."""
    d = fresh_daemon(config={"limits": {"max_operand_bytes": 96 << 20,
                                        "max_message_bytes": 128 << 20}})
    a = np.broadcast_to(np.ones((1, 1, 1024), np.float32), (20, 1024, 1024))   # 80 MiB
    b = np.broadcast_to(np.ones((1, 1, 1024), np.float32), (20, 1024, 1024))
    with gemmd.Client(d.address(), auto_shm=False) as client:
        with pytest.raises(gemmd.Error) as info:
            client.gemm(a, b)
        message = info.value.message
        assert "limits.max_message_bytes" in message and "client.shm_array" in message, message
