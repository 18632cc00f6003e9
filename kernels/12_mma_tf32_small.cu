/*
 * 12_mma_tf32_small.cu - "mma_tf32_small": f32 with precision "fast" (TF32 tensor cores) for
 * small problems (m <= 128, n <= 128): 05's mma.sync kernel, with small block tiles below 64.
 *
 * Tiling: 32 x 32 x 32, one warp (m, n <= 32); 64 x 64 x 32 with 2 x 2 warps of 32 x 32
 * (m, n <= 64); else 05's own 128 x 128 x 32. 3 cp.async stages; mma.sync m16n8k8 TF32, f32
 * accumulate.
 *
 * What changed over 05/08: only the tile. 08 (wgmma, 128 x 256) ran a batch of 8192 32^3
 * problems at 2.1 TFLOP/s (20% of cublasLt) and 64^3 at 35%: one CTA per problem, nearly all
 * padding.
 *
 * Measured (H200, bench_kernels --variants --small-batches, batched NN): 32 x 32 at 8192 x 32^3:
 * 16.0 / 11.1 TFLOP/s = 144% of cuBLAS at its best; 64 x 64 at 4096 x 64^3: 38.3 / 38.8 = 99%;
 * 05's 128 x 128 at 1024 x 128^3: 69.7 / 71.7 = 97%, where 08 gave 83-85%.
 *
 * Contract: f32 with precision fast, m <= 128 and n <= 128, any k, both transposes, alpha/beta,
 * any batch, aligned or not (05's contract). Compute capability >= 8.0.
 */
#include "05_mma_tf32.cuh"
#include "gk_gpu.h"

namespace {

using tile32 = gk__tf32_cfg<32, 32, 32, 1, 1, 3>;
using tile64 = gk__tf32_cfg<64, 64, 32, 2, 2, 3>;
using tile128 = gk__tf32_cfg<128, 128, 32, 2, 2, 3>; /* 05's */

bool mma_tf32_small_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_F32 && p->fast && cc >= 80 && p->m <= 128 && p->n <= 128 &&
         gk__fits_int32(p);
}

cudaError_t mma_tf32_small_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (p->dtype != GK_F32) return cudaErrorInvalidValue;
  if (p->m <= 32 && p->n <= 32) return gk__tf32_launcher<tile32>::launch(p, stream);
  if (p->m <= 64 && p->n <= 64) return gk__tf32_launcher<tile64>::launch(p, stream);
  return gk__tf32_launcher<tile128>::launch(p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_mma_tf32_small = {
    "mma_tf32_small",
    "f32 precision fast, m and n <= 128: 05's TF32 mma.sync kernel, 32x32, 64x64 or 128x128 tile (12)",
    mma_tf32_small_supports,
    mma_tf32_small_launch,
    0,
};
