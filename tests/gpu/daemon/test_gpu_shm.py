#!/usr/bin/python3
"""Shared memory in place on a real GPU (label gpu): regions registered for DMA with
cudaHostRegister, operands copied straight from them and results straight into them, every form
checked against the float64 reference with the direct byte counts, a region outliving its
unregister while a job reads it, and the budget fallback. The same tests run on gemmd_fake
(daemon_fake_shm). Exits 77 with "SKIP: no CUDA device" where gemmd --backend gpu finds none."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration", "daemon"))
sys.path.insert(0, HERE)
import test_gpu_e2e as e2e  # noqa: E402
import test_shm as shm  # noqa: E402

if __name__ == "__main__":
    sys.exit(e2e.gpu_main([shm.test_every_dtype_in_shm, shm.test_in_place_forms,
                           shm.test_in_place_larger_than_staging,
                           shm.test_in_place_region_outlives_its_unregister,
                           shm.test_in_place_while_waiting_for_memory,
                           shm.test_in_place_fallbacks, shm.test_released_with_the_connection]))
