"""Protocol v1 framing (proto/PROTOCOL.md) without I/O: requests as lists of buffers to send,
and a reply decoder that receives a gemm's result straight into the caller's array.

Hand-written on purpose, around python3-msgpack rather than instead of it: msgpack's Unpacker
keeps every object whole in its own buffer (max_buffer_size, 100 MiB by default, and a copy of
each payload), which is what made the ten-line client of old fail on large results. Here only
the envelope and the bin header of a gemm reply are read by hand; every small object (error
maps, out_hdr, info, stats) is measured by _object_end and decoded by msgpack.unpackb, and a
payload's bytes go from the socket into the result array (Decoder.window) with no copy.
"""

import struct

import msgpack

from ._errors import ProtocolError, from_wire

MSGID_MAX = 0xFFFFFFFF
BIN_MAX = 0xFFFFFFFF          # a bin32 holds at most this many bytes
MAX_OBJECT_BYTES = 64 << 20   # the largest reply part other than a payload (info, stats, ...)
MAX_DEPTH = 64

# ---------------------------------------------------------------------------------------------
# requests


def _bin_header(length):
    if length < 1 << 8:
        return struct.pack(">BB", 0xC4, length)
    if length < 1 << 16:
        return struct.pack(">BH", 0xC5, length)
    return struct.pack(">BI", 0xC6, length)


def pack_call(msgid, method, params=()):
    """A whole request for a small method (ping, info, stats, shm_register, ...)."""
    return msgpack.packb([0, msgid, method, list(params)], use_bin_type=True)


def pack_gemm(msgid, hdr, operands):
    """The request [0, msgid, "gemm", [hdr, a, b(, c)]] as a list of buffers: the msgpack
    framing as bytes, each operand as the caller's memory (a memoryview of bytes). Framing and
    operands alternate (framing first); an operand given as a shared-memory reference (a dict)
    is framing."""
    head = bytearray(msgpack.packb([0, msgid, "gemm"], use_bin_type=True))
    head[0] = 0x94                              # the envelope has 4 elements, params follows
    head += bytes([0x90 | (1 + len(operands))])  # params: [hdr, a, b(, c)]
    head += msgpack.packb(hdr, use_bin_type=True)
    pieces = []
    for operand in operands:
        if isinstance(operand, dict):
            head += msgpack.packb(operand, use_bin_type=True)
            continue
        if operand.nbytes > BIN_MAX:
            raise ValueError("an operand of %d bytes is more than one request can carry over "
                             "the socket (%d); put it in shared memory (client.shm_array, on "
                             "the daemon's machine) or send a smaller batch" %
                             (operand.nbytes, BIN_MAX))
        head += _bin_header(operand.nbytes)
        pieces.append(bytes(head))
        head = bytearray()
        pieces.append(operand)
    if head:
        pieces.append(bytes(head))
    return pieces


# ---------------------------------------------------------------------------------------------
# measuring one msgpack object

_FIXED = {0xC0: 1, 0xC2: 1, 0xC3: 1, 0xCA: 5, 0xCB: 9, 0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9,
          0xD0: 2, 0xD1: 3, 0xD2: 5, 0xD3: 9, 0xD4: 3, 0xD5: 4, 0xD6: 6, 0xD7: 10, 0xD8: 18}
_LENGTH = {0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0),      # bin: (size of length, extra bytes)
           0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1),      # ext: the type byte
           0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0)}      # str
_CONTAINER = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}  # (size of count, per item)


class _Incomplete(Exception):
    """More bytes are needed."""


def _uint(buf, pos, size):
    if pos + size > len(buf):
        raise _Incomplete
    return int.from_bytes(buf[pos:pos + size], "big")


