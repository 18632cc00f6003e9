/*
 * 17_wgmma_i8_persist.cuh - the persistent Hopper gemm of 8-bit operands (17's design: a producer
 * warpgroup fills a TMA ring, two consumer warpgroups multiply 64 rows each, C leaves through
 * TMA stores from staging buffers of its own) as a template over what the 8-bit type changes:
 * the wgmma instruction, the accumulator's type (s32 for i8, f32 for fp8) and the epilogue.
 * 17_wgmma_i8_persist.cu (i8) and 19_wgmma_fp8_persist.cu (e4m3, e5m2) instantiate it; the
 * design, its figures and its contract are in 17's opening comment.
 *
 * An Op class supplies:
 *   acc_t                      int32_t or float: the accumulator, C's element and alpha/beta's
 *   mma<BN>(acc, desc_a, desc_b)  one wgmma m64nBNk32 on K-major descriptors (device)
 *   epilogue<EPI>(args, v, c0)    the element stored: alpha * v + beta * c0, then the
 *                              activation when EPI (device; c0 is 0 where C is not read)
 *   scalar(double)             alpha or beta in acc_t (host)
 *   fallback()                 the kernel that reads every layout, for when the K-major copy's
 *                              memory cannot be had
 * and C's element type Out is acc_t, or (fp8: the output cast in the store) __half or
 * __nv_bfloat16, each element rounded once from the f32 epilogue.
 *
 * Contract: header-only, included by .cu files only; the device code sits under
 * GK_WGMMA_DEVICE (gk_wgmma_ptx.cuh, which also holds the s8 and fp8 wgmma forms the Ops call).
 * Every wgmma of 8-bit types reads both operands K-major (the transpose bits exist for 16-bit
 * types alone), so the launcher copies an operand that is not into stream-ordered memory of the
 * context's pool first.
 */
#ifndef GK_17_WGMMA_I8_PERSIST_CUH
#define GK_17_WGMMA_I8_PERSIST_CUH

#include "gk_epilogue_dev.cuh"
#include "08_wgmma_tf32.cuh" /* gk__tf32_map: a tensor map of any element type */
#include "gk_gpu.h"

/* At namespace scope, as 16's: in the compute_80 pass the kernel bodies are empty, and members
 * of an internal class that nothing reads would be warnings (errors here).
 * 15's byte geometry (gk__wgmma_cfg: BM 128, boxes of 64 rows x 128 bytes) with K_TILE 8-bit
 * values a k tile, then one staging buffer of half a consumer's 32-bit tile per consumer. */
template <int BN_, int STAGES_>
struct gk__k8_cfg : gk__wgmma_cfg<BN_, STAGES_> {
  using base = gk__wgmma_cfg<BN_, STAGES_>;
  using base::BN, base::STAGES, base::STAGE_BYTES, base::CONSUMERS;
  static constexpr int K_TILE = 128;                         /* 8-bit values: 128 bytes */
  static constexpr int PARTS = 2, PART_COLS = BN / PARTS;    /* staged one after another */
  static constexpr int PART_BYTES = 64 * PART_COLS * 4;
  static constexpr int STAGING_OFFSET = STAGES * STAGE_BYTES + 1024; /* from the ring's start */
  static constexpr size_t SMEM_TOTAL = 1024 + STAGING_OFFSET + (size_t)CONSUMERS * PART_BYTES;
  static_assert(K_TILE == base::BK * 2, "a k tile spans the f16 tile's 128 bytes");
  static_assert(16 * STAGES <= 1024, "the ring's barriers fit before the staging buffers");
  static_assert(SMEM_TOTAL <= 227 * 1024, "Hopper gives a block at most 227 KB of shared memory");
};

/* What the kernel needs besides the tensor maps; C (and C0, the bias) of type Out. */
template <typename Acc, typename Out = Acc>
struct gk__k8_args {
  Out *c;
  const Out *bias; /* beta multiplies this row (n values, bias_stride apart) instead of C */
  int64_t bias_stride, stride_c;
  int m, n, k;
  Acc alpha, beta;
  bool beta_zero;
  gk_act act;
};

