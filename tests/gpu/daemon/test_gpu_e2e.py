#!/usr/bin/python3
"""The daemon end to end on the GPU backend, through real sockets: every GEMM form against the
float64 reference with poisoned outputs, big sizes (4096 and 8192 f32), payloads much larger
than the pinned staging buffers (the chunked double-buffered path, both directions), tiny
staging (pause/resume and the spill path), 32 concurrent clients, pipelining, the device
memory budget (RESOURCE_EXHAUSTED, and jobs that wait for memory), the kernel preference, and
`info` listing the GPU. With two or more GPUs, the load must reach every one.

Exits 77 with "SKIP: no CUDA device" when gemmd --backend gpu finds none (or was built
without CUDA)."""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
# A pure-Python msgpack carried to a GPU machine whose Python lacks one (scripts/gpu-run.sh).
if os.path.isdir(os.path.join(HERE, "..", "..", "..", ".deps", "python")):
    sys.path.append(os.path.join(HERE, "..", "..", "..", ".deps", "python"))
import gemmd_harness as h  # noqa: E402

MIB = 1024 * 1024
# Every daemon here takes a fixed budget rather than 90% of the card: the tests of other areas
# may run on the same GPU at the same time.
BASE = {"gpu": {"memory_bytes": "2GiB", "staging_bytes": "8MiB", "staging_buffers": 2},
        "limits": {"max_requests_in_flight": 256}}


def gpu_daemon(ctx, gpu=None, **kwargs):
    config = h.deep_merge(BASE, {"gpu": gpu or {}})
    config = h.deep_merge(config, kwargs.pop("config", None))
    return ctx.daemon(backend="gpu", config=config, **kwargs)


def probe(gemmd):
    """None when gemmd serves from a GPU here, else the reason it does not."""
    ctx = h.Context(gemmd, h.rng(1))
    d = gpu_daemon(ctx)
    try:
        d.start()
    except h.DaemonError:
        log = d.log()
        d.kill()
        reason = [line for line in log.splitlines() if "CUDA" in line or "GPU" in line or
                  "gpu" in line]
        return (reason[-1] if reason else log.strip().splitlines()[-1:] or ["gemmd exited"])
    d.stop()
    d.cleanup()
    return None


def devices_of(info):
    """The GPU entries of `info` (its devices list, else the backend's own)."""
    for path in ("devices", "backend_info.devices"):
        found = [dev for dev in h.dig(info, path, []) or []
                 if isinstance(dev, dict) and isinstance(dev.get("id"), int) and dev["id"] >= 0]
        if found:
            return found
    return []


def test_info_lists_gpu(ctx):
    with gpu_daemon(ctx) as d, d.connect() as client:
        info = client.call("info")
        assert info.get("backend") == "gpu", "info.backend %r" % info.get("backend")
        devs = devices_of(info)
        assert devs, "info lists no GPU: %r" % info
        for dev in devs:
            text = " ".join("%s=%r" % kv for kv in sorted(dev.items()))
            assert dev.get("memory", 0) > 0 and dev.get("name"), text
            print("  GPU:", text)
        names = [str(k) for k in info.get("kernels") or h.dig(info, "backend_info.kernels") or []]
        assert names, "info lists no kernels: %r" % info
        if "fake" not in names:  # the fake CUDA runtime of test_gpu_backend_fake has its own
            assert any("tiled16" in k for k in names), "kernels %r" % names
        print("  kernels:", ", ".join(names))
        stats = client.call("stats")
        h.check_gemm(client, ctx.rng, 64, 64, 64, "f32")
        stats = client.call("stats")
        per_dev = h.dig(stats, "backend_stats.devices") or h.dig(stats, "devices") or []
        assert any(isinstance(s, dict) and s.get("jobs", 0) >= 1 for s in per_dev), stats


FORMS_SIZES = [(1, 1, 1), (7, 7, 7), (1, 1000, 1), (1000, 1, 3), (33, 17, 65), (129, 65, 257),
               (1000, 800, 1200)]


