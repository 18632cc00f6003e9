/*
 * 14_dmma_f64_small.cu - "dmma_f64_small": f64 GEMM of small problems (m <= 32, n <= 32) on
 * Hopper's FP64 tensor cores: 10's kernel with a 32 x 32 block tile.
 *
 * Tiling: 32 x 32 x 16, 4 warps (2 x 2) of 16 x 16 = 1 x 2 mma.sync m16n8k8 tiles, 4 cp.async
 * stages.
 *
 * What changed over 10: only the tile. 10's 64 x 64 tile ran a batch of 8192 32^3 problems at
 * 5.2 TFLOP/s, 57% of cublasLt's 9.2 (at 64^3 it already matches cuBLAS: 101%).
 *
 * Measured (H200, bench_kernels --variants --small-batches, batched NN): 8192 x 32^3: 10.2 / 9.3
 * TFLOP/s = 109% of cuBLAS at its best.
 *
 * Contract: f64, m <= 32 and n <= 32, any k, both transposes, alpha/beta, any batch, aligned
 * or not (10's contract). Compute capability 9.0 (the m16n8k8 f64 shape).
 */
#include "06_dmma_f64.cuh"
#include "gk_gpu.h"

namespace {

using cfg = gk__dmma_cfg<32, 32, 16, 2, 2, 4, 8>;

bool dmma_f64_small_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_F64 && cc == 90 && p->m <= 32 && p->n <= 32 && gk__fits_int32(p);
}

cudaError_t dmma_f64_small_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (p->dtype != GK_F64) return cudaErrorInvalidValue;
  return gk__dmma_launcher<cfg>::launch(p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_dmma_f64_small = {
    "dmma_f64_small",
    "f64, m and n <= 32: 10's FP64 tensor-core kernel with a 32x32x16 tile, 4 warps (14)",
    dmma_f64_small_supports,
    dmma_f64_small_launch,
    0,
};
