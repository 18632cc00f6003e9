#!/usr/bin/python3
"""A socket-level fuzzer of the running daemon.

Each execution opens a connection, writes one input (valid requests mutated: bit flips,
interesting bytes, truncations, splices of two messages, huge declared lengths, random
msgpack objects as whole messages, params or header values; a memfd passed and registered,
then gemms naming it, in bounds or not; a cuda_register of fake device memory, then gemms
naming it), half-closes, and reads until the daemon closes (one in
ten closes at once instead): every reply must be a well-formed msgpack-RPC response, and the
daemon must close once it has answered (a connection left hanging is a failure). After each
batch the daemon must still be running, answer ping and gemms checked against the float64
reference, hold no connection, job, reserved byte or shared-memory region of the batch any more
(stats), and its log must hold no sanitizer report.

  fuzz_socket.py --gemmd PATH [--seconds S] [--executions N] [--batch N] [--workers N]
  fuzz_socket.py --gemmd PATH --replay DIR|FILE...

Defaults: 20 s (times GEMMD_LOAD_SCALE), batches of 200 on 4 connections at a time. Prints
"LOAD fuzz_socket executions=N ..." at the end. A failing batch is written to
fuzz-failure/ in the daemon's temp dir (kept), one file per input; --replay sends those files
(a folder's in name order) as one batch to a fresh daemon. GEMMD_TEST_SEED
replays a run."""
import argparse
import concurrent.futures
import fcntl
import os
import re
import socket
import struct
import sys
import time

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load_util as lu  # noqa: E402
from load_util import h  # noqa: E402

# Small limits: a mutated header that declares a large request is refused or admitted without
# reserving much (the same code paths as with the defaults, less memory under ASan).
CONFIG = {"log_level": "error", "cpu": {"threads": 2},
          "queue": {"memory_budget": "256MiB", "max_jobs": 64},
          "shm": {"max_bytes_per_connection": "1MiB", "max_bytes_total": "64MiB"},
          "limits": {"max_operand_bytes": "16MiB", "max_message_bytes": "64MiB"},
          "timeouts": {"request_ms": 10000}}
INTERESTING = [0x00, 0x01, 0x7f, 0x80, 0xff, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7,
               0xca, 0xcb, 0xcf, 0xd3, 0xd9, 0xdb, 0xdc, 0xdd, 0xde, 0xdf, 0x90, 0x94, 0x9f,
               0x80, 0x8f, 0xa0, 0xbf, 0xe0]
# msgpack heads that declare far more than follows (bin32, str32, array32, map32, ext32)
HUGE_HEADS = [b"\xc6", b"\xdb", b"\xdd", b"\xdf", b"\xc9\x00\x00\x00\x01"]
HDR_KEYS = ["m", "n", "k", "dtype", "trans_a", "trans_b", "alpha", "beta", "batch",
            "precision", "timeout_ms", "bias", "activation", "scale_a", "scale_b", "alpha_im",
            "beta_im", "conj_a", "conj_b", "lda", "ldb", "ldc"]
ACTIVATIONS = ["none", "relu", "gelu", "gelu_tanh"]
DTYPE_SIZE = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i8": 1, "e4m3": 1, "e5m2": 1,
              "c64": 8, "c128": 16}
# A CUDA IPC handle as gemmd_fake's runtime reads it (magic, pid, descriptor of a memfd that is
# the "device memory"), with pid 0 and the size in the descriptor's place: execute() makes the
# memfd and writes the real pid and descriptor in, so a kept input replays.
CUDA_PLACEHOLDER = b"FAKEIPC1" + struct.pack("<i", 0)
CUDA_BUS_IDS = ["0000:10:00.0", "0000:10:00.0", "10:00.0", "0000:11:00.0", "zz:zz", ""]


