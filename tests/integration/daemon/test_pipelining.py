#!/usr/bin/python3
"""Many requests on one connection written back to back before any reply is read; replies are
matched by msgid (any order is allowed) and every result is checked. Mixed sizes with
cpu.threads 2 let small jobs overtake big ones."""
import os
import socket
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402

CONFIG = {"cpu": {"threads": 2}, "limits": {"max_requests_in_flight": 256}}


class Job:
    """One pipelined gemm: its inputs, its packed bytes, and how to check its reply."""

    def __init__(self, rng, msgid, m, n, k, dtype, trans_a=False, trans_b=False, beta=0.0,
                 batch=None):
        self.msgid = msgid
        self.args = (m, n, k, dtype, trans_a, trans_b, beta, batch)
        self.a, self.b = h.random_operands(rng, m, n, k, dtype, trans_a, trans_b, batch)
        lead = (batch,) if batch else ()
        self.c = h.round_to(rng.uniform(-1, 1, lead + (m, n)), dtype) if beta else None
        self.hdr = {"m": m, "n": n, "k": k, "dtype": dtype, "trans_a": trans_a,
                    "trans_b": trans_b, "alpha": 1.5, "beta": beta}
        if batch:
            self.hdr["batch"] = batch
        self.packed = h.Client.pack_gemm(msgid, self.hdr, self.a, self.b, self.c)

    def check(self, client):
        m, n, k, dtype, trans_a, trans_b, beta, batch = self.args
        out_hdr, out = client.gemm_result(self.msgid, self.hdr)
        what = "pipelined msgid %d (%dx%dx%d %s)" % (self.msgid, m, n, k, dtype)
        h.assert_close(out, self.a, self.b, self.c, 1.5, beta, trans_a, trans_b, dtype, what)
        h.check_out_hdr(out_hdr, m, n, dtype, batch or 1, what)


def _mixed_jobs(ctx, count, first_msgid):
    big = 160 if ctx.quick else 300
    shapes = [(big, big, big, "f64"), (1, 1, 1, "f32"), (7, 7, 7, "f16"), (33, 17, 65, "bf16"),
              (5, 3, 4, "f32"), (64, 1, 64, "f64")]
    jobs = []
    for i in range(count):
        m, n, k, dtype = shapes[i % len(shapes)]
        jobs.append(Job(ctx.rng, first_msgid + i, m, n, k, dtype, trans_a=bool(i & 1),
                        trans_b=bool(i & 2), beta=0.5 if i % 3 == 0 else 0.0,
                        batch=2 if i % 5 == 0 else None))
    return jobs


def _arrival_order(client, jobs):
    """Reads every reply, returns their msgids in arrival order (replies are kept pending)."""
    order = []
    for _ in jobs:
        reply = client.read_reply()
        if reply.msgid in client.pending or reply.msgid in order:
            raise h.ProtocolError("a second reply for msgid %d" % reply.msgid)
        client.pending[reply.msgid] = reply
        order.append(reply.msgid)
    return order


def test_back_to_back(ctx):
    with ctx.daemon(config=CONFIG) as d, d.connect() as client:
        jobs = _mixed_jobs(ctx, 60, 1000)
        pings = [h.msgpack.packb([0, 5000 + i, "ping", []]) for i in range(20)]
        stream = b"".join(job.packed for job in jobs) + b"".join(pings)
        sender = h.send_in_background(client, stream)
        order = _arrival_order(client, jobs + pings)
        sender.join()
        assert sender.error is None, sender.error
        assert sorted(order) == sorted([j.msgid for j in jobs] + [5000 + i for i in range(20)]), \
            "replies for msgids %s" % sorted(order)
        for job in jobs:
            job.check(client)
        for i in range(20):
            assert client.wait(5000 + i).result == "pong"
        overtaken = sum(1 for x, y in zip(order, sorted(order)) if x != y)
        print("replies out of request order: %d of %d" % (overtaken, len(order)))


