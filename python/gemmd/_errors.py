"""The exceptions of the gemmd client.

Every failure of a call raises gemmd.Error or a subclass of it. `code` is the wire name of the
daemon's error code (proto/PROTOCOL.md, section 6) and `message` its text. Failures that happen
on this side carry the code the C library uses for them and have classes of their own, so that
they can be told apart without looking at the code:

    ConnectError      the daemon cannot be reached         UNAVAILABLE        (ConnectionError)
    ConnectionLost    the connection broke mid-call         UNAVAILABLE        (ConnectionError)
    Timeout           the call's own timeout passed         DEADLINE_EXCEEDED  (TimeoutError)
    ProtocolError     a reply that breaks the protocol      INTERNAL
"""

CODES = ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "DEADLINE_EXCEEDED",
         "CANCELLED", "UNAUTHENTICATED", "NOT_FOUND", "UNIMPLEMENTED", "INTERNAL")


class Error(Exception):
    """A call failed; code is one of CODES, message says why."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class ConnectError(Error, ConnectionError):
    """No daemon answers at the address (or the address is unusable)."""

    def __init__(self, message, code="UNAVAILABLE"):
        super().__init__(code, message)

    def __reduce__(self):
        return (type(self), (self.message, self.code))


class ConnectionLost(Error, ConnectionError):
    """The daemon closed or reset the connection; every call in flight on it fails with this."""

    def __init__(self, message):
        super().__init__("UNAVAILABLE", message)

    def __reduce__(self):
        return (type(self), (self.message,))


class Timeout(Error, TimeoutError):
    """The call's timeout passed on this side before the reply came."""

    def __init__(self, message):
        super().__init__("DEADLINE_EXCEEDED", message)

    def __reduce__(self):
        return (type(self), (self.message,))


class ProtocolError(Error):
    """The daemon sent something that is not a protocol v1 reply; the connection is closed."""

    def __init__(self, message):
        super().__init__("INTERNAL", message)

    def __reduce__(self):
        return (type(self), (self.message,))


def from_wire(error):
    """The exception for an error map of a reply (a bare string, as plain msgpack-RPC servers
    send, becomes INTERNAL; an unknown code stays as the daemon named it)."""
    if isinstance(error, dict):
        code = error.get("code")
        message = error.get("message", "")
        if isinstance(code, str) and code:
            return Error(code, message if isinstance(message, str) else repr(message))
    if isinstance(error, str):
        return Error("INTERNAL", error)
    return ProtocolError("error is not {code: str, message: str}: %r" % (error,))
