#!/usr/bin/python3
"""The fp8 gemm (e4m3 / e5m2 -> f32) on a real GPU: every check of
tests/integration/daemon/test_fp8.py on the GPU backend, so the small lane's batches, the
staging path, shared memory, row blocks and kernels 19 (its K-major copies too) and 20 all run
within fp8's accumulation bound of the float64 result. Exits 77 with "SKIP: no CUDA device" where gemmd --backend gpu
finds none."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration", "daemon"))
os.environ.setdefault("GEMMD_TEST_BACKEND", "gpu")  # before the harness reads it
import test_fp8 as fp8  # noqa: E402
from test_gpu_e2e import gpu_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(gpu_main(fp8.TESTS))
