/*
 * 13_mma_f16_small.cu - "mma_f16_small": f16 and bf16 GEMM (f32 accumulate) of small problems
 * (m <= 128, n <= 128): 04's mma.sync kernel with small block tiles.
 *
 * Tiling: 32 x 32 x 32, one warp (m, n <= 32), else 64 x 64 x 64 with 2 x 2 warps of 32 x 32;
 * 3 cp.async stages, ldmatrix / ldmatrix.trans, mma.sync m16n8k16.
 *
 * What changed over 04/07: only the tile. 07 (wgmma, 128 x 256) ran a batch of 8192 32^3
 * problems at 2.0 TFLOP/s, 14% of cublasLt's 14.5, and 64^3 at 21%.
 *
 * Measured (H200, bench_kernels --variants --small-batches, batched NN, bf16): 32 x 32 at
 * 8192 x 32^3: 23.7 / 14.9 TFLOP/s = 159% of cuBLAS at its best; at 4096 x 64^3 64 x 64 x 32
 * gave 81-84% and 64 x 64 x 64 92% (53.3 / 58.2); at 1024 x 128^3 64 x 64 x 64 74% against 07's
 * 58-61% and 04's 66% (cublasLt keeps the lead there). From 256^3 up 07 is faster (80%).
 *
 * Contract: f16 or bf16, m <= 128 and n <= 128 (on Hopper, m and n above 64 only where 15 does
 * not apply), any k, both transposes, alpha/beta, any batch,
 * aligned or not (04's contract). Compute capability >= 8.0.
 */
#include "04_mma_f16.cuh"
#include "gk_gpu.h"

extern "C" const gk_kernel gk_kernel_wgmma_f16_persist; /* 15 */

namespace {

using tile32 = gk__mma16_cfg<32, 32, 32, 1, 1, 3>;
using tile64 = gk__mma16_cfg<64, 64, 64, 2, 2, 3>;

template <typename T>
cudaError_t launch_for(const gk_problem *p, cudaStream_t stream) {
  if (p->m <= 32 && p->n <= 32) return gk__mma16_launcher<T, tile32>::launch(p, stream);
  return gk__mma16_launcher<T, tile64>::launch(p, stream);
}

bool mma_f16_small_supports(const gk_problem *p, int cc) {
  if (!((p->dtype == GK_F16 || p->dtype == GK_BF16) && cc >= 80 && p->m <= 128 && p->n <= 128 &&
        gk__fits_int32(p)))
    return false;
  /* From 65 to 128 rows or columns, 15's persistent 128 x 128 tile is faster where it applies
   * (H100, 1024 x 128^3 bf16: 104% of cuBLAS against 79% here; 4096 x 64^3 97% against 99%). */
  return (p->m <= 64 && p->n <= 64) || !gk_kernel_wgmma_f16_persist.supports(p, cc);
}

cudaError_t mma_f16_small_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (p->dtype == GK_F16) return launch_for<__half>(p, stream);
  if (p->dtype == GK_BF16) return launch_for<__nv_bfloat16>(p, stream);
  return cudaErrorInvalidValue;
}

} // namespace

extern "C" const gk_kernel gk_kernel_mma_f16_small = {
    "mma_f16_small",
    "f16/bf16, m and n <= 128: 04's mma.sync kernel, 32x32x32 or 64x64x64 tile (13)",
    mma_f16_small_supports,
    mma_f16_small_launch,
    0,
};
