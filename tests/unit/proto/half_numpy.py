#!/usr/bin/python3
"""NumPy's float16 conversions, for tests/unit/proto/test_proto_half.c to compare bit for bit.

  half_numpy.py DIR   writes, as raw little-endian arrays:
    widen.u32    numpy's float32 bits of every float16 bit pattern 0..65535
    narrow.u32   float32 inputs: every value of the top 19 bits (sign, exponent, 10 mantissa
                 bits) with the low 13 bits 0, 1, just under half, half, just over half and all
                 ones, so every float16 rounding boundary, tie, subnormal and the overflow edge
                 are hit from both sides; then 1M random bit patterns (NaNs and infs included)
    narrow.u16   numpy's float16 bits of each input (astype, round to nearest even)
"""
import os
import sys

import numpy as np


def main(directory):
    every = np.arange(65536, dtype="<u2")
    every.view("<f2").astype("<f4").view("<u4").tofile(os.path.join(directory, "widen.u32"))

    top = np.arange(1 << 19, dtype=np.uint32) << 13
    low = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF], dtype=np.uint32)
    boundaries = (top[:, None] | low[None, :]).ravel()
    random = np.random.default_rng(16).integers(0, 1 << 32, 1 << 20, dtype=np.uint32)
    inputs = np.concatenate([boundaries, random]).astype("<u4")
    inputs.tofile(os.path.join(directory, "narrow.u32"))
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is one of the cases
        halves = inputs.view("<f4").astype("<f2").view("<u2")
    halves.tofile(os.path.join(directory, "narrow.u16"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
