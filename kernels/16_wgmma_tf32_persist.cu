/*
 * 16_wgmma_tf32_persist.cu - "wgmma_tf32_persist": 08's TF32 Hopper kernel on a persistent grid
 * whose epilogue overlaps the next tile, as 15 does for f16/bf16: C leaves through TMA stores
 * from staging tiles of its own while the producer loads the next tile's operands.
 *
 * Tiling: 08's (D = X * Y^T, 128 x 256 x 32 tiles, 128 x 128 where the wide tile would fill at
 * most half of the SMs; NN as D = C^T), 384 threads; a grid of at most one CTA per SM walking
 * tiles blockIdx.x, + gridDim.x, ... in the grouped order, the operand ring (3 stages of 48 KB,
 * or 5 of 32 KB) running on across tiles. f32 C is twice f16's bytes, so each consumer stages
 * its 64 x BS tile in two halves through one buffer of 64 x BS / 2 floats (32 KB wide, 16 KB
 * narrow): half 0 is written, handed to the copy engine, and half 1 is written once the engine
 * has read half 0 (cp.async.bulk.wait_group.read), then the warpgroup goes on to its next tile.
 * The buffer holds 128-byte-swizzled boxes of 32 columns of C: 64 rows deep for D = C (the
 * accumulators' 8-byte pairs: two-way bank conflicts at most), BS / 2 rows for D = C^T (each
 * accumulator is one element of a column of C: conflict-free).
 * The epilogue is fused there (gk_kernel.epilogue): a bias row in place of C for beta, and
 * ReLU, so that they cost no extra pass over C (GELU stays a pass: see gk_registry.cu), and so
 * is the output cast: with p->cast, C (C0, the bias and the result) is f16 or bf16, rounded from
 * the accumulators in the staging tile, which then holds a part in half its bytes (boxes of 64
 * columns), and no work area or pass is used.
 * What changed over 08: the persistent grid and the stores (08 stages C in its ring, so a CTA
 * loads, multiplies and stores in turn; at 8192 x 8192 x 64, 256 MB of C for 8.6 GFLOP, 08 ran
 * at 81-82% of cuBLAS).
 *
 * Measured (H100, bench_kernels, ours / cuBLAS at its best in the same run, bench/RESULTS.md
 * "Kernel history", 16): 8192 x 8192 x 64 72.8 / 74.0 and 72.9 / 68.2 TFLOP/s = 98% / 107% in
 * two runs, where 08 ran 59.6-60.8 (81-82%); batch 64 x 256^3 as 08. Tried: a 4-stage ring with
 * the tile staged in quarters (226 KB of shared memory): no better anywhere, 69.7 at the skinny
 * shape.
 *
 * Contract: 08's (f32 with precision "fast", compute capability 9.0 exactly, NN, NT and TT, A
 * and B describable by TMA, any m, n, alpha/beta, any batch) for k <= 512 (MAX_K, below), and C
 * describable by TMA: 16-byte aligned, n a multiple of 4. The rest stays with 08 and 05,
 * registered after this kernel.
 */
#include "gk_epilogue_dev.cuh"
#include "08_wgmma_tf32.cuh"
#include "16_wgmma_tf32_persist.cuh" /* the persistent kernel's opening */
#include "gk_gpu.h"

/* 08's tile with a ring of STAGES, then (from the next 1 KB boundary past the ring's barriers)
 * one staging buffer of half a consumer's tile per consumer. */
template <int BS_, int STAGES_, int PARTS_>
struct gk__tf32_persist_cfg : gk__wgmma_tf32_cfg<BS_, STAGES_> {
  using base = gk__wgmma_tf32_cfg<BS_, STAGES_>;
  using base::BS, base::STAGES, base::STAGE_BYTES, base::CONSUMERS;
  static constexpr int PARTS = PARTS_;                          /* staged one after another */
  static constexpr int PART_COLS = BS / PARTS;                  /* columns of D per part */
  static constexpr int PART_BYTES = 64 * PART_COLS * 4;         /* one consumer's buffer */
  static constexpr int STAGING_OFFSET = STAGES * STAGE_BYTES + 1024; /* from the ring's start */
  static constexpr size_t SMEM_TOTAL = 1024 + STAGING_OFFSET + (size_t)CONSUMERS * PART_BYTES;
  static_assert(16 * STAGES <= 1024, "the ring's barriers fit before the staging buffers");
  static_assert(SMEM_TOTAL <= 227 * 1024, "Hopper gives a block at most 227 KB of shared memory");
};

