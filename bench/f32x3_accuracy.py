#!/usr/bin/python3
"""f32x3_accuracy.py - kernel 21's (wgmma_f32x3) arithmetic emulated on the CPU, against an
FFMA chain (what an SGEMM on the CUDA cores does per output) and float64.

    f32x3_accuracy.py [--m M] [--n N] [--ks 256,1024,4096] [--seed S] [--check]

Kernel 21 splits each f32 operand into big (RN to TF32's 11 bits by an integer add on its bits)
and small (the exact rest, rounded the same way), and sums small_x big_y + big_x small_y + big_x big_y
on the TF32 tensor cores: per k tile of 32, twelve wgmma k8 steps (the small products first)
into zeroed accumulators, then one f32 add (round to nearest) into the tile's sum; on the narrow
tile with k >= 2048, into a middle sum first, added to the tile's every ~sqrt(k tiles) tiles
(two levels: on wide exponents the chain of one f32 add per k tile, not the split's dropped
bits, is what makes 21's error; with the operands exact it stays within a few per cent).
The tensor core is modelled as: each k8 step's eight products exact, added to its accumulator
exactly, the result rounded toward zero to f32 (it truncates; its internal width is not
documented, so this is a model, checked against the device by test_gpu_kernels's accuracy
table). "tc throughout" is the same split summed in the tensor core over the whole k (no f32
add per k tile), to show what the per-tile add buys. "split-k 4" is the FFMA chain over four
quarters of k, then summed: what cuBLAS's SGEMM error looks like on short grids with a long k
(the device's 1024x1024x4096 row), the figure 21's two-level sum is held to.

Per input kind (uniform [-1, 1), normal, wide exponents 2^-30..2^30, cancellation-heavy) and k:
max and mean over the outputs of |C - C64| / (|A| |B|), C64 the float64 product and |A| |B| the
product of the absolute values (the scale of each output's rounding errors).
--check exits 1 unless kernel 21's model is at most the FFMA chain's on every row (max and mean),
and from k = 2048 its two-level sum at most split-k 4's mean.
"""
import argparse
import sys

import numpy as np

F32, F64, U32 = np.float32, np.float64, np.uint32


def tf32_rn(x):
    """float32 -> TF32 (in float32), to nearest with ties away: add half an ulp, clear 13 bits."""
    return ((x.view(U32) + U32(0x1000)) & U32(0xFFFFE000)).view(F32)


def split(x):
    """(big, small) of a float32 array, as kernel 21's split() computes them."""
    big = tf32_rn(x)
    return big, tf32_rn(x - big)


def trunc_f32(s):
    """float64 -> float32 rounded toward zero."""
    r = s.astype(F32)
    over = np.abs(r.astype(F64)) > np.abs(s)
    r[over] = np.nextafter(r[over], F32(0))
    return r


def tc_step(acc, x8, y8):
    """One wgmma k8 step: acc (f32) + the exact sum of eight products, truncated to f32."""
    return trunc_f32(acc.astype(F64) + x8.astype(F64) @ y8.astype(F64))


def mid_group(k_tiles):
    """k tiles per middle sum: the smallest g with g * g >= k_tiles (kernel 21's mid_group)."""
    g = 1
    while g * g < k_tiles:
        g += 1
    return g