class Fuzzer:
    def __init__(self, rng_):
        self.rng = rng_

    def randint(self, lo, hi):
        return int(self.rng.integers(lo, hi + 1))

    def chance(self, p):
        return self.rng.random() < p

    def choice(self, seq):
        return seq[self.randint(0, len(seq) - 1)]

    # -- valid seeds
    def msgid(self):
        return self.choice([0, 1, self.randint(0, 2**32 - 1), 2**32 - 1])

    def gemm_seed(self):
        dtype = self.choice(list(DTYPE_SIZE))
        m, n, k = self.randint(1, 9), self.randint(1, 9), self.randint(1, 9)
        batch = self.choice([None, 1, self.randint(1, 3)])
        hdr = {"m": m, "n": n, "k": k, "dtype": dtype}
        if self.chance(0.3):
            hdr["trans_a"] = self.chance(0.5)
            hdr["trans_b"] = self.chance(0.5)
        if self.chance(0.3):  # i8 takes integers: a fraction is its refusal to fuzz
            hdr["alpha"] = self.choice([self.rng.uniform(-2, 2), self.randint(-3, 3)])
        with_c = self.chance(0.3)
        if with_c:
            hdr["beta"] = self.choice([0.0, 0.5, 1])
        if batch:
            hdr["batch"] = batch
        if self.chance(0.2):
            hdr["precision"] = self.choice(["exact", "fast"])
        if self.chance(0.1):
            hdr["timeout_ms"] = self.randint(0, 1000)
        if self.chance(0.2):
            hdr["activation"] = self.choice(ACTIVATIONS)
        if self.chance(0.2):  # fp8's per-tensor scales: on another dtype, their refusal
            hdr[self.choice(["scale_a", "scale_b"])] = self.choice([0.5, 2, 1e300, -0.0])
        if self.chance(0.2):  # the complex keys: on another dtype, their refusal
            hdr[self.choice(["alpha_im", "beta_im", "conj_a", "conj_b"])] = \
                self.choice([0.5, -2, True, False])
        if self.chance(0.05):  # leading dimensions with payloads: refused
            hdr[self.choice(["lda", "ldb", "ldc"])] = self.choice([1, k + 1, 2**63])
        bias = with_c and self.chance(0.3)  # the epilogue's c: one row of n
        if bias:
            hdr["bias"] = True
        size, nb = DTYPE_SIZE[dtype], batch or 1
        c_size = 4 if dtype in ("i8", "e4m3", "e5m2") else size  # i8's c is i32, fp8's f32
        params = [hdr, self.rng.bytes(nb * m * k * size), self.rng.bytes(nb * k * n * size)]
        if with_c:
            params.append(self.rng.bytes(n * c_size if bias else nb * m * n * c_size))
        return [0, self.msgid(), "gemm", params]

    def seed(self):
        kind = self.randint(0, 9)
        if kind < 5:
            return self.gemm_seed()
        if kind < 8:
            return [0, self.msgid(), self.choice(["ping", "info", "stats"]), []]
        if kind == 8:
            return [2, self.choice(["ping", "gemm", "nope"]), []]
        methods = ["cancel", "", "x" * 40, "auth", "shm_unregister"]
        return [0, self.msgid(), self.choice(methods), []]

    # -- random msgpack
    def random_object(self, depth=0):
        kind = self.randint(0, 11 if depth < 4 else 7)
        if kind == 0:
            return None
        if kind == 1:
            return self.chance(0.5)
        if kind == 2:
            return self.choice([0, -1, 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, -2**63,
                                2**64 - 1, self.randint(-1000, 100000)])
        if kind == 3:
            return self.choice([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e308,
                                self.rng.uniform(-1e6, 1e6)])
        if kind == 4:
            return self.choice(HDR_KEYS + ["gemm", "ping", "", "\u00e9" * 3, "x" * 300])
        if kind == 5:
            return self.rng.bytes(self.randint(0, 64))
        if kind == 6:
            return msgpack.ExtType(self.randint(0, 127), self.rng.bytes(self.randint(0, 8)))
        if kind == 7:
            return self.randint(0, 64)
        if kind in (8, 9):
            return [self.random_object(depth + 1) for _ in range(self.randint(0, 5))]
        return {self.random_key(): self.random_object(depth + 1)
                for _ in range(self.randint(0, 5))}

    def random_key(self):
        return self.choice(HDR_KEYS + ["x", ""]) if self.chance(0.8) else self.randint(0, 9)

    def structured(self):
        """A valid envelope around something odd: random params, or a gemm header with odd
        values (huge, negative, wrong types, unknown or missing keys)."""
        if self.chance(0.3):
            methods = ["gemm", "ping", "stats", "auth", "shm_register"]
            return [0, self.msgid(), self.choice(methods), self.random_object()]
        msg = self.gemm_seed()
        hdr = msg[3][0]
        for _ in range(self.randint(1, 3)):
            key = self.random_key()
            hdr[key] = self.choice([self.random_object(), 0, 65537, 2**32, 2**62, -1, "f32"])
        if self.chance(0.2):
            hdr.pop(self.choice(["m", "n", "k", "dtype"]), None)
        if self.chance(0.3):
            msg[3] = msg[3][:self.randint(0, len(msg[3]))]
        return msg

    # -- byte mutations
    def mutate(self, data):
        data = bytearray(data)
        for _ in range(self.randint(1, 4)):
            op = self.randint(0, 6)
            if not data:
                data = bytearray(self.pack(self.seed()))
            pos = self.randint(0, len(data) - 1)
            if op == 0:
                data[pos] ^= 1 << self.randint(0, 7)
            elif op == 1:
                data[pos] = self.choice(INTERESTING)
            elif op == 2:
                del data[self.randint(0, len(data) - 1):]
            elif op == 3:
                other = self.pack(self.seed())
                data = data[:pos] + other[self.randint(0, len(other) - 1):]
            elif op == 4:
                head = self.choice(HUGE_HEADS)
                length = self.choice([0xFFFFFFFF, 0x7FFFFFFF, 0x10000000,
                                      self.randint(0, 2**32 - 1)])
                data[pos:pos] = head + struct.pack(">I", length)
            elif op == 5:
                data[pos:pos] = self.rng.bytes(self.randint(1, 16))
            else:
                end = self.randint(pos, len(data))
                data[pos:pos] = data[pos:end]
        return bytes(data)

    @staticmethod
    def pack(obj):
        return msgpack.packb(obj, use_bin_type=True)

    def ref(self, size):
        """A reference into region 1 (mostly), in bounds or not."""
        ref = {"region": self.choice([1, 1, 1, 2, 0])}
        if self.chance(0.8):
            ref["offset"] = self.choice([0, 0, self.randint(0, size), size, 2**63, -1])
        return ref

    def naming_tail(self, size, p_operand, p_out):
        """A gemm whose operands (each with p_operand) and result (p_out) name region 1 of
        size bytes, mutated now and then, sometimes followed by a shm_unregister."""
        gemm = self.gemm_seed()
        params = gemm[3]
        for i in range(1, len(params)):
            if self.chance(p_operand):
                params[i] = self.ref(size)
        if self.chance(p_out):
            params[0]["out"] = self.ref(size)
        tail = self.pack(gemm)
        if self.chance(0.3):
            tail = self.mutate(tail)
        if self.chance(0.3):
            tail += self.pack([0, self.msgid(), "shm_unregister", [self.choice([1, 2, "x"])]])
        return tail

    def declared(self, size):
        return size if self.chance(0.8) else self.choice([0, size + 1, 2**32, 2**64 - 1])

    def shm_input(self):
        """A memfd of `size` bytes registered, then a gemm naming it (mutated or not): returns
        (bytes, size); the descriptor goes with the first byte."""
        size = self.choice([0, 1, 4096, 65536, self.randint(1, 65536)])
        register = self.pack([0, self.msgid(), "shm_register", [self.declared(size)]])
        return register + self.naming_tail(size, 0.6, 0.3), size

    def cuda_input(self):
        """A cuda_register of "device memory" (a memfd, over gemmd_fake: see CUDA_PLACEHOLDER),
        then a gemm naming it (mutated or not); the CPU backend answers UNIMPLEMENTED."""
        size = self.choice([4096, 65536, self.randint(1, 65536)])
        handle = CUDA_PLACEHOLDER + struct.pack("<i", size) + bytes(64 - 16)
        if self.chance(0.15):
            handle = self.choice([self.rng.bytes(64), handle[:self.randint(0, 63)], handle + b"x"])
        reg = {"handle": handle, "pci_bus_id": self.choice(CUDA_BUS_IDS),
               "bytes": self.declared(size)}
        if self.chance(0.1):
            reg[self.choice(list(reg))] = self.random_object()
        register = self.pack([0, self.msgid(), "cuda_register", [reg]])
        return register + self.naming_tail(size, 0.7, 0.8), None

    def input(self):
        """(bytes, memfd size or None): one execution's input."""
        kind = self.randint(0, 11)
        if kind < 5:
            data = b"".join(self.pack(self.seed()) for _ in range(self.randint(1, 3)))
            return self.mutate(data), None
        if kind < 8:
            return self.pack(self.structured()), None
        if kind == 8:
            return self.pack(self.random_object()), None
        if kind == 9:
            return self.shm_input()
        if kind == 10:
            return self.cuda_input()
        return self.rng.bytes(self.randint(1, 256)), None


