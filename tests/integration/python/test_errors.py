"""Errors: the daemon's codes as gemmd.Error, and the client's own failures (cannot connect,
connection lost, timeout, malformed reply) as distinct subclasses that never hang."""

import signal
import time

import msgpack
import numpy as np
import pytest

import gemmd
import gemmd_harness as h
from conftest import drain, read_request

F32 = np.ones((4, 4), np.float32)


def test_daemon_codes(client, fresh_daemon):
    with pytest.raises(gemmd.Error) as info:
        client.gemm(F32, F32, alpha=float("nan"))
    assert info.value.code == "INVALID_ARGUMENT" and "alpha" in info.value.message
    assert type(info.value) is gemmd.Error
    with pytest.raises(gemmd.Error) as info:
        client._call("no_such_method", None)
    assert info.value.code == "UNIMPLEMENTED"
    d = fresh_daemon(config={"limits": {"max_dim": 64}})
    with gemmd.Client(d.address()) as small:
        with pytest.raises(gemmd.Error) as info:
            small.gemm(np.ones((65, 2), np.float32), np.ones((2, 2), np.float32))
        assert info.value.code == "RESOURCE_EXHAUSTED" and "m" in info.value.message
        small.ping()      # an error reply leaves the connection usable
    assert set(gemmd.CODES) >= {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "UNAVAILABLE",
                                "DEADLINE_EXCEEDED", "CANCELLED", "UNIMPLEMENTED", "INTERNAL"}


def test_daemon_deadline_exceeded(fresh_daemon, rng):
    """timeout= is sent as timeout_ms: a job still queued behind busy ones when it passes is
    answered DEADLINE_EXCEEDED by the daemon (a plain gemmd.Error, not the client's Timeout)."""
    d = fresh_daemon(config={"cpu": {"threads": 1, "blas_threads": 1}})
    big = rng.standard_normal((600, 600))
    with gemmd.Client(d.address(), timeout=300) as c:
        start = time.monotonic()
        c.gemm(big, big)
        count = max(2, min(24, int(0.3 / max(time.monotonic() - start, 1e-3)) + 1))
        busy = [c.submit(big, big) for _ in range(count)]
        time.sleep(0.02)
        late = c.submit(F32, F32, timeout=0.001)
        with pytest.raises(gemmd.Error) as info:
            late.result(120)
        assert info.value.code == "DEADLINE_EXCEEDED" and not isinstance(info.value,
                                                                           gemmd.Timeout)
        for future in busy:
            future.result()


def test_connect_errors(tmp_path):
    with pytest.raises(gemmd.ConnectError) as info:
        gemmd.Client("unix:%s/none.sock" % tmp_path)
    assert isinstance(info.value, ConnectionError) and info.value.code == "UNAVAILABLE"
    with pytest.raises(gemmd.ConnectError):
        gemmd.Client("tcp:127.0.0.1:%d" % h.free_tcp_port())
    for bad in ("nonsense", "unix:", "tcp:host", "tcp::::1:80", "tcp:h:99999"):
        with pytest.raises(ValueError):
            gemmd.Client(bad)


def test_daemon_killed_mid_request(fresh_daemon, rng):
    d = fresh_daemon(config={"cpu": {"threads": 1, "blas_threads": 1}})
    big = rng.standard_normal((1500, 1500))
    with gemmd.Client(d.address()) as c:
        futures = [c.submit(big, big) for _ in range(4)]
        time.sleep(0.2)
        d.proc.send_signal(signal.SIGKILL)
        start = time.monotonic()
        for future in futures:
            with pytest.raises(gemmd.ConnectionLost):
                future.result(30)
        assert time.monotonic() - start < 10
        with pytest.raises(gemmd.ConnectionLost):
            c.ping()      # at once: the connection is known to be gone
        assert c.closed


def test_daemon_stopped_between_requests(fresh_daemon):
    d = fresh_daemon()
    with gemmd.Client(d.address()) as c:
        c.ping()
        d.stop()
        with pytest.raises(gemmd.ConnectionLost):
            c.gemm(F32, F32, timeout=30)


