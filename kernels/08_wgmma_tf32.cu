/*
 * 08_wgmma_tf32.cu - "wgmma_tf32": f32 GEMM with precision "fast" on Hopper's TF32 tensor cores
 * through wgmma (sm_90a), fed by TMA: 07_wgmma_f16's machinery (07_wgmma_f16.cuh: mbarrier
 * ring, producer/consumer warpgroups, setmaxnreg, 128-byte swizzle, C through shared memory)
 * for 4-byte elements.
 *
 * The catch: tf32 wgmma has no transpose bits. An operand read from shared memory through a
 * descriptor must be K-major (k contiguous), and of our stored layouts only A (m x k) and a
 * transposed B (n x k) are. wgmma's A operand may instead come from registers, loaded by the
 * threads with ordinary shared loads in whatever layout the tile has. So each CTA computes
 *     D (R x S) = X (R x K, registers) * Y^T (Y: S x K, K-major in shared memory)
 * and the stored layouts pick X, Y and where D goes:
 *   NN (A m x k, B k x n): X = B^T (R = n, B's tile is MN-major: k rows of n), Y = A (S = m);
 *                          D = C^T, written transposed through shared memory;
 *   NT (A m x k, B n x k): X = A (R = m, K-major), Y = B (S = n); D = C;
 *   TT (A k x m, B n x k): X = A^T (R = m, A's tile MN-major), Y = B (S = n); D = C;
 *   TN (A k x m, B k x n): both tiles MN-major, neither formulation is legal: refused here, so
 *                          the selector keeps it on mma_tf32 (05).
 *
 * Tiling: BR = 128 rows of D (two consumer warpgroups of 64), BS = 256 columns (128 when the
 * wide grid would fill at most half of the SMs, as 07), BK = 32 floats = one 128-byte swizzle
 * row. Per k tile the producer's one thread issues TMA boxes of 32 x 64 (K-major: 8 KB) or
 * 32 x 32 (MN-major X: 4 KB) into a 4-stage ring (6 for BS = 128) of 48 KB (32 KB) stages.
 * Each consumer thread loads its m64k8 fragment (4 registers: rows g and g + 8 of its warp's
 * 16, k = t and t + 4; the PTX "register fragment" layout for 32-bit A) for the four k8 steps
 * of the tile with 32-bit shared loads that undo the swizzle (K-major X: conflict-free; MN-major
 * X: two-way conflicts), then issues four wgmma m64nBSk8 with Y from its descriptor (K-major,
 * a k8 step moves the start by 32 bytes, 8-row groups 1 KB apart), waits for them and releases
 * the stage. Waiting per tile leaves the tensor cores to the other consumer warpgroup meanwhile,
 * and measured 5-8% faster than keeping one group in flight across tiles (which needs two
 * fragment sets: wgmma reads its register operand asynchronously); that variant is kept behind
 * GK_WGMMA_TF32_VARIANTS for tuning builds.
 * Epilogue: direct D goes to shared memory in rows (pitch BS * 4 + 32 bytes, as 07); D = C^T is
 * stored transposed, as rows of C of 64 floats (pitch 68 words: the accumulators' scalar stores,
 * columns 2t and 2t + 1 for rows g, land on banks 8t + g: conflict-free), so either way C is then
 * written (and with beta read) in whole 16-byte groups along its rows, alpha/beta in f32.
 * The f32 bits go to the tensor cores as they are (hardware truncation to TF32), as in 05.
 * What changed over 05 (mma.sync, 52% / 47% of cuBLAS): 05 sat on the ~5 TB/s L2 -> SM wall at
 * 32 KB of operands per MFLOP with a 128 x 128 tile read through ldmatrix; here the copy engine
 * fills a 128 x 256 tile (24 KB per MFLOP) and the tensor cores read the wide operand themselves.
 *
 * Measured (H200, bench_kernels --kernel wgmma_tf32 --dtype tf32, two runs, bench/RESULTS.md,
 * "08 wgmma_tf32"): 392.8 / 351.4 TFLOP/s at 4096^3 / 8192^3 = 107% / 98% of cuBLAS TF32 (368 /
 * 360 that run); 2048^3 114%, 1024^3 114%, 1000x1200x800 141%, batch 64 x 256^3 137%, skinny
 * 8192x8192x64 94% (88% in the repeat). Rel. diff to cuBLAS 7.8e-4 (truncated vs rounded TF32).
 *
 * Contract: f32 with precision "fast" on compute capability 9.0 exactly, any m, n, k, the
 * transposes NN, NT and TT, alpha/beta (beta == 0: C not read), any batch, when TMA can
 * describe the operands: A and B 16-byte aligned and their stored rows a multiple of 4 elements
 * (16 bytes). Everything else stays with mma_tf32, registered after this kernel. With the output
 * cast (p->cast) C is f16 or bf16, each output rounded from its float in the store
 * (GK_EPILOGUE_CAST), for a problem without a bias or activation (gk_gpu_gemm runs those as
 * passes, so such a problem keeps the cast's passes too).
 */
