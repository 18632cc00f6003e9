"""The asyncio client: gemmd.aio.Client.

    async with gemmd.aio.Client(address) as client:
        c = await client.gemm(a, b)
        results = await asyncio.gather(*(client.gemm(x, b) for x in batches))

Every coroutine call is one request; any number may be in flight on one connection (replies
come back in any order). Operands are sent from the caller's arrays and results received
straight into the result array, as in the blocking client (loop.sock_sendall and
sock_recv_into on the connection's socket: asyncio's transports would copy them). A call that
times out or is cancelled is given up: its reply is thrown away and bytes of it not yet sent go
out as zeros.

Several addresses, retries of a gemm after a lost connection or UNAVAILABLE, reconnecting after
the daemon closed an idle connection, and the token: as gemmd.Client.
"""

import asyncio
import socket
import time

from . import _address, _auth, _limits
from ._arrays import Problem
from ._calls import Call, Table, zeros_like_pieces
from ._errors import ConnectError, ConnectionLost, Error, ProtocolError, Timeout
from ._wire import Decoder
from .client import timeout_ms

_RECV_CHUNK = 1 << 20
_SEND_SLICE = 16 << 20
_REOPEN_PAUSE_S = 0.1    # as in the blocking client   # operands go out in slices so that a given-up call stops using them


