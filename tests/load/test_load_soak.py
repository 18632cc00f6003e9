#!/usr/bin/python3
"""A long run of small gemms: 100,000 over 4 pipelining connections (GEMMD_LOAD_SCALE=10: the
full million), every result checked. gemmd's RSS stays flat from the 10% mark to the end.

How flat is judged: RSS is sampled as the run goes; the median of the samples in the 10%-20%
stretch is the reference, the median of those in the last 10% the end. The end may exceed the
reference by at most max(4 MiB, 5% of it). A leak of 64 bytes per request shows at 100,000
requests (5.5 MiB); allocator noise (a few pages of heap moving about) does not, and medians
ignore a single sample taken in the middle of a burst."""
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load_util as lu  # noqa: E402
from load_util import h  # noqa: E402

CONNECTIONS = 4
WINDOW = 32  # requests written at once and in flight per connection
SHAPES = [(8, 8, 8, "f32"), (4, 12, 6, "f64"), (16, 3, 9, "f32"), (8, 8, 16, "f16"),
          (1, 1, 1, "f32"), (12, 4, 12, "f64")]
SLACK_MIB = 4
SLACK_FRACTION = 0.05


class Soak:
    def __init__(self, d, problems, total):
        self.d, self.problems = d, problems
        self.per_conn = total // CONNECTIONS
        self.done = [0] * CONNECTIONS
        self.errors = []

    def body(self, i):
        try:
            with self.d.connect() as client:
                stream = lu.Stream(client.sock)
                msgid = lu.msgid_base(i)
                while self.done[i] < self.per_conn:
                    count = min(WINDOW, self.per_conn - self.done[i])
                    batch = {msgid + j: self.problems[(msgid + j) % len(self.problems)]
                             for j in range(count)}
                    client.send_raw(b"".join(p.request(m) for m, p in batch.items()))
                    for _ in range(count):
                        reply = stream.next(60 * self.d.scale)
                        problem = batch.pop(reply.msgid)
                        assert reply.error is None, "msgid %d: %r" % (reply.msgid, reply.error)
                        problem.check(reply.result, "conn %d msgid %d" % (i, reply.msgid))
                    self.done[i] += count
                    msgid += count
        except BaseException as exc:  # noqa: reported by the main thread
            self.errors.append("conn %d: %s: %s" % (i, type(exc).__name__, exc))

    def progress(self):
        return sum(self.done) / float(self.per_conn * CONNECTIONS)


def test_soak(ctx):
    total = lu.scaled(ctx, 100000, minimum=1000)
    problems = lu.problems(ctx.rng, 24, SHAPES)
    with ctx.daemon(config={"cpu": {"threads": 2}}) as d, d.connect() as monitor:
        rss_start = lu.rss_bytes(d.pid)
        soak = Soak(d, problems, total)
        threads = [threading.Thread(target=soak.body, args=(i,)) for i in range(CONNECTIONS)]
        start = time.monotonic()
        for t in threads:
            t.start()
        samples = []  # (progress, rss)
        while any(t.is_alive() for t in threads):
            samples.append((soak.progress(), lu.rss_bytes(d.pid)))
            time.sleep(0.1)
        for t in threads:
            t.join()
        elapsed = time.monotonic() - start
        samples.append((soak.progress(), lu.rss_bytes(d.pid)))
        assert not soak.errors, "; ".join(soak.errors)
        done = sum(soak.done)
        assert done == soak.per_conn * CONNECTIONS
        # the last replies count once their loop sees the write finish: waited for
        lu.wait_stats(d, lambda st: st["gemm_ok"] >= done, 10.0,
                      "stats gemm_ok to reach %d" % done, client=monitor)
        st = monitor.call("stats")
        assert st["gemm_ok"] == done, "stats gemm_ok %d, %d answered" % (st["gemm_ok"], done)

        ref = _median(samples, 0.10, 0.20)
        end = _median(samples, 0.90, 1.01)
        allowed = max(SLACK_MIB * 1048576, SLACK_FRACTION * ref)
        lu.figures("soak", requests=done, connections=CONNECTIONS, lost=0,
                   seconds="%.1f" % elapsed, per_s="%.0f" % (done / elapsed),
                   rss_before_mib=lu.mib(rss_start), rss_10pct_mib=lu.mib(ref),
                   rss_end_mib=lu.mib(end), rss_max_mib=lu.mib(max(r for _, r in samples)),
                   growth_mib=lu.mib(end - ref), allowed_mib=lu.mib(allowed), samples=len(samples),
                   rss_check="skipped_sanitizer" if ctx.sanitized else "flat")
        assert ctx.sanitized or end - ref <= allowed, (
            "gemmd RSS grew from %s MiB at 10-20%% of the run to %s MiB in its last 10%% "
            "(allowed: %s MiB)" % (lu.mib(ref), lu.mib(end), lu.mib(allowed)))


def _median(samples, lo, hi):
    """Median RSS of the samples taken between progress lo and hi (the nearest one when the
    stretch got none: a very fast run)."""
    inside = [rss for progress, rss in samples if lo <= progress < hi]
    if not inside:
        inside = [min(samples, key=lambda s: abs(s[0] - lo))[1]]
    return statistics.median(inside)


if __name__ == "__main__":
    sys.exit(h.main([test_soak]))
