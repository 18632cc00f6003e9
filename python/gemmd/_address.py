"""Daemon addresses, as gemmctl and libgemmclient take them: "unix:PATH", "tcp:HOST:PORT",
"tcp:[IPV6]:PORT", or several of them separated by commas; None means $GEMMD_ADDRESS, then the
default socket. Also the token of TCP connections (explicit, $GEMMD_TOKEN, $GEMMD_TOKEN_FILE)."""

import itertools
import os
import socket

from ._errors import ConnectError

DEFAULT_ADDRESS = "unix:/run/gemmd/gemmd.sock"
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes, NUL included


def resolve(address):
    """The address to use: address itself, else $GEMMD_ADDRESS, else DEFAULT_ADDRESS."""
    if address:
        return address
    return os.environ.get("GEMMD_ADDRESS") or DEFAULT_ADDRESS


def resolve_list(address):
    """The addresses to use (resolve()'s text split at commas), each checked by parse()."""
    text = resolve(address)
    if not isinstance(text, str):
        raise TypeError("address must be a str, got %s" % type(text).__name__)
    addresses = [part.strip() for part in text.split(",")]
    if not all(addresses):
        raise ValueError("%r: an empty address in the list" % text)
    for one in addresses:
        parse(one)
    return addresses


# Where the next connection of this process starts in a list: consecutive connections (of one
# Client or many) take the addresses in turn. next() on a count is atomic in CPython.
_turn = itertools.count()


def rotation(addresses):
    """addresses in the order a new connection tries them: the next one in turn first."""
    start = next(_turn) % len(addresses)
    return addresses[start:] + addresses[:start]


def is_tcp(address):
    return address.startswith("tcp:")


def resolve_token(token):
    """The token to send on TCP connections: token itself (str or bytes), else $GEMMD_TOKEN,
    else the contents of the file $GEMMD_TOKEN_FILE names (one trailing newline stripped),
    else None."""
    if token is None:
        token = os.environ.get("GEMMD_TOKEN") or None
    if token is None and os.environ.get("GEMMD_TOKEN_FILE"):
        path = os.environ["GEMMD_TOKEN_FILE"]
        try:
            with open(path, "rb") as f:
                token = f.read(4097)
        except OSError as exc:
            raise ConnectError("GEMMD_TOKEN_FILE %s: %s" % (path, exc.strerror),
                               "UNAUTHENTICATED") from None
        if token.endswith(b"\n"):
            token = token[:-1]
    if isinstance(token, str):
        token = token.encode()
    if token is not None and not isinstance(token, (bytes, bytearray)):
        raise TypeError("token must be a str or bytes, got %s" % type(token).__name__)
    return bytes(token) if token else None


def _port(text, address):
    if not text.isdigit() or len(text) > 5 or not 1 <= int(text) <= 65535:
        raise ValueError("%r: port %r is not a number 1..65535" % (address, text))
    return int(text)


def parse(address):
    """(family, target) for socket.connect: (AF_UNIX, path) or (None, (host, port)) for TCP,
    whose family comes from getaddrinfo. Raises ValueError for a malformed address."""
    if not isinstance(address, str):
        raise TypeError("address must be a str, got %s" % type(address).__name__)
    if address.startswith("unix:"):
        path = address[len("unix:"):]
        if not path:
            raise ValueError("%r: empty socket path" % address)
        if len(os.fsencode(path)) > _SUN_PATH_MAX:
            raise ValueError("%r: a Unix socket path holds at most %d bytes" %
                             (address, _SUN_PATH_MAX))
        return socket.AF_UNIX, path
    if address.startswith("tcp:"):
        rest = address[len("tcp:"):]
        if rest.startswith("["):
            host, sep, port = rest[1:].partition("]:")
            if not sep:
                raise ValueError("%r: expected tcp:[IPV6]:PORT" % address)
        else:
            host, sep, port = rest.rpartition(":")
            if not sep:
                raise ValueError("%r: expected tcp:HOST:PORT" % address)
            if ":" in host:
                raise ValueError("%r: an IPv6 address goes in brackets: tcp:[::1]:PORT" % address)
        if not host:
            raise ValueError("%r: empty host" % address)
        return None, (host, _port(port, address))
    raise ValueError("%r is neither unix:PATH nor tcp:HOST:PORT" % address)


def tcp_candidates(host, port):
    """getaddrinfo's stream addresses for host:port; ConnectError when the name does not
    resolve."""
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConnectError("cannot resolve %r: %s" % (host, exc)) from None


def connect(address, timeout):
    """A connected, blocking stream socket to address (already resolved), or ConnectError."""
    family, target = parse(address)
    if family == socket.AF_UNIX:
        candidates = [(socket.AF_UNIX, socket.SOCK_STREAM, 0, "", target)]
    else:
        candidates = tcp_candidates(*target)
    last = None
    for fam, kind, proto, _, sockaddr in candidates:
        sock = socket.socket(fam, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        configure(sock)
        return sock
    if isinstance(last, socket.timeout):
        raise ConnectError("connecting to %s timed out" % address, "DEADLINE_EXCEEDED")
    raise ConnectError("cannot connect to %s: %s" % (address, last))


def configure(sock):
    """Small requests go out at once on TCP (a request is written in a few pieces)."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
