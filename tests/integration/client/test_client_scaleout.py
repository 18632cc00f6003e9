#!/usr/bin/python3
"""Issue 15 on the client side, against the real daemon: address lists with a dead address
(libgemmclient and gemmctl), a connection the daemon closed while idle carrying on, and, when
the daemon has the `auth` method, the TCP token. Usage:
  test_client_scaleout.py --gemmd PATH --bin PATH/test_client_e2e --gemmctl PATH [--token]
--token runs only the token test (it skips, exit 77, when `info` lists no "auth" feature).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import gemmd_harness as h

ARGS = None
DEAD = "unix:/nonexistent/gemmd-dead.sock"
IDLE_MS = 100
# How the daemon is given its token (the daemon side of issue 15).
DAEMON_TOKEN_CONFIG = "auth.token_file"
TOKEN = "e2e-token-0123456789"


def run_bin(mode, env):
    proc = subprocess.run([ARGS.bin, mode], env=dict(os.environ, **env), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=280)
    print(proc.stdout, end="")
    assert proc.returncode == 0, "test_client_e2e %s failed (exit %d)" % (mode, proc.returncode)


def gemmctl(*argv, env=None):
    proc = subprocess.run([ARGS.gemmctl] + list(argv), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})))
    assert not h.sanitizer_report(proc.stderr), "sanitizer report:\n" + proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def test_library_list_and_idle_close(ctx):
    with h.Daemon(ctx.gemmd, config={"timeouts": {"idle_ms": IDLE_MS}}) as d:
        run_bin("scaleout", {"GEMMD_ADDRESS": DEAD + "," + d.address("unix"),
                             "GEMMD_TEST_IDLE_SLEEP_MS": str(IDLE_MS * 4)})
        # how many idle closes the client met depends on timing: said, not asserted
        print("idle closes: %d" % d.log().count("idle for timeouts.idle_ms"))


def gemms_served(daemon):
    client = daemon.connect("unix")
    try:
        return client.call("stats").get("gemm_ok")
    finally:
        client.close()


def test_draining_daemon(ctx):
    """A is told to drain with 24 requests queued: those it does not finish go to B."""
    drain = {"timeouts": {"drain_ms": 100}}
    with h.Daemon(ctx.gemmd, config=drain) as b:
        a = h.Daemon(ctx.gemmd, config=drain).start()
        try:
            run_bin("drain", {"GEMMD_ADDRESS": a.address("unix") + "," + b.address("unix"),
                              "GEMMD_TEST_DRAIN_PID": str(a.pid)})
            a.stop(sig=None)  # it had its SIGTERM: a clean exit
        finally:
            a.cleanup()
        print("requests B served: %s" % gemms_served(b))  # how many depends on timing


def test_gemmctl_list(ctx):
    with h.Daemon(ctx.gemmd) as d:
        addr = DEAD + "," + d.unix_path  # a bare path in a list is unix:PATH too
        for _ in range(2):  # round robin: both starting points
            rc, out, err = gemmctl("--connect", addr, "--json", "verify")
            assert rc == 0, "verify over %s: exit %d\n%s%s" % (addr, rc, out, err)
            assert json.loads(out)["result"] == "PASS", out
        rc, _, err = gemmctl("ping", env={"GEMMD_ADDRESS": d.address("unix") + "," + DEAD})
        assert rc == 0, err
    rc, _, err = gemmctl("--connect", DEAD + "," + DEAD, "ping")
    assert rc == 3 and "none of 2 addresses" in err, (rc, err)


def has_auth(daemon):
    client = daemon.connect("unix")
    try:
        info = client.call("info")
    finally:
        client.close()
    return "auth" in (info.get("features") or [])


def test_token(ctx):
    with h.Daemon(ctx.gemmd) as d:
        if not has_auth(d):
            raise h.Skip("the daemon's info lists no \"auth\" feature")
    tmp = tempfile.mkdtemp(prefix="gemmd-token-")
    try:
        token_file = os.path.join(tmp, "token")
        with open(os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(TOKEN + "\n")  # the daemon wants it unreadable by others
        token_run(ctx, token_file)
    finally:
        shutil.rmtree(tmp)


def token_run(ctx, token_file):
    section, key = DAEMON_TOKEN_CONFIG.split(".")
    with h.Daemon(ctx.gemmd, tcp=True, config={section: {key: token_file}}) as d:
        run_bin("token", {"GEMMD_ADDRESS": d.address("tcp"), "GEMMD_TOKEN": TOKEN})
        rc, out, err = gemmctl("--connect", d.address("tcp"), "--token-file", token_file, "ping")
        assert rc == 0, err
        rc, out, err = gemmctl("--connect", d.address("tcp"), "ping")
        assert rc == 1 and "UNAUTHENTICATED" in err, (rc, err)
        rc, out, err = gemmctl("--connect", d.address("unix"), "ping")  # no token on Unix
        assert rc == 0, err


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--gemmctl", required=True)
    parser.add_argument("--token", action="store_true")
    ARGS, rest = parser.parse_known_args()
    tests = [test_token] if ARGS.token else [test_library_list_and_idle_close,
                                             test_draining_daemon, test_gemmctl_list]
    sys.exit(h.main(tests, [sys.argv[0]] + rest))
