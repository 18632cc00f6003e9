"""A small MLP's forward pass on gemmd: each layer is one request, gelu(x @ w + b).

    GEMMD_ADDRESS=unix:/tmp/gemmd.sock python3 dense_layers.py

The weights go to the daemon once (put: resident for the connection); each call then sends only
the activations, a batch of them multiplied by the one resident matrix (broadcast_b), and the
daemon adds the bias row and applies the activation where it computes the product: the
"epilogue" feature (proto/PROTOCOL.md). Checked against NumPy in float64.
"""
import math

import numpy as np

import gemmd

rng = np.random.default_rng(7)
sizes = [256, 512, 512, 10]                       # input, two hidden layers, output
weights = [rng.standard_normal((m, n)).astype(np.float32) / math.sqrt(m)
           for m, n in zip(sizes, sizes[1:])]
biases = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in sizes[1:]]
x = rng.standard_normal((4, 32, sizes[0])).astype(np.float32)   # 4 batches of 32 inputs


def gelu(v):
    return 0.5 * v * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0)))


with gemmd.Client() as client:          # $GEMMD_ADDRESS, else unix:/run/gemmd/gemmd.sock
    features = client.features
    if "epilogue" not in features or "resident" not in features:
        raise SystemExit("this gemmd lacks the epilogue or resident operands: %s" % sorted(features))
    resident = [client.put(w) for w in weights]  # once; later calls send only their handles
    h = x
    for i, (w, b) in enumerate(zip(resident, biases)):
        last = i == len(resident) - 1
        h = client.gemm(h, w, bias=b, activation=None if last else "gelu")
    for w in resident:
        client.free(w)

ref = x.astype(np.float64)
for i, (w, b) in enumerate(zip(weights, biases)):
    ref = ref @ w.astype(np.float64) + b
    if i < len(weights) - 1:
        ref = gelu(ref)
assert h.shape == (4, 32, sizes[-1]), h.shape
assert np.allclose(h, ref, rtol=1e-4, atol=1e-4), float(np.max(np.abs(h - ref)))
print("dense layers example: right (output %s, largest error %.1e)" % (h.shape, np.max(np.abs(h - ref))))
