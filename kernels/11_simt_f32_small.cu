/*
 * 11_simt_f32_small.cu - "simt_f32_small": f32 exact GEMM of small problems (m <= 64, n <= 64),
 * the small-job lane's batches: 02's kernel with small block tiles.
 *
 * Tiling: 64 x 32 block tile (32 threads, one 64 x 32 warp tile) when n <= 32, else 64 x 64
 * (64 threads); BK = 8, 8 x 8 outputs per thread, cp.async for the operand that needs no
 * transpose; 16 or 8 blocks per SM as launch bounds. One batch entry per block column of the
 * grid, as in 02.
 *
 * What changed over 02: only the tile. 02's 128 x 128 tile computes a 32^3 problem in a block
 * whose 16x larger tile is mostly padding: a batch of 8192 such problems ran at 2.2 TFLOP/s,
 * 22% of cublasLt's 10.1, and 64^3 at 41%. A tile the size of the problem wastes nothing, and
 * the many small blocks fill every SM.
 *
 * Measured (H200, bench_kernels --variants --small-batches, batched NN, ours / cuBLAS at its
 * best in the same run): 64 x 32 at 8192 x 32^3: 10.1 / 11.2 TFLOP/s = 90%; 64 x 64 at
 * 4096 x 64^3: 26.1 / 24.6 = 106% (and 94% at 128^3, where 02 keeps the lead: 107%).
 *
 * Contract: f32 (exact or fast: exact is always allowed) with m <= 64 and n <= 64, any k, both
 * transposes, alpha/beta, any batch, rows aligned or not (02's scalar path).
 */
#include "02_simt_f32.cuh"
#include "gk_gpu.h"

namespace {

using narrow_tile = gk__simt_launcher<float, 64, 32, 8, 16, true>;
using square_tile = gk__simt_launcher<float, 64, 64, 8, 8, true>;

bool simt_f32_small_supports(const gk_problem *p, int cc) {
  (void)cc;
  return p->dtype == GK_F32 && p->m <= 64 && p->n <= 64 && gk__fits_int32(p);
}

cudaError_t simt_f32_small_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (p->dtype != GK_F32) return cudaErrorInvalidValue;
  return p->n <= 32 ? narrow_tile::launch(p, stream) : square_tile::launch(p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_simt_f32_small = {
    "simt_f32_small",
    "f32 exact, m and n <= 64: 02's CUDA-core kernel with a 64x32 or 64x64 block tile (11)",
    simt_f32_small_supports,
    simt_f32_small_launch,
    0,
};