def f32x3(a, b, per_tile=True, bk=32, two_level=False):
    """Kernel 21's sum (per_tile False: all in the tensor core, no f32 add per k tile;
    two_level: the k tiles' sums through a middle sum, as its narrow tile from k = 2048)."""
    m, k = a.shape
    n = b.shape[1]
    ab, as_ = split(a)
    bb, bs = split(b)
    acc = np.zeros((m, n), F32)
    mid = np.zeros((m, n), F32)
    group, folded = mid_group((k + bk - 1) // bk), 0
    for k0 in range(0, k, bk):
        part = np.zeros((m, n), F32) if per_tile else acc
        steps = [(as_, bb), (ab, bs), (ab, bb)]
        for xa, yb in steps:
            for kk in range(k0, min(k0 + bk, k), 8):
                part = tc_step(part, xa[:, kk:kk + 8], yb[kk:kk + 8, :])
        if not per_tile:
            acc = part
        elif not two_level:
            acc = (acc + part).astype(F32)
        else:
            mid, folded = (mid + part).astype(F32), folded + 1
            if folded == group:
                acc, mid, folded = (acc + mid).astype(F32), np.zeros((m, n), F32), 0
    return (acc + mid).astype(F32) if two_level else acc


def ffma_chain(a, b):
    """Each output an FFMA chain over k in f32 (the product exact in f64, then rounded)."""
    m, k = a.shape
    acc = np.zeros((m, b.shape[1]), F32)
    a64, b64 = a.astype(F64), b.astype(F64)
    for l in range(k):
        acc = (acc.astype(F64) + np.outer(a64[:, l], b64[l, :])).astype(F32)
    return acc


def split_k(a, b, parts=4):
    """FFMA chains over `parts` slices of k, summed in f32 (cuBLAS's split-k, as modelled)."""
    k = a.shape[1]
    acc = np.zeros((a.shape[0], b.shape[1]), F32)
    for i in range(parts):
        lo, hi = i * k // parts, (i + 1) * k // parts
        acc = (acc + ffma_chain(a[:, lo:hi], b[lo:hi, :])).astype(F32)
    return acc


def inputs(kind, m, n, k, rng):
    """A (m x k) and B (k x n) of one kind, in float32."""
    if kind == "uniform":
        return rng.uniform(-1, 1, (m, k)).astype(F32), rng.uniform(-1, 1, (k, n)).astype(F32)
    if kind == "normal":
        return rng.standard_normal((m, k)).astype(F32), rng.standard_normal((k, n)).astype(F32)
    if kind == "wide":  # signs random, exponents spread evenly over 2^-30 .. 2^30

        def wide(shape):
            return (rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(-30, 30, shape))).astype(F32)

        return wide((m, k)), wide((k, n))
    # cancellation: the second half of k repeats the first with A negated and perturbed by
    # ~2^-10, so each output is ~2^-10 of its terms' magnitude
    h = k // 2
    u = rng.uniform(-1, 1, (m, h))
    a = np.concatenate([u, -u * (1 + rng.uniform(-1, 1, (m, h)) * 2.0**-10)], axis=1)
    w = rng.uniform(-1, 1, (h, n))
    b = np.concatenate([w, w], axis=0)
    return a.astype(F32), b.astype(F32)


def errors(c, a, b):
    a64, b64 = a.astype(F64), b.astype(F64)
    ref, mag = a64 @ b64, np.abs(a64) @ np.abs(b64)
    e = np.abs(c.astype(F64) - ref) / mag
    return e.max(), e.mean()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--m", type=int, default=48)
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--ks", default="256,1024,4096")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    worse = 0
    print(f"|A| |B|-scaled error, max / mean over {args.m} x {args.n} outputs (seed {args.seed})\n")
    print("| inputs | k | FFMA chain (SGEMM) | split-k 4 | 21: f32 add per k tile | 21: two levels "
          "| tc throughout |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind in ("uniform", "normal", "wide", "cancel"):
        for k in (int(s) for s in args.ks.split(",")):
            a, b = inputs(kind, args.m, args.n, k, rng)
            ref = errors(ffma_chain(a, b), a, b)
            sk = errors(split_k(a, b), a, b)
            ours = errors(f32x3(a, b), a, b)
            two = errors(f32x3(a, b, two_level=True), a, b)
            tc = errors(f32x3(a, b, per_tile=False), a, b)
            flag = "" if ours[0] <= ref[0] and ours[1] <= ref[1] else " **worse**"
            flag2 = "" if k < 2048 or two[1] <= sk[1] else " **worse**"
            worse += bool(flag) + bool(flag2)
            print(f"| {kind} | {k} | {ref[0]:.1e} / {ref[1]:.1e} | {sk[0]:.1e} / {sk[1]:.1e} "
                  f"| {ours[0]:.1e} / {ours[1]:.1e}{flag} | {two[0]:.1e} / {two[1]:.1e}{flag2} "
                  f"| {tc[0]:.1e} / {tc[1]:.1e} |")
            sys.stdout.flush()
    if args.check and worse:
        print(f"\n{worse} rows where 21's model is worse than the FFMA chain")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