def test_small_overtakes_big(ctx):
    """With two workers, a tiny job sent after a big one may finish first: both stay right."""
    with ctx.daemon(config=CONFIG) as d, d.connect() as client:
        big = 300 if ctx.quick else 700
        jobs = [Job(ctx.rng, 1, big, big, big, "f64")]
        jobs += [Job(ctx.rng, 2 + i, 3, 5, 7, "f32") for i in range(8)]
        client.send_raw(b"".join(job.packed for job in jobs))
        order = _arrival_order(client, jobs)
        for job in jobs:
            job.check(client)
        print("arrival order: %s" % order)


def test_split_writes(ctx):
    """Requests cut at every byte boundary: a message may arrive in any number of reads."""
    with ctx.daemon(config=CONFIG) as d, d.connect() as client:
        jobs = [Job(ctx.rng, 10 + i, 3, 4, 5, dtype) for i, dtype in
                enumerate(("f32", "f64", "f16", "bf16"))]
        stream = b"".join(job.packed for job in jobs)
        for start in range(0, len(stream), 7):
            client.send_raw(stream[start:start + 7])
            time.sleep(0.0005)
        for job in jobs:
            job.check(client)
        # two messages in one write, the second cut in half
        ping1 = h.msgpack.packb([0, 77, "ping", []])
        ping2 = h.msgpack.packb([0, 78, "ping", []])
        client.send_raw(ping1 + ping2[:3])
        time.sleep(0.05)
        client.send_raw(ping2[3:])
        assert client.wait(77).result == "pong"
        assert client.wait(78).result == "pong"


def test_thousands_of_small_requests(ctx):
    """3000 pings, 200 tiny gemms and some info/stats in one write: all answered, once each."""
    with ctx.daemon(config=CONFIG) as d, d.connect() as client:
        chunks, jobs, expected = [], [], set()
        for i in range(3200):
            msgid = 100000 + i
            if i % 16 == 0:
                job = Job(ctx.rng, msgid, 2, 3, 2, "f32")
                jobs.append(job)
                chunks.append(job.packed)
            else:
                method = "info" if i % 101 == 0 else "stats" if i % 103 == 0 else "ping"
                chunks.append(h.msgpack.packb([0, msgid, method, []]))
            expected.add(msgid)
        sender = h.send_in_background(client, b"".join(chunks))
        seen = set()
        job_ids = {job.msgid for job in jobs}
        for _ in expected:
            reply = client.read_reply()
            assert reply.msgid in expected and reply.msgid not in seen, \
                "unexpected or repeated msgid %d" % reply.msgid
            seen.add(reply.msgid)
            assert reply.error is None, reply
            if reply.msgid in job_ids:
                client.pending[reply.msgid] = reply
        sender.join()
        for job in jobs:
            job.check(client)


def test_half_close(ctx):
    """A client that writes its requests and then shuts down its writing side (as `nc -N`
    does) still gets every reply; then the daemon closes too."""
    with ctx.daemon(config=CONFIG) as d, d.connect() as client:
        jobs = [Job(ctx.rng, 20 + i, 17, 9, 33, dtype) for i, dtype in
                enumerate(("f32", "f64", "f16", "bf16"))]
        client.send_raw(b"".join(job.packed for job in jobs) +
                        h.msgpack.packb([0, 99, "ping", []]))
        client.sock.shutdown(socket.SHUT_WR)
        for job in jobs:
            job.check(client)
        assert client.wait(99).result == "pong"
        assert client.is_closed(5 * ctx.scale), "the daemon kept a half-closed connection open"


def test_same_msgid_twice(ctx):
    """msgids are the client's business: two requests with one id both get answered."""
    with ctx.daemon(config=CONFIG) as d, d.connect() as client:
        client.send_raw(h.msgpack.packb([0, 9, "ping", []]) * 2)
        first = client.read_reply()
        second = client.read_reply()
        assert first == second == h.Reply(9, None, "pong"), (first, second)


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(h.main([test_back_to_back, test_small_overtakes_big, test_split_writes,
                     test_thousands_of_small_requests, test_half_close, test_same_msgid_twice]))
