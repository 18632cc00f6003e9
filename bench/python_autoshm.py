#!/usr/bin/python3
"""The Python client's gemm() from plain NumPy arrays three ways, against one daemon (issue
34): the default (the automatic scratch region), the socket (auto_shm=False), and shm_array
operands with out= (no copy at all: the floor). Beside them, the box's memory copy bandwidth
with 1 and N threads in the same run, and the copies the default path makes (what bounds it).
Median of --repeat runs after one warm-up each; prints a Markdown table and writes it to --out,
with a second one of where the default path's calls went (copy in, the gemm, copy out) and, on a
GPU daemon, the share of the bytes it moved straight between the regions and the device.

  bench/python_autoshm.py --gemmd build/daemon/gemmd --out $OUT/python_autoshm.md
  bench/python_autoshm.py --address unix:/run/gemmd/gemmd.sock --sizes f32:1024,f64:4096

--gemmd starts a daemon of its own (--backend, default gpu; default config; a Unix socket under
/tmp) and stops it at the end. A benchmark, not a test: it asserts nothing about times, but it
does check every result against NumPy's.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import gemmd  # noqa: E402
from gemmd import _copier  # noqa: E402

DEFAULT_SIZES = "f32:256,f32:512,f32:1024,f32:2048,f32:4096,f32:8192,f64:4096"
NP = {"f32": np.float32, "f64": np.float64}


def start_daemon(binary, backend):
    """(process, address, directory) of a gemmd on a Unix socket under /tmp."""
    where = tempfile.mkdtemp(prefix="gemmd-bench-", dir="/tmp")
    sock = os.path.join(where, "gemmd.sock")
    config = os.path.join(where, "gemmd.yaml")
    with open(config, "w") as f:
        f.write("listen:\n  - unix:%s\n" % sock)
    log = open(os.path.join(where, "gemmd.log"), "wb")
    proc = subprocess.Popen([binary, "--config", config, "--backend", backend],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    address = "unix:" + sock
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("gemmd exited (%d); its log: %s" % (proc.returncode, log.name))
        try:
            with gemmd.Client(address, connect_timeout=1) as client:
                client.ping()
            return proc, address, where
        except gemmd.Error:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("gemmd did not answer on %s within 120 s (log: %s)" % (address, log.name))


def copy_bandwidth(threads, nbytes=64 << 20, repeat=7):
    """(median seconds, bytes/s) of one copy of nbytes between arrays whose pages exist."""
    src = np.ones(nbytes // 8)
    dst = np.zeros_like(src)
    copier = _copier.Copier(threads)
    times = []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        copier.copy([(dst, src)])
        times.append(time.perf_counter() - start)
    copier.close()
    med = statistics.median(times[1:])
    return med, nbytes / med


def timed(fn, repeat, warmed=None):
    fn()                                  # warm-up: regions made, pages touched, threads up
    if warmed is not None:
        warmed()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def direct_bytes(client):
    """(shm_direct_in_bytes, shm_direct_out_bytes) of a GPU daemon's stats (bytes its gemms
    copied straight between registered regions and the device, not through staging), or None."""
    try:
        backend = client.stats().get("backend_stats") or {}
    except gemmd.Error:
        return None
    if "shm_direct_in_bytes" not in backend:
        return None
    return backend["shm_direct_in_bytes"], backend["shm_direct_out_bytes"]


class Phases:
    """Where the default path's calls went (the scratch's own clock: copy in, the gemm on the
    daemon, copy out; the median of the calls sampled) and the share of their bytes the daemon
    moved by DMA straight from the region, over the calls between start() and stop()."""

    def __init__(self, client, dtype, n):
        self.client, self.gemm_bytes = client, 3 * n * n * np.dtype(NP[dtype]).itemsize
        self.samples, self.last, self.result = [], None, None

    def _now(self):
        scratch = self.client._scratch
        return None if scratch is None else (scratch.served, dict(scratch.spent))

    def start(self):
        self.first = self.last = self._now()
        self.direct = direct_bytes(self.client)

    def sample(self):
        """After each timed call: that call's phases, where the scratch served it whole."""
        now = self._now()
        if now is not None and self.last is not None and now[0] == self.last[0] + 1 and \
                now[1] != self.last[1]:
            self.samples.append({k: now[1][k] - self.last[1][k] for k in now[1]})
        self.last = now

    def stop(self):
        now = self._now()
        if not self.samples or now is None:
            return
        self.result = {k: statistics.median(x[k] for x in self.samples) for k in self.samples[0]}
        direct = direct_bytes(self.client)
        if direct is not None and self.direct is not None and now[0] > self.first[0]:
            moved = sum(direct) - sum(self.direct)
            self.result["direct"] = moved / ((now[0] - self.first[0]) * self.gemm_bytes)


def check(got, a, b, dtype):
    ref = a[:256].astype(np.float64) @ b.astype(np.float64)
    tol = (1e-4 if dtype == "f32" else 1e-10) * np.sqrt(a.shape[1]) * \
        (np.abs(a[:256]).astype(np.float64) @ np.abs(b).astype(np.float64))
    bad = np.abs(got[:256] - ref) > tol + 1e-30
    if bad.any():
        raise SystemExit("wrong result: %d of the first 256 rows' elements off" % bad.sum())