def test_forms(ctx):
    """Every dtype, both transposes, alpha/beta with and without c, batch, odd sizes."""
    with gpu_daemon(ctx) as d, d.connect() as client:
        i = 0
        for dtype in ("f32", "f64", "f16", "bf16"):
            for (m, n, k) in FORMS_SIZES:
                if ctx.quick and m * n * k > 10**8:
                    continue
                for ta, tb in ((False, False), (True, False), (False, True), (True, True)):
                    i += 1
                    alpha, beta = ((1.0, 0.0), (-1.5, 0.0), (0.75, 0.5), (2.0, -1.0))[i % 4]
                    batch = 3 if (i % 5 == 0 and m * n * k < 10**7) else None
                    out_hdr = h.check_gemm(client, ctx.rng, m, n, k, dtype, ta, tb, alpha, beta,
                                           batch=batch)
                    assert out_hdr["device"].startswith("cuda:"), out_hdr


def test_kernel_preference(ctx):
    """gpu.kernel names the kernel every reply uses when it supports the problem."""
    for kernel in ("tiled16", "cublas"):
        with gpu_daemon(ctx, gpu={"kernel": kernel}) as d, d.connect() as client:
            for dtype in ("f32", "f64"):
                out_hdr = h.check_gemm(client, ctx.rng, 123, 45, 67, dtype, True, False, 1.25,
                                       0.5)
                assert out_hdr["kernel"] == kernel, (kernel, out_hdr)


def test_big(ctx):
    """4096 and 8192 f32: C of 64 and 256 MiB leave in chunks through the default staging."""
    sizes = (1024,) if ctx.quick else (4096, 8192)
    with gpu_daemon(ctx, gpu={"staging_bytes": "64MiB"}) as d, d.connect(timeout=300) as client:
        for size in sizes:
            out_hdr = h.check_gemm(client, ctx.rng, size, size, size, "f32", poison_c=False)
            print("  %d^3 f32: %s %s %r" % (size, out_hdr["device"], out_hdr["kernel"],
                                              out_hdr["timings"]))


def test_chunked_staging(ctx):
    """staging_bytes 1 MiB: every operand spans several staging buffers, C several chunks."""
    with gpu_daemon(ctx, gpu={"staging_bytes": "1MiB"}) as d, d.connect() as client:
        for (m, n, k, dtype, beta) in ((700, 900, 1100, "f32", 0.5), (513, 1025, 257, "f64", 0.0),
                                       (1000, 800, 1200, "bf16", -1.0)):
            out_hdr = h.check_gemm(client, ctx.rng, m, n, k, dtype, False, True, 1.0, beta)
            t = out_hdr["timings"]
            assert t["compute_us"] > 0 and t["transfer_out_us"] > 0, out_hdr


def test_tiny_staging_concurrent(ctx):
    """4 KiB staging, 8 clients at once: inputs keep pausing for a free buffer (pause/resume,
    spills) and outputs go out 4 KiB at a time."""
    with gpu_daemon(ctx, gpu={"staging_bytes": 4096}) as d:
        def one(i):
            with d.connect() as client:
                rng = np.random.default_rng(1000 + i)
                for j in range(3):
                    m, n, k = (int(x) for x in rng.integers(1, 200, 3))
                    h.check_gemm(client, rng, m, n, k, ("f32", "f64", "f16")[j], bool(i & 1),
                                 bool(j & 1), 1.0, 0.5 if j == 1 else 0.0)
        h.run_threads(one, 8)