def serve_reply(reply_bytes, close=False):
    """A fake server that reads one request and answers with reply_bytes (a function of the
    request's msgid), then closes or stays silent."""
    def handler(conn):
        request = read_request(conn)
        if request is None:
            return
        conn.sendall(reply_bytes(request[1]))
        if close:
            conn.close()
        else:
            drain(conn)
    return handler


@pytest.mark.parametrize("name,reply,error", [
    ("not msgpack", lambda msgid: b"\xc1\xc1\xc1", gemmd.ProtocolError),
    ("a request", lambda msgid: msgpack.packb([0, msgid, "ping", []]), gemmd.ProtocolError),
    ("unknown msgid", lambda msgid: msgpack.packb([1, msgid + 7, None, "pong"]),
     gemmd.ProtocolError),
    ("a 2-element array", lambda msgid: msgpack.packb([1, msgid]), gemmd.ProtocolError),
    ("a bad error map", lambda msgid: msgpack.packb([1, msgid, 42, None]),
     gemmd.ProtocolError),
    ("short result", lambda msgid: msgpack.packb(
        [1, msgid, None, [{"m": 4, "n": 4, "dtype": "f32"}, b"\0" * 60]]),
     gemmd.ProtocolError),
    ("result not bin", lambda msgid: msgpack.packb(
        [1, msgid, None, [{"m": 4, "n": 4, "dtype": "f32"}, "x" * 64]]), gemmd.ProtocolError),
    ("wrong out_hdr", lambda msgid: msgpack.packb(
        [1, msgid, None, [{"m": 8, "n": 2, "dtype": "f32"}, b"\0" * 64]]),
     gemmd.ProtocolError),
    ("truncated reply", lambda msgid: msgpack.packb(
        [1, msgid, None, [{"m": 4, "n": 4, "dtype": "f32"}, b"\0" * 64]])[:-10],
     gemmd.ConnectionLost),
])
def test_malformed_and_truncated_replies(fake_server, name, reply, error):
    server = fake_server(serve_reply(reply, close=(error is gemmd.ConnectionLost)))
    # retries=0: the fake server answers one connection only, a retry would find nobody
    with gemmd.Client(server.address, retries=0) as c:
        start = time.monotonic()
        with pytest.raises(error) as info:
            c.gemm(F32, F32, timeout=20)
        assert time.monotonic() - start < 10, name
        assert c.closed               # the connection is not used again
        if error is gemmd.ProtocolError:
            assert info.value.code == "INTERNAL"
            with pytest.raises(error):    # nor is the daemon that broke the protocol
                c.ping()


def test_a_plain_string_error_is_internal(fake_server):
    server = fake_server(serve_reply(lambda msgid: msgpack.packb([1, msgid, "boom", None])))
    with gemmd.Client(server.address) as c:
        with pytest.raises(gemmd.Error) as info:
            c.ping(timeout=20)
        assert info.value.code == "INTERNAL" and info.value.message == "boom"


def test_timeout_never_hangs(fake_server):
    server = fake_server(drain)      # answers nothing
    with gemmd.Client(server.address) as c:
        for call in (lambda: c.ping(timeout=0.3),
                     lambda: c.gemm(F32, F32, timeout=0.3),
                     lambda: c.submit(F32, F32).result(0.3)):
            start = time.monotonic()
            with pytest.raises(gemmd.Timeout) as info:
                call()
            assert 0.25 <= time.monotonic() - start < 5
            assert isinstance(info.value, TimeoutError)
            assert info.value.code == "DEADLINE_EXCEEDED"


def test_server_closes_without_replying(fake_server):
    server = fake_server(lambda conn: (read_request(conn), conn.close()))
    with gemmd.Client(server.address, retries=0) as c:
        with pytest.raises(gemmd.ConnectionLost):
            c.gemm(F32, F32)      # no timeout: EOF alone ends the wait


def test_notifications_are_skipped(fake_server):
    def handler(conn):
        msgid = read_request(conn)[1]
        conn.sendall(msgpack.packb([2, "hello", [1, 2]]) + msgpack.packb([1, msgid, None, "pong"]))
        drain(conn)
    server = fake_server(handler)
    with gemmd.Client(server.address) as c:
        c.ping(timeout=20)
