/*
 * 18_mma_i8_small.cu - "mma_i8_small": the integer gemm (i8 x i8 -> i32) of small problems, and
 * of the shapes 17 cannot describe by TMA, on mma.sync m16n8k32 (sm_80 and up).
 *
 * Tiling: one CTA per 64 x 64 tile of C (4 warps of 32 x 32), or per 32 x 32 tile (1 warp) where
 * m and n are at most 32; grid.z walks the batch. Each warp multiplies 2 x 4 m16n8k32 tiles per
 * k step of 32, its fragments read straight from global memory (L1 serves the other warps'
 * reads of the same rows): a fragment register is 4 consecutive k values of one row of op(A) or
 * one column of op(B), one 4-byte load where the operand is K-major (A m x k, B n x k) with k a
 * multiple of 4, else 4 byte loads packed. No shared memory, no barriers: a small problem is a
 * few k steps, and its cost is reading A and B once and writing C once.
 * Epilogue fused (gk_kernel.epilogue): alpha * acc + beta * C0 in 32-bit arithmetic that wraps,
 * C0 being C or the bias row, then ReLU.
 *
 * What changed over 17: the tile. 17's 128 x 128 tile ran a batch of 8192 32^3 problems at 46%
 * of cuBLAS and 4096 x 64^3 at 68% (H100): the tile was 16 and 4 times the problem.
 * Measured: see bench/RESULTS.md, "The integer gemm".
 *
 * Contract: i8, compute capability >= 8.0, any m, n, k (int32), every transpose, alpha/beta
 * integers, any batch, aligned or not; selected for m and n <= 64, and wherever 17 does not
 * apply (k not a multiple of 16, unaligned operands, or no Hopper).
 */
#include "gk_epilogue_dev.cuh"
#include "gk_fast_common.cuh"
#include "gk_gpu.h"

extern "C" const gk_kernel gk_kernel_wgmma_i8_persist; /* 17 */

namespace {

struct small_args {
  const int8_t *a, *b;
  int32_t *c;
  const int32_t *bias; /* beta multiplies this row (n values, bias_stride apart) instead of C */
  int64_t stride_a, stride_b, stride_c, bias_stride;
  int m, n, k;
  int32_t alpha, beta;
  bool beta_zero;
  gk_act act;
};

/* D (4 x s32) += A (16 x 32 s8, row) * B (32 x 8 s8, col). */
__device__ __forceinline__ void mma_s8(int32_t (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
               "{%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  (void)d, (void)a, (void)b;
#endif
}

/* Four consecutive k values (kk .. kk + 3) of line `line` (a row of op(A), a column of op(B)),
 * packed low byte first; 0 outside. K_MAJOR: the line is stored contiguous along k (ld = k);
 * else along the other dimension (k rows of `lines` values). VEC: k % 4 == 0 and a 4-byte
 * aligned base, so a whole group inside is one aligned word. */
template <bool K_MAJOR, bool VEC>
__device__ __forceinline__ uint32_t load4(const int8_t *base, int line, int lines, int kk, int k) {
  if (line >= lines) return 0;
  if (K_MAJOR && VEC && kk + 3 < k)
    return __ldg(reinterpret_cast<const uint32_t *>(base + (int64_t)line * k + kk));
  uint32_t word = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (kk + e >= k) break;
    const int8_t v = K_MAJOR ? base[(int64_t)line * k + kk + e] : base[(int64_t)(kk + e) * lines + line];
    word |= (uint32_t)(uint8_t)v << (8 * e);
  }
  return word;
}

/* alpha * v + beta * C0 (gk__i32_axpby), then ReLU; C0 read inside C only. */
template <bool EPI>
__device__ __forceinline__ int32_t scaled(const small_args &args, const int32_t *c, const int32_t *bias,
                                          int row, int col, int32_t v) {
  const int32_t c0 =
      args.beta_zero ? 0 : EPI && bias != NULL ? bias[col] : c[(int64_t)row * args.n + col];
  const int32_t out = gk__i32_axpby(args.alpha, v, args.beta, c0);
  return EPI && args.act == GK_ACT_RELU && out < 0 ? 0 : out;
}

/* WM x WN warps of 32 x 32; TA / TB: A stored k x m / B stored n x k (the K-major one). */
template <int WM, int WN, bool TA, bool TB, bool VEC, bool EPI>
__global__ void __launch_bounds__(32 * WM * WN) small_i8(small_args args) {
  constexpr int BM = 32 * WM, BN = 32 * WN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int tiles_n = (args.n + BN - 1) / BN;
  const int row0 = (blockIdx.x / tiles_n) * BM + (warp / WN) * 32;
  const int col0 = (blockIdx.x % tiles_n) * BN + (warp % WN) * 32;
  const int64_t z = blockIdx.z;
  const int8_t *a = args.a + z * args.stride_a, *b = args.b + z * args.stride_b;
  int32_t acc[2][4][4] = {};
  for (int k0 = 0; k0 < args.k; k0 += 32) {
    uint32_t fa[2][4], fb[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const int r = row0 + mi * 16 + g;
#pragma unroll
      for (int q = 0; q < 4; ++q) /* a0: row g, k 4t; a1: row g + 8; a2, a3: k + 16 */
        fa[mi][q] = load4<!TA, VEC>(a, r + 8 * (q & 1), args.m, k0 + 16 * (q >> 1) + 4 * t, args.k);
    }
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) /* b0: column g, k 4t; b1: k + 16 */
#pragma unroll
      for (int q = 0; q < 2; ++q)
        fb[ni][q] = load4<TB, VEC>(b, col0 + ni * 8 + g, args.n, k0 + 16 * q + 4 * t, args.k);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) mma_s8(acc[mi][ni], fa[mi], fb[ni]);
  }
  /* d0, d1: row g, columns 2t and 2t + 1; d2, d3: row g + 8. A pair inside a row of even n
   * is one 8-byte store: C is most of a small problem's bytes (4096 x 64^3: 64 MB of C for
   * 32 MB of A and B), and 4-byte stores left half of each 32-byte sector unwritten. */
  int32_t *c = args.c + z * args.stride_c;
  const int32_t *bias = EPI && args.bias != NULL ? args.bias + z * args.bias_stride : NULL;
  const bool pairs = args.n % 2 == 0 && reinterpret_cast<uintptr_t>(c) % 8 == 0;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + mi * 16 + g + 8 * h, col = col0 + ni * 8 + 2 * t;
        if (row >= args.m || col >= args.n) continue;
        const int32_t v0 = scaled<EPI>(args, c, bias, row, col, acc[mi][ni][2 * h]);
        int32_t *dst = c + (int64_t)row * args.n + col;
        if (pairs) { /* n even: col + 1 < n too */
          *reinterpret_cast<int2 *>(dst) = make_int2(v0, scaled<EPI>(args, c, bias, row, col + 1, acc[mi][ni][2 * h + 1]));
          continue;
        }
        dst[0] = v0;
        if (col + 1 < args.n) dst[1] = scaled<EPI>(args, c, bias, row, col + 1, acc[mi][ni][2 * h + 1]);
      }
}

