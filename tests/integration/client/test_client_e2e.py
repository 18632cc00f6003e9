#!/usr/bin/python3
"""Runs test_client_e2e (libgemmclient against the real daemon) against a default daemon and
against one whose limits.max_dim is 100 (error propagation). Usage:
  test_client_e2e.py --gemmd PATH --bin PATH/test_client_e2e
"""
import argparse
import os
import subprocess
import sys

import gemmd_harness as h

ARGS = None


def run_bin(daemon, mode):
    env = dict(os.environ, GEMMD_ADDRESS=daemon.address("unix"))
    proc = subprocess.run([ARGS.bin, mode], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=280)
    print(proc.stdout, end="")
    assert proc.returncode == 0, "test_client_e2e %s failed (exit %d)" % (mode, proc.returncode)


def test_main(ctx):
    with h.Daemon(ctx.gemmd) as daemon:
        run_bin(daemon, "main")


def test_limits(ctx):
    with h.Daemon(ctx.gemmd, config={"limits": {"max_dim": 100}}) as daemon:
        run_bin(daemon, "limits")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    ARGS, rest = parser.parse_known_args()
    sys.exit(h.main([test_main, test_limits], [sys.argv[0]] + rest))
