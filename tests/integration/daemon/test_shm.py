#!/usr/bin/python3
"""Shared memory for local clients (proto/PROTOCOL.md, "Shared memory"): memfd regions passed
with SCM_RIGHTS over the Unix socket, gemm operands and results in them, every dtype and mixed
forms checked against a float64 reference, and every way a client could misuse it: unsealed or
non-memfd descriptors, no descriptor, truncation after registering (refused by the seal),
ranges past the end or overflowing, an output overlapping an input, unknown regions, quotas,
TCP, and regions (and descriptors) released when the connection closes."""
import contextlib
import fcntl
import mmap
import os
import socket
import sys
import threading

import msgpack
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402
import metrics_util as mu  # noqa: E402

DTYPES = ("f32", "f64", "f16", "bf16")
U64_MAX = 2**64 - 1


class Region:
    """A sealed memfd of size bytes, mapped here, and registered on client (or not)."""

    def __init__(self, size, seal=True):
        self.size = size
        self.fd = os.memfd_create("gemmd-test", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, size)
        if seal:
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        self.map = mmap.mmap(self.fd, size)
        self.id = None
        self.used = 0

    def register(self, client):
        result = call_with_fd(client, "shm_register", [self.size], self.fd)
        assert set(result) >= {"region", "size"} and result["size"] == self.size, result
        self.id = result["region"]
        return self

    def put(self, arr, dtype):
        """Writes arr (in dtype) at the next free offset; returns its reference map."""
        data = h.to_wire(arr, dtype)
        offset = self.used
        self.map[offset:offset + len(data)] = data
        self.used = (offset + len(data) + 63) // 64 * 64
        return {"region": self.id, "offset": offset}

    def take(self, nbytes):
        """A reference to the next nbytes of free space (for an output)."""
        ref = {"region": self.id, "offset": self.used}
        self.used = (self.used + nbytes + 63) // 64 * 64
        return ref

    def read(self, ref, dtype, shape):
        nbytes = int(np.prod(shape)) * h.DTYPES[dtype]
        return h.from_wire(bytes(self.map[ref["offset"]:ref["offset"] + nbytes]), dtype, shape)

    def close(self):
        self.map.close()
        os.close(self.fd)


def send_with_fds(client, method, params, fds, msgid=None):
    """The request, its first (and only) sendmsg carrying fds as SCM_RIGHTS."""
    msgid = client._take_msgid(msgid)
    data = msgpack.packb([0, msgid, method, params], use_bin_type=True)
    socket.send_fds(client.sock, [data], list(fds))
    return msgid


def call_with_fd(client, method, params, fd):
    reply = client.wait(send_with_fds(client, method, params, [] if fd is None else [fd]))
    return client.result_of(reply)


def expect_error(code, fn, *args, what=""):
    try:
        result = fn(*args)
    except h.RpcError as exc:
        if exc.code != code:
            raise AssertionError("%s: %s, expected %s" % (what, exc, code)) from None
        return exc.message
    raise AssertionError("%s: succeeded (%s), expected %s" % (what, h._short(result), code))


def gemm_refs(client, hdr, a, b, c=None):
    """A gemm whose operands are each a reference map or an array (sent as a bin)."""
    dtype = hdr["dtype"]
    params = [hdr] + [x if isinstance(x, dict) else h.to_wire(x, dtype)
                      for x in (a, b, c) if x is not None]
    msgid = client._take_msgid(None)
    client.send_raw(msgpack.packb([0, msgid, "gemm", params], use_bin_type=True))
    return client.result_of(client.wait(msgid))


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def shm_stats(client):
    stats = client.call("stats")
    return stats["shm_regions"], stats["shm_bytes"]


def with_daemon(fn, **daemon_kwargs):
    def run(ctx):
        with ctx.daemon(**daemon_kwargs) as d, d.connect() as client:
            fn(ctx, d, client)
    run.__name__ = fn.__name__
    return run


def checked_gemm(ctx, client, region, m, n, k, dtype, forms, trans_a=False, trans_b=False,
                 alpha=1.0, beta=0.0, batch=None):
    """One gemm with a, b, c and the result each in shared memory or not (forms: a string of
    the ones in shm, e.g. "ab" or "abco"), checked against the float64 reference."""
    a, b = h.random_operands(ctx.rng, m, n, k, dtype, trans_a, trans_b, batch)
    lead = (batch,) if batch else ()
    c = h.round_to(ctx.rng.uniform(-1, 1, lead + (m, n)), dtype) if beta else None
    hdr = {"m": m, "n": n, "k": k, "dtype": dtype, "trans_a": trans_a, "trans_b": trans_b,
           "alpha": alpha, "beta": beta}
    if batch:
        hdr["batch"] = batch
    shape = lead + (m, n)
    out_ref = None
    if "o" in forms:
        out_ref = region.take(int(np.prod(shape)) * h.DTYPES[dtype])
        hdr["out"] = out_ref
    sent = [region.put(x, dtype) if x is not None and name in forms else x
            for name, x in (("a", a), ("b", b), ("c", c))]
    result = gemm_refs(client, hdr, *sent)
    out_hdr, data = result
    what = "shm gemm %dx%dx%d %s forms=%s" % (m, n, k, dtype, forms)
    h.check_out_hdr(out_hdr, m, n, dtype, batch or 1, what)
    if out_ref is not None:
        assert data is None, "%s: a result in shm came with %r" % (what, type(data))
        assert out_hdr["out"] == dict(out_ref, bytes=int(np.prod(shape)) * h.DTYPES[dtype]), \
            out_hdr
        out = region.read(out_ref, dtype, shape)
    else:
        out = h.from_wire(data, dtype, shape)
    h.assert_close(out, a, b, c, alpha, beta, trans_a, trans_b, dtype, what)


