"""The two fp8 formats of the fp8 gemm (protocol "e4m3" and "e5m2", the OCP 8-bit floating
point formats), between NumPy float arrays and the uint8 arrays of their bytes that gemm() sends
(NumPy has no fp8 dtype).

  e4m3  1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinity; S.1111.111 is NaN; the
        largest finite value is 448, the smallest subnormal 2^-9.
  e5m2  1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE 754 rules (infinity, NaNs); the
        largest finite value is 57344, the smallest subnormal 2^-16.

to_e4m3 / to_e5m2 round to nearest, ties to even (subnormals alike); a finite value beyond the
largest saturates to it with its sign; infinity stays infinity in e5m2 and saturates in e4m3,
which has none; NaN stays NaN. The rules, and every byte, are those of the daemon's C converter
(proto/gp_fp8.c): the same bit arithmetic on the float64 value, vectorized. from_e4m3 /
from_e5m2 are exact (every fp8 value is a float32).

    a8 = gemmd.fp8.to_e4m3(a / scale_a)             # uint8, to send with dtype="e4m3"
    back = gemmd.fp8.from_e4m3(a8) * scale_a        # float32: what the daemon multiplies
"""

import numpy as np

__all__ = ["to_e4m3", "to_e5m2", "from_e4m3", "from_e5m2", "E4M3_MAX", "E5M2_MAX"]

E4M3_MAX = 448.0
E5M2_MAX = 57344.0


class _Format:
    """What tells one format from the other (gp_fp8.c's fp8_format)."""

    def __init__(self, mant_bits, bias, max_abs, nan, has_inf):
        self.mant_bits, self.bias = mant_bits, bias
        self.max_abs = max_abs      # the largest finite value's bits, sign cleared
        self.nan = nan              # the NaN written, sign cleared
        self.has_inf = has_inf      # e5m2: exponent all ones and mantissa 0 is infinity
        self.table = _decode_table(self)


def _decode_table(fmt):
    """The float32 value of each of the 256 bytes."""
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes & 0x7F) >> fmt.mant_bits
    mant = codes & ((1 << fmt.mant_bits) - 1)
    scale = float(1 << fmt.mant_bits)
    subnormal = mant / scale * 2.0 ** (1 - fmt.bias)
    normal = (1.0 + mant / scale) * 2.0 ** (exp - fmt.bias)
    values = sign * np.where(exp == 0, subnormal, normal)
    top = exp == (0x7F >> fmt.mant_bits)
    if fmt.has_inf:
        values = np.where(top & (mant == 0), sign * np.inf, values)
        values = np.where(top & (mant != 0), np.nan, values)
    else:
        values = np.where((codes & 0x7F) == fmt.nan, np.nan, values)
    return np.copysign(values, sign).astype(np.float32)


_E4M3 = _Format(3, 7, 0x7E, 0x7F, False)
_E5M2 = _Format(2, 15, 0x7B, 0x7E, True)
_U64 = np.uint64


def _round_shift(value, shift):
    """value >> shift (uint64 arrays, 1 <= shift <= 63) rounded to nearest, ties to even."""
    kept = value >> shift
    rest = value & ((_U64(1) << shift) - _U64(1))
    half = _U64(1) << (shift - _U64(1))
    up = (rest > half) | ((rest == half) & ((kept & _U64(1)) == _U64(1)))
    return kept + up.astype(np.uint64)


def _narrow(x, fmt):
    """gp_fp8.c's narrow() over an array: float64 bits to fp8 bytes."""
    d = np.asarray(x, dtype=np.float64)
    u = np.ascontiguousarray(d).view(np.uint64)
    sign = ((u >> _U64(56)) & _U64(0x80)).astype(np.uint8)
    exp = ((u >> _U64(52)) & _U64(0x7FF)).astype(np.int64)
    full = (u & _U64((1 << 52) - 1)) | _U64(1 << 52)
    mb, emin = fmt.mant_bits, 1 - fmt.bias
    e = exp - 1023
    # normal results: the exponent field plus the rounded mantissa (a carry bumps the exponent)
    normal = ((e + fmt.bias) << mb) + \
        (_round_shift(full, _U64(52 - mb)).astype(np.int64) - (1 << mb))
    # subnormal results: steps of 2^(emin - mant_bits); a shift past 63 leaves less than half
    # a step, as a shift of 63 does (full < 2^53)
    shift = np.clip(52 - mb + (emin - e), 1, 63).astype(np.uint64)
    subnormal = _round_shift(full, shift).astype(np.int64)
    bits = np.minimum(np.where(e >= emin, normal, subnormal), fmt.max_abs)
    out = np.where(exp == 0, 0, bits)   # zero, or a double subnormal: far below a step
    inf_bits = 0x7C if fmt.has_inf else fmt.max_abs
    mant_set = (u & _U64((1 << 52) - 1)) != _U64(0)
    out = np.where(exp == 0x7FF, np.where(mant_set, fmt.nan, inf_bits), out)
    return (sign | out.astype(np.uint8)).reshape(d.shape)


def _widen(codes, fmt):
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError("fp8 bytes are a uint8 array, not %s" % codes.dtype)
    return fmt.table[codes]


def to_e4m3(x):
    """x (any real array-like) as e4m3 bytes: a uint8 array of its shape."""
    return _narrow(x, _E4M3)


def to_e5m2(x):
    """x (any real array-like) as e5m2 bytes: a uint8 array of its shape."""
    return _narrow(x, _E5M2)


def from_e4m3(codes):
    """e4m3 bytes (a uint8 array) as float32 values (NaN for S.1111.111)."""
    return _widen(codes, _E4M3)


def from_e5m2(codes):
    """e5m2 bytes (a uint8 array) as float32 values (infinities, NaNs)."""
    return _widen(codes, _E5M2)
