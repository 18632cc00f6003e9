#!/usr/bin/python3
"""gemmctl's command line as people and scripts use it (issue 14, "Command-line polish"):
  - global options (--json, --connect) after the command as well as before it;
  - `info --json` and `stats --json` carry the {"ok", "command"} wrapper of the other commands;
  - --json output is valid JSON (strict UTF-8) whatever the file names, non-UTF-8 ones too;
  - `-` reads a .npy from stdin (several in a row) and writes the result to stdout;
  - --connect and GEMMD_ADDRESS take a bare socket path;
  - a bad GEMMD_ADDRESS is named as the source of the error.
  test_gemmctl_cli.py --gemmd PATH --gemmctl PATH
"""
import argparse
import io
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import gemmd_harness as h

ARGS = None
EXIT_OK, EXIT_USAGE = 0, 2


def gemmctl(*argv, env=None, stdin=b""):
    """Runs gemmctl; argv may hold bytes (file names in no encoding). Returns (rc, out, err) as
    bytes."""
    proc = subprocess.run([ARGS.gemmctl] + list(argv), input=stdin, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=120, env=env)
    err = proc.stderr.decode("utf-8", "replace")
    assert not h.sanitizer_report(err), "sanitizer report from gemmctl:\n" + err
    return proc.returncode, proc.stdout, proc.stderr