# ---- results


@with_daemon
def test_features_announce_shm_on_unix_only(ctx, d, client):
    assert "shm" in client.call("info").get("features", []), client.call("info")
    with ctx.daemon(tcp=True) as d2, d2.connect("tcp") as tcp:
        assert "shm" not in tcp.call("info")["features"]


@with_daemon
def test_every_dtype_in_shm(ctx, d, client):
    region = Region(1 << 20).register(client)
    for dtype in DTYPES:
        for forms in ("abo", "ab", "o", "ao", "bo"):
            region.used = 0
            checked_gemm(ctx, client, region, 33, 17, 65, dtype, forms)
        region.used = 0
        checked_gemm(ctx, client, region, 17, 9, 13, dtype, "abco", alpha=0.5, beta=-1.5)
        region.used = 0
        checked_gemm(ctx, client, region, 17, 9, 13, dtype, "bc", True, True, 2.0, 0.25)
        region.used = 0
        checked_gemm(ctx, client, region, 7, 5, 3, dtype, "abo", True, False, batch=3)


@with_daemon
def test_unaligned_offsets(ctx, d, client):
    """Operands and the result at odd byte offsets, in every dtype: right, and under UBSan no
    misaligned load (the CPU backend reads aligned ones in place and copies the others; the
    socket fuzzer found an f16 operand at an odd offset read in place)."""
    region = Region(1 << 20).register(client)
    for dtype in DTYPES:
        m, n, k = 19, 11, 23
        a, b = h.random_operands(ctx.rng, m, n, k, dtype)
        region.used = 1                      # odd: misaligned for every dtype
        a_ref = region.put(a, dtype)         # at 1; put rounds what follows up to 64
        region.used += 3
        b_ref = region.put(b, dtype)         # at 64 * j + 3
        region.used += 5
        out = region.take(m * n * h.DTYPES[dtype])
        result = gemm_refs(client, {"m": m, "n": n, "k": k, "dtype": dtype, "out": out},
                           a_ref, b_ref)
        assert result[1] is None, "the result came as bytes"
        h.assert_close(region.read(out, dtype, (m, n)), a, b, None, 1.0, 0.0, False, False,
                       dtype, "%s at odd offsets" % dtype)


@with_daemon
def test_operands_in_two_regions(ctx, d, client):
    r1 = Region(1 << 16).register(client)
    r2 = Region(1 << 16).register(client)
    a, b = h.random_operands(ctx.rng, 20, 30, 40, "f32")
    out = r2.take(20 * 30 * 4)
    result = gemm_refs(client, {"m": 20, "n": 30, "k": 40, "dtype": "f32", "out": out},
                       r1.put(a, "f32"), r2.put(b, "f32"))
    assert result[1] is None
    h.assert_close(r2.read(out, "f32", (20, 30)), a, b, None, 1.0, 0.0, False, False, "f32")
    assert shm_stats(client) == (2, 2 << 16)


def test_larger_than_staging(ctx):
    """Operands from regions many staging buffers long: on the GPU backend the copy pauses
    while staging is full and resumes; results still exact."""
    with ctx.daemon(config={"gpu": {"staging_bytes": "64KiB"}}) as d, d.connect() as client:
        region = Region(4 << 20).register(client)
        for dtype in ("f32", "f64"):
            region.used = 0
            checked_gemm(ctx, client, region, 300, 260, 280, dtype, "abco", alpha=1.0,
                         beta=0.5)
            region.used = 0
            checked_gemm(ctx, client, region, 300, 260, 280, dtype, "ao")


@with_daemon
def test_unregister_and_reuse(ctx, d, client):
    region = Region(4096).register(client)
    assert client.call("shm_unregister", [region.id]) is None
    assert shm_stats(client) == (0, 0)
    expect_error("NOT_FOUND", client.call, "shm_unregister", [region.id], what="twice")
    a = np.ones((4, 4))
    expect_error("NOT_FOUND", gemm_refs, client, {"m": 4, "n": 4, "k": 4, "dtype": "f32"},
                 {"region": region.id, "offset": 0}, a, what="unregistered operand")
    region2 = Region(4096).register(client)
    assert region2.id != region.id
    checked_gemm(ctx, client, region2, 4, 4, 4, "f32", "abo")


# ---- refusals


