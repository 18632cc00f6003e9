"""The auth exchange that opens a TCP connection when a token is set (proto/PROTOCOL.md,
"auth"), shared by the blocking and the asyncio client: the request's bytes, and what its reply
means. It is the connection's first request, answered before anything else is sent."""

import msgpack

from ._errors import Error, ProtocolError, from_wire

AUTH_MSGID = 0   # the connection's table of calls starts at 1: no reply can be mistaken


def request(token):
    return msgpack.packb([0, AUTH_MSGID, "auth", [token]], use_bin_type=True)


def new_unpacker():
    return msgpack.Unpacker(max_buffer_size=1 << 20)


def check(reply, address):
    """Raises unless reply is [1, AUTH_MSGID, nil, true] (a wrong token: Error UNAUTHENTICATED;
    an older daemon without auth: its UNIMPLEMENTED)."""
    if (not isinstance(reply, list) or len(reply) != 4 or reply[0] != 1 or
            reply[1] != AUTH_MSGID):
        raise ProtocolError("gemmd on %s: auth answered %r" % (address, reply))
    if reply[2] is not None:
        error = from_wire(reply[2])
        raise Error(error.code, "gemmd on %s refused the token: %s" % (address, error.message))
    if reply[3] is not True:
        raise ProtocolError("gemmd on %s: auth answered %r, not true" % (address, reply[3]))
