"""load_util.py - what the load-and-fault scripts (tests/load/test_*.py) share.

Built on tests/integration/gemmd_harness.py (the daemon, the client, the float64 reference).
Python 3 with Debian's python3-msgpack and python3-numpy only.

Scale
  load_scale() -> float         env GEMMD_LOAD_SCALE (default 1): counts and durations grow
                                with it (10: the full million small gemms, longer fuzzing).
  scaled(ctx, n, minimum=1)     n * load_scale(), and a tenth of it under a sanitizer.
  raise_nofile(need)            soft RLIMIT_NOFILE up to the hard limit (a daemon started
                                afterwards inherits it); Skip when the hard limit is below need.

Figures
  figures(test, **fields)       prints one parseable line: "LOAD <test> key=value ...".
  rss_bytes(pid)                VmRSS of a process, from /proc/PID/status.
  settle_rss(pid, target, probe, timeout) -> RSS   polls RSS (probe() between polls, so that
                                the allocator gets calls to give memory back) until it is at
                                most target or timeout passes; returns the last reading.
  wait_stats(daemon, predicate, timeout, what, client=None) -> the `stats` map, polled until
                                predicate holds (on client, else on a fresh connection).

Checked requests without per-request NumPy work
  Problem(rng, m, n, k, dtype)  random operands, the request's params packed once, the float64
                                reference and the per-element error bound precomputed.
      .request(msgid) -> bytes  the whole request with this msgid.
      .check(result, what)      asserts a gemm result [out_hdr, bin] against the reference.
  problems(rng, count, shapes)  a list of Problems over the given (m, n, k, dtype) shapes.
  PING(msgid) -> bytes          a ping request.
  msgid_base(i)                 unique msgid ranges per client: (i + 1) << 20.
  Stream(sock)                  replies of one blocking socket: .next(timeout) -> Reply, raises
                                ConnectionClosed at EOF or reset.
"""

import os
import resource
import socket
import sys
import time

import msgpack
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
import gemmd_harness as h  # noqa: E402

# ---------------------------------------------------------------------------------------------
# scale


def load_scale():
    text = os.environ.get("GEMMD_LOAD_SCALE", "1")
    try:
        value = float(text)
    except ValueError:
        raise ValueError("GEMMD_LOAD_SCALE=%r is not a number" % text) from None
    if not value > 0:
        raise ValueError("GEMMD_LOAD_SCALE=%r must be > 0" % text)
    return value


def scaled(ctx, n, minimum=1):
    """n at GEMMD_LOAD_SCALE=1 on a Release build; a sanitizer build does a tenth."""
    value = n * load_scale()
    if ctx.sanitized:
        value /= 10
    return max(minimum, int(value))


def raise_nofile(need):
    """Soft RLIMIT_NOFILE to the hard limit; Skip when even that is below need."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        raise h.Skip("RLIMIT_NOFILE hard limit %d is below the %d file descriptors this test "
                     "needs (raise it: ulimit -Hn)" % (hard, need))
    if soft == resource.RLIM_INFINITY or (hard != resource.RLIM_INFINITY and soft >= hard):
        return soft
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# ---------------------------------------------------------------------------------------------
# figures


def figures(test, **fields):
    """One line a script can grep: LOAD <test> key=value ..."""
    parts = ["%s=%s" % (key, value) for key, value in fields.items()]
    print("LOAD %s %s" % (test, " ".join(parts)), flush=True)


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/%d/status" % pid)


def mib(nbytes):
    return "%.1f" % (nbytes / 1048576.0)


def settle_rss(pid, target, probe, timeout):
    deadline = time.monotonic() + timeout
    while True:
        rss = rss_bytes(pid)
        if rss <= target or time.monotonic() >= deadline:
            return rss
        probe()
        time.sleep(0.25)


def wait_stats(daemon, predicate, timeout, what, client=None):
    """Polls `stats` until predicate(stats) holds; returns that map. On client when given, else
    on a fresh connection each time (which the count of connections then includes)."""
    def poll():
        if client is not None:
            found = client.call("stats")
        else:
            with daemon.connect() as fresh:
                found = fresh.call("stats")
        return found if predicate(found) else None
    return h.wait_until(poll, timeout, what)


# ---------------------------------------------------------------------------------------------
# checked requests


def msgid_base(i):
    return (i + 1) << 20


def PING(msgid):  # noqa: N802 (reads like a constant request)
    return msgpack.packb([0, msgid, "ping", []], use_bin_type=True)


_GEMM_HEAD = b"\x94\x00"  # [0, ... : a request envelope
_GEMM_METHOD = msgpack.packb("gemm", use_bin_type=True)


class Problem:
    def __init__(self, rng_, m, n, k, dtype="f32"):
        a, b = h.random_operands(rng_, m, n, k, dtype)
        self.m, self.n, self.k, self.dtype = m, n, k, dtype
        self.hdr = {"m": m, "n": n, "k": k, "dtype": dtype}
        self.params = msgpack.packb([self.hdr, h.to_wire(a, dtype), h.to_wire(b, dtype)],
                                    use_bin_type=True)
        self.ref = h.ref_gemm(a, b, None, 1.0, 0.0)
        bound = np.matmul(np.abs(a), np.abs(b))
        self.limit = h.tolerance(dtype, k) * bound + h.SUBNORMAL_SPACING[dtype]

    def request(self, msgid):
        return _GEMM_HEAD + msgpack.packb(msgid) + _GEMM_METHOD + self.params

    def check(self, result, what):
        if not isinstance(result, list) or len(result) != 2 or not isinstance(result[1], bytes):
            raise h.ProtocolError("%s: gemm result is not [out_hdr, bin]" % what)
        out = h.from_wire(result[1], self.dtype, (self.m, self.n)).astype(np.float64)
        err = np.abs(out - self.ref)
        if not (err <= self.limit).all():  # NaN compares false: caught too
            idx = np.unravel_index(np.argmax(np.nan_to_num(err / self.limit, nan=np.inf)),
                                   err.shape)
            raise AssertionError("%s: %dx%dx%d %s: element %s = %r, expected %r" % (
                what, self.m, self.n, self.k, self.dtype, tuple(int(i) for i in idx),
                out[idx], self.ref[idx]))


def problems(rng_, count, shapes):
    return [Problem(rng_, *shapes[i % len(shapes)]) for i in range(count)]


class Stream:
    """Replies read off one blocking socket (the harness Client's parsing, without its
    per-call bookkeeping)."""

    def __init__(self, sock):
        self.sock = sock
        self.unpacker = msgpack.Unpacker(raw=False, max_buffer_size=2**31 - 1,
                                         strict_map_key=False)

    def next(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                obj = next(self.unpacker)
            except StopIteration:
                pass
            else:
                if not isinstance(obj, list) or len(obj) != 4 or obj[0] != 1:
                    raise h.ProtocolError("not a response: %r" % (obj,))
                return h.Reply(obj[1], obj[2], obj[3])
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply within %.0f s" % timeout)
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                raise TimeoutError("no reply within %.0f s" % timeout) from None
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise h.ConnectionClosed("reset: %s" % exc) from None
            if not data:
                raise h.ConnectionClosed("gemmd closed the connection")
            self.unpacker.feed(data)