def bench_size(address, dtype, n, repeat, rng, pieces):
    a = rng.uniform(-1, 1, (n, n)).astype(NP[dtype])
    b = rng.uniform(-1, 1, (n, n)).astype(NP[dtype])
    row = {"what": "%s %d^3" % (dtype, n), "mib": 3 * a.nbytes / (1 << 20)}
    with gemmd.Client(address, timeout=600) as auto:
        check(auto.gemm(a, b), a, b, dtype)
        phases = Phases(auto, dtype, n)
        row["auto"] = timed(lambda: (auto.gemm(a, b), phases.sample()), repeat, phases.start)
        phases.stop()
        row["phases"] = phases.result
        scratch = auto._scratch
        row["served"] = scratch is not None and scratch.served > 0
    row["pieces"] = None
    if pieces:
        with gemmd.Client(address, timeout=600, scratch_pieces=pieces) as cut:
            check(cut.gemm(a, b), a, b, dtype)
            row["pieces"] = timed(lambda: cut.gemm(a, b), repeat)
    with gemmd.Client(address, timeout=600, auto_shm=False) as plain:
        check(plain.gemm(a, b), a, b, dtype)
        row["socket"] = timed(lambda: plain.gemm(a, b), repeat)
    with gemmd.Client(address, timeout=600, auto_shm=False) as shared:
        try:
            sa, sb = shared.shm_array(a.shape, a.dtype), shared.shm_array(b.shape, b.dtype)
            so = shared.shm_array((n, n), a.dtype)
        except gemmd.Error:
            row["shm"] = None
        else:
            sa[...], sb[...] = a, b
            shared.gemm(sa, sb, out=so)
            check(so, a, b, dtype)
            before = []
            row["shm"] = timed(lambda: shared.gemm(sa, sb, out=so), repeat,
                               lambda: before.append(direct_bytes(shared)))
            after = direct_bytes(shared)
            row["shm_direct"] = None if after is None or before[0] is None else \
                (sum(after) - sum(before[0])) / (repeat * row["mib"] * (1 << 20))
    return row


def ms(seconds):
    return "-" if seconds is None else "%.2f" % (seconds * 1e3)


def share(x):
    return "-" if x is None else "%.0f%%" % (100 * x)


def table(rows, bw1, bwn, threads, device, pieces):
    lines = ["Python client, plain NumPy arrays, median of the runs; %s." % device,
             "Memory copy (64 MiB, np.copyto in row blocks): 1 thread %.1f GB/s, %d threads "
             "%.1f GB/s." % (bw1 / 1e9, threads, bwn / 1e9), "",
             "| gemm | operands + C MiB | `gemm(a, b)` default ms | socket ms | `shm_array`, "
             "out= ms | copies at %d threads ms | default / socket |%s" % (
                 threads, " %d pieces ms |" % pieces if pieces else ""),
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |%s" % (" ---: |" if pieces else "")]
    for r in rows:
        copies = r["mib"] * (1 << 20) / bwn
        lines.append("| %s | %.1f | %s%s | %s | %s | %s | %.2f |" % (
            r["what"], r["mib"], ms(r["auto"]), "" if r["served"] else " (socket)",
            ms(r["socket"]), ms(r["shm"]), ms(copies), r["auto"] / r["socket"]) +
            (" %s |" % ms(r["pieces"]) if pieces else ""))
    lines += ["", "Where the default path's time went (median of the timed calls the scratch "
              "served whole, by its own clock), and the share of the bytes the daemon moved straight "
              "between the region and the device (GPU; the rest went through staging):", "",
              "| gemm | copy in ms | gemm (request to reply) ms | copy out ms | direct, default "
              "| direct, `shm_array` |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        p = r.get("phases") or {}
        lines.append("| %s | %s | %s | %s | %s | %s |" % (
            r["what"], ms(p.get("copy_in")), ms(p.get("gemm")), ms(p.get("copy_out")),
            share(p.get("direct")), share(r.get("shm_direct"))))
    lines += ["", "\"(socket)\": the default sent this size over the socket (its cost model, "
              "or shm_min_bytes). \"copies\": what the default path copies, at the measured "
              "N-thread bandwidth; default >= shm_array + copies unless pieces overlap them."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemmd", help="start this gemmd binary (default config)")
    parser.add_argument("--backend", default="gpu", help="with --gemmd: gpu (default) or cpu")
    parser.add_argument("--address", help="a running daemon (default $GEMMD_ADDRESS)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES,
                        help="dtype:n,... square gemms (default %s)" % DEFAULT_SIZES)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--pieces", type=int, default=0,
                        help="also time the default forced into this many row pieces "
                        "(Client(scratch_pieces=N)), to check the cost model's choice")
    parser.add_argument("--out", help="write the Markdown table here too")
    args = parser.parse_args()
    proc = where = None
    address = args.address
    if args.gemmd:
        proc, address, where = start_daemon(args.gemmd, args.backend)
    try:
        with gemmd.Client(address) as client:
            info = client.info()
            device = "%s backend, %s" % (info.get("backend"), ", ".join(
                str(d.get("name", d)) if isinstance(d, dict) else str(d)
                for d in info.get("devices", [])) or "no devices")
        threads = _copier.default_threads()
        bw1 = copy_bandwidth(1)[1]
        bwn = copy_bandwidth(threads)[1]
        rng = np.random.default_rng(34)
        rows = []
        for spec in args.sizes.split(","):
            dtype, n = spec.split(":")
            rows.append(bench_size(address, dtype, int(n), args.repeat, rng, args.pieces))
            print("%s: default %s ms, socket %s ms, shm_array %s ms" % (
                rows[-1]["what"], ms(rows[-1]["auto"]), ms(rows[-1]["socket"]),
                ms(rows[-1]["shm"])), file=sys.stderr, flush=True)
        text = table(rows, bw1, bwn, threads, device, args.pieces)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
