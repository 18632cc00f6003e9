#!/usr/bin/python3
"""What a new user tripped on in gemmctl (issue 31):
  - bench, verify and gemm with sizes the daemon cannot serve: refused from the daemon's info
    before anything is allocated, naming the limit, its value and the config key (exit 2);
  - a daemon killed during `gemmctl gemm`: the connection was lost during the request, then
    reconnecting failed (exit 3), not only "connect ...: Connection refused";
  - verify's float64 reference: a bar on a terminal while it runs past half a second, and the
    same PASS from OpenBLAS's dgemm and from the loop a machine without OpenBLAS uses.
  test_gemmctl_newuser.py --gemmd PATH --gemmctl PATH
"""
import argparse
import os
import pty
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import msgpack
import numpy as np

import gemmd_harness as h

ARGS = None
EXIT_USAGE, EXIT_CONNECT = 2, 3


def run_measured(argv, env=None, timeout=120):
    """(exit code, stdout, stderr, peak RSS in MiB) of one gemmctl run."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([ARGS.gemmctl] + argv, stdout=out, stderr=err, env=env)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("gemmctl %s ran past %d s" % (" ".join(argv), timeout))
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
        assert not h.sanitizer_report(stderr), "sanitizer report from gemmctl:\n" + stderr
        return proc.returncode, out.read().decode(), stderr, usage.ru_maxrss // 1024


def test_sizes_over_the_limits(ctx):
    with h.Daemon(ctx.gemmd) as d:
        addr = d.address("unix")
        cases = [  # argv, what the message must name
            (["bench", "--m", "60000", "--n", "60000", "--k", "60000"],
             ["m*n*k*batch", "70368744177664", "limits.max_work"]),
            (["bench", "--m", "100000", "--n", "10", "--k", "10"],
             ["m: 100000", "65536", "limits.max_dim"]),
            (["bench", "--m", "20000", "--n", "20000", "--k", "20000"],
             ["a (bytes): 1600000000", "1073741824", "limits.max_operand_bytes"]),
            (["bench", "--m", "20000", "--n", "20000", "--k", "20000", "--shm"],
             ["limits.max_operand_bytes"]),
            (["verify", "--m", "60000", "--n", "60000", "--k", "10"],
             ["the result (bytes)", "limits.max_operand_bytes"]),
        ]
        for argv, names in cases:
            rc, out, err, peak = run_measured(["--connect", addr] + argv, timeout=60)
            what = " ".join(argv)
            assert rc == EXIT_USAGE, "%s: exit %d\n%s" % (what, rc, err)
            for name in names:
                assert name in err, "%s: %r not in the message: %s" % (what, name, err)
            # nothing allocated: before, bench filled 19.7 GB, 1.6 GB x 2 for --m 20000
            assert peak < 400, "%s: %d MiB resident" % (what, peak)
        # gemm: the result of two files, over max_operand_bytes, refused before its buffer
        tmp = tempfile.mkdtemp(dir=d.dir)
        a = np.lib.format.open_memmap(os.path.join(tmp, "a.npy"), "w+", np.float32, (65536, 1))
        b = np.lib.format.open_memmap(os.path.join(tmp, "b.npy"), "w+", np.float32, (1, 8192))
        del a, b
        rc, out, err, peak = run_measured(["--connect", addr, "gemm", "--a", tmp + "/a.npy",
                                           "--b", tmp + "/b.npy", "--out", tmp + "/c.npy"])
        assert rc == EXIT_USAGE and "limits.max_operand_bytes" in err, (rc, err)
        assert not os.path.exists(tmp + "/c.npy")
        # and sizes it can serve still run
        rc, out, err, _ = run_measured(["--connect", addr, "bench", "--m", "64", "--n", "64",
                                        "--k", "64", "--requests", "4"])
        assert rc == 0, err


def _daemon_dying_on_gemm(path):
    """A stand-in daemon on a Unix socket: answers info (no limits), and on the first gemm
    closes the connection and its listener, as a daemon killed mid-request does (the socket
    file stays: a reconnect is refused). Returns the thread serving it."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(4)

    def serve():
        conn, _ = listener.accept()
        unpacker = msgpack.Unpacker(raw=False)
        while True:
            data = conn.recv(1 << 16)
            if not data:
                break
            unpacker.feed(data)
            for _, msgid, method, _params in unpacker:
                if method == "info":
                    conn.sendall(msgpack.packb([1, msgid, None, {"version": "0", "limits": {}}]))
                    continue
                conn.close()      # the gemm arrived: the daemon dies
                listener.close()
                return
        conn.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_daemon_killed_during_gemm(ctx):
    tmp = tempfile.mkdtemp()
    try:
        np.save(tmp + "/a.npy", np.ones((64, 32), np.float32))
        np.save(tmp + "/b.npy", np.ones((32, 16), np.float32))
        path = tmp + "/gemmd.sock"
        thread = _daemon_dying_on_gemm(path)
        proc = subprocess.run([ARGS.gemmctl, "--connect", path, "gemm", "--a", tmp + "/a.npy",
                               "--b", tmp + "/b.npy", "--out", tmp + "/c.npy"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=60)
        thread.join(10)
        err = proc.stderr
        assert proc.returncode == EXIT_CONNECT, (proc.returncode, err)
        # before: "gemmctl: gemm: connect unix:...: Connection refused (UNAVAILABLE)" alone
        assert "the connection was lost during the request" in err, err
        assert "reconnecting failed" in err and "Connection refused" in err, err
        assert not os.path.exists(tmp + "/c.npy")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_verify_reference(ctx):
    with h.Daemon(ctx.gemmd) as d:
        addr = d.address("unix")
        # both references, every dtype, alpha and beta: PASS
        for blas in ("1", "0"):
            env = dict(os.environ, GEMMCTL_REF_BLAS=blas)
            for dtype in ("f32", "f64", "f16", "bf16", "i8", "e4m3"):
                scal = ["--alpha", "3", "--beta", "-2"] if dtype == "i8" else \
                    ["--alpha", "0.5", "--beta", "0.25"]
                rc, out, err, _ = run_measured(["--connect", addr, "verify", "--m", "300",
                                                "--n", "257", "--k", "300", "--dtype", dtype]
                                               + scal, env=env)
                assert rc == 0 and "PASS" in out, "blas=%s %s: %s%s" % (blas, dtype, out, err)
        # a long reference on a terminal shows its progress (the loop: slow enough anywhere)
        master, slave = pty.openpty()
        env = dict(os.environ, GEMMCTL_REF_BLAS="0")
        proc = subprocess.Popen([ARGS.gemmctl, "--connect", addr, "verify", "--m", "1200",
                                 "--n", "1200", "--k", "1200", "--dtype", "f64"],
                                stdout=subprocess.PIPE, stderr=slave, env=env)
        os.close(slave)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
        os.close(master)
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0 and b"PASS" in out, out
        assert b"float64 reference [" in shown and b"rows" in shown, shown[-500:]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--gemmctl", required=True)
    ARGS, rest = parser.parse_known_args()
    sys.exit(h.main([test_sizes_over_the_limits, test_daemon_killed_during_gemm,
                     test_verify_reference], [sys.argv[0]] + rest))
