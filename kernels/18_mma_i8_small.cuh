/*
 * 18_mma_i8_small.cuh - 18's small-problem gemm of 8-bit operands on mma.sync m16n8k32 as a
 * template over what the 8-bit type changes: the mma instruction, the accumulator (s32 for i8,
 * f32 for fp8) and the epilogue. 18_mma_i8_small.cu (i8) and 20_mma_fp8_small.cu (e4m3, e5m2)
 * instantiate it; the design and its figures are in 18's opening comment.
 *
 * An Op class supplies:
 *   acc_t                         int32_t or float: the accumulator, C's element, alpha/beta's
 *   mma(d, a, b)                  D (4 x acc_t) += A (16 x 32, row) * B (32 x 8, col) (device)
 *   store<EPI>(args, v, c0)       the element stored (gk__k8_store_i32 / _f32) (device)
 *   scalar(double)                alpha or beta in acc_t (host)
 * The m16n8k32 fragments of every 8-bit type share one layout, so the loads are common.
 *
 * Contract: header-only, included by .cu files only; any m, n, k within int32, every
 * transpose, any batch, aligned or not.
 */
#ifndef GK_18_MMA_I8_SMALL_CUH
#define GK_18_MMA_I8_SMALL_CUH

#include "gk_epilogue_dev.cuh"
#include "gk_tile_common.cuh"
#include "gk_gpu.h"

template <typename Acc>
struct gk__k8_small_args {
  const uint8_t *a, *b;
  Acc *c;
  const Acc *bias; /* beta multiplies this row (n values, bias_stride apart) instead of C */
  int64_t stride_a, stride_b, stride_c, bias_stride;
  int m, n, k;
  Acc alpha, beta;
  bool beta_zero;
  gk_act act;
};

/* Four consecutive k values (kk .. kk + 3) of line `line` (a row of op(A), a column of op(B)),
 * packed low byte first; 0 outside. K_MAJOR: the line is stored contiguous along k (ld = k);
 * else along the other dimension (k rows of `lines` values). VEC: k % 4 == 0 and a 4-byte
 * aligned base, so a whole group inside is one aligned word. */
template <bool K_MAJOR, bool VEC>
__device__ __forceinline__ uint32_t gk__k8_load4(const uint8_t *base, int line, int lines, int kk, int k) {
  if (line >= lines) return 0;
  if (K_MAJOR && VEC && kk + 3 < k)
    return __ldg(reinterpret_cast<const uint32_t *>(base + (int64_t)line * k + kk));
  uint32_t word = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (kk + e >= k) break;
    const uint8_t v = K_MAJOR ? base[(int64_t)line * k + kk + e] : base[(int64_t)(kk + e) * lines + line];
    word |= (uint32_t)v << (8 * e);
  }
  return word;
}

/* alpha * v + beta * C0 and the activation (Op::store); C0 read inside C only. */
template <class Op, bool EPI, typename Acc>
__device__ __forceinline__ Acc gk__k8_small_scaled(const gk__k8_small_args<Acc> &args, const Acc *c,
                                                   const Acc *bias, int row, int col, Acc v) {
  const Acc c0 = args.beta_zero ? Acc(0) : EPI && bias != NULL ? bias[col] : c[(int64_t)row * args.n + col];
  return Op::template store<EPI>(args, v, c0);
}

/* WM x WN warps of 32 x 32; TA / TB: A stored k x m / B stored n x k (the K-major one). */
template <class Op, int WM, int WN, bool TA, bool TB, bool VEC, bool EPI>
__global__ void __launch_bounds__(32 * WM * WN) gk__k8_small(gk__k8_small_args<typename Op::acc_t> args) {
  using Acc = typename Op::acc_t;
  constexpr int BM = 32 * WM, BN = 32 * WN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int tiles_n = (args.n + BN - 1) / BN;
  const int row0 = (blockIdx.x / tiles_n) * BM + (warp / WN) * 32;
  const int col0 = (blockIdx.x % tiles_n) * BN + (warp % WN) * 32;
  const int64_t z = blockIdx.z;
  const uint8_t *a = args.a + z * args.stride_a, *b = args.b + z * args.stride_b;
  Acc acc[2][4][4] = {};
  for (int k0 = 0; k0 < args.k; k0 += 32) {
    uint32_t fa[2][4], fb[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
      const int r = row0 + mi * 16 + g;
#pragma unroll
      for (int q = 0; q < 4; ++q) /* a0: row g, k 4t; a1: row g + 8; a2, a3: k + 16 */
        fa[mi][q] = gk__k8_load4<!TA, VEC>(a, r + 8 * (q & 1), args.m, k0 + 16 * (q >> 1) + 4 * t, args.k);
    }
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) /* b0: column g, k 4t; b1: k + 16 */
#pragma unroll
      for (int q = 0; q < 2; ++q)
        fb[ni][q] = gk__k8_load4<TB, VEC>(b, col0 + ni * 8 + g, args.n, k0 + 16 * q + 4 * t, args.k);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) Op::mma(acc[mi][ni], fa[mi], fb[ni]);
  }
  /* d0, d1: row g, columns 2t and 2t + 1; d2, d3: row g + 8. A pair inside a row of even n
   * is one 8-byte store: C is most of a small problem's bytes (4096 x 64^3: 64 MB of C for
   * 32 MB of A and B), and 4-byte stores left half of each 32-byte sector unwritten. */
  Acc *c = args.c + z * args.stride_c;
  const Acc *bias = EPI && args.bias != NULL ? args.bias + z * args.bias_stride : NULL;
  const bool pairs = args.n % 2 == 0 && reinterpret_cast<uintptr_t>(c) % 8 == 0;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + mi * 16 + g + 8 * h, col = col0 + ni * 8 + 2 * t;
        if (row >= args.m || col >= args.n) continue;
        const Acc v0 = gk__k8_small_scaled<Op, EPI>(args, c, bias, row, col, acc[mi][ni][2 * h]);
        Acc *dst = c + (int64_t)row * args.n + col;
        if (pairs) { /* n even: col + 1 < n too */
          *reinterpret_cast<typename gk__k8_pair<Acc>::type *>(dst) = gk__k8_pair<Acc>::make(
              v0, gk__k8_small_scaled<Op, EPI>(args, c, bias, row, col + 1, acc[mi][ni][2 * h + 1]));
          continue;
        }
        dst[0] = v0;
        if (col + 1 < args.n) dst[1] = gk__k8_small_scaled<Op, EPI>(args, c, bias, row, col + 1, acc[mi][ni][2 * h + 1]);
      }
}

