#!/usr/bin/python3
"""The output cast (out_dtype) on a real GPU: every check of
tests/integration/daemon/test_out_dtype.py on the GPU backend, so the small lane's batches, the
staging path, shared memory and gk_epilogue.cu's cast passes around each kernel all run against
float64. Exits 77 with "SKIP: no CUDA device" where gemmd --backend gpu finds none."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration", "daemon"))
os.environ.setdefault("GEMMD_TEST_BACKEND", "gpu")  # before the harness reads it
import test_out_dtype as out_dtype  # noqa: E402
from test_gpu_e2e import gpu_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(gpu_main(out_dtype.TESTS))