/* An element of C (of type Out) in the accumulator's type, and two results stored as Out. */
template <typename T> __device__ __forceinline__ T gk__k8_c0(T x) { return x; }
__device__ __forceinline__ float gk__k8_c0(__half x) { return __half2float(x); }
__device__ __forceinline__ float gk__k8_c0(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename Out, typename Acc>
__device__ __forceinline__ void gk__k8_put_pair(unsigned char *at, Acc x, Acc y) {
  if constexpr (sizeof(Out) == sizeof(Acc)) {
    *reinterpret_cast<typename gk__k8_pair<Acc>::type *>(at) = gk__k8_pair<Acc>::make(x, y);
  } else { /* the output cast: two 16-bit values, one 4-byte store */
    const Out pair[2] = {gk__from_f32<Out>(x), gk__from_f32<Out>(y)};
    *reinterpret_cast<uint32_t *>(at) = *reinterpret_cast<const uint32_t *>(pair);
  }
}

#if GK_WGMMA_DEVICE
/* Consumer side, ring slot `it`: waits for its bytes, issues this warpgroup's four wgmmas on its
 * 64 rows (box `consumer` of A) and keeps them in flight; once the group before is done,
 * releases slot it - 1 when release_prev. Both operands K-major: a k32 step is 32 bytes. */
template <class C, class Op>
__device__ __forceinline__ void gk__k8_consume(const gk__ring &ring, int it, bool release_prev,
                                               int consumer, typename Op::acc_t (&acc)[C::ACC]) {
  const int s = it % C::STAGES;
  gk__mbar_wait(ring.full0 + 8 * s, (it / C::STAGES) & 1);
  const uint32_t sa = ring.smem0 + s * C::STAGE_BYTES + consumer * C::CHUNK_BYTES;
  const uint32_t sb = ring.smem0 + s * C::STAGE_BYTES + C::A_BYTES;
  gk__wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::K_TILE / 32; ++kk)
    Op::template mma<C::BN>(acc, gk__wgmma_desc(sa + kk * 32, 16, 1024),
                            gk__wgmma_desc(sb + kk * 32, 16, 1024));
  gk__wgmma_commit();
  gk__wgmma_wait<1>();
  if (release_prev && threadIdx.x % 128 == 0)
    gk__mbar_arrive(ring.empty0 + 8 * ((it + C::STAGES - 1) % C::STAGES));
}

/* The element stored at (row, col) from accumulator v: C0 read where inside C (C, or the bias
 * row, already at the problem's row). */
template <class Op, bool EPI, typename Acc, typename Out>
__device__ __forceinline__ Acc gk__k8_scaled(const gk__k8_args<Acc, Out> &args, const Out *c,
                                             const Out *bias, int row, int col, Acc v) {
  const Acc c0 = args.beta_zero || row >= args.m || col >= args.n ? Acc(0)
                 : EPI && bias != NULL                          ? gk__k8_c0(bias[col])
                                                                : gk__k8_c0(c[(int64_t)row * args.n + col]);
  return Op::template epilogue<EPI>(args, v, c0);
}

/* One consumer's epilogue for the tile at (m0, n0) of problem z, half by half (16's scheme):
 * wait until the engine has read the buffer, fill it, make it visible to the async proxy, store
 * its boxes. Accumulator layout: thread (warp4, g, t) holds rows warp4 * 16 + g and + 8,
 * columns 8j + 2t and + 1. */
template <class C, class Op, bool EPI, typename Out>
__device__ __forceinline__ void gk__k8_store_tile(const CUtensorMap *map_c,
                                                  const gk__k8_args<typename Op::acc_t, Out> &args,
                                                  const typename Op::acc_t (&acc)[C::ACC],
                                                  uint32_t buffer, unsigned char *buffer_ptr,
                                                  int consumer, int m0, int n0, int z) {
  constexpr int BOX_COLS = 128 / sizeof(Out); /* columns of C in a 128-byte swizzle row */
  const int wg_thread = threadIdx.x % 128, warp4 = wg_thread / 32, lane = wg_thread % 32;
  const int g = lane / 4, t = lane % 4;
  const Out *c = args.c + (int64_t)z * args.stride_c;
  const Out *bias = args.bias != NULL ? args.bias + (int64_t)z * args.bias_stride : NULL;
  const int row0 = m0 + consumer * 64;
#pragma unroll /* part indexes acc: a constant, or acc goes to local memory */
  for (int part = 0; part < C::PARTS; ++part) {
    const int col0 = n0 + part * C::PART_COLS;
    if (wg_thread == 0) gk__bulk_wait_read();
    gk__named_sync(2 + consumer, 128);
#pragma unroll
    for (int jj = 0; jj < C::PART_COLS / 8; ++jj) {
      const int j = part * (C::PART_COLS / 8) + jj;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int r = warp4 * 16 + g + 8 * e, col = 8 * jj + 2 * t;
        gk__k8_put_pair<Out>(buffer_ptr + gk__swizzled<Out>(r, col, 64),
                             gk__k8_scaled<Op, EPI>(args, c, bias, row0 + r, col0 + col, acc[4 * j + 2 * e]),
                             gk__k8_scaled<Op, EPI>(args, c, bias, row0 + r, col0 + col + 1, acc[4 * j + 2 * e + 1]));
      }
    }
    gk__fence_proxy_async();
    gk__named_sync(2 + consumer, 128);
    if (wg_thread != 0) continue;
    for (int b = 0; b < C::PART_COLS / BOX_COLS; ++b)
      if (row0 < args.m && col0 + b * BOX_COLS < args.n)
        gk__tma_store_3d(map_c, buffer + b * 64 * 128, col0 + b * BOX_COLS, row0, z);
    gk__bulk_commit();
  }
}
#endif /* GK_WGMMA_DEVICE */