template <class Op, int WM, int WN, bool TA, bool TB>
cudaError_t gk__k8_small_run(const gk_problem *p, const gk__k8_small_args<typename Op::acc_t> &args,
                             bool vec, cudaStream_t stream) {
  constexpr int BM = 32 * WM, BN = 32 * WN;
  const int64_t tiles = ((p->m + BM - 1) / BM) * ((p->n + BN - 1) / BN);
  if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  const bool epi = args.bias != NULL || args.act != GK_ACT_NONE;
  return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
    gk__k8_small_args<typename Op::acc_t> chunk = args;
    chunk.a += first * args.stride_a, chunk.b += first * args.stride_b;
    chunk.c += first * args.stride_c;
    if (chunk.bias != NULL) chunk.bias += first * args.bias_stride;
    const dim3 grid((unsigned)tiles, 1, count);
    if (vec) {
      if (epi) gk__k8_small<Op, WM, WN, TA, TB, true, true><<<grid, 32 * WM * WN, 0, stream>>>(chunk);
      else gk__k8_small<Op, WM, WN, TA, TB, true, false><<<grid, 32 * WM * WN, 0, stream>>>(chunk);
    } else {
      if (epi) gk__k8_small<Op, WM, WN, TA, TB, false, true><<<grid, 32 * WM * WN, 0, stream>>>(chunk);
      else gk__k8_small<Op, WM, WN, TA, TB, false, false><<<grid, 32 * WM * WN, 0, stream>>>(chunk);
    }
    return cudaGetLastError();
  });
}

template <class Op, int WM, int WN>
cudaError_t gk__k8_small_layout(const gk_problem *p, const gk__k8_small_args<typename Op::acc_t> &args,
                                bool vec, cudaStream_t stream) {
  if (p->trans_a)
    return p->trans_b ? gk__k8_small_run<Op, WM, WN, true, true>(p, args, vec, stream)
                      : gk__k8_small_run<Op, WM, WN, true, false>(p, args, vec, stream);
  return p->trans_b ? gk__k8_small_run<Op, WM, WN, false, true>(p, args, vec, stream)
                    : gk__k8_small_run<Op, WM, WN, false, false>(p, args, vec, stream);
}

/* p through the 32 x 32 tile where m and n are at most 32, else the 64 x 64 one. */
template <class Op>
cudaError_t gk__k8_small_launch(const gk_problem *p, cudaStream_t stream) {
  using Acc = typename Op::acc_t;
  gk__k8_small_args<Acc> args;
  args.a = static_cast<const uint8_t *>(p->a), args.b = static_cast<const uint8_t *>(p->b);
  args.c = static_cast<Acc *>(p->c), args.bias = static_cast<const Acc *>(p->bias);
  args.stride_a = p->m * p->k, args.stride_b = p->k * p->n, args.stride_c = p->m * p->n;
  args.bias_stride = p->bias_stride;
  args.m = (int)p->m, args.n = (int)p->n, args.k = (int)p->k;
  args.alpha = Op::scalar(p->alpha), args.beta = Op::scalar(p->beta), args.beta_zero = p->beta == 0.0;
  args.act = p->act;
  const bool vec = p->k % 4 == 0 && gk__aligned(p->a, 4) && gk__aligned(p->b, 4);
  if (p->m <= 32 && p->n <= 32) return gk__k8_small_layout<Op, 1, 1>(p, args, vec, stream);
  return gk__k8_small_layout<Op, 2, 2>(p, args, vec, stream);
}

#endif /* GK_18_MMA_I8_SMALL_CUH */