@with_daemon
def test_registration_refused(ctx, d, client):
    unsealed = Region(4096, seal=False)
    msg = expect_error("INVALID_ARGUMENT", call_with_fd, client, "shm_register", [4096],
                       unsealed.fd, what="unsealed memfd")
    assert "F_SEAL_SHRINK" in msg, msg
    sealed = Region(4096)
    expect_error("INVALID_ARGUMENT", call_with_fd, client, "shm_register", [8192], sealed.fd,
                 what="declared size over the memfd's")
    expect_error("INVALID_ARGUMENT", call_with_fd, client, "shm_register", [0], sealed.fd,
                 what="size 0")
    msg = expect_error("INVALID_ARGUMENT", call_with_fd, client, "shm_register", [4096], None,
                       what="no descriptor")
    assert "no file descriptor" in msg, msg
    rfd, wfd = os.pipe()
    expect_error("INVALID_ARGUMENT", call_with_fd, client, "shm_register", [4096], rfd,
                 what="a pipe")
    with open(os.path.join(d.dir, "plain"), "wb+") as plain:
        plain.truncate(4096)
        expect_error("INVALID_ARGUMENT", call_with_fd, client, "shm_register", [4096],
                     plain.fileno(), what="a plain file (no seals)")
    with open("/dev/null", "rb") as null:
        expect_error("INVALID_ARGUMENT", call_with_fd, client, "shm_register", [4096],
                     null.fileno(), what="/dev/null")
    expect_error("INVALID_ARGUMENT", call_with_fd, client, "shm_register", ["big"], sealed.fd,
                 what="a str size")
    expect_error("INVALID_ARGUMENT", call_with_fd, client, "shm_register", [], sealed.fd,
                 what="no size")
    os.close(rfd)
    os.close(wfd)
    # each refused request consumed its descriptor: the next one pairs correctly
    assert sealed.register(client).id >= 1
    assert shm_stats(client) == (1, 4096)


@with_daemon
def test_truncation_refused_by_the_seal(ctx, d, client):
    region = Region(1 << 16).register(client)
    try:
        os.ftruncate(region.fd, 0)
    except PermissionError:
        pass
    else:
        raise AssertionError("ftruncate of a registered (sealed) memfd succeeded")
    assert os.fstat(region.fd).st_size == 1 << 16
    checked_gemm(ctx, client, region, 64, 64, 64, "f32", "abo")


@with_daemon
def test_ranges_checked(ctx, d, client):
    region = Region(4096).register(client)
    hdr = {"m": 16, "n": 16, "k": 16, "dtype": "f32"}          # 1024 bytes each
    a = np.ones((16, 16))
    cases = [({"region": region.id, "offset": 3073}, "one byte past the end"),
             ({"region": region.id, "offset": 4096}, "at the end"),
             ({"region": region.id, "offset": U64_MAX}, "offset + length overflows"),
             ({"region": region.id, "offset": U64_MAX - 1000}, "offset + length wraps")]
    for ref, what in cases:
        expect_error("INVALID_ARGUMENT", gemm_refs, client, hdr, ref, a, what="a " + what)
        expect_error("INVALID_ARGUMENT", gemm_refs, client, hdr, a, ref, what="b " + what)
        expect_error("INVALID_ARGUMENT", gemm_refs, client, dict(hdr, out=ref), a, a,
                     what="out " + what)
    expect_error("NOT_FOUND", gemm_refs, client, hdr, {"region": 999, "offset": 0}, a,
                 what="unknown region")
    expect_error("NOT_FOUND", gemm_refs, client, dict(hdr, out={"region": 999}), a, a,
                 what="unknown out region")
    for bad, what in (({"offset": 0}, "no region"), ({"region": -1}, "negative region"),
                      ({"region": region.id, "size": 3}, "unknown key")):
        expect_error("INVALID_ARGUMENT", gemm_refs, client, hdr, bad, a, what=what)
    # a key given twice: msgpack by hand, as no dict can hold it
    twice = b"\x82" + (msgpack.packb("region") + msgpack.packb(region.id)) * 2
    raw = (b"\x94\x00\xcd\x10\x00\xa4gemm\x93" + msgpack.packb(hdr) + twice +
           msgpack.packb(h.to_wire(a, "f32"), use_bin_type=True))
    client.send_raw(raw)
    reply = client.wait(0x1000)
    assert reply.error["code"] == "INVALID_ARGUMENT" and "duplicate" in \
        reply.error["message"], reply.error
    expect_error("INVALID_ARGUMENT", gemm_refs, client, dict(hdr, out=7), a, a,
                 what="out not a map")
    # the last byte fits exactly
    ref = {"region": region.id, "offset": 3072}
    region.map[3072:4096] = h.to_wire(a, "f32")
    out_hdr, c = gemm_refs(client, hdr, ref, a)
    assert np.all(h.from_wire(c, "f32", (16, 16)) == 16.0)
    # the connection is still in step
    assert client.call("ping") == "pong"