def _head(buf, pos):
    """(kind, value, next position) of the token at pos: kind "scalar" (next is its end),
    "array"/"map" (value the count), "raw" (value the length of the bytes that follow)."""
    if pos >= len(buf):
        raise _Incomplete
    byte = buf[pos]
    if byte <= 0x7F or byte >= 0xE0:
        return "scalar", None, pos + 1
    if 0x80 <= byte <= 0x8F:
        return "map", byte & 0x0F, pos + 1
    if 0x90 <= byte <= 0x9F:
        return "array", byte & 0x0F, pos + 1
    if 0xA0 <= byte <= 0xBF:
        return "raw", byte & 0x1F, pos + 1
    if byte in _FIXED:
        return "scalar", None, pos + _FIXED[byte]
    if byte in _LENGTH:
        size, extra = _LENGTH[byte]
        return "raw", _uint(buf, pos + 1, size) + extra, pos + 1 + size
    if byte in _CONTAINER:
        size, per_item = _CONTAINER[byte]
        return ("array" if per_item == 1 else "map"), _uint(buf, pos + 1, size), pos + 1 + size
    raise ProtocolError("byte 0x%02x is not msgpack" % byte)


def _object_end(buf, pos):
    """The end of the msgpack object starting at pos; _Incomplete when buf ends first."""
    todo = 1          # objects still to skip at this level and below
    stack = []
    while True:
        while todo == 0:
            if not stack:
                if pos > len(buf):
                    raise _Incomplete
                return pos
            todo = stack.pop()
        kind, value, pos = _head(buf, pos)
        todo -= 1
        if kind == "raw":
            pos += value
        elif kind in ("array", "map"):
            if len(stack) >= MAX_DEPTH:
                raise ProtocolError("a reply nests deeper than %d levels" % MAX_DEPTH)
            stack.append(todo)
            todo = value * (2 if kind == "map" else 1)
        if pos > len(buf):
            raise _Incomplete


def _object(buf, pos):
    """(object, end) of the msgpack object at pos."""
    end = _object_end(buf, pos)
    try:
        return msgpack.unpackb(bytes(buf[pos:end]), raw=False, strict_map_key=False), end
    except (ValueError, msgpack.UnpackException) as exc:
        raise ProtocolError("undecodable msgpack in a reply: %s" % exc) from None


def _int(buf, pos, what):
    kind, _, end = _head(buf, pos)
    value, end = _object(buf, pos)
    if kind != "scalar" or not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError("%s is %r, not an integer" % (what, value))
    return value, end


# ---------------------------------------------------------------------------------------------
# replies


class Destination:
    """Where a gemm's result goes: a writable byte view of exactly the expected size, or None
    to read the result and throw it away (a request given up on). shm_bytes: the result was
    asked into a shared-memory region, so the reply carries nil and says where it went."""

    def __init__(self, view, shm_bytes=None):
        self.view = view
        self.nbytes = view.nbytes if view is not None else None
        self.shm_bytes = shm_bytes


class Reply:
    """A complete reply: error is None or a gemmd.Error; result the decoded result (for a gemm,
    the out_hdr map; its matrix is already in the destination)."""

    __slots__ = ("msgid", "error", "result")

    def __init__(self, msgid, error, result):
        self.msgid = msgid
        self.error = error
        self.result = result


