"""Matrix products on gemmd from PyTorch CPU tensors (zero-copy through __array__).

    GEMMD_ADDRESS=unix:/tmp/gemmd.sock python3 torch_gemm.py

Exits 77 with "SKIP: ..." when PyTorch is not installed (Debian: apt-get install python3-torch).
"""
import sys

try:
    import torch
except ImportError:
    print("SKIP: PyTorch is not installed (apt-get install python3-torch)")
    sys.exit(77)

import gemmd

a = torch.randn(256, 128)
b = torch.randn(128, 64)
with gemmd.Client() as client:
    c = torch.from_numpy(client.gemm(a, b))               # result: a writable NumPy array
    assert torch.allclose(c, a @ b, rtol=1e-4, atol=1e-3)
    ct = torch.from_numpy(client.gemm(a.T, b, trans_a=True))   # a.T is column-major: no copy
    assert torch.allclose(ct, a @ b, rtol=1e-4, atol=1e-3)
    half = client.gemm(a.half(), b.half())
    assert torch.allclose(torch.from_numpy(half).float(), a.half().float() @ b.half().float(),
                          rtol=2e-2, atol=2e-1)
    bf16 = client.gemm(a.bfloat16(), b.bfloat16())        # uint16 bits (or ml_dtypes.bfloat16)
    got = torch.from_numpy(bf16.view("int16")).view(torch.bfloat16).float()
    want = a.bfloat16().float() @ b.bfloat16().float()
    assert torch.allclose(got, want, rtol=5e-2, atol=5e-1)
print("torch example: right")
