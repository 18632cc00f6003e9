#!/usr/bin/python3
"""test_client_scratch.py - runs test_client_scratch against a real gemmd on a Unix socket
(the scratch region) and on TCP (no shared memory: the library's strided packing), then checks
that the Unix runs registered shared memory with the daemon.
  test_client_scratch.py --gemmd build/daemon/gemmd --bin build/.../test_client_scratch
"""
import argparse
import os
import subprocess
import sys

import gemmd_harness as h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmd")
    ap.add_argument("--bin", required=True)
    args, _ = ap.parse_known_args()
    with h.Daemon(h.find_gemmd(sys.argv), tcp=True) as d:
        p = subprocess.run([args.bin, d.address("unix"), d.address("tcp")], capture_output=True,
                           text=True, timeout=600 * d.scale)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr[-6000:])
        assert p.returncode == 0, "test_client_scratch failed"
        # the gemm in bands of rows (GEMMD_SCRATCH_PIECES): 300 rows in 3 bands of 100
        p = subprocess.run([args.bin, d.address("unix")], capture_output=True, text=True,
                           timeout=600 * d.scale, env=dict(os.environ, GEMMD_SCRATCH_PIECES="3"))
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr[-6000:])
        assert p.returncode == 0, "test_client_scratch failed in bands"
        c = d.connect()
        stats = c.call("stats")
        c.close()
        assert stats["requests"]["shm_register"] >= 2, stats["requests"]
    return 0


if __name__ == "__main__":
    sys.exit(main())
