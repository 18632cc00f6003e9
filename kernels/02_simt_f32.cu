/*
 * 02_simt_f32.cu - "simt_f32": f32 exact GEMM on the CUDA cores, register tiled.
 *
 * Tiling: 128 x 128 block tile, BK = 8, 256 threads, 8 x 8 outputs per thread as four 4x4
 * sub-tiles, 64 x 32 warp tiles (on grids of two waves and more with k >= 1024: 128 x 256, 8 x 16
 * outputs per thread as eight 4x4 sub-tiles, 64 x 64 warp tiles, one block per SM); A transposed into shared memory through registers, the operand
 * that needs no transpose (B unless trans_b) copied by cp.async; double-buffered shared memory;
 * grouped tile order for L2 (the kernel itself is in 02_simt_f32.cuh, shared with
 * 03_simt_f64.cu).
 *
 * What changed over 01 (tiled16, the classic tiled kernel): each thread computes 64 outputs instead of
 * one, so each shared-memory value feeds 8 FMAs instead of one; loads are 16 bytes wide; the next
 * k tile is fetched while the current one is multiplied.
 * Why: tiled16 is bound by shared-memory bandwidth (2 loads per FMA); at 8 FMAs per load the
 * FMA units become the limit, as in cuBLAS's own SIMT kernels.
 *
 * Tuning (bench/RESULTS.md, "Kernel history"): BK 8 through registers 75-77% of cuBLAS; BK 16
 * 82-84%; the cp.async operand frees the staging registers that had spilled.
 *
 * Measured (H200, bench_kernels --variants, run 4): 44.4 / 45.0 / 46.1 TFLOP/s at 2048^3 /
 * 4096^3 / 8192^3 = 90% / 88% / 90% of cuBLAS SGEMM (49.6 / 51.2 / 51.1).
 *
 * Contract: any m, n, k, both transposes, alpha/beta (beta == 0: C not read), any batch; rows that
 * are not 16-byte aligned (ld % 4 != 0 or an unaligned pointer) use the same kernel with scalar
 * loads. supports() accepts every f32 problem (also precision "fast": exact is always allowed).
 */
#include "02_simt_f32.cuh"
#include "gk_gpu.h"

namespace {

using simt_f32 = gk__simt_launcher<float, 128, 128, 8, 2, true>;
/* Where the grid is at least two waves of 128 x 256 tiles and k long enough for the main loop
 * to dominate: 8 x 16 outputs per thread (warp tiles of 64 x 64), one block of 256 threads per
 * SM: 128 FMAs for 6 shared loads a k step instead of 64 for 4 (H100, same run: 4096^3 44.1
 * against 42.3 TFLOP/s, 8192^3 44.1 against 43.0; at the skinny 8192 x 8192 x 64 it lost, 30.7
 * against 34.0, and short grids leave SMs idle). */
using simt_f32_wide = gk__simt_launcher<float, 128, 256, 8, 1, true, 4>;
constexpr int64_t WIDE_MIN_K = 1024;

bool use_wide(const gk_gpu_ctx *ctx, const gk_problem *p) {
  const int64_t wide_tiles = ((p->m + 127) / 128) * ((p->n + 255) / 256) * p->batch;
  return p->k >= WIDE_MIN_K && wide_tiles >= 2 * (int64_t)gk__sm_count(ctx);
}

bool simt_f32_supports(const gk_problem *p, int cc) {
  (void)cc; /* plain CUDA-core code: any GPU the build targets */
  return p->dtype == GK_F32 && gk__fits_int32(p);
}

cudaError_t simt_f32_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (p->dtype != GK_F32) return cudaErrorInvalidValue;
  return use_wide(ctx, p) ? simt_f32_wide::launch(p, stream) : simt_f32::launch(p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_simt_f32 = {
    "simt_f32",
    "f32 exact, CUDA cores: 128x128x8 block tile, 8x8 per thread (128x256, 8x16 on large grids), "
    "cp.async + register staging (02)",
    simt_f32_supports,
    simt_f32_launch,
    0,
};
