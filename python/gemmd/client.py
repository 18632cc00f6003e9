"""The blocking client: gemmd.Client.

One Client is one connection. Calls may be pipelined: submit() sends a gemm and returns a
Future at once; many can be in flight, and their replies come back in any order. Whoever waits
(Future.result, or a blocking call) drives the connection: sends what is queued and receives
what has arrived, completing every request whose reply it reads. A Client may be shared by
threads; one of them drives at a time.
"""

import math
import os
import select
import socket
import threading
import time
from collections import deque

import numpy as np

from . import _address
from ._arrays import Problem, byte_view, wire_dtype
from ._shm import Region, Regions, new_memfd, region_size
from ._calls import Call, Table, zeros_like_pieces
from ._errors import ConnectionLost, Error, ProtocolError, Timeout
from ._wire import Decoder

_RECV_CHUNK = 1 << 20
_SLICE_S = 0.05        # a driver looks at newly queued sends at least this often


def _deadline(timeout):
    if timeout is None:
        return None
    if timeout < 0:
        raise ValueError("timeout must be >= 0 seconds or None, got %r" % (timeout,))
    return time.monotonic() + timeout


def _left(deadline):
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def timeout_ms(timeout):
    """The request's timeout_ms for a timeout in seconds (None: none)."""
    return None if timeout is None else max(0, math.ceil(timeout * 1000.0))


class Future:
    """The outcome of a submitted request. result() and exception() drive the connection
    until it is there. .report is the daemon's report of a gemm (out_hdr: device, kernel,
    timings in µs) once it completed."""

    def __init__(self, client, call):
        self._client = client
        self._call = call
        self._done = False
        self._value = None
        self._error = None
        self._callbacks = []

    @property
    def msgid(self):
        return self._call.msgid

    @property
    def report(self):
        return self._call.report

    def done(self):
        return self._done

    def result(self, timeout=None):
        """The value (a gemm's result array); raises the call's gemmd.Error. A timeout here
        raises gemmd.Timeout and leaves the request in flight (cancel() gives it up)."""
        self._client._drive(self, _deadline(timeout))
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self, timeout=None):
        self._client._drive(self, _deadline(timeout))
        return self._error

    def cancel(self):
        """Gives the request up: it completes with gemmd.Error CANCELLED, its arrays are let
        go (bytes not yet sent go out as zeros, the reply is thrown away). False if done."""
        if self._done:
            return False
        self._client._abandon(self._call, Error("CANCELLED", "cancelled by the caller"))
        return True

    def add_done_callback(self, fn):
        if self._done:
            fn(self)
        else:
            self._callbacks.append(fn)

    def _set(self, value, error):
        if self._done:
            return
        self._value, self._error, self._done = value, error, True
        for fn in self._callbacks:
            fn(self)
        self._callbacks = []