def _well_formed(obj):
    if not isinstance(obj, list) or len(obj) != 4 or obj[0] != 1:
        return False
    if not isinstance(obj[1], int) or not 0 <= obj[1] <= 0xFFFFFFFF:
        return False
    error = obj[2]
    return error is None or (isinstance(error, dict) and isinstance(error.get("code"), str) and
                             isinstance(error.get("message"), str) and obj[3] is None)


def _send_with_memfd(sock, data, size):
    """data, with a sealed memfd of size bytes attached to its first byte (SCM_RIGHTS)."""
    fd = os.memfd_create("fuzz", os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        sent = sock.sendmsg([data[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                          struct.pack("i", fd))])
    finally:
        os.close(fd)
    sock.sendall(data[sent:])


def _with_device_memfds(data):
    """data with each CUDA_PLACEHOLDER made a real fake handle: a memfd of the size it carries,
    this process's pid and the descriptor. Returns (data, descriptors to close after)."""
    if CUDA_PLACEHOLDER not in data:  # most inputs: no copy
        return data, []
    out, fds = bytearray(data), []
    at = out.find(CUDA_PLACEHOLDER)
    while 0 <= at and at + 16 <= len(out):
        size = struct.unpack_from("<i", out, at + 12)[0]
        if 0 < size <= 1 << 20:
            fd = os.memfd_create("fuzz-device")
            fds.append(fd)
            os.ftruncate(fd, size)
            struct.pack_into("<ii", out, at + 8, os.getpid(), fd)
        at = out.find(CUDA_PLACEHOLDER, at + 1)
    return bytes(out), fds


def execute(path, item, timeout, abrupt):
    """One input (bytes, memfd size or None) on a fresh connection; returns None or what went
    wrong. abrupt: close at once without reading (the replies then meet a closed peer)."""
    data, memfd_size = item
    data, device_fds = _with_device_memfds(data)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        try:
            if memfd_size is None:
                sock.sendall(data)
            else:
                _send_with_memfd(sock, data, memfd_size)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed on a fatal error before all of it went: fine
        if abrupt:
            return None
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=1 << 26)
        deadline = time.monotonic() + timeout
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except socket.timeout:
                return "the daemon neither answered nor closed within %.0f s of our EOF" % timeout
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                break
            unpacker.feed(chunk)
            for obj in unpacker:
                if not _well_formed(obj):
                    return "a reply that is not a response: %r" % (obj,)
            if time.monotonic() > deadline:
                return "replies still coming %.0f s after our EOF" % timeout
        return None
    except ValueError as exc:  # msgpack: bytes that are not msgpack
        return "reply bytes that are not msgpack: %s" % exc
    finally:
        sock.close()
        for fd in device_fds:
            os.close(fd)