/* The kernel: grid.x CTAs walk the batch chunk's `problems` x tiles; warpgroup 0 (one thread)
 * loads, warpgroups 1 and 2 multiply and store (15's loop). */
template <class C, class Op, typename Out>
__global__ void __launch_bounds__(C::THREADS, 1)
    gk__k8_persist(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_c, gk__k8_args<typename Op::acc_t, Out> args,
                   int problems) {
#if GK_WGMMA_DEVICE
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const gk__ring ring = gk__ring_init<C>(smem_raw);
  const int warpgroup = threadIdx.x / 128;
  const int tiles_m = (args.m + C::BM - 1) / C::BM, tiles_n = (args.n + C::BN - 1) / C::BN;
  const int64_t total = (int64_t)tiles_m * tiles_n * problems;
  const int k_tiles = (args.k + C::K_TILE - 1) / C::K_TILE;
  int m0, n0, z;

  if (warpgroup == 0) { /* producer: both operands K-major (15's TA = false, TB = true) */
    gk__setmaxnreg_dec<C::PRODUCER_REGS>();
    if (threadIdx.x != 0) return;
    int it = 0; /* k tiles loaded so far: the ring's running slot */
    for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
      gk__tile_origin(t, tiles_m, tiles_n, C::BM, C::BN, &m0, &n0, &z);
      for (int kt = 0; kt < k_tiles; ++kt, ++it)
        gk__wgmma_produce<C, false, true>(ring, it, &map_a, &map_b, m0, n0, kt * C::K_TILE, z);
    }
    return;
  }

  gk__setmaxnreg_inc<C::CONSUMER_REGS>();
  const int consumer = warpgroup - 1;
  const uint32_t buffer = ring.smem0 + C::STAGING_OFFSET + consumer * C::PART_BYTES;
  unsigned char *buffer_ptr = smem_raw + (buffer - gk__smem_addr(smem_raw));
  int it = 0;
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    gk__tile_origin(t, tiles_m, tiles_n, C::BM, C::BN, &m0, &n0, &z);
    typename Op::acc_t acc[C::ACC];
#pragma unroll
    for (int i = 0; i < C::ACC; ++i) acc[i] = 0;
    for (int kt = 0; kt < k_tiles; ++kt, ++it) gk__k8_consume<C, Op>(ring, it, kt > 0, consumer, acc);
    gk__wgmma_wait<0>();
    if (threadIdx.x % 128 == 0) /* the tile's last slot: free for the producer */
      gk__mbar_arrive(ring.empty0 + 8 * ((it + C::STAGES - 1) % C::STAGES));
    if (args.bias == NULL && args.act == GK_ACT_NONE) /* the plain store has no epilogue code */
      gk__k8_store_tile<C, Op, false, Out>(&map_c, args, acc, buffer, buffer_ptr, consumer, m0, n0, z);
    else
      gk__k8_store_tile<C, Op, true, Out>(&map_c, args, acc, buffer, buffer_ptr, consumer, m0, n0, z);
  }
  if (threadIdx.x % 128 == 0) gk__bulk_wait_all(); /* C is written before the grid ends */
#else
  (void)map_a, (void)map_b, (void)map_c, (void)args, (void)problems;
#endif
}

/* dst[z][c][r] = src[z][r][c] for `batch` rows x cols matrices of bytes: an operand made K-major.
 * 64 x 64 tiles through shared memory; with VEC (cols and rows multiples of 4, 4-byte aligned
 * bases) every global access is a 4-byte word, so that a warp reads and writes 128 bytes of
 * rows at once (byte by byte the pass ran at a fraction of memory speed: 8192^3 with B k x n
 * took 240 us more than with B n x k on an H100). */