class Client:
    """A connection to gemmd.

    address: "unix:PATH", "tcp:HOST:PORT" or "tcp:[IPV6]:PORT"; None means $GEMMD_ADDRESS,
    then unix:/run/gemmd/gemmd.sock. timeout: the default of every call's timeout (seconds,
    None: wait as long as it takes; a lost connection is still noticed at once).
    connect_timeout: how long connecting may take.
    """

    def __init__(self, address=None, *, timeout=None, connect_timeout=10.0):
        self.address = _address.resolve(address)
        self.timeout = timeout
        self._sock = _address.connect(self.address, connect_timeout)
        self._sock.setblocking(False)
        self._poll = select.poll()
        self._table = Table()
        self._futures = {}
        self._decoder = Decoder(self._table.destination)
        self._sendq = deque()               # [call, memoryview, is_operand, fds to pass]
        self._regions = Regions()
        self._recv_buf = bytearray(_RECV_CHUNK)
        self._failure = None
        self._features = None
        self._lock = threading.RLock()      # the table, the send queue, the socket's writes
        self._cond = threading.Condition(threading.Lock())
        self._driving = False

    # ---- context manager, closing
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Closes the connection; requests still in flight fail with ConnectionLost."""
        with self._lock:
            if self._failure is None:
                self._fail(ConnectionLost("the client closed the connection"))

    @property
    def closed(self):
        return self._failure is not None

    # ---- the API
    def gemm(self, a, b, c=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False,
             precision="exact", timeout=None, out=None):
        """C = alpha * op(a) @ op(b) + beta * c on the daemon, as a new array (or in out).

        a, b (and c): 2-D matrices, or 3-D batches (batch, rows, cols) of the same dtype:
        float32, float64, float16, bfloat16 (ml_dtypes) or uint16 (bf16 bit patterns); NumPy
        arrays, or anything with __array__ or the buffer protocol. op(x) is x.T (the last two
        axes swapped) when trans_x. c is read only when beta != 0. The result has a's dtype
        and shape (m, n) or (batch, m, n); out=, an array of that shape and dtype, receives
        it instead (straight into its memory when it is C-contiguous). precision "fast" lets
        f32 run on TF32 tensor cores. timeout (seconds; default the Client's) bounds the
        whole call and is sent to the daemon too; on expiry gemmd.Timeout is raised and out
        may hold part of a result."""
        timeout = self.timeout if timeout is None else timeout
        future = self.submit(a, b, c, alpha=alpha, beta=beta, trans_a=trans_a,
                             trans_b=trans_b, precision=precision, timeout=timeout, out=out)
        return self._finish(future, timeout)

    def submit(self, a, b, c=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False,
               precision="exact", timeout=None, out=None):
        """gemm() without waiting: returns a Future at once. The arrays (and out) must stay
        unchanged until it completes. timeout is only sent to the daemon (it does not start
        the job later than that); Future.result(timeout) bounds the wait."""
        problem = Problem(a, b, c, alpha, beta, trans_a, trans_b, precision)
        ms = timeout_ms(timeout)
        if ms is not None:
            problem.hdr["timeout_ms"] = ms
        return self._start("gemm", problem, out)

    def ping(self, timeout=None):
        """Round trip to the daemon; returns the seconds it took."""
        start = time.monotonic()
        self._call("ping", timeout)
        return time.monotonic() - start

    def info(self, timeout=None):
        """The daemon's info map: version, backend, devices, kernels, dtypes, limits."""
        return self._call("info", timeout)

    def stats(self, timeout=None):
        """The daemon's stats map: counters, queues, bytes, latencies."""
        return self._call("stats", timeout)

    @property
    def features(self):
        """The optional features the daemon announces in info's "features" list (empty for a
        daemon that has none): how the client learns of later additions to the protocol."""
        if self._features is None:
            features = self.info().get("features", [])
            self._features = frozenset(f for f in features if isinstance(f, str))
        return self._features

    # ---- shared memory
    def shm_array(self, shape, dtype=np.float32, timeout=None):
        """A new zeroed NumPy array of shape and dtype in shared memory registered with the
        daemon: a gemm whose operand (or out=) is such an array, or a C-contiguous slice of one,
        sends a reference instead of the bytes, and the daemon reads (or writes) the array in
        place. Needs a daemon that announces the "shm" feature (a Unix socket, shm.enabled);
        otherwise raises gemmd.Error UNIMPLEMENTED. Each array is one region: keep them few
        and large (shm.max_regions_per_connection). The region lasts until shm_free() or the
        connection closes; the array stays valid memory either way."""
        if "shm" not in self.features:
            raise Error("UNIMPLEMENTED", "gemmd on %s offers no shared memory (it needs a Unix "
                        "socket and shm.enabled)" % self.address)
        wire_dtype(dtype)
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        size = region_size(count * dtype.itemsize)
        fd, mapping = new_memfd(size)
        try:
            reply = self._finish(self._start("shm_register", params=[size], fds=[fd]),
                                 self.timeout if timeout is None else timeout)
        finally:
            os.close(fd)     # the daemon has its own mapping; ours is mapping
        if not isinstance(reply, dict) or not isinstance(reply.get("region"), int):
            raise ProtocolError("shm_register answered %r, not {region, size}" % (reply,))
        with self._lock:
            self._regions.add(Region(reply["region"], mapping, size))
        return np.frombuffer(mapping, dtype, count).reshape(shape)

    def shm_free(self, array, timeout=None):
        """Unregisters the region array lives in (from shm_array). The array stays valid
        memory, but gemm sends its bytes again. Refused (gemmd.Error INVALID_ARGUMENT) while a
        gemm in flight writes its result there."""
        with self._lock:
            region, _ = self._regions.holding(byte_view(np.asarray(array)))
        if region is None:
            raise ValueError("the array is not in a shared-memory region of this client")
        self._finish(self._start("shm_unregister", params=[region.id]),
                     self.timeout if timeout is None else timeout)
        with self._lock:
            self._regions.remove(region)

    @property
    def in_flight(self):
        """Requests submitted and not yet completed."""
        return len(self._table)

    # ---- requests
    def _call(self, method, timeout):
        timeout = self.timeout if timeout is None else timeout
        return self._finish(self._start(method), timeout)

    def _finish(self, future, timeout):
        try:
            return future.result(timeout)
        except Timeout:
            self._abandon(future._call, Timeout(
                "no reply from gemmd on %s within %gs" % (self.address, timeout)))
            raise

    def _start(self, method, problem=None, out=None, params=(), fds=None):
        """fds: descriptors passed (SCM_RIGHTS) with the request's first byte."""
        with self._lock:
            self._raise_if_failed()
            call = Call(self._table.new_msgid(), method, problem, out, params, self._regions)
            future = Future(self, call)
            self._table.calls[call.msgid] = call
            self._futures[call.msgid] = future
            for i, piece in enumerate(call.pieces):
                first_fds = fds if i == 0 else None
                self._sendq.append([call, memoryview(piece), i % 2 == 1, first_fds])
            call.pieces = None
            self._send_some()
        return future

    def _abandon(self, call, error):
        with self._lock:
            call.abandon()
            queue = deque()
            for entry in self._sendq:
                if entry[0] is call and entry[2]:
                    queue.extend([call, zero, False, None]
                                 for zero in zeros_like_pieces(entry[1]))
                else:
                    queue.append(entry)
            self._sendq = queue
            future = self._futures.pop(call.msgid, None)
        if future is not None:
            future._set(None, error)
            self._wake()

    def _raise_if_failed(self):
        if self._failure is not None:
            raise type(self._failure)(self._failure.message)

    # ---- driving the connection
    def _drive(self, future, deadline):
        """Sends and receives until future is done or deadline passes (Timeout)."""
        with self._cond:
            while not future.done() and self._driving:
                left = _left(deadline)
                if left == 0:
                    raise Timeout("no reply from gemmd on %s in time" % self.address)
                self._cond.wait(_SLICE_S if left is None else min(left, _SLICE_S))
            if future.done():
                return
            self._driving = True
        try:
            while not future.done():
                left = _left(deadline)
                if left == 0:
                    raise Timeout("no reply from gemmd on %s in time" % self.address)
                self._step(_SLICE_S if left is None else min(left, _SLICE_S))
        finally:
            with self._cond:
                self._driving = False
                self._cond.notify_all()

    def _wake(self):
        with self._cond:
            self._cond.notify_all()

    def _step(self, wait_s):
        with self._lock:
            if self._failure is not None:
                return
            fd = self._sock.fileno()
            events = select.POLLIN | (select.POLLOUT if self._sendq else 0)
            self._poll.register(fd, events)
        ready = self._poll.poll(wait_s * 1000.0)
        revents = ready[0][1] if ready else 0
        with self._lock:
            if self._failure is not None:
                return
            if revents & select.POLLOUT:
                self._send_some()
            if revents & (select.POLLIN | select.POLLHUP | select.POLLERR):
                self._receive_some()

    def _send_some(self):
        """Sends what the socket takes now (the lock is held)."""
        try:
            while self._sendq:
                entry = self._sendq[0]
                if entry[3]:
                    sent = socket.send_fds(self._sock, [entry[1]], entry[3])
                    entry[3] = None       # passed with the first byte sent
                else:
                    sent = self._sock.send(entry[1])
                if sent < len(entry[1]):
                    entry[1] = entry[1][sent:]
                    return
                self._sendq.popleft()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fail(ConnectionLost("sending to gemmd on %s failed: %s" % (self.address, exc)))

    def _receive_some(self):
        """Receives what has arrived (the lock is held); completes the calls it finishes."""
        for _ in range(64):
            window = self._decoder.window()
            try:
                if window is not None:
                    count = self._sock.recv_into(window)
                else:
                    count = self._sock.recv_into(self._recv_buf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._fail(ConnectionLost("gemmd on %s reset the connection: %s" %
                                          (self.address, exc)))
                return
            if count == 0:
                self._fail(ConnectionLost("gemmd on %s closed the connection%s" % (
                    self.address, "" if self._decoder.idle else " in the middle of a reply")))
                return
            try:
                if window is not None:
                    self._decoder.advance(count)
                else:
                    self._decoder.feed(memoryview(self._recv_buf)[:count])
                self._complete(self._decoder.replies)
            except ProtocolError as exc:
                self._fail(ProtocolError("gemmd on %s: %s" % (self.address, exc.message)))
                return
        self._wake()

    def _complete(self, replies):
        while replies:
            reply = replies.pop(0)
            call = self._table.calls.pop(reply.msgid)
            future = self._futures.pop(reply.msgid, None)
            if future is None:
                continue          # given up on: the reply is thrown away
            try:
                value, error = call.outcome(reply)
            except ProtocolError as exc:
                future._set(None, exc)
                raise
            future._set(value, error)

    def _fail(self, error):
        """The connection is unusable: every call in flight fails with error."""
        self._failure = error
        try:
            self._sock.close()
        except OSError:
            pass
        self._sendq.clear()
        futures = list(self._futures.values())
        self._futures.clear()
        self._table.calls.clear()
        for future in futures:
            future._set(None, type(error)(error.message))
        self._wake()