@with_daemon
def test_output_overlapping_an_input_refused(ctx, d, client):
    region = Region(1 << 14).register(client)
    hdr = {"m": 16, "n": 16, "k": 16, "dtype": "f32"}
    a = np.ones((16, 16))
    for a_off, out_off in ((0, 0), (0, 1020), (1020, 0), (512, 1024 - 4)):
        msg = expect_error("INVALID_ARGUMENT", gemm_refs, client,
                           dict(hdr, out={"region": region.id, "offset": out_off}),
                           {"region": region.id, "offset": a_off}, a,
                           what="overlap a@%d out@%d" % (a_off, out_off))
        assert "overlap" in msg, msg
    expect_error("INVALID_ARGUMENT", gemm_refs, client,
                 dict(hdr, beta=1.0, out={"region": region.id, "offset": 2048}), a, a,
                 {"region": region.id, "offset": 2048}, what="c in place")
    # adjacent is fine
    region.map[0:1024] = h.to_wire(a, "f32")
    out_hdr, c = gemm_refs(client, dict(hdr, out={"region": region.id, "offset": 1024}),
                           {"region": region.id, "offset": 0}, a)
    assert c is None and np.all(region.read({"offset": 1024}, "f32", (16, 16)) == 16.0)


def test_quotas(ctx):
    config = {"shm": {"max_regions_per_connection": 2, "max_bytes_per_connection": 12288,
                      "max_bytes_total": 16384}}
    with ctx.daemon(config=config) as d, d.connect() as one, d.connect() as two:
        Region(4096).register(one)
        Region(4096).register(one)
        msg = expect_error("RESOURCE_EXHAUSTED", Region(4096).register, one,
                           what="third region")
        assert "max_regions_per_connection" in msg, msg
        msg = expect_error("RESOURCE_EXHAUSTED", Region(16384).register, two,
                           what="over per conn")
        assert "max_bytes_per_connection" in msg, msg
        Region(8192).register(two)
        msg = expect_error("RESOURCE_EXHAUSTED", Region(4096).register, two, what="over total")
        assert "max_bytes_total" in msg, msg
        assert shm_stats(one) == (3, 16384)


def test_regions_count_against_the_memory_budget(ctx):
    config = {"queue": {"memory_budget": "1MiB"}}
    with ctx.daemon(config=config) as d, d.connect() as client:
        region = Region(512 << 10).register(client)
        assert client.call("stats")["reserved_bytes"] == 512 << 10
        msg = expect_error("RESOURCE_EXHAUSTED", Region(768 << 10).register, client,
                           what="over the budget")
        assert "queue.memory_budget" in msg, msg
        big = np.ones((256, 256))                       # 3 x 256 KiB in f32: over 512 KiB
        hdr = {"m": 256, "n": 256, "k": 256, "dtype": "f32"}
        if h.TEST_BACKEND == "cpu":   # the CPU holds a job's operands in host memory
            # a gemm over what the region left waits for room (not refused), and the region's
            # unregistration makes that room
            with d.connect() as other:
                msgid = 7  # from a thread: the daemon does not read a waiting connection
                sender = h.send_in_background(other, h.Client.pack_gemm(msgid, hdr, big, big))
                h.wait_until(lambda: h.dig(client.call("stats"), "admission_waits", 0) >= 1,
                             10 * ctx.scale, "the gemm to wait for room")
                client.call("shm_unregister", [region.id])
                _, c = other.gemm_result(msgid, hdr, timeout=30)
                assert np.all(c == 256.0)
                sender.join(10 * ctx.scale)
                assert sender.error is None, sender.error
        else:
            client.call("shm_unregister", [region.id])
        assert client.call("stats")["reserved_bytes"] == 0
        out_hdr, c = client.gemm({"m": 256, "n": 256, "k": 256, "dtype": "f32"}, big, big)
        assert np.all(c == 256.0)


def test_no_regions_allowed(ctx):
    """With max_regions_per_connection 0 every descriptor is closed on arrival: the refusal
    still names the quota, not a missing descriptor."""
    with ctx.daemon(config={"shm": {"max_regions_per_connection": 0}}) as d, \
            d.connect() as client:
        msg = expect_error("RESOURCE_EXHAUSTED", Region(4096).register, client, what="none")
        assert "max_regions_per_connection" in msg, msg
        assert client.call("ping") == "pong"


def test_disabled(ctx):
    with ctx.daemon(config={"shm": {"enabled": False}}) as d, d.connect() as client:
        assert "shm" not in client.call("info")["features"]
        expect_error("INVALID_ARGUMENT", Region(4096).register, client, what="disabled")
        assert client.call("ping") == "pong"


def test_tcp_refused(ctx):
    with ctx.daemon(tcp=True) as d, d.connect("tcp") as client:
        msg = expect_error("INVALID_ARGUMENT", client.call, "shm_register", [4096],
                           what="register over TCP")
        assert "Unix socket" in msg, msg
        expect_error("INVALID_ARGUMENT", gemm_refs, client,
                     {"m": 1, "n": 1, "k": 1, "dtype": "f32"}, {"region": 1, "offset": 0},
                     np.ones((1, 1)), what="a reference over TCP")
        assert client.call("ping") == "pong"