def strict_json(data, what):
    """The one JSON object in data, decoded as strict UTF-8 as any JSON parser must."""
    try:
        return json.loads(data.decode("utf-8", "strict"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise AssertionError("%s: not valid JSON (%s): %r" % (what, exc, data))


def ok(result, what):
    rc, out, err = result
    assert rc == EXIT_OK, "%s: exit %d\nstdout: %r\nstderr: %s" % (what, rc, out, err.decode())
    return out, err


def npy_bytes(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def test_global_options_after_command(ctx):
    with h.Daemon(ctx.gemmd) as d:
        addr = d.address("unix")
        for argv in (["info", "--json", "--connect", addr], ["--json", "info", "--connect", addr],
                     ["info", "--connect=" + addr, "--json"]):
            out, _ = ok(gemmctl(*argv), " ".join(argv))
            assert strict_json(out, " ".join(argv))["backend"] == "cpu"
        out, _ = ok(gemmctl("ping", "--connect", addr), "ping --connect after the command")
        assert b"pong" in out
        with tempfile.TemporaryDirectory() as tmp:
            a, b = ctx.rng.standard_normal((5, 3)), ctx.rng.standard_normal((3, 4))
            np.save(os.path.join(tmp, "a.npy"), a.astype(np.float32))
            np.save(os.path.join(tmp, "b.npy"), b.astype(np.float32))
            out, _ = ok(gemmctl("gemm", "--a", os.path.join(tmp, "a.npy"), "--b",
                                os.path.join(tmp, "b.npy"), "--out", os.path.join(tmp, "c.npy"),
                                "--json", "--connect", addr), "gemm ... --json --connect")
            assert strict_json(out, "gemm --json")["command"] == "gemm"
        # a command's own options are still its own
        rc, _, err = gemmctl("info", "--bogus", "--connect", addr)
        assert rc == EXIT_USAGE and b"--bogus" in err, (rc, err)


def test_info_stats_json_wrapper(ctx):
    with h.Daemon(ctx.gemmd) as d:
        for command, key in (("info", "backend"), ("stats", "requests")):
            out, _ = ok(gemmctl("--connect", d.address("unix"), "--json", command), command)
            reply = strict_json(out, command + " --json")
            assert reply.get("ok") is True and reply.get("command") == command, reply
            assert key in reply or len(reply) > 2, "%s: the reply's fields are missing: %s" % (
                command, reply)
        info = strict_json(ok(gemmctl("--connect", d.address("unix"), "--json", "info"),
                              "info")[0], "info")
        assert info["backend"] == "cpu" and "version" in info, info


def test_json_for_any_file_name(ctx):
    names = [b"plain.npy", "caf\u00e9 \u2713.npy".encode(), b"latin1-\xe9t\xe9.npy",
             b"bad-\xff\xfe.npy", b"cut-\xe2\x82.npy", b"quote\"back\\slash\ttab.npy",
             b"ctl-\x01\x7f.npy"]
    with h.Daemon(ctx.gemmd) as d, tempfile.TemporaryDirectory() as tmp:
        addr = d.address("unix")
        tmpb = os.fsencode(tmp)
        a = ctx.rng.standard_normal((4, 6)).astype(np.float32)
        b = ctx.rng.standard_normal((6, 2)).astype(np.float32)
        np.save(os.path.join(tmp, "a.npy"), a)
        np.save(os.path.join(tmp, "b.npy"), b)
        for name in names:
            out_path = os.path.join(tmpb, name)
            out, _ = ok(gemmctl("--json", "--connect", addr, "gemm", "--a",
                                os.path.join(tmpb, b"a.npy"), "--b",
                                os.path.join(tmpb, b"b.npy"), "--out", out_path), repr(name))
            reply = strict_json(out, "gemm --out %r" % name)
            # the valid text survives; bytes that are not UTF-8 stand as U+FFFD
            assert reply["ok"] is True and reply["out"].replace("\ufffd", "") == os.path.join(
                tmp, name.decode("utf-8", "ignore")), reply
            assert ("\ufffd" in reply["out"]) == (name != name.decode("utf-8", "ignore").encode()),\
                reply
            c = np.load(out_path)
            assert np.allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
            # an error naming the file (it does not exist as input) is valid JSON too
            rc, out, _ = gemmctl("--json", "--connect", addr, "gemm", "--a",
                                 os.path.join(tmpb, b"missing-" + name), "--b",
                                 os.path.join(tmpb, b"b.npy"), "--out", out_path)
            reply = strict_json(out, "gemm --a missing %r" % name)
            assert rc == EXIT_USAGE and reply["ok"] is False, (rc, reply)


def test_stdin_stdout(ctx):
    with h.Daemon(ctx.gemmd) as d:
        addr = d.address("unix")
        m, n, k = 37, 21, 29
        a = ctx.rng.standard_normal((m, k)).astype(np.float32)
        b = ctx.rng.standard_normal((k, n)).astype(np.float32)
        c = ctx.rng.standard_normal((m, n)).astype(np.float32)
        # A and B both from stdin, one after the other; C to stdout
        out, err = ok(gemmctl("--connect", addr, "gemm", "--a", "-", "--b", "-", "--out", "-",
                              stdin=npy_bytes(a) + npy_bytes(b)), "gemm --a - --b - --out -")
        got = np.load(io.BytesIO(out))
        h.assert_close(got, a, b, None, 1.0, 0.0, False, False, "f32", "stdin/stdout")
        assert b"written to -" in err, "the summary should go to stderr: %r" % err
        # with --json the summary on stderr is the JSON object; stdout holds only the array
        with tempfile.TemporaryDirectory() as tmp:
            np.save(os.path.join(tmp, "b.npy"), b)
            out, err = ok(gemmctl("--json", "--connect", addr, "gemm", "--a", "-", "--b",
                                  os.path.join(tmp, "b.npy"), "--c", "-", "--beta", "0.5",
                                  "--alpha", "2", "--out", "-",
                                  stdin=npy_bytes(a) + npy_bytes(c)), "gemm --c - --json")
            got = np.load(io.BytesIO(out))
            h.assert_close(got, a, b, c, 2.0, 0.5, False, False, "f32", "stdin C, alpha, beta")
            assert strict_json(err.strip().splitlines()[-1], "summary")["out"] == "-"
        # a stream that ends early is an input error, nothing sent
        truncated = npy_bytes(a)[:-7]
        rc, _, err = gemmctl("--connect", addr, "gemm", "--a", "-", "--b", "-", "--out", "-",
                             stdin=truncated)
        assert rc == EXIT_USAGE and b"stdin" in err, (rc, err)


def test_bare_socket_path(ctx):
    with h.Daemon(ctx.gemmd) as d:
        out, _ = ok(gemmctl("--connect", d.unix_path, "ping"), "--connect PATH")
        assert b"pong" in out
        rel = os.path.relpath(d.unix_path)
        if len(rel) < 100 and "/" in rel:
            ok(gemmctl("--connect", rel, "ping"), "--connect relative/PATH")
        env = dict(os.environ, GEMMD_ADDRESS=d.unix_path)
        out, _ = ok(gemmctl("ping", env=env), "GEMMD_ADDRESS=PATH")
        assert b"pong" in out


def test_bad_gemmd_address_named(ctx):
    for bad in ("bogus", "tcp:nohost", "unix:"):
        env = dict(os.environ, GEMMD_ADDRESS=bad)
        rc, out, err = gemmctl("ping", env=env)
        assert rc == EXIT_USAGE, "GEMMD_ADDRESS=%s: exit %d" % (bad, rc)
        assert b"GEMMD_ADDRESS" in err, "the error does not name GEMMD_ADDRESS: %r" % err
        rc, out, err = gemmctl("--json", "ping", env=env)
        reply = strict_json(out, "ping --json with GEMMD_ADDRESS=%s" % bad)
        assert "GEMMD_ADDRESS" in reply["error"]["message"], reply
    # --connect wins over GEMMD_ADDRESS, and its own errors name --connect
    env = dict(os.environ, GEMMD_ADDRESS="bogus")
    rc, _, err = gemmctl("--connect", "nonsense", "ping", env=env)
    assert rc == EXIT_USAGE and b"--connect" in err and b"GEMMD_ADDRESS" not in err, err


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--gemmctl", required=True)
    ARGS, rest = parser.parse_known_args()
    sys.exit(h.main([test_global_options_after_command, test_info_stats_json_wrapper,
                     test_json_for_any_file_name, test_stdin_stdout, test_bare_socket_path,
                     test_bad_gemmd_address_named], [sys.argv[0]] + rest))
