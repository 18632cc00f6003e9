"""Matrix products on gemmd from NumPy.

    GEMMD_ADDRESS=unix:/tmp/gemmd.sock python3 numpy_gemm.py
"""
import numpy as np

import gemmd

rng = np.random.default_rng()
a = rng.standard_normal((500, 300)).astype(np.float32)
b = rng.standard_normal((300, 200)).astype(np.float32)

with gemmd.Client() as client:          # $GEMMD_ADDRESS, else unix:/run/gemmd/gemmd.sock
    c = client.gemm(a, b)               # like a @ b
    assert np.allclose(c, a @ b, rtol=1e-4, atol=1e-3)

    # transposes, alpha and beta, in place: c = 2 * a @ b + 0.5 * c
    client.gemm(a.T.copy(), b, c, trans_a=True, alpha=2.0, beta=0.5, out=c)

    # a batch of 8 products of float64 matrices, many in flight at once
    xs = rng.standard_normal((8, 64, 32))
    ys = rng.standard_normal((8, 32, 16))
    futures = [client.submit(xs, ys, alpha=float(i)) for i in range(4)]
    for i, future in enumerate(futures):
        assert np.allclose(future.result(), i * (xs @ ys))
    print("4 batches on %s (%s), %d us computing" % (
        futures[0].report["device"], futures[0].report["kernel"],
        futures[0].report["timings"]["compute_us"]))
    try:
        client.gemm(a, a)               # 500x300 times 500x300: refused before sending
    except ValueError as exc:
        print("refused:", exc)
print("numpy example: right")