def test_released_with_the_connection(ctx):
    with ctx.daemon() as d:
        with d.connect() as watcher:
            watcher.call("ping")          # accepted: its socket counts in before
            before = open_fds(d.pid)
            with d.connect() as client:
                regions = [Region(1 << 16).register(client) for _ in range(3)]
                # descriptors sent with requests that take none, beyond the queue's cap
                for _ in range(80):
                    client.wait(send_with_fds(client, "ping", [], [regions[0].fd]))
                assert shm_stats(watcher) == (3, 3 << 16)
                assert client.call("stats")["shm_fds_dropped"] >= 80 - 16
            h.wait_until(lambda: shm_stats(watcher) == (0, 0), 10 * d.scale,
                         "the regions to go with their connection")
            h.wait_until(lambda: open_fds(d.pid) <= before, 10 * d.scale,
                         "the daemon's descriptors back to %d" % before)
            for r in regions:
                r.close()


# ---- in place: the backend reads and writes the mapping itself (GPU: registered for DMA)

GPU = h.TEST_BACKEND == "gpu"
FAKE = "FAKE_CUDA_DEVICES" in os.environ  # gemmd_fake: registration failures can be injected
# every job through the staging path, where regions go straight to the device (the small-job
# lane copies its slot in one piece)
# split_min_rows 0: the tests of one device's paths must not see their large jobs split across two
# (test_in_place_split turns it on)
IN_PLACE = {"gpu": {"small_job_bytes": 0, "staging_bytes": "64KiB", "split_min_rows": 0}}


def reg_stats(client):
    """The GPU backend's registration figures (zeros on the CPU backend)."""
    bs = client.call("stats").get("backend_stats", {})
    keys = ("shm_registered_regions", "shm_registered_bytes", "shm_register_failures",
            "shm_register_refused", "shm_direct_in_bytes", "shm_direct_out_bytes",
            "shm_split_jobs")
    return dict((k, bs.get(k, 0)) for k in keys)


def wait_registered(d, client, regions, nbytes):
    if GPU:
        h.wait_until(lambda: reg_stats(client)["shm_registered_regions"] == regions and
                     reg_stats(client)["shm_registered_bytes"] == nbytes, 10 * d.scale,
                     "%d regions (%d bytes) registered for DMA" % (regions, nbytes))


@contextlib.contextmanager
def split_region(ctx):
    """(client, an 8 MiB registered region) of a daemon that splits tall region gemms between
    two devices by rows and runs the parent's rows in row blocks; None on the CPU backend, with
    one GPU, or without shared memory (nothing to split)."""
    if not GPU:
        yield None
        return
    config = {"gpu": {"small_job_bytes": 0, "staging_bytes": "64KiB", "split_min_rows": 128}}
    with ctx.daemon(config=config) as d, d.connect() as client:
        stats = client.call("stats")["backend_stats"]
        if len(stats["devices"]) < 2 or "shm" not in client.call("info")["features"]:
            print("  one GPU, or no shared memory: nothing to split")
            yield None
            return
        region = Region(8 << 20).register(client)
        wait_registered(d, client, 1, 8 << 20)
        try:
            yield client, region
        finally:
            region.close()


def gemm_into(region, hdr, nbytes, poison, run, what):
    """hdr's gemm with its result written into region: nbytes taken and filled with the byte
    `poison` first, 64 guard bytes after them that must stay; run() sends it (hdr["out"] set)
    and returns (out_hdr, data). Returns (out_hdr, the result's reference)."""
    dest = region.take(nbytes + 64)
    off = dest["offset"]
    region.map[off:off + nbytes] = poison * nbytes
    region.map[off + nbytes:off + nbytes + 64] = b"\xab" * 64
    hdr["out"] = dest
    out_hdr, data = run()
    assert data is None and out_hdr["out"]["bytes"] == nbytes, (what, out_hdr)
    assert bytes(region.map[off + nbytes:off + nbytes + 64]) == b"\xab" * 64, \
        "%s: the bytes past the result were written" % what
    return out_hdr, dest


def expect_split(client, run):
    """run() (a region gemm, returning its out_hdr) split between two devices, its parent's
    rows in pieces; returns the out_hdr."""
    before = client.call("stats")["backend_stats"]
    out_hdr = run()
    after = client.call("stats")["backend_stats"]
    assert after["shm_split_jobs"] - before["shm_split_jobs"] == 1, (before, after)
    assert after["shm_pieced_jobs"] > before["shm_pieced_jobs"], (before, after)
    assert "+" in out_hdr["device"], out_hdr
    return out_hdr


def pinned_metric(port):
    return mu.value(mu.parse(mu.http_get(port, "/metrics")[1]), "gemmd_shm_registered_bytes")


