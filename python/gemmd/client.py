"""The blocking client: gemmd.Client.

One Client is one connection at a time. Calls may be pipelined: submit() sends a gemm and returns a
Future at once; many can be in flight, and their replies come back in any order. Whoever waits
(Future.result, or a blocking call) drives the connection: sends what is queued and receives
what has arrived, completing every request whose reply it reads. A Client may be shared by
threads; one of them drives at a time.

With several addresses, each new connection takes the next one in turn. A gemm whose
connection was lost, or that the daemon answered UNAVAILABLE (draining, a failed device), is
sent again on a fresh connection, at most `retries` times; a connection the daemon closed while
idle is reopened by the next call.
"""

import math
import os
import select
import socket
import threading
import time
from collections import deque

import numpy as np

from . import _address, _auth, _limits
from ._arrays import Problem, Resident, byte_view, put_params, wire_dtype
from ._autoshm import Scratch
from ._copier import Copier
from ._shm import Region, Regions, new_memfd, region_size
from ._calls import Call, Table, zeros_like_pieces
from ._errors import ConnectError, ConnectionLost, Error, ProtocolError, Timeout
from ._wire import Decoder

_RECV_CHUNK = 1 << 20
_REOPEN_PAUSE_S = 0.1   # before the 2nd attempt at a new connection; doubles for each next
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
        self._tries = 0             # times it was sent again (Client.retries bounds it)
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


def connect(address, timeout, token):
    """A connected socket to one address, authenticated on TCP when token is set."""
    sock = _address.connect(address, timeout)
    if token is None or not _address.is_tcp(address):
        return sock
    try:
        sock.sendall(_auth.request(token))
        unpacker = _auth.new_unpacker()
        for _ in range(64):
            data = sock.recv(4096)
            if not data:
                raise ConnectError("gemmd on %s closed the connection during auth" % address)
            unpacker.feed(data)
            for reply in unpacker:
                _auth.check(reply, address)
                return sock
        raise ProtocolError("gemmd on %s: no reply to auth" % address)
    except socket.timeout:
        sock.close()
        raise ConnectError("authenticating to %s timed out" % address,
                           "DEADLINE_EXCEEDED") from None
    except OSError as exc:
        sock.close()
        raise ConnectError("authenticating to %s: %s" % (address, exc)) from None
    except Error:
        sock.close()
        raise


