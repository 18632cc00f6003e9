#!/usr/bin/python3
"""The integer gemm (i8 -> i32) on a real GPU: every check of
tests/integration/daemon/test_i8.py on the GPU backend, so the small lane's batches, the
staging path, shared memory, row blocks and kernel 17 (its K-major copies too) all run bit for
bit against the exact result. Exits 77 with "SKIP: no CUDA device" where gemmd --backend gpu
finds none."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration", "daemon"))
os.environ.setdefault("GEMMD_TEST_BACKEND", "gpu")  # before the harness reads it
import test_i8 as i8  # noqa: E402
from test_gpu_e2e import gpu_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(gpu_main(i8.TESTS))