def test_in_place_forms(ctx):
    """Every mix of a, b, c and the result in a registered region or on the socket, with
    transposes, beta and batches, against the float64 reference; on the GPU each operand in a
    region and each result into one is copied straight (the direct byte counts say exactly
    which), none through staging. The registration shows in gemmd_shm_registered_bytes."""
    port = h.free_tcp_port()
    config = dict(IN_PLACE, metrics={"listen": "tcp:127.0.0.1:%d" % port})
    with ctx.daemon(config=config) as d, d.connect() as client:
        region = Region(4 << 20).register(client)
        wait_registered(d, client, 1, 4 << 20)
        assert pinned_metric(port) == (4 << 20 if GPU else 0)
        for dtype in DTYPES:
            size = h.DTYPES[dtype]
            cases = [(70, 50, 90, "abo", False, False, 1.0, 0.0, None),
                     (70, 50, 90, "ab", True, False, 1.0, 0.0, None),
                     (33, 65, 17, "o", False, True, -0.5, 0.0, None),
                     (33, 65, 17, "abco", True, True, 2.0, 0.5, None),
                     (33, 65, 17, "co", False, False, 1.0, -1.0, None),
                     (40, 30, 20, "bc", False, False, 1.0, 0.25, None),
                     (9, 7, 5, "abo", False, True, 1.0, 0.0, 3)]
            for m, n, k, forms, ta, tb, alpha, beta, batch in cases:
                before = reg_stats(client)
                region.used = 0
                checked_gemm(ctx, client, region, m, n, k, dtype, forms, ta, tb, alpha, beta,
                             batch)
                if not GPU:
                    continue
                after = reg_stats(client)
                per = (batch or 1) * size
                want_in = sum(per * x for name, x in (("a", m * k), ("b", k * n), ("c", m * n))
                              if name in forms and (name != "c" or beta))
                want_out = per * m * n if "o" in forms else 0
                got_in = after["shm_direct_in_bytes"] - before["shm_direct_in_bytes"]
                got_out = after["shm_direct_out_bytes"] - before["shm_direct_out_bytes"]
                assert (got_in, got_out) == (want_in, want_out), (dtype, forms, got_in, got_out,
                                                                  want_in, want_out)
        assert client.call("shm_unregister", [region.id]) is None
        wait_registered(d, client, 0, 0)
        assert pinned_metric(port) == 0


def test_in_place_larger_than_staging(ctx):
    """Operands many staging buffers long go straight through in one copy each."""
    with ctx.daemon(config=IN_PLACE) as d, d.connect() as client:
        region = Region(8 << 20).register(client)
        wait_registered(d, client, 1, 8 << 20)
        for dtype in ("f32", "f64"):
            region.used = 0
            checked_gemm(ctx, client, region, 300, 260, 280, dtype, "abco", alpha=1.0, beta=0.5)
        if GPU:
            assert reg_stats(client)["shm_direct_out_bytes"] >= 300 * 260 * 12


def test_in_place_row_blocks(ctx):
    """A gemm of at least 2 x 2048 rows whose A and result are in registered regions runs on
    the GPU in row blocks (gpu.shm_pieces), each block's copies overlapping the other blocks'
    kernels: ragged last blocks, C from a region or from the socket, B from either, every
    dtype, against the float64 reference, with every byte of A, C and the result copied
    straight exactly once. A transposed A, or shm_pieces 1, runs at once."""
    cases = [(4173, 24, 40, "f32", "abo", False, False, 1.0, 0.0, True),
             (9000, 9, 13, "f64", "abco", False, True, 1.0, 0.5, True),
             (8300, 16, 8, "f16", "ao", False, False, 1.0, -1.0, True),
             (5000, 8, 16, "bf16", "abo", False, True, 2.0, 0.0, True),
             (4500, 8, 16, "f32", "abo", True, False, 1.0, 0.0, False)]
    for pieces in (4, 1):
        config = {"gpu": dict(IN_PLACE["gpu"], shm_pieces=pieces)}
        with ctx.daemon(config=config) as d, d.connect() as client:
            region = Region(8 << 20).register(client)
            wait_registered(d, client, 1, 8 << 20)
            for m, n, k, dtype, forms, ta, tb, alpha, beta, blocked in cases:
                before = client.call("stats").get("backend_stats", {})
                region.used = 0
                checked_gemm(ctx, client, region, m, n, k, dtype, forms, ta, tb, alpha, beta)
                if not GPU:
                    continue
                after = client.call("stats").get("backend_stats", {})
                grew = dict((key, after[key] - before[key]) for key in
                            ("shm_pieced_jobs", "shm_direct_in_bytes", "shm_direct_out_bytes"))
                size = h.DTYPES[dtype]
                want_in = sum(size * x for name, x in (("a", m * k), ("b", k * n), ("c", m * n))
                              if name in forms and (name != "c" or beta))
                want = {"shm_pieced_jobs": int(blocked and pieces > 1),
                        "shm_direct_in_bytes": want_in, "shm_direct_out_bytes": size * m * n}
                assert grew == want, (pieces, m, n, k, dtype, forms, grew, want)


def failed_launch_then_right(ctx, client, region, m, nk):
    """An m x nk x nk f32 gemm in region whose launch fails (the fake's alpha 777) answers
    INTERNAL; the same gemm then comes back right."""
    region.used = 0
    a, b = h.random_operands(ctx.rng, m, nk, nk, "f32")
    hdr = {"m": m, "n": nk, "k": nk, "dtype": "f32", "alpha": 777.0,
           "out": region.take(m * nk * 4)}
    expect_error("INTERNAL", gemm_refs, client, hdr, region.put(a, "f32"),
                 region.put(b, "f32"), what="a failed launch")
    region.used = 0
    checked_gemm(ctx, client, region, m, nk, nk, "f32", "abo")