#include "gk_epilogue_dev.cuh"
#include "08_wgmma_tf32.cuh" /* the tile, fragments, k-tile steps, maps; 07_wgmma_f16.cuh */
#include "gk_gpu.h"

namespace {

using tf32_args = gk__wgmma_tf32_args;
template <int BS, int STAGES>
using tf32_cfg = gk__wgmma_tf32_cfg<BS, STAGES>;

#if GK_WGMMA_DEVICE
/* Four outputs C[row][col..col+3] after alpha/beta, rounded to C's element type T (float, or
 * the output cast's __half / __nv_bfloat16); vec4 (n % 4 == 0, C aligned to four elements): the
 * group is wholly inside, one access each way; else element by element. */
template <typename T>
__device__ __forceinline__ void store4(const tf32_args &args, T *c, int row, int col, float4 v,
                                       bool vec4) {
  struct alignas(4 * sizeof(T)) quad { T e[4]; };
  if (row >= args.m || col >= args.n) return;
  T *dst = c + (int64_t)row * args.n + col;
  float r[4] = {v.x * args.alpha, v.y * args.alpha, v.z * args.alpha, v.w * args.alpha};
  if (vec4) {
    if (!args.beta_zero) {
      const quad old = *reinterpret_cast<const quad *>(dst);
#pragma unroll
      for (int e = 0; e < 4; ++e) r[e] = fmaf(args.beta, gk__to_f32(old.e[e]), r[e]);
    }
    quad out;
#pragma unroll
    for (int e = 0; e < 4; ++e) out.e[e] = gk__from_f32<T>(r[e]);
    *reinterpret_cast<quad *>(dst) = out;
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (col + e >= args.n) break;
    if (!args.beta_zero) r[e] = fmaf(args.beta, gk__to_f32(dst[e]), r[e]);
    dst[e] = gk__from_f32<T>(r[e]);
  }
}

#endif /* GK_WGMMA_DEVICE */

/*
 * The kernel: one CTA per 128 x BS tile of D (grouped order), blockIdx.z = the problem within the
 * batch chunk. Warpgroup 0 (one elected thread) fills the ring by TMA; warpgroups 1 and 2 each
 * multiply 64 rows of the tile. X_MN: X's stored tile is MN-major (k rows); OUT_T: D = C^T.
 */
template <class C, bool X_MN, bool OUT_T, bool IN_FLIGHT, typename T>
__global__ void __launch_bounds__(C::THREADS, 1)
    tf32_gemm(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_y,
              tf32_args args) {
#if GK_WGMMA_DEVICE
  constexpr int BR = C::BR, BS = C::BS, BK = C::BK;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const gk__ring ring_addr = gk__ring_init<C>(smem_raw); /* 07_wgmma_f16.cuh */
  const uint32_t smem0 = ring_addr.smem0, full0 = ring_addr.full0, empty0 = ring_addr.empty0;
  unsigned char *ring = smem_raw + (smem0 - gk__smem_addr(smem_raw));
  const int warpgroup = threadIdx.x / 128, wg_thread = threadIdx.x % 128;

  int tile_r, tile_s;
  gk__raster((args.rows + BR - 1) / BR, (args.cols + BS - 1) / BS, &tile_r, &tile_s);
  const int r0 = tile_r * BR, s0 = tile_s * BS, z = (int)blockIdx.z;
  const int k_tiles = (args.k + BK - 1) / BK;

  if (warpgroup == 0) { /* producer */
    gk__setmaxnreg_dec<C::PRODUCER_REGS>();
    if (wg_thread != 0) return;
    for (int kt = 0; kt < k_tiles; ++kt)
      gk__tf32_produce<C, X_MN>(ring_addr, kt, &map_x, &map_y, r0, s0, kt * BK, z);
    return;
  }

  /* consumers: warpgroup w multiplies rows (w-1)*64 .. +64 of the tile */
  gk__setmaxnreg_inc<C::CONSUMER_REGS>();
  const int consumer = warpgroup - 1;
  const int warp4 = wg_thread / 32, lane = wg_thread % 32, g = lane / 4, t = lane % 4;
  float acc[C::ACC];
#pragma unroll
  for (int i = 0; i < C::ACC; ++i) acc[i] = 0.0f;

  /* this thread's fragment rows: g and g + 8 of its warp's 16 within the consumer's 64 */
  const int row_lo = consumer * 64 + warp4 * 16 + g;
  if (IN_FLIGHT) {
    /* two fragment sets, so that the registers of the group still in flight are never
     * overwritten (wgmma reads its register operand asynchronously) */
    uint32_t frag_even[BK / 8][4], frag_odd[BK / 8][4];
    for (int kt = 0; kt < k_tiles; kt += 2) {
      gk__tf32_consume<C, X_MN, true>(acc, frag_even, kt, ring, smem0, full0, empty0, row_lo, t,
                                  wg_thread);
      if (kt + 1 < k_tiles)
        gk__tf32_consume<C, X_MN, true>(acc, frag_odd, kt + 1, ring, smem0, full0, empty0, row_lo, t,
                                    wg_thread);
    }
  } else {
    uint32_t frag[BK / 8][4];
    for (int kt = 0; kt < k_tiles; ++kt)
      gk__tf32_consume<C, X_MN, false>(acc, frag, kt, ring, smem0, full0, empty0, row_lo, t, wg_thread);
  }
  gk__wgmma_wait<0>();

  /* Epilogue through shared memory (see the file comment): once both consumers are done with
   * the ring, each stages its 64 x BS tile of D, then writes its part of C along C's rows.
   * Accumulator layout: thread (warp4, g, t) holds D rows warp4*16 + g and + 8, columns 8j + 2t
   * and + 1 in acc[4j..4j+1] and acc[4j+2..4j+3]. */
  gk__named_sync(1, 128 * C::CONSUMERS);
  T *c = reinterpret_cast<T *>(args.c) + (int64_t)z * args.stride_c;
  const bool vec4 = args.n % 4 == 0 && reinterpret_cast<uintptr_t>(c) % (4 * sizeof(T)) == 0;
  if (OUT_T) {
    /* stage[s][r]: row s of the tile = a row of C (64 floats, this consumer's columns) */
    unsigned char *stage = ring + consumer * BS * C::CT_PITCH;
    const int r = warp4 * 16 + g;
#pragma unroll
    for (int j = 0; j < BS / 8; ++j) {
      float *col0 = reinterpret_cast<float *>(stage + (8 * j + 2 * t) * C::CT_PITCH) + r;
      float *col1 = reinterpret_cast<float *>(stage + (8 * j + 2 * t + 1) * C::CT_PITCH) + r;
      col0[0] = acc[4 * j], col1[0] = acc[4 * j + 1];
      col0[8] = acc[4 * j + 2], col1[8] = acc[4 * j + 3];
    }
    gk__named_sync(2 + consumer, 128); /* this warpgroup's tile is complete */
    constexpr int GROUPS = 64 / 4;     /* four-column groups per staged row */
#pragma unroll 4
    for (int idx = wg_thread; idx < BS * GROUPS; idx += 128) {
      const int srow = idx / GROUPS, group = idx % GROUPS;
      const float4 v = *reinterpret_cast<const float4 *>(stage + srow * C::CT_PITCH + group * 16);
      store4(args, c, s0 + srow, r0 + consumer * 64 + group * 4, v, vec4);
    }
  } else {
    unsigned char *stage = ring + consumer * 64 * C::C_PITCH;
    unsigned char *row_g = stage + (warp4 * 16 + g) * C::C_PITCH + 8 * t;
#pragma unroll
    for (int j = 0; j < BS / 8; ++j) {
      *reinterpret_cast<float2 *>(row_g + 32 * j) = make_float2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<float2 *>(row_g + 8 * C::C_PITCH + 32 * j) =
          make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
    gk__named_sync(2 + consumer, 128);
    constexpr int GROUPS = BS / 4;
#pragma unroll 4
    for (int idx = wg_thread; idx < 64 * GROUPS; idx += 128) {
      const int srow = idx / GROUPS, group = idx % GROUPS;
      const float4 v = *reinterpret_cast<const float4 *>(stage + srow * C::C_PITCH + group * 16);
      store4(args, c, r0 + consumer * 64 + srow, s0 + group * 4, v, vec4);
    }
  }
#else
  (void)map_x, (void)map_y, (void)args;
#endif
}

/* ---- host side ------------------------------------------------------------------------------ */


/* One formulation (see the file comment): X stored x_inner x x_outer per problem, Y stored S x K
 * (K-major); D is R x S. */
template <class C, bool X_MN, bool OUT_T, bool IN_FLIGHT, typename T>
cudaError_t run(const gk_problem *p, cudaStream_t stream) {
  auto kernel = tf32_gemm<C, X_MN, OUT_T, IN_FLIGHT, T>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)C::SMEM_BYTES);
  if (err != cudaSuccess) return err;
  const gk__tf32_plan plan = gk__tf32_plan_for(p, OUT_T);
  const int64_t tiles = ((plan.args.rows + C::BR - 1) / C::BR) * ((plan.args.cols + C::BS - 1) / C::BS);
  if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
    const tf32_args chunk = gk__tf32_args_at<T>(plan, first);
    CUtensorMap map_x, map_y;
    const cudaError_t map_err = gk__tf32_operand_maps<C, X_MN>(&map_x, &map_y, plan, p->k, first, count);
    if (map_err != cudaSuccess) return map_err;
    kernel<<<dim3((unsigned)tiles, 1, count), C::THREADS, C::SMEM_BYTES, stream>>>(map_x, map_y,
                                                                                   chunk);
    return cudaGetLastError();
  });
}

