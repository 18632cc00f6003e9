/*
 * 06_dmma_f64.cu - "dmma_f64": f64 GEMM on the FP64 tensor cores (mma.sync m8n8k4, DMMA).
 *
 * Tiling: 64 x 64 block tile, BK = 16, 4 warps (2 x 2) of 32 x 32 = 4 x 4 m8n8k4 tiles, 4
 * cp.async stages, two fragment sets in registers (the loads of step s+1 overlap the mma of
 * step s). Kernel template: 06_dmma_f64.cuh.
 *
 * What changed over 03 (simt_f64): the multiply-adds move to the FP64 tensor cores, which on
 * Hopper run twice the DFMA rate (~67 against ~34 TFLOP/s by the datasheet); 03 measured 18-19
 * TFLOP/s at 4096^3-8192^3, 29% of cuBLAS (which uses DMMA). Each fragment is one double per
 * thread, so the operands are read from shared memory with scalar 8-byte loads; rows padded to a
 * pitch of 4 mod 16 doubles make every such load conflict-free in either layout, so transposes
 * cost nothing (cp.async keeps the global layout, the fragment load picks the index order).
 * 128 x 64 (64 x 32 warp tiles, 3 stages) measured the same at 4096^3 and up and less at
 * 2048^3 and below, so the smaller tile with more blocks per SM is registered.
 *
 * Measured (H200, bench_kernels, run 4): 27.8 / 29.1 / 30.0 TFLOP/s at 2048^3 / 4096^3 / 8192^3
 * = 48% / 47% / 48% of cuBLAS DGEMM (03: 29%).
 *
 * Contract: f64, any m, n, k (unaligned rows: scalar loads, same kernel), both transposes,
 * alpha/beta (beta == 0: C not read), any batch. Needs compute capability >= 8.0 (DMMA). On
 * compute capability 9.0, 10_dmma16_f64.cu (the same kernel on the sm_90 mma shapes) comes
 * first.
 */
#include "06_dmma_f64.cuh"
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
    "f64, FP64 tensor cores mma.sync m8n8k4: 64x64x16 tile, 4-stage cp.async (06)",
    dmma_f64_supports,
    dmma_f64_launch,
    0,
};