class Client:
    """A connection to gemmd.

    address: "unix:PATH", "tcp:HOST:PORT" or "tcp:[IPV6]:PORT", or several separated by commas
    (each new connection takes the next in turn, skipping those that do not answer); None
    means $GEMMD_ADDRESS, then unix:/run/gemmd/gemmd.sock. timeout: the default of every
    call's timeout (seconds, None: wait as long as it takes; a lost connection is still
    noticed at once). connect_timeout: how long connecting may take. token: sent first on
    every TCP connection (str or bytes; None: $GEMMD_TOKEN, else the file $GEMMD_TOKEN_FILE
    names, else no token). retries: how many times a gemm is sent again after its connection
    was lost or the daemon answered UNAVAILABLE (0: never). auto_shm: on a daemon that offers
    shared memory (a Unix socket), gemm() copies operands of shm_min_bytes or more (together)
    into a region of this client's and has the result written there, instead of sending them
    over the socket, where its cost model says that is faster (see gemmd._autoshm). The
    scratch region grows to at most scratch_max_bytes; copy_threads threads copy into it and
    out of it (None: $GEMMD_COPY_THREADS, else min(CPUs the process may use, 16));
    scratch_pieces (None: the cost model) forces a gemm through the scratch into that many row
    pieces.
    """

    def __init__(self, address=None, *, timeout=None, connect_timeout=10.0, token=None,
                 retries=2, auto_shm=True, shm_min_bytes=1 << 20, scratch_max_bytes=1 << 31,
                 copy_threads=None, scratch_pieces=None):
        self.addresses = _address.resolve_list(address)
        self.address = self.addresses[0]    # the one the connection is to (set on connecting)
        if not isinstance(retries, int) or retries < 0:
            raise ValueError("retries must be an int >= 0, got %r" % (retries,))
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retries = retries
        self._token = _address.resolve_token(token)
        self._stale_regions = []            # regions of connections that are gone
        self._recv_buf = bytearray(_RECV_CHUNK)
        self._failure = None
        self._closed = False                # by the caller (close()), or for good (protocol)
        self._sock = None
        self._features = None
        self._limits = None         # info's limits, asked for by the first large gemm
        self._lock = threading.RLock()      # the table, the send queue, the socket's writes
        self._cond = threading.Condition(threading.Lock())
        self._driving = False
        self._scratch = None
        if auto_shm:
            self._scratch = Scratch(self, Copier(copy_threads), shm_min_bytes,
                                    scratch_max_bytes, scratch_pieces)
        self._open()

    def _open(self):
        """A new connection to the next address that answers, with fresh per-connection
        state (the lock is held, or the Client is being made). Raises ConnectError."""
        last = None
        for address in _address.rotation(self.addresses):
            try:
                sock = connect(address, self.connect_timeout, self._token)
            except ConnectError as exc:
                last = exc
                continue
            sock.setblocking(False)
            self._sock, self.address, self._failure = sock, address, None
            self._poll = select.poll()
            self._table = Table()
            self._futures = {}
            self._decoder = Decoder(self._table.destination)
            self._sendq = deque()           # [call, memoryview, is_operand, fds to pass]
            # regions live as long as the connection that registered them: after a reconnect
            # their arrays are plain memory again, sent as bytes
            if getattr(self, "_regions", None) is not None:
                self._stale_regions.extend(self._regions.all())
            self._regions = Regions()
            return
        if len(self.addresses) > 1:
            raise ConnectError("no gemmd answers at %s; the last said: %s" %
                               (",".join(self.addresses), last.message), last.code)
        raise last

    def _reopen(self):
        """_open() after a lost connection: up to 1 + retries attempts, pausing between them
        (a proxy may still hand the first one to the box that just went away)."""
        for attempt in range(self.retries + 1):
            try:
                self._open()
                return
            except ConnectError:
                if attempt == self.retries:
                    raise
                time.sleep(_REOPEN_PAUSE_S * (1 << attempt))

    # ---- context manager, closing
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Closes the connection; requests still in flight fail with ConnectionLost."""
        with self._lock:
            self._closed = True
            if self._failure is None:
                self._fail(ConnectionLost("the client closed the connection"))
        if self._scratch is not None:
            self._scratch.copier.close()

    @property
    def closed(self):
        """No connection now (closed, lost, or not re-made yet)."""
        return self._failure is not None

    # ---- the API
    def gemm(self, a, b, c=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False,
             precision="exact", timeout=None, out=None, bias=None, activation=None,
             out_dtype=None, dtype=None, scale_a=1.0, scale_b=1.0, conj_a=False,
             conj_b=False):
        """C = alpha * op(a) @ op(b) + beta * c on the daemon, as a new array (or in out).

        a, b (and c): 2-D matrices, or 3-D batches (batch, rows, cols) of the same dtype:
        float32, float64, float16, bfloat16 (ml_dtypes), uint16 (bf16 bit patterns) or int8
        (below); NumPy arrays, or anything with __array__ or the buffer protocol. op(x) is
        x.T (the last two axes swapped) when trans_x. c is read only when beta != 0. The
        result has a's dtype (int32 for int8) and shape (m, n) or (batch, m, n); out=, an
        array of that shape and dtype, receives it instead (straight into its memory when it
        is C-contiguous). precision "fast" lets f32 run on TF32 tensor cores. timeout
        (seconds; default the Client's) bounds the whole call and is sent to the daemon too;
        on expiry gemmd.Timeout is raised and out may hold part of a result.

        The epilogue (daemons whose features list "epilogue"): bias, n values (shape (n,), the
        dtype of a), is added to every row of the product, in place of c and beta; activation
        "relu", "gelu" (erf form) or "gelu_tanh" is applied to every element last. So
        gemm(x, w, bias=b, activation="gelu") is gelu(x @ w + b), computed where the product
        is.

        The output cast (daemons whose features list "out_dtype"): out_dtype "f16" or "bf16"
        (or np.float16, ml_dtypes.bfloat16, np.uint16 for bf16 bit patterns) asks a float32 or
        float64 gemm for its result rounded once, at the end, to that dtype: computed in a's
        dtype, epilogue included, then rounded to nearest even. The result (and out=) then has
        the out dtype, and so must c or bias. "f32"/"f64" or a's own dtype is the same as None
        (a's dtype: nothing is sent); any other pair raises TypeError before sending.

        The integer gemm (daemons whose features list "i8"): int8 a and b return an int32
        result, and c, bias and out= must be int32 too. alpha and beta are integers within
        int32, activation "relu" or None, precision is ignored; the arithmetic is 32-bit two's
        complement (exact while the result fits, wrapping beyond, as cuBLAS's 32I compute).
        Anything else raises ValueError or TypeError before sending; int32 a and b are no gemm
        (TypeError).

        The fp8 gemm (daemons whose features list "fp8"): dtype "e4m3" or "e5m2" names the
        format of a and b, uint8 arrays of fp8 bytes (NumPy has no fp8 dtype; gemmd.fp8 converts
        to and from float); it must be given for them (uint8 alone is refused), and for nothing
        else. The result is float32 (or out_dtype's f16 / bf16), and c, bias and out= hold that
        too. scale_a and scale_b (default 1.0, fp8 only) are the per-tensor scales: the result
        is act(alpha * scale_a * scale_b * op(a) @ op(b) + beta * c). Each product of two fp8
        values is exact and the sum is taken in float32 (with fewer bits on a Hopper GPU's fp8
        tensor cores: an error of the order of 2^-14 * sum |scaled a b|). Every activation is
        taken; precision is ignored.

        The complex gemm (daemons whose features list "complex"): complex64 or complex128 a and
        b (c and out= of the same dtype); alpha and beta may be Python complex numbers, and
        conj_a / conj_b conjugate op(a) / op(b) (BLAS's 'C' is trans_x and conj_x). No bias,
        activation or out_dtype. complex64 follows precision as float32 does."""
        timeout = self.timeout if timeout is None else timeout
        if not _limits.clearly_small(a, b, c if beta != 0 else None, trans_a, trans_b):
            self._check_limits(Problem(a, b, c, alpha, beta, trans_a, trans_b, precision, bias,
                                       activation, out_dtype, dtype, scale_a, scale_b,
                                       conj_a, conj_b, views=False))
        kw = dict(alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b,
                  precision=precision, timeout=timeout, out=out, bias=bias,
                  activation=activation, out_dtype=out_dtype, dtype=dtype, scale_a=scale_a,
                  scale_b=scale_b, conj_a=conj_a, conj_b=conj_b)
        if self._scratch is not None:
            result = self._scratch.gemm(a, b, c if beta != 0 else None, kw)
            if result is not None:
                return result
        return self._finish(self.submit(a, b, c, **kw), timeout)

    def submit(self, a, b, c=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False,
               precision="exact", timeout=None, out=None, bias=None, activation=None,
               out_dtype=None, dtype=None, scale_a=1.0, scale_b=1.0, conj_a=False,
               conj_b=False):
        """gemm() without waiting: returns a Future at once. The arrays (and out) must stay
        unchanged until it completes. timeout is only sent to the daemon (it does not start
        the job later than that); Future.result(timeout) bounds the wait."""
        if not _limits.clearly_small(a, b, c if beta != 0 else None, trans_a, trans_b):
            self._check_limits(Problem(a, b, c, alpha, beta, trans_a, trans_b, precision, bias,
                                       activation, out_dtype, dtype, scale_a, scale_b,
                                       conj_a, conj_b, views=False))
        problem = Problem(a, b, c, alpha, beta, trans_a, trans_b, precision, bias, activation,
                          out_dtype, dtype, scale_a, scale_b, conj_a, conj_b)
        ms = timeout_ms(timeout)
        if ms is not None:
            problem.hdr["timeout_ms"] = ms
        return self._start("gemm", problem, out)

    def _check_limits(self, probe):
        """A large gemm against the daemon's limits (info's, asked once), before any operand
        is copied or sent; a shared-memory operand does not cross the socket."""
        sizes = [(name, nbytes, not self._in_region(x)) for name, nbytes, x in probe.sizes]
        if not _limits.worth_checking(sizes, probe.nbytes):
            return
        if self._limits is None:
            self._limits = dict(self.info().get("limits", {}))
        _limits.check(self._limits, probe.dims, sizes, probe.nbytes)

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
        if np.dtype(dtype) != np.dtype(np.uint8):   # uint8: fp8 bytes
            wire_dtype(dtype)
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        mapping = self._register_region(count * dtype.itemsize, timeout=timeout)
        return np.frombuffer(mapping, dtype, count).reshape(shape)

    def _register_region(self, nbytes, prepare=None, timeout=None):
        """The mapping of a new region of nbytes (rounded up to pages) registered with the
        daemon; prepare(uint8 array of it), when given, runs before it is registered."""
        size = region_size(nbytes)
        fd, mapping = new_memfd(size)
        try:
            if prepare is not None:
                prepare(np.frombuffer(mapping, np.uint8))
            reply = self._finish(self._start("shm_register", params=[size], fds=[fd]),
                                 self.timeout if timeout is None else timeout)
        finally:
            os.close(fd)     # the daemon has its own mapping; ours is mapping
        if not isinstance(reply, dict) or not isinstance(reply.get("region"), int):
            raise ProtocolError("shm_register answered %r, not {region, size}" % (reply,))
        with self._lock:
            self._regions.add(Region(reply["region"], mapping, size))
        return mapping

    def _in_region(self, array):
        """Whether array's first byte lies in a region of the current connection."""
        start = array.__array_interface__["data"][0]
        with self._lock:
            return any(r.start <= start < r.start + r.size for r in self._regions.all())

    def shm_free(self, array, timeout=None):
        """Unregisters the region array lives in (from shm_array). The array stays valid
        memory, but gemm sends its bytes again. Refused (gemmd.Error INVALID_ARGUMENT) while a
        gemm in flight writes its result there."""
        view = byte_view(np.asarray(array))
        with self._lock:
            region, _ = self._regions.holding(view)
            if region is None:
                for old in self._stale_regions:
                    if old.offset_of(view) is not None:
                        self._stale_regions.remove(old)  # went with its connection already
                        return
        if region is None:
            raise ValueError("the array is not in a shared-memory region of this client")
        self._finish(self._start("shm_unregister", params=[region.id]),
                     self.timeout if timeout is None else timeout)
        with self._lock:
            self._regions.remove(region)

    # ---- resident operands
    def put(self, array, timeout=None, *, dtype=None):
        """Uploads array (2-D, or 3-D: a batch) once; returns a gemmd.Resident that gemm()
        and submit() take in the place of an array (a, b or c) and send as a handle. The daemon
        keeps it until free() or the end of this connection (resident.* quotas). A batch of a
        (3-D) by a 2-D Resident b uses that one b for every entry. dtype "e4m3" or "e5m2" puts
        a uint8 array of fp8 bytes as that format (a gemm of a Resident a put so takes its
        format when gemm's dtype is left out). Needs a daemon that announces the "resident"
        feature, else gemmd.Error UNIMPLEMENTED."""
        if "resident" not in self.features:
            raise Error("UNIMPLEMENTED", "gemmd on %s keeps no resident operands (a daemon "
                        "older than the put method)" % self.address)
        params, shape, np_dtype, wire = put_params(array, dtype)
        with self._lock:
            future = self._start("put", params=params)
            connection = self._table
        reply = self._finish(future, self.timeout if timeout is None else timeout)
        if not isinstance(reply, dict) or not isinstance(reply.get("handle"), int):
            raise ProtocolError("put answered %r, not {handle}" % (reply,))
        return Resident(reply["handle"], shape, np_dtype, connection, wire)

    def free(self, resident, timeout=None):
        """Lets the daemon drop a Resident from put(). One whose connection is gone went
        with it already (nothing to do); one freed twice raises gemmd.Error NOT_FOUND."""
        if not isinstance(resident, Resident):
            raise TypeError("free takes a gemmd.Resident from put(), not a %s" %
                            type(resident).__name__)
        with self._lock:
            gone = resident.connection is not self._table
        if gone:
            resident.freed = True
            return
        self._finish(self._start("free", params=[resident.handle]),
                     self.timeout if timeout is None else timeout)
        resident.freed = True

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
            self._ensure_open()
            future = Future(self, None)
            self._enqueue(future, method, problem, out, params, fds)
            self._send_some()
        return future

    def _enqueue(self, future, method, problem, out, params=(), fds=None):
        """future's request as a new call on the current connection (the lock is held); fds
        are passed with its first byte."""
        for resident in problem.residents if problem is not None else ():
            if resident.connection is not self._table:
                raise Error("NOT_FOUND", "%r belongs to a connection that is gone: put it "
                            "again" % (resident,))
        call = Call(self._table.new_msgid(), method, problem, out, params, self._regions)
        future._call = call
        self._table.calls[call.msgid] = call
        self._futures[call.msgid] = future
        for i, piece in enumerate(call.pieces):
            self._sendq.append([call, memoryview(piece), i % 2 == 1, fds if i == 0 else None])
        call.pieces = None

    def _ensure_open(self):
        """A usable connection for a new call: the current one, else a new one unless the
        Client was closed (or broke for good); one the daemon closed while idle is noticed
        here and replaced, instead of failing the call with a broken pipe."""
        if self._failure is None and not self._futures and self._peer_closed():
            self._fail(ConnectionLost("gemmd on %s closed the idle connection" % self.address))
        if self._failure is None:
            return
        if self._closed:
            self._raise_if_failed()
        try:
            self._reopen()
        except ConnectError as exc:
            raise ConnectionLost("%s; reconnecting failed: %s" %
                                 (self._failure.message, exc.message)) from None

    def _peer_closed(self):
        """The idle connection has EOF or an error pending (nothing else can be there)."""
        poller = select.poll()
        poller.register(self._sock.fileno(), select.POLLIN)
        if not poller.poll(0):
            return False
        try:
            return self._sock.recv(1, socket.MSG_PEEK) == b""
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

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
        unavailable = []
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
            if (error is not None and error.code == "UNAVAILABLE" and not self._closed and
                    self._retriable(future)):
                future._tries += 1
                unavailable.append(future)
                continue
            future._set(value, error)
        if unavailable:
            self._move(unavailable)

    def _move(self, unavailable):
        """This daemon is draining or lost its device: its UNAVAILABLE gemms, and every call
        still in flight on it (they would fare no better), go to a new connection."""
        why = ConnectionLost("gemmd on %s answered UNAVAILABLE" % self.address)
        others = self._drop(why)
        keep = [f for f in others if f._call.method == "gemm" and f._call.problem is not None]
        for future in others:
            if future not in keep:
                future._set(None, why)
        self._send_again(unavailable + keep, why)

    def _drop(self, error):
        """Closes the connection; returns the futures that were in flight on it."""
        self._failure = error
        try:
            self._sock.close()
        except OSError:
            pass
        self._sendq.clear()
        futures = list(self._futures.values())
        self._futures.clear()
        self._table.calls.clear()
        return futures

    def _fail(self, error):
        """The connection is unusable: its gemms with retries left are sent again on a new
        one (a lost connection), every other call in flight fails with error."""
        if isinstance(error, ProtocolError):
            self._closed = True             # a daemon that breaks the protocol is not retried
        futures = self._drop(error)
        again = []
        for future in futures:
            if (isinstance(error, ConnectionLost) and not self._closed and
                    self._retriable(future)):
                future._tries += 1
                again.append(future)
            else:
                future._set(None, type(error)(error.message))
        self._send_again(again, error)
        self._wake()

    def _retriable(self, future):
        call = future._call
        return (call.method == "gemm" and call.problem is not None and not future.done() and
                future._tries < self.retries and not call.problem.residents)  # handles stay

    def _send_again(self, futures, why):
        """futures' requests on a new connection (the lock is held); if none can be made,
        they fail with ConnectionLost."""
        if not futures:
            return
        try:
            self._reopen()
        except ConnectError as exc:
            for future in futures:
                future._set(None, ConnectionLost("%s; reconnecting failed: %s" %
                                                 (why.message, exc.message)))
            return
        for future in futures:
            old = future._call
            self._enqueue(future, old.method, old.problem, old.out)
        self._send_some()