template <bool VEC>
__global__ void __launch_bounds__(256) gk__k8_transpose(const uint8_t *__restrict__ src,
                                                        uint8_t *__restrict__ dst, int64_t rows,
                                                        int64_t cols) {
  __shared__ uint8_t tile[64][68]; /* rows 4-byte aligned; the pad spreads a column's banks */
  const int64_t z = blockIdx.z, r0 = (int64_t)blockIdx.y * 64, c0 = (int64_t)blockIdx.x * 64;
  src += z * rows * cols, dst += z * rows * cols;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16; /* 16 words a row, 16 rows a step */
  for (int i = ty; i < 64; i += 16) {
    const int64_t r = r0 + i, c = c0 + 4 * tx;
    if (VEC && r < rows && c < cols) {
      *reinterpret_cast<uint32_t *>(&tile[i][4 * tx]) = *reinterpret_cast<const uint32_t *>(src + r * cols + c);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        tile[i][4 * tx + e] = r < rows && c + e < cols ? src[r * cols + c + e] : 0;
    }
  }
  __syncthreads();
  for (int i = ty; i < 64; i += 16) { /* output row c0 + i: source column i */
    const int64_t c = c0 + i, r = r0 + 4 * tx;
    if (c >= cols) continue;
    if (VEC && r < rows) {
      const uint32_t word = (uint32_t)tile[4 * tx][i] | (uint32_t)tile[4 * tx + 1][i] << 8 |
                            (uint32_t)tile[4 * tx + 2][i] << 16 | (uint32_t)tile[4 * tx + 3][i] << 24;
      *reinterpret_cast<uint32_t *>(dst + c * rows + r) = word;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (r + e < rows) dst[c * rows + r + e] = tile[4 * tx + e][i];
    }
  }
}

static inline cudaError_t gk__k8_transpose_launch(const void *src, void *dst, int64_t rows,
                                                  int64_t cols, int64_t batch, cudaStream_t stream) {
  const int64_t bx = (cols + 63) / 64, by = (rows + 63) / 64;
  if (bx > INT32_MAX || by > 65535) return cudaErrorInvalidValue;
  const bool vec = rows % 4 == 0 && cols % 4 == 0 && gk__aligned(src, 4) && gk__aligned(dst, 4);
  return gk__for_batch_chunks(batch, [&](int64_t first, unsigned count) {
    const int64_t offset = first * rows * cols;
    const dim3 grid((unsigned)bx, (unsigned)by, count);
    const uint8_t *from = static_cast<const uint8_t *>(src) + offset;
    uint8_t *to = static_cast<uint8_t *>(dst) + offset;
    if (vec) gk__k8_transpose<true><<<grid, 256, 0, stream>>>(from, to, rows, cols);
    else gk__k8_transpose<false><<<grid, 256, 0, stream>>>(from, to, rows, cols);
    return cudaGetLastError();
  });
}

/* A and B as TMA reads them K-major (rows of k bytes, 16-byte aligned), C (32-bit elements) as
 * TMA stores it. */
static inline bool gk__k8_fits(const gk_problem *p) {
  return gk__fits_int32(p) && p->k % 16 == 0 && gk__aligned(p->a, 16) && gk__aligned(p->b, 16) &&
         gk__aligned(p->c, 16) && p->n % 4 == 0 && p->m * p->k < ((int64_t)1 << 40) &&
         p->n * p->k < ((int64_t)1 << 40) && p->m * p->n * 4 < ((int64_t)1 << 40);
}