class Client:
    """A connection to gemmd for asyncio programs. Connect with `async with Client(address)`
    or `client = await Client.connect(address)`; close with `await client.close()`.
    address, timeout, connect_timeout, token and retries as for gemmd.Client (a call's
    timeout covers its retries)."""

    def __init__(self, address=None, *, timeout=None, connect_timeout=10.0, token=None,
                 retries=2):
        self.addresses = _address.resolve_list(address)
        self.address = self.addresses[0]
        if not isinstance(retries, int) or retries < 0:
            raise ValueError("retries must be an int >= 0, got %r" % (retries,))
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retries = retries
        self._token = _address.resolve_token(token)
        self._sock = None
        self._closed = False     # by the caller, or for good (a protocol error)
        self._opening = None     # an asyncio.Lock: one reconnect at a time
        self._tasks = []
        self._features = None
        self._limits = None         # info's limits, asked for by the first large gemm
        self._reset()

    def _reset(self):
        """Per-connection state, fresh."""
        self._table = Table()
        self._futures = {}
        self._decoder = Decoder(self._table.destination)
        self._sendq = None
        self._failure = None

    @classmethod
    async def connect(cls, address=None, **kwargs):
        client = cls(address, **kwargs)
        await client._connect()
        return client

    async def __aenter__(self):
        if self._sock is None:
            await self._connect()
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False

    async def _connect(self):
        """A connection to the next address that answers (each new one takes the next in
        turn). Raises ConnectError."""
        last = None
        for address in _address.rotation(self.addresses):
            try:
                sock = await self._connect_one(address)
            except ConnectError as exc:
                last = exc
                continue
            loop = asyncio.get_running_loop()
            self._reset()
            self._sock, self.address = sock, address
            self._sendq = asyncio.Queue()
            self._tasks = [loop.create_task(self._reader()), loop.create_task(self._writer())]
            return
        if len(self.addresses) > 1:
            raise ConnectError("no gemmd answers at %s; the last said: %s" %
                               (",".join(self.addresses), last.message), last.code)
        raise last

    async def _connect_one(self, address):
        loop = asyncio.get_running_loop()
        family, target = _address.parse(address)
        if family == socket.AF_UNIX:
            candidates = [(socket.AF_UNIX, target)]
        else:
            infos = await loop.getaddrinfo(*target, type=socket.SOCK_STREAM)
            candidates = [(info[0], info[4]) for info in infos]
        last = None
        for fam, sockaddr in candidates:
            sock = socket.socket(fam, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, sockaddr), self.connect_timeout)
                _address.configure(sock)
                if self._token is not None and _address.is_tcp(address):
                    await asyncio.wait_for(self._authenticate(sock, address),
                                           self.connect_timeout)
            except asyncio.TimeoutError:
                sock.close()
                raise ConnectError("connecting to %s timed out" % address,
                                   "DEADLINE_EXCEEDED") from None
            except OSError as exc:
                sock.close()
                last = exc
                continue
            except Error:
                sock.close()
                raise
            return sock
        raise ConnectError("cannot connect to %s: %s" % (address, last))

    async def _authenticate(self, sock, address):
        """The auth exchange, before the connection carries anything else."""
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(sock, _auth.request(self._token))
        unpacker = _auth.new_unpacker()
        while True:
            data = await loop.sock_recv(sock, 4096)
            if not data:
                raise ConnectError("gemmd on %s closed the connection during auth" % address)
            unpacker.feed(data)
            for reply in unpacker:
                _auth.check(reply, address)
                return

    async def _ensure_open(self):
        """A usable connection for a new call: the current one, else a new one unless the
        Client was closed (a connection the daemon closed while idle is replaced here)."""
        if self._sock is None:
            raise ConnectError("not connected: use `async with Client(...)` or "
                               "`await Client.connect(...)`")
        if self._failure is None:
            return
        if self._closed:
            raise type(self._failure)(self._failure.message)
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._failure is None:
                return                  # another call reconnected meanwhile
            for attempt in range(self.retries + 1):   # as gemmd.Client._reopen
                try:
                    await self._connect()
                    return
                except ConnectError as exc:
                    if attempt == self.retries:
                        raise ConnectionLost("%s; reconnecting failed: %s" %
                                             (self._failure.message, exc.message)) from None
                    await asyncio.sleep(_REOPEN_PAUSE_S * (1 << attempt))

    async def close(self):
        """Closes the connection; calls in flight fail with ConnectionLost."""
        self._closed = True
        if self._failure is None:
            self._fail(ConnectionLost("the client closed the connection"))
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._tasks = []

    @property
    def closed(self):
        """No connection now (closed, lost, or not re-made yet)."""
        return self._failure is not None

    # ---- the API (arguments as gemmd.Client's)
    async def gemm(self, a, b, c=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False,
                   precision="exact", timeout=None, out=None, bias=None, activation=None,
                   out_dtype=None, dtype=None, scale_a=1.0, scale_b=1.0, conj_a=False,
                   conj_b=False):
        """C = alpha * op(a) @ op(b) + beta * c; see gemmd.Client.gemm (out_dtype, int8 and
        fp8 with dtype, scale_a and scale_b included)."""
        timeout = self.timeout if timeout is None else timeout
        if not _limits.clearly_small(a, b, c if beta != 0 else None, trans_a, trans_b):
            probe = Problem(a, b, c, alpha, beta, trans_a, trans_b, precision, bias,
                            activation, out_dtype, dtype, scale_a, scale_b, views=False)
            sizes = [(name, nbytes, True) for name, nbytes, _ in probe.sizes]
            if _limits.worth_checking(sizes, probe.nbytes):   # before anything is copied or sent
                if self._limits is None:
                    self._limits = dict((await self.info()).get("limits", {}))
                _limits.check(self._limits, probe.dims, sizes, probe.nbytes)
        problem = Problem(a, b, c, alpha, beta, trans_a, trans_b, precision, bias, activation,
                          out_dtype, dtype, scale_a, scale_b, conj_a, conj_b)
        ms = timeout_ms(timeout)
        if ms is not None:
            problem.hdr["timeout_ms"] = ms
        return await self._request("gemm", timeout, problem, out)

    async def ping(self, timeout=None):
        """Round trip; returns the seconds it took."""
        start = time.monotonic()
        await self._request("ping", timeout)
        return time.monotonic() - start

    async def info(self, timeout=None):
        return await self._request("info", timeout)

    async def stats(self, timeout=None):
        return await self._request("stats", timeout)

    async def features(self):
        """The optional features the daemon announces (info's "features"; empty if none)."""
        if self._features is None:
            features = (await self.info()).get("features", [])
            self._features = frozenset(f for f in features if isinstance(f, str))
        return self._features

    @property
    def in_flight(self):
        return len(self._table)

    # ---- requests
    async def _request(self, method, timeout, problem=None, out=None):
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        tries = 0
        while True:
            await self._ensure_open()
            sock = self._sock
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await self._request_once(method, left, problem, out)
            except (ConnectionLost, Error) as exc:
                lost = isinstance(exc, ConnectionLost)
                if (not (lost or exc.code == "UNAVAILABLE") or method != "gemm" or
                        self._closed or tries >= self.retries):
                    raise
                tries += 1
                if not lost and self._sock is sock and self._failure is None:
                    # draining or a failed device: this daemon is left for a fresh connection
                    self._fail(ConnectionLost("gemmd on %s answered UNAVAILABLE" %
                                              self.address))

    async def _request_once(self, method, timeout, problem, out):
        call = Call(self._table.new_msgid(), method, problem, out)
        future = asyncio.get_running_loop().create_future()
        self._table.calls[call.msgid] = call
        self._futures[call.msgid] = future
        self._sendq.put_nowait(call)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            self._abandon(call)
            raise Timeout("no reply from gemmd on %s within %gs" %
                          (self.address, timeout)) from None
        except asyncio.CancelledError:
            self._abandon(call)
            raise

    def _abandon(self, call):
        call.abandon()
        if self._table.calls.get(call.msgid) is not call:
            return               # its connection is gone: a new one may use the msgid again
        future = self._futures.pop(call.msgid, None)
        if future is not None and not future.done():
            future.cancel()

    # ---- the connection's two tasks
    async def _writer(self):
        loop = asyncio.get_running_loop()
        try:
            while True:
                call = await self._sendq.get()
                pieces, call.pieces = call.pieces, None
                for i, piece in enumerate(pieces):
                    view = memoryview(piece)
                    for start in range(0, max(len(view), 1), _SEND_SLICE):
                        part = view[start:start + _SEND_SLICE]
                        if i % 2 == 1 and call.msgid not in self._futures:
                            for zero in zeros_like_pieces(part):   # given up on
                                await loop.sock_sendall(self._sock, zero)
                        else:
                            await loop.sock_sendall(self._sock, part)
        except OSError as exc:
            self._fail(ConnectionLost("sending to gemmd on %s failed: %s" % (self.address, exc)))

    async def _reader(self):
        loop = asyncio.get_running_loop()
        buf = bytearray(_RECV_CHUNK)
        try:
            while True:
                window = self._decoder.window()
                count = await loop.sock_recv_into(self._sock, window if window is not None
                                                  else buf)
                if count == 0:
                    self._fail(ConnectionLost("gemmd on %s closed the connection%s" % (
                        self.address, "" if self._decoder.idle else " in the middle of a reply")))
                    return
                if window is not None:
                    self._decoder.advance(count)
                else:
                    self._decoder.feed(memoryview(buf)[:count])
                self._complete(self._decoder.replies)
        except ProtocolError as exc:
            self._fail(ProtocolError("gemmd on %s: %s" % (self.address, exc.message)))
        except OSError as exc:
            self._fail(ConnectionLost("gemmd on %s reset the connection: %s" %
                                      (self.address, exc)))

    def _complete(self, replies):
        while replies:
            reply = replies.pop(0)
            call = self._table.calls.pop(reply.msgid)
            future = self._futures.pop(reply.msgid, None)
            if future is None or future.done():
                continue
            try:
                value, error = call.outcome(reply)
            except ProtocolError as exc:
                future.set_exception(exc)
                raise
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)

    def _fail(self, error):
        if self._failure is not None:
            return
        if isinstance(error, ProtocolError):
            self._closed = True          # a daemon that breaks the protocol is not retried
        self._failure = error
        if self._sock is not None:
            self._sock.close()
        futures = list(self._futures.values())
        self._futures.clear()
        self._table.calls.clear()
        for future in futures:
            if not future.done():
                future.set_exception(type(error)(error.message))
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
