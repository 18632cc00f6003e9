/*
 * 07_wgmma_f16.cu - "wgmma_f16": f16 and bf16 GEMM (f32 accumulate) for Hopper (sm_90a): TMA
 * loads into a shared-memory ring, warpgroup MMA (wgmma) straight from shared memory.
 *
 * Tiling: 128 x 256 block tile (128 x 128 when the wide tile would fill at most half of the SMs),
 * BK = 64, 384 threads = 3 warpgroups, warp-specialised:
 *   - warpgroup 0, the producer: one thread issues cp.async.bulk.tensor (TMA) copies of 64 x 64
 *     boxes (2 of A, 4 of B per k tile, 48 KB) into a 4-stage ring (6 x 32 KB for 128 x 128),
 *     each stage guarded by a "full" mbarrier (TMA completes bytes on it) and an "empty" one
 *     (consumers release it);
 *   - warpgroups 1 and 2, the consumers: 64 rows each, one wgmma.mma_async m64n256k16 per k16
 *     step (4 per k tile), 128 f32 accumulators per thread; setmaxnreg moves registers from the
 *     producer (40) to the consumers (232). Each keeps one wgmma group in flight and releases
 *     the stage of the previous one;
 *   - the epilogue stages each consumer's f32 tile in the idle ring (rows padded 32 bytes: no
 *     bank conflicts) and writes C back in whole rows, alpha/beta in f32, one rounding.
 * What changed over 04 (mma.sync): 04 hit a wall at ~5 TB/s of L2 -> SM traffic with 128 x 128
 * tiles read through ldmatrix into registers (320-330 TFLOP/s, 44-47% of cuBLAS). Here
 *   - the tensor cores read both operands from shared memory themselves (no ldmatrix, no fragment
 *     registers), so a 128 x 256 tile with 128 accumulators per thread fits: 12 KB of operands
 *     per MFLOP instead of 16, and the copy engine moves them without any thread's attention;
 *   - shared memory holds the tiles in TMA's 128-byte swizzle, which is also the layout wgmma's
 *     descriptors read without bank conflicts;
 *   - transposes cost nothing: each operand keeps its stored layout and the instruction's
 *     transpose bits say K-major or M/N-major (gk_wgmma_ptx.cuh, gk__wgmma_desc);
 *   - edges cost nothing: TMA zero-fills the parts of a box outside the matrix (so k tails add
 *     zeros), and the epilogue bounds-checks C.
 * Batch: each tensor map is 3-D (inner, outer, batch), blockIdx.z picks the problem; launches are
 * chunked at 65535 problems as in the other kernels.
 *
 * Measured (H200, bench_kernels, "wgmma run 2" in bench/RESULTS.md): bf16 738 / 774 TFLOP/s at 4096^3 /
 * 8192^3 = 96% / 116% of cuBLAS (whose 8192^3 ran at 670 that run), f16 711 / 729 = 96% / 113%;
 * 1024^3, 2048^3, 1000x1200x800 and batch 64 x 256^3 at 99-106%; the skinny 8192x8192x64 at 49%
 * (one k tile per CTA: load, multiply and store do not overlap; a persistent grid would).
 * Every result bit-identical to cuBLAS.
 *
 * Since 15 (wgmma_f16_persist, the same tiles on a persistent grid with TMA stores of C) is
 * registered ahead of it, 07 serves the problems whose C TMA cannot store: n not a multiple of
 * 8, or C not 16-byte aligned.
 *
 * Contract: f16 or bf16 on compute capability 9.0 exactly (wgmma and setmaxnreg are sm_90a; the
 * build carries sm_90a SASS), any m, n, k, both transposes, alpha/beta (beta == 0: C not read),
 * any batch, when TMA can describe the operands: A and B 16-byte aligned and their stored rows a
 * multiple of 8 elements (16 bytes). Everything else (odd leading dimensions, other GPUs) stays
 * with mma_f16, registered after this kernel.
 */
#include "07_wgmma_f16.cuh"
#include "gk_gpu.h"

namespace {

/* The registered configurations: 128 x 256 x 64 with 4 stages (4 x 48 KB of shared memory), and
 * 128 x 128 x 64 with 6 stages (6 x 32 KB) for grids that would leave most SMs idle. */
using cfg_wide = gk__wgmma_cfg<256, 4>;
using cfg_narrow = gk__wgmma_cfg<128, 6>;

/* The narrow tile when the wide one fills at most half of the SMs (one CTA per SM either way):
 * twice the CTAs then beat the wide tile's fewer operand bytes per flop. */
bool use_narrow(const gk_gpu_ctx *ctx, const gk_problem *p) {
  const int sms = gk__sm_count(ctx);
  const int64_t wide_tiles = ((p->m + cfg_wide::BM - 1) / cfg_wide::BM) *
                             ((p->n + cfg_wide::BN - 1) / cfg_wide::BN) * p->batch;
  return wide_tiles * 2 <= sms;
}

template <typename T>
cudaError_t launch_as(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  return use_narrow(ctx, p) ? gk__wgmma_launcher<T, cfg_narrow>::launch(p, stream)
                            : gk__wgmma_launcher<T, cfg_wide>::launch(p, stream);
}

bool wgmma_f16_supports(const gk_problem *p, int cc) {
  return (p->dtype == GK_F16 || p->dtype == GK_BF16) && cc == 90 && gk__wgmma_fits(p);
}

cudaError_t wgmma_f16_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (p->dtype == GK_F16) return launch_as<__half>(ctx, p, stream);
  if (p->dtype == GK_BF16) return launch_as<__nv_bfloat16>(ctx, p, stream);
  return cudaErrorInvalidValue;
}

} // namespace
extern "C" const gk_kernel gk_kernel_wgmma_f16 = {
    "wgmma_f16",
    "f16/bf16, Hopper wgmma + TMA: 128x256x64 tile (128x128 for small grids), mbarrier ring, "
    "producer/consumer warpgroups (07)",
    wgmma_f16_supports,
    wgmma_f16_launch,
    0,
};
