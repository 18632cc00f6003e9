"""Fixtures of the Python client's tests: a real gemmd (the harness's Daemon, backend from
GEMMD_TEST_BACKEND, default cpu), clients of the package under test, fake servers.

Run: ctest -L integration -R python_, or by hand:
  PYTHONPATH=python:tests/integration /usr/bin/python3 -m pytest tests/integration/python \
      --gemmd build/daemon/gemmd
"""

import os
import socket
import tempfile
import threading

import pytest

import gemmd_harness as h


def pytest_addoption(parser):
    parser.addoption("--gemmd", help="the gemmd binary (default $GEMMD_BIN)")
    parser.addoption("--build-dir", help="the CMake build tree (for the install tests)")


@pytest.fixture(scope="session")
def gemmd_bin(request):
    path = request.config.getoption("--gemmd") or os.environ.get("GEMMD_BIN")
    if not path:
        pytest.skip("no gemmd binary: pass --gemmd PATH or set GEMMD_BIN")
    return os.path.abspath(path)


@pytest.fixture(scope="session")
def build_dir(request):
    path = request.config.getoption("--build-dir")
    if not path:
        pytest.skip("no build tree: pass --build-dir")
    return os.path.abspath(path)


@pytest.fixture(scope="session")
def quick(gemmd_bin):
    return h.quick(gemmd_bin)


def start_daemon(gemmd_bin, **kwargs):
    daemon = h.Daemon(gemmd_bin, **kwargs)
    try:
        daemon.start()
    except h.DaemonError as exc:
        daemon.cleanup()
        if h.TEST_BACKEND == "gpu":
            pytest.exit("SKIP: gemmd serves no GPU here: %s" % str(exc).splitlines()[0], 77)
        raise
    return daemon


@pytest.fixture(scope="session")
def daemon(gemmd_bin):
    """One daemon for the tests that do not stop or reconfigure it (TCP and Unix)."""
    d = start_daemon(gemmd_bin, tcp=True)
    yield d
    d.stop()
    d.cleanup()


@pytest.fixture
def fresh_daemon(gemmd_bin):
    """A daemon of the test's own, which it may kill; factory taking Daemon's arguments."""
    started = []

    def make(**kwargs):
        started.append(start_daemon(gemmd_bin, **kwargs))
        return started[-1]

    yield make
    for d in started:
        d.cleanup()


@pytest.fixture
def client(daemon):
    import gemmd
    with gemmd.Client(daemon.address(), timeout=120 * daemon.scale) as c:
        yield c


@pytest.fixture(scope="session")
def rng():
    return h.rng()


class FakeServer:
    """A Unix socket server that answers each connection with handler(conn) in a thread: for
    replies the daemon never sends (garbage, truncated, silent)."""

    def __init__(self, handler):
        self.dir = tempfile.mkdtemp(prefix="gemmd-fake-", dir="/tmp")
        self.path = os.path.join(self.dir, "fake.sock")
        self.address = "unix:" + self.path
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(self.path)
        self.sock.listen(4)
        self.sock.settimeout(30)
        self.handler = handler
        self.conns = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        self.conns.append(conn)
        conn.settimeout(30)
        try:
            self.handler(conn)
        except OSError:
            pass

    def close(self):
        self.sock.close()
        for conn in self.conns:
            conn.close()
        self.thread.join(5)
        try:
            os.unlink(self.path)
            os.rmdir(self.dir)
        except OSError:
            pass


@pytest.fixture
def fake_server():
    servers = []

    def make(handler):
        servers.append(FakeServer(handler))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def drain(conn):
    """Reads and ignores what the client sends until it closes the connection."""
    while conn.recv(1 << 16):
        pass


def read_request(conn):
    """Reads one msgpack request off conn (small ones only); returns it."""
    import msgpack
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=1 << 30)
    while True:
        data = conn.recv(1 << 16)
        if not data:
            return None
        unpacker.feed(data)
        for msg in unpacker:
            return msg