namespace {

using tf32_args = gk__wgmma_tf32_args;
using cfg_wide = gk__tf32_persist_cfg<256, 3, 2>;
using cfg_narrow = gk__tf32_persist_cfg<128, 5, 2>;

#if GK_WGMMA_DEVICE
/* act(alpha * v + beta * C0[row][col]), C0 read where inside C: C, or the bias row (fused
 * epilogue; bias already at the problem's row), both of C's type T; act is ReLU or none */
template <bool EPI, typename T>
__device__ __forceinline__ float scaled(const tf32_args &args, const T *c, const T *bias,
                                        int row, int col, float v) {
  v *= args.alpha;
  if (!args.beta_zero && row < args.m && col < args.n)
    v = fmaf(args.beta, gk__to_f32(EPI && bias != NULL ? bias[col] : c[(int64_t)row * args.n + col]), v);
  return EPI && args.act == GK_ACT_RELU ? gk__relu(v) : v; /* no other is asked of a store */
}

/* Two adjacent elements of a row of C, rounded to T, as one store. */
__device__ __forceinline__ void store_pair(unsigned char *at, float x, float y, float *) {
  *reinterpret_cast<float2 *>(at) = make_float2(x, y);
}
template <typename T>
__device__ __forceinline__ void store_pair(unsigned char *at, float x, float y, T *) {
  T pair[2] = {gk__from_f32<T>(x), gk__from_f32<T>(y)};
  *reinterpret_cast<uint32_t *>(at) = *reinterpret_cast<const uint32_t *>(pair);
}

/* Part `part` of one consumer's tile into its buffer, in C's type T. Accumulator layout: thread
 * (warp4, g, t) holds D rows warp4 * 16 + g and + 8, columns 8j + 2t and + 1 (acc[4j..4j+1],
 * acc[4j+2..4j+3]). D = C: rows of C, boxes 64 deep; D = C^T: D's columns are rows of C, boxes
 * PART_COLS deep. */
template <class C, bool OUT_T, bool EPI, typename T>
__device__ __forceinline__ void stage_part(const tf32_args &args, const T *c, const T *bias,
                                           const float (&acc)[C::ACC], unsigned char *buffer,
                                           int part, int d_row0, int d_col0) {
  const int wg_thread = threadIdx.x % 128, warp4 = wg_thread / 32, lane = wg_thread % 32;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int jj = 0; jj < C::PART_COLS / 8; ++jj) {
    const int j = part * (C::PART_COLS / 8) + jj;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = warp4 * 16 + g + 8 * e, col = 8 * jj + 2 * t; /* in the consumer's part */
      const float d0 = acc[4 * j + 2 * e], d1 = acc[4 * j + 2 * e + 1];
      const int d_row = d_row0 + r, d_col = d_col0 + col;
      if (OUT_T) { /* D (d_row, d_col) is C (d_col, d_row) */
        *reinterpret_cast<T *>(buffer + gk__swizzled<T>(col, r, C::PART_COLS)) =
            gk__from_f32<T>(scaled<EPI>(args, c, bias, d_col, d_row, d0));
        *reinterpret_cast<T *>(buffer + gk__swizzled<T>(col + 1, r, C::PART_COLS)) =
            gk__from_f32<T>(scaled<EPI>(args, c, bias, d_col + 1, d_row, d1));
      } else {
        store_pair(buffer + gk__swizzled<T>(r, col, 64), scaled<EPI>(args, c, bias, d_row, d_col, d0),
                   scaled<EPI>(args, c, bias, d_row, d_col + 1, d1), (T *)nullptr);
      }
    }
  }
}

/* One consumer's epilogue for the tile at (r0, s0) of problem z, part by part: wait until the
 * engine has read the buffer, fill it, make it visible to the async proxy, store its boxes. C
 * is of type T (f32, or the out dtype of the output cast: a part then fills half the buffer). */