template <class C, class Op, typename Out>
cudaError_t gk__k8_run(const gk_problem *p, const void *a, const void *b, int sms, cudaStream_t stream) {
  using Acc = typename Op::acc_t;
  auto kernel = gk__k8_persist<C, Op, Out>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)C::SMEM_TOTAL);
  if (err != cudaSuccess) return err;
  const int64_t tiles = ((p->m + C::BM - 1) / C::BM) * ((p->n + C::BN - 1) / C::BN);
  if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  gk__k8_args<Acc, Out> args;
  args.m = (int)p->m, args.n = (int)p->n, args.k = (int)p->k;
  args.stride_c = p->m * p->n, args.bias_stride = p->bias_stride;
  args.alpha = Op::scalar(p->alpha), args.beta = Op::scalar(p->beta), args.beta_zero = p->beta == 0.0;
  args.act = p->act;
  return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
    gk__k8_args<Acc, Out> chunk = args;
    chunk.c = static_cast<Out *>(p->c) + first * args.stride_c;
    chunk.bias = p->bias != NULL ? static_cast<const Out *>(p->bias) + first * p->bias_stride : NULL;
    const uint8_t *ca = static_cast<const uint8_t *>(a) + first * p->m * p->k;
    const uint8_t *cb = static_cast<const uint8_t *>(b) + first * p->n * p->k;
    CUtensorMap map_a, map_b, map_c;
    cudaError_t map_err = gk__tf32_map(&map_a, ca, p->k, p->m, count, C::CHUNK, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1);
    if (map_err == cudaSuccess)
      map_err = gk__tf32_map(&map_b, cb, p->k, p->n, count, C::CHUNK, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1);
    if (map_err == cudaSuccess)
      map_err = gk__tf32_map(&map_c, chunk.c, p->n, p->m, count, 64, gk__tf32_c_map_type<Out>(),
                             sizeof(Out));
    if (map_err != cudaSuccess) return map_err;
    const int64_t work = tiles * count;
    const unsigned grid = (unsigned)(work < sms ? work : sms);
    kernel<<<grid, C::THREADS, C::SMEM_TOTAL, stream>>>(map_a, map_b, map_c, chunk, (int)count);
    return cudaGetLastError();
  });
}

/* The K-major operands a and b (p's own, or copies) through the tile that suits the grid: the
 * 128 x 256 tile (3 stages), or the 128 x 128 one (5 stages) where the wide one would fill at
 * most half of the SMs. */
template <class Op, typename Out>
cudaError_t gk__k8_run_k_major(gk_gpu_ctx *ctx, const gk_problem *p, const void *a, const void *b,
                               cudaStream_t stream) {
  using wide = gk__k8_cfg<256, 3>;
  using narrow = gk__k8_cfg<128, 5>;
  const int sms = gk__sm_count(ctx);
  const int64_t wide_tiles = ((p->m + wide::BM - 1) / wide::BM) * ((p->n + wide::BN - 1) / wide::BN) * p->batch;
  if (wide_tiles * 2 <= sms || p->n <= narrow::BN) return gk__k8_run<narrow, Op, Out>(p, a, b, sms, stream);
  return gk__k8_run<wide, Op, Out>(p, a, b, sms, stream);
}

/* K-major copies of the operands that are not (A stored k x m, B stored k x n) in one
 * stream-ordered allocation, the gemm on them, and the allocation's return; Op's fallback where
 * the allocation fails. C of type Out: the output cast only in the native layout (no copy, and
 * so no fallback, which has no cast). */
template <class Op, typename Out = typename Op::acc_t>
cudaError_t gk__k8_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!p->trans_a && p->trans_b) return gk__k8_run_k_major<Op, Out>(ctx, p, p->a, p->b, stream);
  if (sizeof(Out) != sizeof(typename Op::acc_t)) return cudaErrorInvalidValue;
  const size_t a_bytes = p->trans_a ? (size_t)(p->batch * p->m * p->k) : 0;
  const size_t b_bytes = !p->trans_b ? (size_t)(p->batch * p->n * p->k) : 0;
  const size_t a_round = (a_bytes + 255) & ~(size_t)255;
  void *copies = NULL;
  cudaMemPool_t pool = ctx != NULL ? gk_gpu_ctx_pool(ctx) : NULL;
  if (pool == NULL || cudaMallocFromPoolAsync(&copies, a_round + b_bytes, pool, stream) != cudaSuccess) {
    (void)cudaGetLastError(); /* not sticky: clear it, and read every layout as it is */
    return Op::fallback().launch(ctx, p, stream);
  }
  uint8_t *a_t = static_cast<uint8_t *>(copies), *b_t = a_t + a_round;
  cudaError_t err = cudaSuccess;
  if (p->trans_a) err = gk__k8_transpose_launch(p->a, a_t, p->k, p->m, p->batch, stream);
  if (err == cudaSuccess && !p->trans_b) err = gk__k8_transpose_launch(p->b, b_t, p->k, p->n, p->batch, stream);
  if (err == cudaSuccess)
    err = gk__k8_run_k_major<Op, Out>(ctx, p, p->trans_a ? a_t : p->a, p->trans_b ? p->b : b_t, stream);
  const cudaError_t freed = cudaFreeAsync(copies, stream);
  return err != cudaSuccess ? err : freed;
}

#endif /* GK_17_WGMMA_I8_PERSIST_CUH */