def test_pipelined(ctx):
    """40 requests written back to back on one connection (2 x 64 KiB staging): replies by
    msgid, every one checked."""
    with gpu_daemon(ctx, gpu={"staging_bytes": 65536}) as d, d.connect() as client:
        jobs = []
        blob = bytearray()
        for i in range(40):
            m, n, k = (int(x) for x in ctx.rng.integers(1, 300, 3))
            dtype = ("f32", "f64", "f16", "bf16")[i % 4]
            a, b = h.random_operands(ctx.rng, m, n, k, dtype)
            c = h.round_to(ctx.rng.uniform(-1, 1, (m, n)), dtype) if i % 3 == 0 else None
            hdr = {"m": m, "n": n, "k": k, "dtype": dtype, "alpha": 1.0,
                   "beta": 0.5 if c is not None else 0.0}
            jobs.append((100 + i, hdr, a, b, c))
            blob += h.Client.pack_gemm(100 + i, hdr, a, b, c)
        sender = h.send_in_background(client, bytes(blob))
        for msgid, hdr, a, b, c in jobs:
            out_hdr, out = client.gemm_result(msgid, hdr, timeout=120)
            h.assert_close(out, a, b, c, 1.0, hdr["beta"], False, False, hdr["dtype"],
                           "pipelined %d" % msgid)
        sender.join(60)
        assert sender.error is None, sender.error


def test_concurrent_clients(ctx):
    """32 clients at once, each a few random gemms; with several GPUs every one gets work."""
    seen = set()
    with gpu_daemon(ctx) as d:
        def one(i):
            with d.connect(timeout=120) as client:
                rng = np.random.default_rng(2000 + i)
                for j in range(4):
                    m, n, k = (int(x) for x in rng.integers(1, 600, 3))
                    out_hdr = h.check_gemm(client, rng, m, n, k, ("f32", "f64")[j % 2],
                                           bool(j & 1), bool(i & 1), 1.0, 0.25 if i % 3 else 0.0,
                                           batch=2 if j == 3 else None)
                    seen.add(out_hdr["device"])
        h.run_threads(one, 32)
        with d.connect() as client:
            ngpu = len(devices_of(client.call("info")))
    print("  devices used: %s (of %d)" % (sorted(seen), ngpu))
    if ngpu > 1:
        assert len(seen) == ngpu, "only %s of %d GPUs served" % (sorted(seen), ngpu)


def test_memory_budget(ctx):
    """A job larger than the device budget is refused before its payload; jobs that fit one at a
    time wait for memory instead of failing."""
    each = 512 if ctx.quick else 1024  # 3 x each^2 x 4 bytes: half the budget and more
    budget = "6MiB" if ctx.quick else "24MiB"
    with gpu_daemon(ctx, gpu={"memory_bytes": budget, "staging_bytes": "1MiB"}) as d:
        with d.connect() as client:
            n = 2048  # a, b, c of 16 MiB each: 48 MiB > 24 MiB
            hdr = {"m": n, "n": n, "k": n, "dtype": "f32"}
            zeros = np.zeros((n, n), np.float32)
            try:
                client.gemm(hdr, zeros, zeros)
            except h.RpcError as exc:
                assert exc.code == "RESOURCE_EXHAUSTED", exc
            else:
                raise AssertionError("a 48 MiB job under a 24 MiB budget was accepted")
            h.check_gemm(client, ctx.rng, 3, 3, 3, "f32")  # the connection still serves

        def one(i):  # at most one fits at a time: the others wait for memory
            with d.connect(timeout=120) as client:
                h.check_gemm(client, np.random.default_rng(i), each, each, each, "f32")
        h.run_threads(one, 6)


TESTS = [test_info_lists_gpu, test_forms, test_kernel_preference, test_chunked_staging,
         test_tiny_staging_concurrent, test_pipelined, test_concurrent_clients, test_memory_budget,
         test_big]

def gpu_main(tests):
    """Runs tests (h.main) when gemmd serves from a GPU here; else exits 77 with the reason."""
    try:
        gemmd = h.find_gemmd()
    except h.DaemonError as exc:
        print("FAIL: %s" % exc)
        return 1
    why = probe(gemmd)
    if why is not None:
        print("SKIP: no CUDA device (%s)" % str(why).strip())
        return 77
    return h.main(tests)


if __name__ == "__main__":
    sys.exit(gpu_main(TESTS))
