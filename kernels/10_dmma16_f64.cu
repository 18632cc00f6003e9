/*
 * 10_dmma16_f64.cu - "dmma16_f64": f64 GEMM on Hopper's FP64 tensor cores with the sm_90 mma
 * shapes (mma.sync m16n8k8 / m16n8k16 .f64).
 *
 * Tiling: see CFG below (block tile, warps, stages, mma shape) and bench/RESULTS.md, "10
 * dmma16_f64"; otherwise 06's kernel (gk_fast_dmma.cuh): cp.async stages with 4-double row
 * padding, two fragment sets in registers, conflict-free 8-byte fragment loads in every layout.
 *
 * What changed over 06: 06 issues mma.sync m8n8k4 (256 multiply-adds an instruction, the
 * Ampere shape) and reaches 47-48% of cuBLAS DGEMM on the H200 at every size, as if the FP64
 * tensor cores ran at half rate: Hopper doubled their throughput per SM, and the sm_90 shapes
 * m16n8k8 / m16n8k16 carry 4x / 8x the work per instruction, so the issue rate no longer halves
 * it. The fragments follow the same (row g, k t) pattern with offsets of 8 rows and 4 k per
 * element, so the shared-memory layout and its bank-conflict-free pitch are 06's.
 *
 * Measured: see bench/RESULTS.md, "10 dmma16_f64".
 *
 * Contract: as 06 (f64, any m, n, k, both transposes, alpha/beta, any batch), on compute
 * capability 9.0 (the build carries sm_90a machine code; its compute_80 PTX has no sm_90 mma
 * shapes); registered before 06, which keeps the other GPUs.
 */
#include "gk_fast_dmma.cuh"
#include "gk_gpu.h"

namespace {

using cfg = gk__dmma_cfg<64, 64, 16, 4, 2, 4, 8>;

bool dmma16_f64_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_F64 && cc == 90 && gk__fits_int32(p);
}

cudaError_t dmma16_f64_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (p->dtype != GK_F64) return cudaErrorInvalidValue;
  return gk__dmma_launcher<cfg>::launch(p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_dmma16_f64 = {
    "dmma16_f64",
    "f64, Hopper FP64 tensor cores mma.sync m16n8k8: 64x64x16 tile, 8 warps, 4-stage cp.async (10)",
    dmma16_f64_supports,
    dmma16_f64_launch,
};
