/*
 * 07_wgmma_f16.cu - "wgmma_f16": f16 and bf16 GEMM (f32 accumulate) for Hopper (sm_90a): TMA
 * loads into a shared-memory ring, warpgroup MMA (wgmma) straight from shared memory.
 *
 * Tiling: 128 x 256 block tile, BK = 64, 384 threads = 3 warpgroups, warp-specialised:
 *   - warpgroup 0, the producer: one thread issues cp.async.bulk.tensor (TMA) copies of 64 x 64
 *     boxes (2 of A, 4 of B per k tile, 48 KB) into a 4-stage ring, each stage guarded by a
 *     "full" mbarrier (TMA completes bytes on it) and an "empty" one (consumers release it);
 *   - warpgroups 1 and 2, the consumers: 64 rows each, one wgmma.mma_async m64n256k16 per k16
 *     step (4 per k tile), 128 f32 accumulators per thread; setmaxnreg moves registers from the
 *     producer (40) to the consumers (232).
 * What changed over 04 (mma.sync): 04 hit a wall at ~5 TB/s of L2 -> SM traffic with 128 x 128
 * tiles read through ldmatrix into registers (320-330 TFLOP/s, 44-47% of cuBLAS). Here
 *   - the tensor cores read both operands from shared memory themselves (no ldmatrix, no fragment
 *     registers), so a 128 x 256 tile with 128 accumulators per thread fits: 12 KB of operands
 *     per MFLOP instead of 16, and the copy engine moves them without any thread's attention;
 *   - shared memory holds the tiles in TMA's 128-byte swizzle, which is also the layout wgmma's
 *     descriptors read without bank conflicts;
 *   - transposes cost nothing: each operand keeps its stored layout and the instruction's
 *     transpose bits say K-major or M/N-major (gk_fast_wgmma.cuh, gk__wgmma_desc);
 *   - edges cost nothing: TMA zero-fills the parts of a box outside the matrix (so k tails add
 *     zeros), and the epilogue bounds-checks C.
 * Batch: each tensor map is 3-D (inner, outer, batch), blockIdx.z picks the problem; launches are
 * chunked at 65535 problems as in the other kernels.
 *
 * Measured (H200, bench_kernels): see bench/RESULTS.md, "Kernel history", 07.
 *
 * Contract: f16 or bf16 on compute capability 9.0 exactly (wgmma and setmaxnreg are sm_90a; the
 * build carries sm_90a SASS), any m, n, k, both transposes, alpha/beta (beta == 0: C not read),
 * any batch, when TMA can describe the operands: A and B 16-byte aligned and their stored rows a
 * multiple of 8 elements (16 bytes). Everything else (odd leading dimensions, other GPUs) stays
 * with mma_f16, registered after this kernel.
 */
#include "gk_fast_wgmma.cuh"
#include "gk_gpu.h"

namespace {

/* The registered configuration: 128 x 256 x 64, 4 stages (4 x 48 KB of shared memory). */
using cfg = gk__wgmma_cfg<256, 4>;

bool wgmma_f16_supports(const gk_problem *p, int cc) {
  return (p->dtype == GK_F16 || p->dtype == GK_BF16) && cc == 90 && gk__wgmma_fits(p);
}

cudaError_t wgmma_f16_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (p->dtype == GK_F16) return gk__wgmma_launcher<__half, cfg>::launch(p, stream);
  if (p->dtype == GK_BF16) return gk__wgmma_launcher<__nv_bfloat16, cfg>::launch(p, stream);
  return cudaErrorInvalidValue;
}

} // namespace
extern "C" const gk_kernel gk_kernel_wgmma_f16 = {
    "wgmma_f16",
    "f16/bf16, Hopper wgmma m64n256k16 + TMA: 128x256x64 tile, 4-stage mbarrier ring, "
    "producer/consumer warpgroups (07)",
    wgmma_f16_supports,
    wgmma_f16_launch,
};
