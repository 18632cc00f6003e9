#!/usr/bin/python3
"""Leading dimensions on a real GPU (label gpu): integration/daemon/test_ld.py's submatrices of
larger arrays in a region (every transpose, f32 / f64 / c64 / c128, batches, beta 0 with NaN in
C, C updated in place) packed on the device by 2D copies and written back row by row, each
against float64 with every byte outside the submatrix checked unchanged; and its misuse cases.
The same tests run on gemmd_fake (daemon_fake_ld). Exits 77 with "SKIP: no CUDA device" where
gemmd --backend gpu finds none."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration", "daemon"))
sys.path.insert(0, HERE)
import test_gpu_e2e as e2e  # noqa: E402
import test_ld as ld  # noqa: E402

if __name__ == "__main__":
    sys.exit(e2e.gpu_main([ld.test_feature, ld.test_submatrices, ld.test_misuse]))