template <int WM, int WN, bool TA, bool TB>
cudaError_t run(const gk_problem *p, const small_args &args, bool vec, cudaStream_t stream) {
  constexpr int BM = 32 * WM, BN = 32 * WN;
  const int64_t tiles = ((p->m + BM - 1) / BM) * ((p->n + BN - 1) / BN);
  if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  const bool epi = args.bias != NULL || args.act != GK_ACT_NONE;
  return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
    small_args chunk = args;
    chunk.a += first * args.stride_a, chunk.b += first * args.stride_b;
    chunk.c += first * args.stride_c;
    if (chunk.bias != NULL) chunk.bias += first * args.bias_stride;
    const dim3 grid((unsigned)tiles, 1, count);
    if (vec) {
      if (epi) small_i8<WM, WN, TA, TB, true, true><<<grid, 32 * WM * WN, 0, stream>>>(chunk);
      else small_i8<WM, WN, TA, TB, true, false><<<grid, 32 * WM * WN, 0, stream>>>(chunk);
    } else {
      if (epi) small_i8<WM, WN, TA, TB, false, true><<<grid, 32 * WM * WN, 0, stream>>>(chunk);
      else small_i8<WM, WN, TA, TB, false, false><<<grid, 32 * WM * WN, 0, stream>>>(chunk);
    }
    return cudaGetLastError();
  });
}

template <int WM, int WN>
cudaError_t run_layout(const gk_problem *p, const small_args &args, bool vec, cudaStream_t stream) {
  if (p->trans_a)
    return p->trans_b ? run<WM, WN, true, true>(p, args, vec, stream) : run<WM, WN, true, false>(p, args, vec, stream);
  return p->trans_b ? run<WM, WN, false, true>(p, args, vec, stream) : run<WM, WN, false, false>(p, args, vec, stream);
}

/* What the kernel computes: every i8 problem (the launch checks this much: gk_gpu_gemm may
 * hand it the pieces of a problem it was chosen for, a broadcast B's batch folded into m). */
bool runs(const gk_problem *p) {
  return p->dtype == GK_I8 && !p->cast && gk__fits_int32(p) &&
         (p->act == GK_ACT_NONE || p->act == GK_ACT_RELU);
}

bool mma_i8_small_supports(const gk_problem *p, int cc) {
  if (!runs(p) || cc < 80) return false;
  return (p->m <= 64 && p->n <= 64) || !gk_kernel_wgmma_i8_persist.supports(p, cc);
}

cudaError_t mma_i8_small_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (!runs(p)) return cudaErrorInvalidValue;
  small_args args;
  args.a = static_cast<const int8_t *>(p->a), args.b = static_cast<const int8_t *>(p->b);
  args.c = static_cast<int32_t *>(p->c), args.bias = static_cast<const int32_t *>(p->bias);
  args.stride_a = p->m * p->k, args.stride_b = p->k * p->n, args.stride_c = p->m * p->n;
  args.bias_stride = p->bias_stride;
  args.m = (int)p->m, args.n = (int)p->n, args.k = (int)p->k;
  args.alpha = (int32_t)p->alpha, args.beta = (int32_t)p->beta, args.beta_zero = p->beta == 0.0;
  args.act = p->act;
  const bool vec = p->k % 4 == 0 && gk__aligned(p->a, 4) && gk__aligned(p->b, 4);
  if (p->m <= 32 && p->n <= 32) return run_layout<1, 1>(p, args, vec, stream);
  return run_layout<2, 2>(p, args, vec, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_mma_i8_small = {
    "mma_i8_small",
    "i8 (i32 C), m and n <= 64 or where 17 does not apply: mma.sync m16n8k32 from global "
    "memory, 32x32 or 64x64 tile (18)",
    mma_i8_small_supports,
    mma_i8_small_launch,
    GK_EPILOGUE_FUSED,
};
