#!/usr/bin/python3
"""Clients SIGKILLed in the middle of a payload. 50 processes each send a gemm header and half
of a 32 MiB operand, then die by SIGKILL, while 10 other clients keep running checked gemms:
none of the 10 fails, gemmd's RSS comes back within 10% of its baseline, and stats adds up
(every request counted, nothing left queued, reserved or connected)."""
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load_util as lu  # noqa: E402
from load_util import h  # noqa: E402

KILLED = 50
WORKERS = 10
# a: 4096 x 2048 f32 = 32 MiB; b and c are small, so the job reserves about 32.4 MiB
BIG = {"m": 4096, "n": 16, "k": 2048, "dtype": "f32"}
OPERAND_A = 4096 * 2048 * 4
SHAPES = [(24, 16, 40, "f32"), (32, 32, 32, "f64"), (17, 9, 64, "f32")]

# The child: connect, send the request up to half of a (or until the daemon stops reading),
# say so, wait to be killed. Plain
# Python (-S: no site packages): 50 of them stay small.
CHILD = r"""
import socket, sys
path, head, half = sys.argv[1], bytes.fromhex(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
s.sendall(head)
# A daemon whose staging is full stops reading (the GPU backend's backpressure): a child it
# paused is mid-payload all the same, so it stops trying after a while.
s.settimeout(3.0)
zeros = bytes(1 << 20)
left = half
try:
    while left:
        left -= s.send(zeros[:min(left, len(zeros))])
except socket.timeout:
    pass
sys.stdout.write("half\n")
sys.stdout.flush()
sys.stdin.read()
"""


def _big_head():
    """The request up to the first byte of a's payload: envelope, header and a's bin32 head."""
    full = h.Client.pack_gemm(1, BIG, b"\0" * OPERAND_A, b"\0" * (2048 * 16 * 4))
    head_len = full.index(b"\xc6" + OPERAND_A.to_bytes(4, "big")) + 5
    return full[:head_len]


class Workers:
    """WORKERS threads, each on its own connection, running checked gemms until stopped."""

    def __init__(self, d, problems):
        self.d, self.problems = d, problems
        self.stop = threading.Event()
        self.done = [0] * WORKERS
        self.errors = []
        self.threads = [threading.Thread(target=self.body, args=(i,)) for i in range(WORKERS)]

    def body(self, i):
        try:
            with self.d.connect() as client:
                stream = lu.Stream(client.sock)
                msgid = lu.msgid_base(i)
                while not self.stop.is_set():
                    problem = self.problems[(i + msgid) % len(self.problems)]
                    client.send_raw(problem.request(msgid))
                    reply = stream.next(60 * self.d.scale)
                    assert reply.msgid == msgid and reply.error is None, \
                        "worker %d: msgid %d answered %r" % (i, msgid, reply)
                    problem.check(reply.result, "worker %d msgid %d" % (i, msgid))
                    self.done[i] += 1
                    msgid += 1
        except BaseException as exc:  # noqa: reported by the main thread
            self.errors.append("worker %d: %s: %s" % (i, type(exc).__name__, exc))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()
        return False