class Decoder:
    """Decodes replies. Bytes come either through feed(data), or, while a payload is being
    received, straight into window() (then advance(count)). destination(msgid) names where a
    gemm reply's payload goes: a Destination, or None when msgid is not a gemm in flight.
    Completed replies pile up in .replies. Raises ProtocolError on anything that breaks the
    protocol; the connection is then unusable."""

    def __init__(self, destination):
        self._destination = destination
        self._buf = bytearray()
        self._pending = None   # (msgid, out_hdr, Destination, bytes still to come) in a payload
        self._filled = 0
        self._scratch = None
        self.replies = []

    @property
    def idle(self):
        """No reply is partly received."""
        return self._pending is None and not self._buf

    # -- payload bytes straight into the destination
    def window(self):
        """A writable memoryview to receive payload bytes into, or None outside a payload."""
        if self._pending is None:
            return None
        dest, left = self._pending[2], self._pending[3]
        if dest.view is None:
            if self._scratch is None:
                self._scratch = memoryview(bytearray(1 << 20))
            return self._scratch[:min(left, len(self._scratch))]
        return dest.view[self._filled:self._filled + left]

    def advance(self, count):
        """count bytes were received into window()."""
        msgid, out_hdr, dest, left = self._pending
        assert 0 < count <= left
        self._filled += count
        left -= count
        if left:
            self._pending = (msgid, out_hdr, dest, left)
        else:
            self._pending = None
            self._filled = 0
            self.replies.append(Reply(msgid, None, out_hdr))

    # -- everything else
    def feed(self, data):
        """Bytes received outside window(); data may hold any number of replies."""
        view = memoryview(data)
        while len(view):
            if self._pending is not None:
                window = self.window()
                count = min(len(window), len(view))
                window[:count] = view[:count]
                view = view[count:]
                self.advance(count)
                continue
            self._buf += view
            view = view[len(view):]
            consumed = self._parse_buffer()
            if self._pending is not None and len(self._buf) > consumed:
                view = memoryview(bytes(self._buf[consumed:]))   # payload bytes already here
                consumed = len(self._buf)
            del self._buf[:consumed]

    def _parse_buffer(self):
        """Parses whole messages (and the head of a gemm reply) off the buffer; returns the
        bytes consumed."""
        pos = 0
        while pos < len(self._buf) and self._pending is None:
            try:
                pos = self._parse_message(pos)
            except _Incomplete:
                if len(self._buf) - pos > MAX_OBJECT_BYTES:
                    raise ProtocolError("a reply's header is over %d bytes" % MAX_OBJECT_BYTES)
                break
        return pos

    def _parse_message(self, pos):
        buf = self._buf
        kind, count, p = _head(buf, pos)
        if kind != "array" or count not in (3, 4):
            raise ProtocolError("a message is not a 3- or 4-element array (byte 0x%02x)" %
                                buf[pos])
        kind_value, p = _int(buf, p, "the message type")
        if count == 3:
            if kind_value != 2:
                raise ProtocolError("a 3-element message of type %d, not a notification" %
                                    kind_value)
            return _object_end(buf, _object_end(buf, p))   # a notification: skipped
        if kind_value != 1:
            raise ProtocolError("a message of type %d, not a response" % kind_value)
        msgid, p = _int(buf, p, "msgid")
        if not 0 <= msgid <= MSGID_MAX:
            raise ProtocolError("msgid %d is not a uint32" % msgid)
        error, p = _object(buf, p)
        dest = self._destination(msgid)
        if error is not None:
            result, p = _object(buf, p)
            if result is not None:
                raise ProtocolError("msgid %d: an error reply with a result" % msgid)
            exc = from_wire(error)
            if isinstance(exc, ProtocolError):
                raise exc
            self.replies.append(Reply(msgid, exc, None))
            return p
        if dest is None:
            result, p = _object(buf, p)
            self.replies.append(Reply(msgid, None, result))
            return p
        return self._parse_gemm_result(msgid, dest, p)

    def _parse_gemm_result(self, msgid, dest, p):
        buf = self._buf
        kind, count, p = _head(buf, p)
        if kind != "array" or count != 2:
            raise ProtocolError("msgid %d: a gemm result is not [out_hdr, c]" % msgid)
        out_hdr, p = _object(buf, p)
        if not isinstance(out_hdr, dict):
            raise ProtocolError("msgid %d: out_hdr is %r, not a map" % (msgid, out_hdr))
        if p >= len(buf):
            raise _Incomplete
        if buf[p] == 0xC0:
            return self._parse_shm_result(msgid, dest, out_hdr, p)
        if buf[p] not in (0xC4, 0xC5, 0xC6):
            raise ProtocolError("msgid %d: the result c is not a bin (byte 0x%02x)" %
                                (msgid, buf[p]))
        _, length, p = _head(buf, p)
        if dest.nbytes is not None and length != dest.nbytes:
            raise ProtocolError("msgid %d: the result holds %d bytes, expected %d" %
                                (msgid, length, dest.nbytes))
        if length == 0:
            self.replies.append(Reply(msgid, None, out_hdr))
        else:
            self._pending = (msgid, out_hdr, dest, length)
            self._filled = 0
        return p

    def _parse_shm_result(self, msgid, dest, out_hdr, p):
        """A gemm reply [out_hdr, nil] whose result is in shared memory (out_hdr["out"])."""
        out = out_hdr.get("out")
        if dest.shm_bytes is None or not isinstance(out, dict) or \
                out.get("bytes") != dest.shm_bytes:
            raise ProtocolError("msgid %d: the result c is nil, but out_hdr out is %r (%s bytes "
                                "asked into shared memory)" % (msgid, out, dest.shm_bytes))
        self.replies.append(Reply(msgid, None, out_hdr))
        return p + 1
