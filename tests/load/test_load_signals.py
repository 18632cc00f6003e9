#!/usr/bin/python3
"""Signals under load from 40 pipelining clients.

SIGTERM: every request the daemon read gets its reply, a correct result or UNAVAILABLE; none is
silently lost. The daemon logs every request it reads (log_level debug: "conn N: msgid M: ..."),
and msgids are unique across clients, so the requests a client got no reply for are checked to
be ones gemmd never read (still in the socket when it closed).
SIGHUP, 20 times under the same load, with limits changing each time: nothing fails."""
import os
import re
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load_util as lu  # noqa: E402
from load_util import h  # noqa: E402

CLIENTS = 40
WINDOW = 4  # requests in flight per client
SHAPES = [(48, 48, 48, "f64"), (64, 32, 80, "f32"), (20, 70, 33, "f32"), (31, 17, 64, "f16")]
READ = re.compile(r"conn \d+: msgid (\d+): ")


class Pipeliner:
    """One client: keeps WINDOW requests in flight (a ping every 5th, else a checked gemm)
    until told to stop or the daemon says UNAVAILABLE or closes; records what came back."""

    def __init__(self, d, i, problems, limit=None):
        self.d, self.i, self.problems, self.limit = d, i, problems, limit
        self.sent = {}  # msgid -> problem (None: ping)
        self.ok, self.unavailable, self.unanswered = 0, 0, set()
        self.stop = threading.Event()
        self.closed = False
        self.error = None
        self.thread = threading.Thread(target=self.run)

    def send_next(self, client, msgid):
        problem = None if msgid % 5 == 0 else self.problems[msgid % len(self.problems)]
        self.sent[msgid] = problem
        client.send_raw(lu.PING(msgid) if problem is None else problem.request(msgid))

    def take(self, reply):
        problem = self.sent.pop(reply.msgid, "unknown")
        assert problem != "unknown", "client %d: a reply for msgid %d, never sent or answered " \
            "twice" % (self.i, reply.msgid)
        if reply.error is not None:
            assert reply.error["code"] == "UNAVAILABLE", "client %d: msgid %d answered %r" % (
                self.i, reply.msgid, reply.error)
            self.unavailable += 1
            return False
        if problem is None:
            assert reply.result == "pong", "client %d: ping answered %r" % (self.i, reply.result)
        else:
            problem.check(reply.result, "client %d msgid %d" % (self.i, reply.msgid))
        self.ok += 1
        return True

    def run(self):
        try:
            with self.d.connect() as client:
                stream = lu.Stream(client.sock)
                msgid = lu.msgid_base(self.i)
                sending = True
                while True:
                    while sending and len(self.sent) < WINDOW and not self.stop.is_set() and (
                            self.limit is None or msgid < lu.msgid_base(self.i) + self.limit):
                        try:
                            self.send_next(client, msgid)
                        except OSError:  # the daemon closed: the read below says so
                            sending = False
                        msgid += 1
                    if not self.sent:
                        break
                    try:
                        reply = stream.next(60 * self.d.scale)
                    except h.ConnectionClosed:
                        self.closed = True
                        break
                    if not self.take(reply):
                        sending = False  # draining: a real client stops here
                self.unanswered = set(self.sent)
        except BaseException as exc:  # noqa: reported by the main thread
            self.error = "client %d: %s: %s" % (self.i, type(exc).__name__, exc)


def _start(d, problems, limit=None):
    clients = [Pipeliner(d, i, problems, limit) for i in range(CLIENTS)]
    for c in clients:
        c.thread.start()
    return clients


def _join(clients, timeout):
    for c in clients:
        c.thread.join(timeout)
        assert not c.thread.is_alive(), "client %d still waiting after %.0f s" % (c.i, timeout)
    errors = [c.error for c in clients if c.error]
    assert not errors, "%d clients failed: %s" % (len(errors), "; ".join(errors[:5]))


def _wait_progress(clients, each, timeout):
    h.wait_until(lambda: all(c.ok >= each or c.error for c in clients), timeout,
                 "every client to have %d replies" % each)