def _settled(st):
    """Every fuzz connection closed (only the health client is left) and nothing held."""
    return (st["connections"] == 1 and st["queue_depth"] == 0 and st["jobs_running"] == 0 and
            st["reserved_bytes"] == 0 and st.get("shm_regions", 0) == 0 and
            st.get("cuda_ipc_regions", 0) == 0)


def _healthy(d, client, rng_):
    if not d.running():
        raise AssertionError("gemmd exited with %r" % d.proc.returncode)
    assert client.call("ping") == "pong"
    h.check_gemm(client, rng_, 13, 11, 7, "f32")
    h.check_gemm(client, rng_, 5, 6, 4, "f64", beta=0.5)
    lu.wait_stats(d, _settled, 10 * d.scale, "no connection, job, reserved byte or region "
                  "left over from the batch", client)
    d.check_log()


def _keep(d, inputs):
    """The batch's inputs as files, in order; a memfd's size in the name (input-N.fd-SIZE)."""
    folder = os.path.join(d.dir, "fuzz-failure")
    os.makedirs(folder, exist_ok=True)
    for i, (data, memfd_size) in enumerate(inputs):
        name = "input-%04d%s.bin" % (i, "" if memfd_size is None else ".fd-%d" % memfd_size)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    return folder


def _options():
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--executions", type=int)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--replay", nargs="+")
    args, _ = parser.parse_known_args()
    return args


