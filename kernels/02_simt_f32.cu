/*
 * 02_simt_f32.cu - "simt_f32": f32 exact GEMM on the CUDA cores, register tiled.
 *
 * Tiling: 128 x 128 block tile, BK = 8, 256 threads, 8 x 8 outputs per thread as four 4x4
 * sub-tiles, 64 x 32 warp tiles; A transposed into shared memory; register-staged double
 * buffering; grouped tile order for L2 (the kernel itself is in gk_fast_simt.cuh, shared with
 * 03_simt_f64.cu).
 *
 * What changed over 01 (tiled16, the seeds' kernel): each thread computes 64 outputs instead of
 * one, so each shared-memory value feeds 8 FMAs instead of one; loads are 16 bytes wide; the next
 * k tile is fetched while the current one is multiplied.
 * Why: tiled16 is bound by shared-memory bandwidth (2 loads per FMA); at 8 FMAs per load the
 * FMA units become the limit, as in cuBLAS's own SIMT kernels.
 *
 * Measured (bench_kernels, see bench/RESULTS.md for the device and commit): see the "## Kernels"
 * table there; this comment is updated from it.
 *
 * Contract: any m, n, k, both transposes, alpha/beta (beta == 0: C not read), any batch; rows that
 * are not 16-byte aligned (ld % 4 != 0 or an unaligned pointer) use the same kernel with scalar
 * loads. supports() accepts every f32 problem (also precision "fast": exact is always allowed).
 */
#include "gk_fast_simt.cuh"
#include "gk_gpu.h"

namespace {

using simt_f32 = gk__simt_launcher<float, 128, 128, 8, 2, true>;

bool simt_f32_supports(const gk_problem *p, int cc) {
  (void)cc; /* plain CUDA-core code: any GPU the build targets */
  return p->dtype == GK_F32 && gk__fits_int32(p);
}

cudaError_t simt_f32_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (p->dtype != GK_F32) return cudaErrorInvalidValue;
  return simt_f32::launch(p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_simt_f32 = {
    "simt_f32",
    "f32 exact, CUDA cores: 128x128x8 block tile, 8x8 per thread, double-buffered (02)",
    simt_f32_supports,
    simt_f32_launch,
};