/* The registered configurations: D tiles of 128 x 256 with 4 stages (4 x 48 KB), and 128 x 128
 * with 6 stages (6 x 32 KB) for grids the wide tile would leave at most half full (as 07). */
using cfg_wide = tf32_cfg<256, 4>;
using cfg_narrow = tf32_cfg<128, 6>;

bool use_narrow(const gk_gpu_ctx *ctx, const gk_problem *p) {
  const int sms = gk__sm_count(ctx);
  const int64_t rows = p->trans_b ? p->m : p->n, cols = p->trans_b ? p->n : p->m;
  const int64_t wide_tiles = ((rows + cfg_wide::BR - 1) / cfg_wide::BR) *
                             ((cols + cfg_wide::BS - 1) / cfg_wide::BS) * p->batch;
  return wide_tiles * 2 <= sms;
}

template <class C, bool IN_FLIGHT, typename T>
cudaError_t launch_with(const gk_problem *p, cudaStream_t stream) {
  if (!p->trans_a && !p->trans_b) return run<C, true, true, IN_FLIGHT, T>(p, stream); /* NN: C^T = B^T A^T */
  if (!p->trans_a && p->trans_b) return run<C, false, false, IN_FLIGHT, T>(p, stream); /* NT */
  if (p->trans_a && p->trans_b) return run<C, true, false, IN_FLIGHT, T>(p, stream);   /* TT */
  return cudaErrorInvalidValue;                                                     /* TN: mma_tf32 */
}