def _run_batch(d, client, pool, inputs, abrupt, rng_):
    """The inputs on connections of their own, then the health checks; a failure keeps the
    batch and raises."""
    timeout = 10 * d.scale
    outcomes = list(pool.map(lambda data, cut: execute(d.unix_path, data, timeout, cut),
                             inputs, abrupt))
    bad = [(i, why) for i, why in enumerate(outcomes) if why]
    try:
        assert not bad, "input %d of the batch: %s" % bad[0]
        _healthy(d, client, rng_)
    except BaseException:
        print("fuzz_socket: failing batch kept in %s" % _keep(d, inputs), flush=True)
        raise


def _replay_inputs(paths):
    files = []
    for path in paths:
        if os.path.isdir(path):
            files += sorted(os.path.join(path, name) for name in os.listdir(path))
        else:
            files.append(path)
    inputs = []
    for name in files:
        with open(name, "rb") as f:
            memfd = re.search(r"\.fd-(\d+)\.bin$", name)
            inputs.append((f.read(), int(memfd.group(1)) if memfd else None))
    return inputs


def test_fuzz_socket(ctx):
    args = _options()
    seconds = args.seconds if args.seconds is not None else 20 * lu.load_scale()
    fuzzer = Fuzzer(ctx.rng)
    executions, batches = 0, 0
    start = time.monotonic()
    with ctx.daemon(config=CONFIG) as d, d.connect() as client, \
            concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
        rss_before = lu.rss_bytes(d.pid)
        if args.replay:  # the inputs of a kept batch, once, in order
            inputs = _replay_inputs(args.replay)
            _run_batch(d, client, pool, inputs, [False] * len(inputs), ctx.rng)
            executions, batches = len(inputs), 1
        while not args.replay:
            if args.executions is not None and executions >= args.executions:
                break
            if args.executions is None and time.monotonic() - start >= seconds:
                break
            inputs = [fuzzer.input() for _ in range(args.batch)]
            _run_batch(d, client, pool, inputs, [fuzzer.chance(0.1) for _ in inputs], ctx.rng)
            executions += len(inputs)
            batches += 1
        elapsed = time.monotonic() - start
        st = client.call("stats")
        lu.figures("fuzz_socket", executions=executions, batches=batches,
                   seconds="%.1f" % elapsed, per_s="%.0f" % (executions / elapsed),
                   requests_seen=st["requests"]["total"],
                   error_replies=sum(st["errors"].values()),
                   shm_registered=st.get("shm_registered_total", 0),
                   cuda_registered=st.get("cuda_ipc_registered_total", 0),
                   cuda_opened=h.dig(st, "backend_stats.cuda_ipc_opened_total", 0),
                   cuda_bytes=h.dig(st, "backend_stats.cuda_ipc_in_bytes", 0) +
                   h.dig(st, "backend_stats.cuda_ipc_out_bytes", 0),
                   connections=st["connections_total"], failures=0,
                   rss_before_mib=lu.mib(rss_before), rss_after_mib=lu.mib(lu.rss_bytes(d.pid)))


if __name__ == "__main__":
    sys.exit(h.main([test_fuzz_socket]))
