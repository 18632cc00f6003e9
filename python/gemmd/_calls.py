"""Requests in flight on one connection, shared by the blocking and the asyncio client:
msgids, where each gemm's result lands, and what each reply means for its caller."""

from ._arrays import byte_view
from ._errors import ProtocolError
from ._wire import MSGID_MAX, Destination, pack_call, pack_gemm


class Call:
    """One request: its msgid, the buffers to send, where a gemm result goes."""

    def __init__(self, msgid, method, problem=None, out=None, params=(), regions=None):
        self.msgid = msgid
        self.method = method
        self.problem = problem
        self.out = out              # kept with problem: a call sent again needs both
        self.report = None          # a gemm's out_hdr once it completed
        if problem is None:
            self.pieces = [pack_call(msgid, method, params)]
            self.destination = None
            self.caller_array = self.landing = None
            return
        self.caller_array, self.landing = problem.result_array(out)
        hdr, operands = problem.hdr, problem.operands
        result = byte_view(self.landing)
        out_ref = regions.ref(result) if regions else None
        if regions:   # operands in a registered region go by reference (a handle map as it is)
            operands = [view if isinstance(view, dict) else regions.ref(view) or view
                        for view in operands]
        if out_ref is not None:
            hdr = dict(hdr, out=out_ref)
            self.destination = Destination(None, shm_bytes=result.nbytes)
        else:
            self.destination = Destination(result)
        self.pieces = pack_gemm(msgid, hdr, operands)

    def abandon(self):
        """The caller gave up: its reply is read and thrown away, its arrays are let go."""
        if self.destination is not None:
            self.destination.view = None
        self.caller_array = self.landing = self.problem = self.out = None

    def outcome(self, reply):
        """(value, exception) of the call for its reply."""
        if reply.error is not None:
            return None, reply.error
        if self.method == "gemm":
            self.report = reply.result
            check_report(reply.result, self.problem, self.msgid)
            if self.landing is not self.caller_array:
                self.caller_array[...] = self.landing   # out= that is not row-major
            return self.caller_array, None
        if self.method == "ping":
            if reply.result != "pong":
                return None, ProtocolError("ping answered %r, not 'pong'" % (reply.result,))
            return reply.result, None
        if self.method in ("shm_unregister", "free"):
            return None, None
        if not isinstance(reply.result, dict):
            return None, ProtocolError("%s answered a %s, not a map" %
                                       (self.method, type(reply.result).__name__))
        return reply.result, None


def check_report(out_hdr, problem, msgid):
    """The reply's m, n and dtype (the result's: out_dtype when cast) must be the request's (the
    payload length was checked)."""
    if problem is None:
        return
    want = {"m": problem.hdr["m"], "n": problem.hdr["n"], "dtype": problem.out_dtype}
    for key, value in want.items():
        if out_hdr.get(key) != value:
            raise ProtocolError("msgid %d: out_hdr %s is %r, the request's %r" %
                                (msgid, key, out_hdr.get(key), value))


class Table:
    """The calls in flight, by msgid. msgids count up from 1 and skip any still in flight."""

    def __init__(self):
        self.calls = {}
        self._next = 1

    def new_msgid(self):
        while True:
            msgid = self._next
            self._next = self._next % MSGID_MAX + 1
            if msgid not in self.calls:
                return msgid

    def destination(self, msgid):
        call = self.calls.get(msgid)
        if call is None:
            raise ProtocolError("a reply for msgid %d, which is not in flight" % msgid)
        return call.destination

    def __len__(self):
        return len(self.calls)


def zeros_like_pieces(view):
    """Zero bytes as long as view, in pieces of at most 1 MiB: what an abandoned request's
    unsent operand bytes are replaced with, so that the stream stays in step."""
    chunk = memoryview(bytes(min(view.nbytes, 1 << 20)))
    left = view.nbytes
    pieces = []
    while left:
        pieces.append(chunk[:min(left, len(chunk))])
        left -= len(pieces[-1])
    return pieces

