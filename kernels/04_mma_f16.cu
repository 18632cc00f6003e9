/*
 * 04_mma_f16.cu - "mma_f16": f16 and bf16 GEMM (f32 accumulate) on the tensor cores, mma.sync.
 *
 * Tiling: 128 x 128 block tile, BK = 32, 128 threads = 4 warps in a 2 x 2 grid, each warp a
 * 64 x 64 tile = 4 x 8 mma.sync.m16n8k16 tiles (128 f32 accumulators per thread). STAGES = 4
 * shared-memory stages filled by cp.async (16 bytes, zero-fill at the edges) so three k tiles
 * are in flight while one is multiplied. Grouped tile order for L2.
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
 * Why: SIMT f32 tops out near 50 TFLOP/s; the H100/H200 tensor cores do ~660 TFLOP/s of
 * f16/bf16 through mma.sync. wgmma (sm_90a) is the next step to reach cuBLAS (~750).
 *
 * Measured: see the "## Kernels" table in bench/RESULTS.md.
 *
 * Contract: f16 or bf16, any m, n, k (rows that are not 16-byte aligned, i.e. ld % 8 != 0 or an
 * unaligned pointer, use the same kernel with scalar loads), both transposes, alpha/beta (beta ==
 * 0: C not read), any batch. Needs compute capability >= 8.0.
 */
#include "gk_fast_mma16.cuh"
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
};