def test_in_place_split(ctx):
    """gpu.split_min_rows: a gemm whose A, B, C and result all lie in registered regions, of at
    least twice that many rows, A not transposed, is split by rows of C between its device and
    an idle second one: the reply names both devices and holds the whole result, right in every
    dtype (ragged halves, C with beta, a transposed B), and stats count it. An operand over the
    socket, a transposed A or too few rows keep it whole."""
    if not GPU:
        return
    cases = [(300, 40, 50, "f32", "abo", False, False, 1.0, 0.0, True),
             (333, 17, 29, "f64", "abco", False, True, -1.0, 0.5, True),
             (257, 8, 16, "f16", "abo", False, False, 2.0, 0.0, True),
             (300, 9, 13, "bf16", "abo", False, True, 1.0, 0.0, True),
             (300, 9, 13, "f32", "ao", False, False, 1.0, 0.0, False),
             (300, 9, 13, "f32", "abo", True, False, 1.0, 0.0, False),
             (255, 9, 13, "f32", "abo", False, False, 1.0, 0.0, False)]
    config = {"gpu": dict(IN_PLACE["gpu"], split_min_rows=128)}
    with ctx.daemon(config=config) as d, d.connect() as client:
        if len(client.call("stats")["backend_stats"]["devices"]) < 2:
            print("  one GPU: nothing to split with")
            return
        region = Region(8 << 20).register(client)
        wait_registered(d, client, 1, 8 << 20)
        for m, n, k, dtype, forms, ta, tb, alpha, beta, split in cases:
            before = reg_stats(client).get("shm_split_jobs", 0)
            region.used = 0
            checked_gemm(ctx, client, region, m, n, k, dtype, forms, ta, tb, alpha, beta)
            grew = client.call("stats")["backend_stats"]["shm_split_jobs"] - before
            assert grew == int(split), (m, n, k, dtype, forms, ta, grew)
        if FAKE:  # both halves' launches fail: one INTERNAL answer, and the next is right
            failed_launch_then_right(ctx, client, region, 300, 16)
        # the devices stay idle in between, so every eligible one above was split; a stats
        # read shows both devices computed
        per = [dev["jobs"] for dev in client.call("stats")["backend_stats"]["devices"]]
        assert all(jobs > 0 for jobs in per), per
        # four clients at once: split or not as the devices happen to be idle, every result
        # right, and nothing left behind
        errors = []
        splits_before = reg_stats(client)["shm_split_jobs"]

        def client_loop(seed):
            rng = np.random.default_rng(seed)
            try:
                with d.connect() as c:
                    own = Region(4 << 20).register(c)  # staged until registered: right too
                    for i in range(12):
                        own.used = 0
                        m = int(rng.integers(256, 400))
                        checked_gemm(ctx, c, own, m, 24, 40, ("f32", "f64")[i % 2], "abco",
                                     alpha=1.5, beta=0.5)
            except Exception as exc:  # noqa: reported below
                errors.append(exc)

        threads = [threading.Thread(target=client_loop, args=(seed,)) for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        print("  %d of 48 gemms from 4 clients at once were split" %
              (reg_stats(client)["shm_split_jobs"] - splits_before))
        st = client.call("stats")
        assert (st["queue_depth"], st["jobs_running"]) == (0, 0), st
        if FAKE:  # a split gemm that faults both devices (alpha 666): one UNAVAILABLE answer
            region.used = 0
            a, b = h.random_operands(ctx.rng, 300, 16, 16, "f32")
            hdr = {"m": 300, "n": 16, "k": 16, "dtype": "f32", "alpha": 666.0,
                   "out": region.take(300 * 16 * 4)}
            expect_error("UNAVAILABLE", gemm_refs, client, hdr, region.put(a, "f32"),
                         region.put(b, "f32"), what="a split gemm that faults both devices")
            assert client.call("ping") == "pong"


def test_in_place_region_outlives_its_unregister(ctx):
    """A region unregistered (or its connection closed) while a gemm still reads it in place
    stays mapped until the job is done: the result is exact, and the registration goes after."""
    with ctx.daemon(config=IN_PLACE) as d, d.connect() as client:
        ins = Region(1 << 20).register(client)
        outs = Region(1 << 20).register(client)
        wait_registered(d, client, 2, 2 << 20)
        m, n, k = 200, 150, 180
        a, b = h.random_operands(ctx.rng, m, n, k, "f32")
        hdr = {"m": m, "n": n, "k": k, "dtype": "f32", "out": outs.take(m * n * 4)}
        msgid = client._take_msgid(None)
        client.send_raw(msgpack.packb([0, msgid, "gemm", [hdr, ins.put(a, "f32"),
                                                          ins.put(b, "f32")]],
                                      use_bin_type=True))
        unreg = client.request("shm_unregister", [ins.id])  # right behind it, unanswered
        assert client.result_of(client.wait(unreg)) is None
        assert client.result_of(client.wait(msgid))[1] is None
        h.assert_close(outs.read(hdr["out"], "f32", (m, n)), a, b, None, 1.0, 0.0, False, False,
                       "f32")
        wait_registered(d, client, 1, 1 << 20)
        # hang up with a gemm in flight: the daemon lets go of both regions once it is done
        with d.connect() as other:
            r = Region(1 << 20).register(other)
            wait_registered(d, client, 2, 2 << 20)
            o = r.take(m * n * 4)
            other.send_raw(msgpack.packb([0, 1, "gemm", [dict(hdr, out=o), r.put(a, "f32"),
                                                         r.put(b, "f32")]], use_bin_type=True))
        h.wait_until(lambda: shm_stats(client) == (1, 1 << 20), 10 * d.scale,
                     "the other connection's region to go")
        wait_registered(d, client, 1, 1 << 20)
        checked_gemm(ctx, client, outs, 31, 17, 9, "f32", "abo")


def test_in_place_while_waiting_for_memory(ctx):
    """Clients whose in-place jobs cannot all fit device memory at once: each waits for its
    turn (the copies straight from its region come at its RUN, whenever that is), all exact."""
    config = h.deep_merge(IN_PLACE, {"gpu": {"memory_bytes": "1MiB"}})
    with ctx.daemon(config=config) as d, d.connect() as watcher:
        clients = [d.connect(timeout=120) for _ in range(4)]
        regions = [Region(2 << 20).register(c) for c in clients]
        wait_registered(d, watcher, 4, 4 * (2 << 20))

        def one(i):
            sub = type("Ctx", (), {"rng": np.random.default_rng(1000 + i)})()
            for forms in ("abo", "abco", "ab", "bo"):
                regions[i].used = 0
                checked_gemm(sub, clients[i], regions[i], 256, 256, 256, "f32", forms,
                             alpha=1.0, beta=0.5 if "c" in forms else 0.0)
        h.run_threads(one, 4)
        if GPU:
            assert reg_stats(watcher)["shm_direct_out_bytes"] == 4 * 3 * 256 * 256 * 4
        for c in clients:
            c.close()


def test_in_place_fallbacks(ctx):
    """cudaHostRegister failing, or a region over shm.gpu_register_max_bytes: the region's
    operands take the staging path, results exact, nothing counted as registered."""
    if not GPU:
        return
    cases = [(None, dict(IN_PLACE, shm={"gpu_register_max_bytes": "1MiB"}),
              "shm_register_refused")]
    if FAKE:
        cases.append(({"FAKE_CUDA_HOST_REGISTER": "fail"}, IN_PLACE, "shm_register_failures"))
    for env, config, key in cases:
        with ctx.daemon(config=config, env=env) as d, d.connect() as client:
            region = Region(2 << 20).register(client)
            h.wait_until(lambda: reg_stats(client)[key] == 1, 10 * d.scale,
                         "%s to count the region" % key)
            for forms in ("abo", "abco", "o"):
                region.used = 0
                checked_gemm(ctx, client, region, 64, 48, 80, "f32", forms, alpha=1.0,
                             beta=0.5 if "c" in forms else 0.0)
            stats = reg_stats(client)
            assert stats["shm_registered_regions"] == 0 and stats["shm_registered_bytes"] == 0
            assert stats["shm_direct_in_bytes"] == 0 and stats["shm_direct_out_bytes"] == 0
            # a region that fits is still registered beside it
            small = Region(1 << 16).register(client)
            if key == "shm_register_refused":
                wait_registered(d, client, 1, 1 << 16)
                checked_gemm(ctx, client, small, 20, 20, 20, "f32", "abo")
                assert reg_stats(client)["shm_direct_out_bytes"] == 20 * 20 * 4


def test_in_place_failed_launch(ctx):
    """A job reading and writing registered regions whose launch fails (the fake's alpha 777)
    answers INTERNAL; the regions stay usable and are let go of with the connection."""
    if not FAKE:
        return
    with ctx.daemon(config=IN_PLACE) as d, d.connect() as client:
        with d.connect() as other:
            region = Region(1 << 20).register(other)
            wait_registered(d, client, 1, 1 << 20)
            failed_launch_then_right(ctx, other, region, 64, 64)
        wait_registered(d, client, 0, 0)
        assert client.call("ping") == "pong"


if __name__ == "__main__":
    sys.exit(h.main([test_features_announce_shm_on_unix_only, test_every_dtype_in_shm,
                     test_unaligned_offsets, test_operands_in_two_regions, test_larger_than_staging, test_unregister_and_reuse,
                     test_registration_refused, test_truncation_refused_by_the_seal,
                     test_ranges_checked, test_output_overlapping_an_input_refused, test_quotas,
                     test_regions_count_against_the_memory_budget, test_no_regions_allowed,
                     test_disabled, test_tcp_refused, test_released_with_the_connection,
                     test_in_place_forms, test_in_place_larger_than_staging,
                     test_in_place_row_blocks, test_in_place_split,
                     test_in_place_region_outlives_its_unregister, test_in_place_fallbacks, test_in_place_failed_launch,
                     test_in_place_while_waiting_for_memory]))