template <class C, bool OUT_T, bool EPI, typename T>
__device__ __forceinline__ void store_tile(const CUtensorMap *map_c, const tf32_args &args,
                                           const float (&acc)[C::ACC], uint32_t buffer,
                                           unsigned char *buffer_ptr, int consumer, int r0, int s0,
                                           int z) {
  constexpr int BOX_COLS = 128 / sizeof(T); /* columns of C in a swizzle row */
  const int wg_thread = threadIdx.x % 128;
  const T *c = reinterpret_cast<const T *>(args.c) + (int64_t)z * args.stride_c;
  const T *bias =
      args.bias != NULL ? reinterpret_cast<const T *>(args.bias) + (int64_t)z * args.bias_stride : NULL;
  const int d_row0 = r0 + consumer * 64;
#pragma unroll /* part indexes acc: a constant, or acc goes to local memory */
  for (int part = 0; part < C::PARTS; ++part) {
    const int d_col0 = s0 + part * C::PART_COLS;
    if (wg_thread == 0) gk__bulk_wait_read();
    gk__named_sync(2 + consumer, 128);
    stage_part<C, OUT_T, EPI, T>(args, c, bias, acc, buffer_ptr, part, d_row0, d_col0);
    gk__fence_proxy_async();
    gk__named_sync(2 + consumer, 128);
    if (wg_thread != 0) continue;
    /* the boxes, in C's coordinates (column, row): D = C: 64 rows of C, PART_COLS / BOX_COLS
     * boxes along them; D = C^T: PART_COLS rows of C, 64 / BOX_COLS boxes */
    const int c_row = OUT_T ? d_col0 : d_row0, c_col = OUT_T ? d_row0 : d_col0;
    const int boxes = OUT_T ? 64 / BOX_COLS : C::PART_COLS / BOX_COLS;
    const int box_bytes = (OUT_T ? C::PART_COLS : 64) * 128;
    for (int b = 0; b < boxes; ++b)
      if (c_row < args.m && c_col + b * BOX_COLS < args.n)
        gk__tma_store_3d(map_c, buffer + b * box_bytes, c_col + b * BOX_COLS, c_row, z);
    gk__bulk_commit();
  }
}
#endif /* GK_WGMMA_DEVICE */

/* The kernel: grid.x CTAs walk the batch chunk's `problems` x tiles of D; warpgroup 0 (one
 * thread) loads, warpgroups 1 and 2 multiply and store (see the opening comment). */
template <class C, bool X_MN, bool OUT_T, typename T>
__global__ void __launch_bounds__(C::THREADS, 1)
    persist_gemm(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_y,
                 const __grid_constant__ CUtensorMap map_c, tf32_args args, int problems) {
#if GK_WGMMA_DEVICE
  GK_TF32_PERSIST_PROLOGUE(C, X_MN);
  const uint32_t buffer = ring.smem0 + C::STAGING_OFFSET + consumer * C::PART_BYTES;
  unsigned char *buffer_ptr = smem_raw + (buffer - gk__smem_addr(smem_raw));
  int it = 0;
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    gk__tile_origin(t, tiles_r, tiles_s, C::BR, C::BS, &r0, &s0, &z);
    float acc[C::ACC];
#pragma unroll
    for (int i = 0; i < C::ACC; ++i) acc[i] = 0.0f;
    uint32_t frag[C::BK / 8][4];
    for (int kt = 0; kt < k_tiles; ++kt, ++it) /* each step waits for its group, frees its slot */
      gk__tf32_consume<C, X_MN, false>(acc, frag, it, ring_ptr, ring.smem0, ring.full0, ring.empty0,
                                       row_lo, t4, wg_thread);
    if (args.bias == NULL && args.act == GK_ACT_NONE) /* the plain store has no epilogue code */
      store_tile<C, OUT_T, false, T>(&map_c, args, acc, buffer, buffer_ptr, consumer, r0, s0, z);
    else
      store_tile<C, OUT_T, true, T>(&map_c, args, acc, buffer, buffer_ptr, consumer, r0, s0, z);
  }
  if (wg_thread == 0) gk__bulk_wait_all(); /* C is written before the grid ends */
#else
  (void)map_x, (void)map_y, (void)map_c, (void)args, (void)problems;
#endif
}

/* C as TMA can store it: 16-byte aligned, rows of whole 16-byte units, strides < 2^40 bytes;
 * in its out dtype with the output cast (f16 / bf16: 2 bytes an element). */
bool c_fits(const gk_problem *p) {
  const int64_t elem = (int64_t)gk_dtype_size(gk_problem_c_dtype(p));
  return gk__aligned(p->c, 16) && (p->n * elem) % 16 == 0 && p->m * p->n * elem < ((int64_t)1 << 40);
}