def _start_children(d, count):
    head = _big_head().hex()
    children = [subprocess.Popen([sys.executable, "-S", "-c", CHILD, d.unix_path, head,
                                  str(OPERAND_A // 2)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                for _ in range(count)]
    for child in children:
        line = child.stdout.readline()
        assert line == b"half\n", "a child did not send half of its payload: %r" % line
    return children


def _kill_round(d, count):
    """count children, each halfway through a 32 MiB operand, SIGKILLed together; returns the
    daemon's RSS while they were all mid-payload."""
    children = _start_children(d, count)
    peak = lu.rss_bytes(d.pid)
    for child in children:
        child.send_signal(signal.SIGKILL)
    for child in children:
        child.wait()
        child.stdin.close()
        child.stdout.close()
    return peak


def _warm_up(d, problems, per_round):
    """The same work once before the baseline, so that it holds what a daemon that has served
    this load keeps anyway (connection buffers, the worker threads' malloc arenas, heap
    fragmentation): the workers for a while, and one round of killed clients."""
    with Workers(d, problems) as workers:
        _kill_round(d, per_round)
        lu.wait_stats(d, lambda s: s["connections"] == 2 + WORKERS, 30 * d.scale,
                      "the warm-up's killed clients to go")
        while min(workers.done) < 3 and not workers.errors:
            time.sleep(0.05)
    assert not workers.errors, "warm-up: %s" % "; ".join(workers.errors)
    lu.wait_stats(d, lambda s: s["connections"] == 2, 30 * d.scale, "the warm-up to close")
    return sum(workers.done)


def test_killed_mid_payload(ctx):
    config = {"cpu": {"threads": 2}}
    problems = lu.problems(ctx.rng, 12, SHAPES)
    killed_total = lu.scaled(ctx, KILLED, minimum=5)
    with ctx.daemon(config=config) as d, d.connect() as monitor:
        per_round = min(KILLED, killed_total)
        warm_gemms = _warm_up(d, problems, per_round)
        baseline = lu.rss_bytes(d.pid)
        peak = baseline
        killed = 0
        with Workers(d, problems) as workers:
            while killed < killed_total:
                count = min(per_round, killed_total - killed)
                peak = max(peak, _kill_round(d, count))
                killed += count
            # the workers go on while the daemon takes the dead connections down
            lu.wait_stats(d, lambda s: s["connections"] == 2 + WORKERS, 30 * ctx.scale,
                          "the killed clients' connections to close")
            while min(workers.done) < 3 and not workers.errors:
                time.sleep(0.05)
        assert not workers.errors, "%d workers failed: %s" % (len(workers.errors),
                                                             "; ".join(workers.errors))
        worker_gemms = sum(workers.done)

        probes = []

        def probe():
            probes.append(1)
            h.check_gemm(monitor, ctx.rng, 40, 30, 20, "f32")
        target = int(baseline * 1.10)
        # (under ASan, whose quarantine keeps freed memory, two probes and no waiting)
        after = lu.settle_rss(d.pid, 0 if ctx.sanitized else target, probe,
                              0.5 if ctx.sanitized else 20)

        st = lu.wait_stats(d, lambda s: s["connections"] == 1, 10 * ctx.scale,
                           "only the monitor connected", monitor)
        gemms = warm_gemms + worker_gemms + len(probes)
        _check_stats(st, gemms, per_round + killed)
        lu.figures("killed_mid_payload", killed=killed, workers=WORKERS,
                   worker_gemms=worker_gemms, worker_failures=0, lost=0,
                   rss_before_mib=lu.mib(baseline), rss_peak_mib=lu.mib(peak),
                   rss_after_mib=lu.mib(after), probes=len(probes),
                   rss_check="skipped_sanitizer" if ctx.sanitized else "within_10pct")
        if not ctx.sanitized:  # ASan's quarantine keeps freed memory on purpose
            assert after <= target, (
                "gemmd RSS %s MiB after the kills (peak %s), baseline %s MiB: not back within "
                "10%%" % (lu.mib(after), lu.mib(peak), lu.mib(baseline)))


def _check_stats(st, gemms, killed):
    """Every request counted: the checked gemms answered OK, the killed ones never finished
    and got no reply; nothing queued, running, reserved; only the monitor connected."""
    expect = {"requests.gemm": gemms + killed, "gemm_ok": gemms, "queue_depth": 0,
              "jobs_running": 0, "reserved_bytes": 0, "connections": 1}
    for key, want in expect.items():
        got = h.dig(st, key)
        assert got == want, "stats %s = %r, expected %r" % (key, got, want)
    errors = {code: n for code, n in st["errors"].items() if n}
    assert not errors, "stats counts error replies: %r" % errors
    # the readiness probe, the monitor, the warm-up, the workers, the killed clients, the polls
    assert st["connections_total"] >= 2 + 2 * WORKERS + killed, "connections_total %d" % (
        st["connections_total"])


if __name__ == "__main__":
    sys.exit(h.main([test_killed_mid_payload]))