def test_sigterm_under_load(ctx):
    # a heavier shape too, so that the drain lasts while clients keep sending
    problems = lu.problems(ctx.rng, 20, SHAPES + [(192, 192, 192, "f64")])
    d = ctx.daemon(config={"log_level": "debug", "cpu": {"threads": 2}}).start()
    try:
        rss_before = lu.rss_bytes(d.pid)
        clients = _start(d, problems)
        _wait_progress(clients, lu.scaled(ctx, 20, minimum=3), 120 * ctx.scale)
        rss_at_signal = lu.rss_bytes(d.pid)
        d.send_signal(signal.SIGTERM)
        _join(clients, 60 * ctx.scale)
        code = d.stop(sig=None)
        assert code == 0, "gemmd exited %d after SIGTERM" % code
    except BaseException:
        d.kill()
        raise
    log = d.log()
    read = {int(m) for m in READ.findall(log)}
    unanswered = set().union(*(c.unanswered for c in clients))
    lost = sorted(read & unanswered)
    assert not lost, "%d requests gemmd read were never answered, e.g. msgids %s" % (
        len(lost), lost[:10])
    assert "replies still queued dropped" not in log, "gemmd dropped queued replies"
    ok = sum(c.ok for c in clients)
    unavailable = sum(c.unavailable for c in clients)
    # and the other way round: every reply answers a request the log shows read
    assert len(read) == ok + unavailable, "gemmd logged %d requests read, clients got %d " \
        "replies" % (len(read), ok + unavailable)
    assert all(c.closed or not c.unanswered for c in clients)
    lu.figures("sigterm", clients=CLIENTS, requests=ok + unavailable + len(unanswered), ok=ok,
               unavailable=unavailable, unread_at_close=len(unanswered), lost=len(lost),
               exit_code=code, rss_before_mib=lu.mib(rss_before),
               rss_at_sigterm_mib=lu.mib(rss_at_signal))


def test_sighup_under_load(ctx):
    problems = lu.problems(ctx.rng, 16, SHAPES)
    reloads = lu.scaled(ctx, 20, minimum=5)
    per_client = lu.scaled(ctx, 300, minimum=40)
    with ctx.daemon(config={"cpu": {"threads": 2}}) as d:
        rss_before = lu.rss_bytes(d.pid)
        clients = _start(d, problems, limit=per_client)
        for n in range(reloads):
            # limits and timeouts that apply on reload, changing every time
            # (max_jobs stays above what the clients keep in flight: a refusal is no failure)
            d.write_config({"cpu": {"threads": 2},
                            "limits": {"max_requests_in_flight": 2 + n % 3,
                                       "max_buffered_bytes": "%dMiB" % (1 + n % 4)},
                            "queue": {"max_jobs": CLIENTS * WINDOW + 1 + n},
                            "timeouts": {"idle_ms": 60000 + n}})
            d.send_signal(signal.SIGHUP)
            # one reload at a time: two signals before the loop sees the first would be one
            h.wait_until(lambda: d.log().count("reloaded ") == n + 1, 30 * ctx.scale,
                         "reload %d to be applied" % (n + 1))
            _wait_progress(clients, per_client * (n + 1) // (reloads + 1), 120 * ctx.scale)
        _join(clients, 120 * ctx.scale)
        failed = [c.i for c in clients if c.unavailable or c.unanswered or c.closed]
        assert not failed, "clients %s lost requests across SIGHUP" % failed
        failed_reloads = d.log().count("reload failed")
        assert not failed_reloads, "%d reloads failed" % failed_reloads
        ok = sum(c.ok for c in clients)
        assert ok == CLIENTS * per_client, "%d of %d requests answered" % (
            ok, CLIENTS * per_client)
        lu.figures("sighup", clients=CLIENTS, reloads=reloads, requests=ok, failed=0, lost=0,
                   rss_before_mib=lu.mib(rss_before), rss_after_mib=lu.mib(lu.rss_bytes(d.pid)))


if __name__ == "__main__":
    sys.exit(h.main([test_sigterm_under_load, test_sighup_under_load]))