template <class C, bool X_MN, bool OUT_T, typename T>
cudaError_t run(const gk_problem *p, int sms, cudaStream_t stream) {
  auto kernel = persist_gemm<C, X_MN, OUT_T, T>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)C::SMEM_TOTAL);
  if (err != cudaSuccess) return err;
  const gk__tf32_plan plan = gk__tf32_plan_for(p, OUT_T);
  const int64_t tiles = ((plan.args.rows + C::BR - 1) / C::BR) * ((plan.args.cols + C::BS - 1) / C::BS);
  if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
    const tf32_args chunk = gk__tf32_args_at<T>(plan, first);
    CUtensorMap map_x, map_y, map_c;
    cudaError_t map_err = gk__tf32_operand_maps<C, X_MN>(&map_x, &map_y, plan, p->k, first, count);
    if (map_err == cudaSuccess) /* boxes of 128 bytes of C, 64 rows deep or PART_COLS (D = C^T) */
      map_err = gk__tf32_map(&map_c, chunk.c, p->n, p->m, count, OUT_T ? C::PART_COLS : 64,
                             gk__tf32_c_map_type<T>(), sizeof(T));
    if (map_err != cudaSuccess) return map_err;
    const int64_t work = tiles * count;
    const unsigned grid = (unsigned)(work < sms ? work : sms);
    kernel<<<grid, C::THREADS, C::SMEM_TOTAL, stream>>>(map_x, map_y, map_c, chunk, (int)count);
    return cudaGetLastError();
  });
}

template <class C, typename T>
cudaError_t launch_with(const gk_problem *p, int sms, cudaStream_t stream) {
  if (!p->trans_a && !p->trans_b) return run<C, true, true, T>(p, sms, stream); /* NN: C^T = B^T A^T */
  if (!p->trans_a && p->trans_b) return run<C, false, false, T>(p, sms, stream); /* NT */
  if (p->trans_a && p->trans_b) return run<C, true, false, T>(p, sms, stream);   /* TT */
  return cudaErrorInvalidValue;                                                /* TN: mma_tf32 */
}

/* Where k is longer, 08's 4-stage ring keeps the tensor cores fed a little better than this
 * kernel's 3 stages and the store is a small share of the work (H100, same run: 8192^3 339 against
 * 347 TFLOP/s, 2048^3 306 against 322; 1000 x 1200 x 800 86 / 86); up to here it is this one
 * (8192 x 8192 x 64: 73 against 61, batch 64 x 256^3 80 / 79). */
constexpr int64_t MAX_K = 512;

bool wgmma_tf32_persist_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_F32 && p->fast && cc == 90 && !(p->trans_a && !p->trans_b) &&
         p->k <= MAX_K && gk__tf32_fits(p) && c_fits(p) && gk_problem_cast_ok(p);
}

cudaError_t wgmma_tf32_persist_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!wgmma_tf32_persist_supports(p, 90)) return cudaErrorInvalidValue;
  const int sms = gk__sm_count(ctx);
  const int64_t rows = p->trans_b ? p->m : p->n, cols = p->trans_b ? p->n : p->m;
  const int64_t wide_tiles = ((rows + cfg_wide::BR - 1) / cfg_wide::BR) *
                             ((cols + cfg_wide::BS - 1) / cfg_wide::BS) * p->batch;
  const bool narrow = wide_tiles * 2 <= sms || cols <= cfg_narrow::BS; /* or half of it idle */
  /* C's element type: f32, or the output cast's f16 / bf16 (stored straight from the
   * accumulators: the cast costs no pass over C, and the store moves half the bytes) */
  return gk__with_c_type(p, [&](auto c_type) {
    using T = typename decltype(c_type)::type;
    return narrow ? launch_with<cfg_narrow, T>(p, sms, stream) : launch_with<cfg_wide, T>(p, sms, stream);
  });
}

} // namespace

extern "C" const gk_kernel gk_kernel_wgmma_tf32_persist = {
    "wgmma_tf32_persist",
    "f32 precision fast, Hopper wgmma tf32 + TMA, persistent: 08's tiles, C stored by TMA in "
    "halves while the next tile loads, or cast to f16/bf16 in the store; not TN (16)",
    wgmma_tf32_persist_supports,
    wgmma_tf32_persist_launch,
    GK_EPILOGUE_FUSED | GK_EPILOGUE_CAST,
};
