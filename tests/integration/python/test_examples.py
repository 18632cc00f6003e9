"""examples/ and the minimal client of proto/PROTOCOL.md section 10, run against a daemon."""

import math
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

import gemmd_harness as h
from conftest import read_request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
EXAMPLES = os.path.join(REPO, "examples")


def run_example(cmd, daemon):
    env = dict(os.environ, GEMMD_ADDRESS=daemon.address())
    return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=240)


@pytest.mark.parametrize("name", ["gemm_blocking", "gemm_poll_loop"])
def test_c_examples(build_dir, daemon, name):
    binary = os.path.join(build_dir, "examples", "example_" + name)
    proc = run_example([binary], daemon)
    assert proc.returncode == 0, proc.stdout
    assert h.sanitizer_report(proc.stdout) is None, proc.stdout
    print(proc.stdout)


def test_numpy_example(daemon):
    proc = run_example([sys.executable, os.path.join(EXAMPLES, "numpy_gemm.py")], daemon)
    assert proc.returncode == 0 and "numpy example: right" in proc.stdout, proc.stdout


def test_dense_layers_example(daemon):
    """resident weights, a batch by one matrix, and the epilogue (bias, gelu) in one example"""
    proc = run_example([sys.executable, os.path.join(EXAMPLES, "dense_layers.py")], daemon)
    assert proc.returncode == 0 and "dense layers example: right" in proc.stdout, proc.stdout


def test_torch_example(daemon):
    proc = run_example([sys.executable, os.path.join(EXAMPLES, "torch_gemm.py")], daemon)
    if proc.returncode == 77:
        pytest.skip("the PyTorch example skipped itself: %s" % proc.stdout.strip())
    assert proc.returncode == 0 and "torch example: right" in proc.stdout, proc.stdout


def test_torch_example_skips_cleanly_without_torch(daemon):
    """Where PyTorch is missing (CI: Debian's python3-torch is not installed) the example says
    SKIP and exits 77; here torch is hidden from it to check that on any machine."""
    hide = ("import runpy, sys; sys.modules['torch'] = None; "
            "runpy.run_path(%r, run_name='__main__')" % os.path.join(EXAMPLES, "torch_gemm.py"))
    proc = run_example([sys.executable, "-c", hide], daemon)
    assert proc.returncode == 77 and proc.stdout.startswith("SKIP: PyTorch"), proc.stdout


def protocol_snippet(path):
    text = open(os.path.join(REPO, "proto", "PROTOCOL.md")).read()
    section = text[text.index("## 10."):text.index("## 11.")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "expected one python block in PROTOCOL.md section 10"
    return blocks[0].replace('"/run/gemmd/gemmd.sock"', repr(path))


def test_protocol_md_client(daemon, fake_server):
    namespace = {}
    exec(compile(protocol_snippet(daemon.unix_path), "PROTOCOL.md", "exec"), namespace)
    call, sock = namespace["call"], namespace["s"]
    # a reply over msgpack's default 100 MiB buffer: 6000x1 by 1x6000 f32, 144 MB
    x = np.linspace(-1, 1, 6000, dtype="<f4")
    hdr = {"m": 6000, "n": 6000, "k": 1, "dtype": "f32"}
    out_hdr, c = call(sock, 2, "gemm", [hdr, x.tobytes(), x.tobytes()])
    c = np.frombuffer(c, "<f4").reshape(6000, 6000)
    np.testing.assert_array_equal(c[::1999], np.outer(x, x)[::1999])
    with pytest.raises(RuntimeError, match="INVALID_ARGUMENT"):
        call(sock, 3, "gemm", [dict(hdr, m=0), b"", b""])
    assert call(sock, 4, "ping", []) == "pong"
    sock.close()
    # a daemon that goes away: an error, not a loop spinning forever
    server = fake_server(lambda conn: (read_request(conn), conn.close()))
    gone = socket.socket(socket.AF_UNIX)
    gone.settimeout(30)
    gone.connect(server.path)
    with pytest.raises(ConnectionError):
        call(gone, 1, "ping", [])
    gone.close()


def test_readme_python_snippet(daemon, monkeypatch):
    """README.md's Python blocks, as a NumPy user would paste them: the first screen, then the
    few more lines (shared memory, a resident operand, the epilogue, futures)."""
    text = open(os.path.join(REPO, "README.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2, "README.md has %d python blocks, this test knows two" % len(blocks)
    monkeypatch.setenv("GEMMD_ADDRESS", daemon.address())
    namespace = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)
    a, b, c = namespace["a"], namespace["b"], namespace["c"]
    h.assert_close(c, a, b, None, 1.0, 0.0, False, False, "f32", "README")
    exec(compile(blocks[1], "README.md", "exec"), namespace)
    for r in namespace["results"]:
        h.assert_close(r, a, b, None, 1.0, 0.0, False, False, "f32", "README futures")
    ref = a.astype(np.float64) @ b.astype(np.float64) + 1.0
    gelu = 0.5 * ref * (1.0 + np.vectorize(math.erf)(ref / math.sqrt(2.0)))   # the erf form
    np.testing.assert_allclose(namespace["y"], gelu, rtol=1e-4, atol=1e-4)
