/*
 * 10_dmma16_f64.cu - "dmma16_f64": f64 GEMM on Hopper's FP64 tensor cores with the sm_90 mma
 * shapes (mma.sync m16n8k8 / m16n8k16 .f64).
 *
 * Tiling: 64 x 64 block tile, BK = 16, 8 warps (4 x 2) of 16 x 32 = 1 x 4 m16n8k8 tiles, 4
 * cp.async stages, 128 registers (and, for larger grids, 32 x 32 warp tiles: see the
 * configurations below); otherwise 06's kernel (06_dmma_f64.cuh): row padding of 4
 * doubles, two fragment sets in registers, conflict-free 8-byte fragment loads in every layout.
 *
 * What changed over 06: 06 issues mma.sync m8n8k4 (256 multiply-adds an instruction, the
 * Ampere shape) and reaches 47-48% of cuBLAS DGEMM on the H200 at every size, as if the FP64
 * tensor cores ran at half rate: Hopper doubled their throughput per SM, and the sm_90 shapes
 * m16n8k8 / m16n8k16 carry 4x / 8x the work per instruction, so the issue rate no longer halves
 * it. The fragments follow the same (row g, k t) pattern with offsets of 8 rows and 4 k per
 * element, so the shared-memory layout and its bank-conflict-free pitch are 06's.
 *
 * Measured (H200, bench_kernels, run 5 at 27cb90d, against cuBLAS DGEMM at its best): 38.2 /
 * 44.2 / 44.4 / 44.8 TFLOP/s at 1024^3 / 2048^3 / 4096^3 / 8192^3 = 86% / 75% / 74% / 72%
 * (06: 57% / 48% / 48% / 48%); 1000x1200x800 72%, 8192x8192x64 68%, batch 64 x 256^3 86%.
 * m16n8k16 (64 x 64 x 32) spilled or ran slower (51-63%); bench/RESULTS.md, "10 dmma16_f64".
 *
 * Contract: as 06 (f64, any m, n, k, both transposes, alpha/beta, any batch), on compute
 * capability 9.0 (the build carries sm_90a machine code; its compute_80 PTX has no sm_90 mma
 * shapes); registered before 06, which keeps the other GPUs.
 */
#include "06_dmma_f64.cuh"
#include "gk_gpu.h"

namespace {

/* Three configurations by the grid's size (bench_kernels --variants --dtype f64, H100, same run;
 * bench/RESULTS.md "Kernel history", 10):
 *   - wide: 64 x 128 tiles, 8 warps of 32 x 32, one fragment set, at most 128 registers for 2
 *     blocks per SM, where its tiles fill 4 waves or more (4096^3 47.2-47.8 TFLOP/s = 80-82%
 *     of cuBLAS, 8192 x 8192 x 64 85%, against 43.1 / 72% and 67% for `few` below);
 *   - square: 64 x 64 tiles, 4 warps of 32 x 32, one set, 3 blocks per SM, where its tiles fill
 *     a wave (2048^3 77%);
 *   - few: 64 x 64 tiles, 8 warps of 16 x 32, two fragment sets (10's first configuration), for
 *     shorter grids, where more warps per tile win (1024^3 87% against 72-79%).
 * The 32 x 32 warp tile reads 2 fragment doubles from shared memory per m16n8k8 instead of 3; its
 * registers fit 2-3 blocks per SM only with one fragment set (two sets at 2 blocks: 54-71%). */
using cfg_wide = gk__dmma_cfg<64, 128, 16, 2, 4, 4, 8, 1, 2>;
using cfg_square = gk__dmma_cfg<64, 64, 16, 2, 2, 4, 8, 1, 3>;
using cfg_few = gk__dmma_cfg<64, 64, 16, 4, 2, 4, 8>;

/* Blocks of configuration C for p, the whole batch. */
template <class C>
int64_t tiles(const gk_problem *p) {
  return ((p->m + C::BM - 1) / C::BM) * ((p->n + C::BN - 1) / C::BN) * p->batch;
}

bool dmma16_f64_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_F64 && cc == 90 && gk__fits_int32(p);
}

cudaError_t dmma16_f64_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (p->dtype != GK_F64) return cudaErrorInvalidValue;
  const int64_t sms = gk__sm_count(ctx);
  if (tiles<cfg_wide>(p) >= 4 * cfg_wide::MIN_BLOCKS * sms) /* 4 waves */
    return gk__dmma_launcher<cfg_wide>::launch(p, stream);
  if (tiles<cfg_square>(p) >= cfg_square::MIN_BLOCKS * sms) /* a wave */
    return gk__dmma_launcher<cfg_square>::launch(p, stream);
  return gk__dmma_launcher<cfg_few>::launch(p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_dmma16_f64 = {
    "dmma16_f64",
    "f64, Hopper FP64 tensor cores mma.sync m16n8k8: 64x64x16 or 64x128x16 tile, 32x32 or 16x32 "
    "warp tiles by grid size, 4-stage cp.async (10)",
    dmma16_f64_supports,
    dmma16_f64_launch,
    0,
};