/* C's element type: f32, or the output cast's f16 / bf16 (rounded in the store, so the cast
 * costs no pass over C). */
template <class C, bool IN_FLIGHT>
cudaError_t launch_typed(const gk_problem *p, cudaStream_t stream) {
  return gk__with_c_type(p, [&](auto c_type) {
    return launch_with<C, IN_FLIGHT, typename decltype(c_type)::type>(p, stream);
  });
}

bool wgmma_tf32_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_F32 && p->fast && cc == 90 && !(p->trans_a && !p->trans_b) &&
         gk__tf32_fits(p) && gk_problem_cast_ok(p);
}

cudaError_t wgmma_tf32_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!wgmma_tf32_supports(p, 90)) return cudaErrorInvalidValue;
  return use_narrow(ctx, p) ? launch_typed<cfg_narrow, false>(p, stream)
                            : launch_typed<cfg_wide, false>(p, stream);
}

#ifdef GK_WGMMA_TF32_VARIANTS
/* For tuning builds only (a temporary registration): one wgmma group kept in flight across k
 * tiles, two fragment sets (bench/RESULTS.md, 08: slower than waiting per tile). */
cudaError_t wgmma_tf32_in_flight_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!wgmma_tf32_supports(p, 90)) return cudaErrorInvalidValue;
  return use_narrow(ctx, p) ? launch_typed<cfg_narrow, true>(p, stream)
                            : launch_typed<cfg_wide, true>(p, stream);
}
#endif

} // namespace
extern "C" const gk_kernel gk_kernel_wgmma_tf32 = {
    "wgmma_tf32",
    "f32 precision fast, Hopper wgmma tf32 + TMA: 128x256x32 tile (128x128 for small grids), "
    "A operand from registers, C^T = B^T A^T for NN, C cast to f16/bf16 in the store; not TN (08)",
    wgmma_tf32_supports,
    wgmma_tf32_launch,
    GK_EPILOGUE_CAST,
};
#ifdef GK_WGMMA_TF32_VARIANTS
extern "C" const gk_kernel gk_kernel_wgmma_tf32_in_flight = {
    "wgmma_tf32_in_flight", "08 with one wgmma group kept in flight across k tiles",
    wgmma_tf32_supports, wgmma_tf32_in_flight_launch,
    0,
};
#endif
