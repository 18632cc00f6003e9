/*
 * 06_dmma_f64.cu - "dmma_f64": f64 GEMM on the FP64 tensor cores (mma.sync m8n8k4, DMMA).
 *
 * Tiling: 128 x 64 block tile, BK = 16, 4 warps (2 x 2) of 64 x 32 = 8 x 4 m8n8k4 tiles (64 f64
 * accumulators per thread), 3 cp.async stages, two fragment sets in registers (the loads of
 * step s+1 overlap the mma of step s). Kernel template: gk_fast_dmma.cuh.
 *
 * What changed over 03 (simt_f64): the multiply-adds move to the FP64 tensor cores, which on
 * Hopper run twice the DFMA rate (~67 against ~34 TFLOP/s by the datasheet); 03 measured 18-19
 * TFLOP/s at 4096^3-8192^3, 29% of cuBLAS (which uses DMMA). Each fragment is one double per
 * thread, so the operands are read from shared memory with scalar 8-byte loads; rows padded to a
 * pitch of 4 mod 16 doubles make every such load conflict-free in either layout, so transposes
 * cost nothing (cp.async keeps the global layout, the fragment load picks the index order).
 * A 64 x 32 warp tile reads 12 doubles per 32 DMMA, inside shared memory's bandwidth.
 *
 * Measured: see the "## Kernels" table in bench/RESULTS.md.
 *
 * Contract: f64, any m, n, k (unaligned rows: scalar loads, same kernel), both transposes,
 * alpha/beta (beta == 0: C not read), any batch. Needs compute capability >= 8.0 (DMMA).
 */
#include "gk_fast_dmma.cuh"
#include "gk_gpu.h"

namespace {

using cfg = gk__dmma_cfg<64, 64, 16, 2, 2, 4>;

bool dmma_f64_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_F64 && cc >= 80 && gk__fits_int32(p);
}

cudaError_t dmma_f64_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (p->dtype != GK_F64) return cudaErrorInvalidValue;
  return gk__dmma_launcher<cfg>::launch(p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_dmma_f64 = {
    "dmma_f64",
    "f64, FP64 tensor cores mma.sync m8n8k4: 128x64x16 tile, 3-stage cp.async (06)",
    dmma_f64_supports,
    dmma_f64_launch,
};
