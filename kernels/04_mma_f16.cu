/*
 * 04_mma_f16.cu - "mma_f16": f16 and bf16 GEMM (f32 accumulate) on the tensor cores, mma.sync.
 *
 * Tiling: 128 x 128 block tile, BK = 32, 128 threads = 4 warps in a 2 x 2 grid, each warp a
 * 64 x 64 tile = 4 x 8 mma.sync.m16n8k16 tiles (128 f32 accumulators per thread). STAGES = 4
 * shared-memory stages filled by cp.async (16 bytes, zero-fill at the edges) so three k tiles
 * are in flight while one is multiplied. Grouped tile order for L2. Kernel template:
 * 04_mma_f16.cuh (13 instantiates it with small tiles).
 *
 * What changed over 02/03: the multiply moves from the FMA units to the tensor cores (one
 * mma.sync does 4096 multiply-adds), so feeding them becomes the whole problem:
 *   - cp.async copies global -> shared without passing through registers, asynchronously, so a
 *     multi-stage ring replaces 02's register double buffer;
 *   - ldmatrix loads a warp's fragments, 4 8x8 matrices per instruction;
 *   - transposes cost nothing: shared memory keeps the global layout, and the fragment load is
 *     ldmatrix (the operand's k is contiguous) or ldmatrix.trans (it is not);
 *   - each shared row is padded by 16 bytes, which puts the 8 rows an ldmatrix reads in 8
 *     different bank groups (row pitch 80 or 272 bytes: conflict-free either way).
 * Why: the CUDA cores top out near 50 TFLOP/s; the tensor cores do an order of magnitude more,
 * and mma.sync is the path every GPU from sm_80 on runs.
 *
 * Measured (H200, bench_kernels, run 4): bf16 329.5 / 331.9 TFLOP/s at 4096^3 / 8192^3 = 44% /
 * 47% of cuBLAS; f16 328.3 / 319.6 = 44% / 44%; 54-56% at 2048^3. The limit is L2 -> SM
 * bandwidth (16 KB per MFLOP at this tile: ~5 TB/s at 320 TFLOP/s); bigger tiles and
 * double-buffered fragments were tried and lost (bench/RESULTS.md). Next: wgmma + TMA (sm_90a)
 * with multicast across a 2-CTA cluster.
 *
 * Contract: f16 or bf16, any m, n, k (rows that are not 16-byte aligned, i.e. ld % 8 != 0 or an
 * unaligned pointer, use the same kernel with scalar loads), both transposes, alpha/beta (beta ==
 * 0: C not read), any batch. Needs compute capability >= 8.0.
 */
#include "04_mma_f16.cuh"
#include "gk_gpu.h"

namespace {

/* The registered configuration: 128 x 128 x 32, 2 x 2 warps of 64 x 64, 4 stages. */
using cfg = gk__mma16_cfg<128, 128, 32, 2, 2, 4>;

bool mma_f16_supports(const gk_problem *p, int cc) {
  return (p->dtype == GK_F16 || p->dtype == GK_BF16) && cc >= 80 && gk__fits_int32(p);
}

cudaError_t mma_f16_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (p->dtype == GK_F16) return gk__mma16_launcher<__half, cfg>::launch(p, stream);
  if (p->dtype == GK_BF16) return gk__mma16_launcher<__nv_bfloat16, cfg>::launch(p, stream);
  return cudaErrorInvalidValue;
}

} // namespace
extern "C" const gk_kernel gk_kernel_mma_f16 = {
    "mma_f16",
    "f16/bf16, tensor cores mma.sync m16n8k16: 128x128x32 tile, 4-stage cp.async (04)",
    mma_f16_supports,
    mma_f16_launch,
    0,
};
