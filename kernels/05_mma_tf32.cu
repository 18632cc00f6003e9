/*
 * 05_mma_tf32.cu - "mma_tf32": f32 GEMM with precision "fast" on the TF32 tensor cores.
 *
 * Tiling: 04's structure for 4-byte elements: 128 x 128 block tile, BK = 32 (128 bytes per
 * k row), 4 warps of 64 x 64, mma.sync.m16n8k8.tf32 (4 x 8 tiles per warp), STAGES = 3
 * cp.async stages (3 x 36 KB: two blocks still fit one SM). Kernel template: 05_mma_tf32.cuh
 * (12 instantiates it with small tiles).
 *
 * What changed over 04: the element is 4 bytes, so ldmatrix (which moves 16-bit elements) can
 * only be used where a fragment's 32-bit elements sit along a shared row: for the operand whose
 * k is contiguous (A not transposed, B transposed), an 8x8 b16 matrix is exactly 8 rows x 4
 * floats, which is one tf32 fragment register. The other layout (k strided) is read with scalar
 * 32-bit shared loads; its rows are padded by 8 floats so that the (k = t, m = g) pattern of a
 * fragment lands on 32 distinct banks (bank = 8t + g), and k-contiguous rows by 4 floats (bank =
 * 4g + t), so every fragment load is conflict-free.
 * The f32 inputs go to the tensor cores as they are: the hardware reads the top 19 bits (TF32
 * truncation, relative error ~2^-10 per product), which is what precision "fast" allows; no
 * conversion instructions in the inner loop.
 * Why: f32 "fast" may trade mantissa bits for the tensor cores' ~8x higher rate (cuBLAS TF32
 * ~390-410 TFLOP/s against ~51 for SIMT SGEMM on an H200).
 *
 * Measured (H200, bench_kernels, run 4): 184.7 / 168.3 TFLOP/s at 4096^3 / 8192^3 = 52% / 47%
 * of cuBLAS TF32 (356 / 358). Same L2 -> SM bandwidth wall as 04 at twice the bytes per flop
 * (bench/RESULTS.md).
 *
 * Contract: f32 with precision "fast", any m, n, k (unaligned rows: scalar loads, same kernel),
 * both transposes, alpha/beta (beta == 0: C not read), any batch. Needs compute capability >= 8.0.
 */
#include "05_mma_tf32.cuh"
#include "gk_gpu.h"

namespace {

/* The registered configuration: 128 x 128 x 32, 2 x 2 warps of 64 x 64, 3 stages. */
using cfg = gk__tf32_cfg<128, 128, 32, 2, 2, 3>;

bool mma_tf32_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_F32 && p->fast && cc >= 80 && gk__fits_int32(p);
}

cudaError_t mma_tf32_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (p->dtype != GK_F32) return cudaErrorInvalidValue;
  return gk__tf32_launcher<cfg>::launch(p, stream);
}

} // namespace
extern "C" const gk_kernel gk_kernel_mma_tf32 = {
    "mma_tf32",
    "f32 precision fast, TF32 tensor cores mma.sync m16n8k8: 128x128x32, 3-stage cp.async (05)",
    mma_tf32_supports,
    mma_tf32_launch,
    0,
};
