/*
 * 15_wgmma_f16_persist.cu - "wgmma_f16_persist": 07's f16/bf16 Hopper kernel as a persistent
 * grid whose epilogue overlaps the next tile: C leaves through TMA stores from its own staging
 * tile, while the producer already loads the next tile's operands.
 *
 * Tiling: 07's 128 x 256 x 64 tile (and its 128 x 128 tile where the wide one would fill at most
 * half of the SMs), 384 threads (one producer warpgroup, two consumers, each
 * 64 rows); a grid of at most one CTA per SM, each walking tiles blockIdx.x, + gridDim.x, ...
 * over the batch chunk in 07's grouped order;
 *   - the operand ring (3 stages of 48 KB) runs on across tiles: the producer counts k tiles, not
 *     tiles, so it fills the ring with the next tiles' operands while the consumers store C;
 *   - each consumer has its own 64 x 256 staging tile of T (32 KB, four 64 x 64 boxes in TMA's
 *     128-byte swizzle: the accumulators' 4-byte pairs land on 32 different banks). It writes
 *     alpha * acc (+ beta * C, read from global at the accumulator's own positions) there,
 *     rounded once to T, then one thread hands the four boxes to the copy engine (TMA store,
 *     clipped at the matrix's edges) and the warpgroup goes straight on to its next tile; the
 *     staging tile is rewritten only once the engine has read it (cp.async.bulk.wait_group.read);
 *   - the epilogue is fused there (gk_kernel.epilogue): a bias row in place of C for beta, and
 *     ReLU, so that they cost no extra pass over C (GELU stays a pass: see gk_registry.cu).
 * What changed over 07: 07 runs one tile per CTA and its epilogue stages C in the operand ring,
 * so a CTA loads, multiplies and stores in turn. Where k is short the store is most of the work:
 * 8192 x 8192 x 64 writes 128 MB of C for 8.6 GFLOP, and 07 ran it at 49-53% of cuBLAS.
 *
 * Measured (H100, bench_kernels, ours / cuBLAS at its best in the same run, bench/RESULTS.md
 * "Kernel history", 15): 8192 x 8192 x 64 bf16 147.4 / 142.0 TFLOP/s = 104%, f16 149.7 / 140.9
 * = 106% (07 in the same run: 64% / 67%); 1024^3 to 8192^3, 1000 x 1200 x 800 and 64 x 256^3
 * at 97-102%, as 07 within the run-to-run spread.
 *
 * Contract: 07's (f16 or bf16, compute capability 9.0 exactly, A and B describable by TMA, any
 * m, n, k, both transposes, alpha/beta, any batch), and C describable by TMA too: 16-byte
 * aligned, n a multiple of 8. Everything else stays with 07 and 04, registered after this kernel.
 */
#include "gk_epilogue_dev.cuh"
#include "07_wgmma_f16.cuh"
#include "gk_gpu.h"

/* The fused epilogue (gk_kernel.epilogue): with bias set, beta multiplies the bias row (n
 * elements, bias_stride apart per problem) instead of C; act (ReLU or none: gk_gpu_gemm asks
 * for no other) is applied last, to the result rounded to T (as the pass over C would see it). */
template <typename T>
struct gk__persist_epilogue {
  const T *bias;
  int64_t bias_stride;
  gk_act act;
};

namespace {

/* 07's tile and a ring of STAGES, then (from the next 1 KB boundary past the ring's barriers)
 * one staging tile of 64 x BN elements of T per consumer. */
template <int BN_, int STAGES_>
struct persist_cfg : gk__wgmma_cfg<BN_, STAGES_> {
  using base = gk__wgmma_cfg<BN_, STAGES_>;
  using base::BN, base::CHUNK, base::STAGES, base::STAGE_BYTES, base::CONSUMERS;
  static constexpr int C_BOX_BYTES = CHUNK * CHUNK * 2;         /* a 64 x 64 box of C: 8 KB */
  static constexpr int C_BOXES = BN / CHUNK;                    /* boxes per consumer's rows */
  static constexpr int STAGE_C_BYTES = C_BOXES * C_BOX_BYTES;   /* 32 KB */
  static constexpr int STAGING_OFFSET = STAGES * STAGE_BYTES + 1024; /* from the ring's start */
  static constexpr size_t SMEM_TOTAL = 1024 + STAGING_OFFSET + (size_t)CONSUMERS * STAGE_C_BYTES;
  static_assert(16 * STAGES <= 1024, "the ring's barriers fit before the staging tiles");
  static_assert(SMEM_TOTAL <= 227 * 1024, "Hopper gives a block at most 227 KB of shared memory");
};
/* As 07: the wide tile (3 stages of 48 KB + 2 x 32 KB staging), and the narrow one (5 stages of
 * 32 KB + 2 x 16 KB) where the wide one would fill at most half of the SMs or half of its own
 * columns (n <= 128). */
using cfg_wide = persist_cfg<256, 3>;
using cfg_narrow = persist_cfg<128, 5>;

#if GK_WGMMA_DEVICE
/* One consumer's epilogue for the tile at (m0, n0) of problem z: its 64 rows into its staging
 * tile (row r, column col of box b at b * 8 KB + r * 128 + ((col / 8) ^ (r % 8)) * 16 +
 * (col % 8) * 2: the 128-byte swizzle), then TMA stores of the boxes inside the matrix. */
template <typename T, class cfg, bool EPI>
__device__ __forceinline__ void store_tile(const CUtensorMap *map_c, const gk__mma16_args<T> &args,
                                           const gk__persist_epilogue<T> &epi,
                                           const float (&acc)[cfg::ACC], uint32_t staging,
                                           unsigned char *staging_ptr, int consumer, int m0, int n0,
                                           int z) {
  const int wg_thread = threadIdx.x % 128, warp4 = wg_thread / 32, lane = wg_thread % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int band0 = m0 + consumer * 64; /* this consumer's first row of C */
  const T *c = args.c + (int64_t)z * args.stride_c;
  const T *bias = EPI && epi.bias != NULL ? epi.bias + (int64_t)z * epi.bias_stride : NULL;
  if (wg_thread == 0) gk__bulk_wait_read(); /* the engine is done with the previous tile */
  gk__named_sync(2 + consumer, 128);
#pragma unroll
  for (int j = 0; j < cfg::BN / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp4 * 16 + g + 8 * h, col = n0 + 8 * j + 2 * t4, row = band0 + r;
      float v0 = acc[4 * j + 2 * h] * args.alpha, v1 = acc[4 * j + 2 * h + 1] * args.alpha;
      if (!args.beta_zero && row < args.m && col < args.n) { /* n is even: col + 1 < n too */
        const float2 old = EPI && bias != NULL ? make_float2(float(bias[col]), float(bias[col + 1]))
                                        : gk__load2(c + (int64_t)row * args.n + col);
        v0 = fmaf(args.beta, old.x, v0), v1 = fmaf(args.beta, old.y, v1);
      }
      if (EPI && epi.act == GK_ACT_RELU) /* the only activation asked of a store */
        v0 = gk__relu(float(T(v0))), v1 = gk__relu(float(T(v1)));
      const int offset = (j / 8) * cfg::C_BOX_BYTES + r * 128 + (((j % 8) ^ (r % 8)) << 4) + 4 * t4;
      gk__store2(reinterpret_cast<T *>(staging_ptr + offset), v0, v1);
    }
  }
  gk__fence_proxy_async(); /* these writes, visible to the copy engine */
  gk__named_sync(2 + consumer, 128);
  if (wg_thread == 0) {
    if (band0 < args.m) {
#pragma unroll
      for (int b = 0; b < cfg::C_BOXES; ++b)
        if (n0 + b * cfg::CHUNK < args.n)
          gk__tma_store_3d(map_c, staging + b * cfg::C_BOX_BYTES, n0 + b * cfg::CHUNK, band0, z);
    }
    gk__bulk_commit();
  }
}
#endif

/* The kernel: grid.x CTAs walk the batch chunk's `problems` x tiles; warpgroup 0 (one thread)
 * loads, warpgroups 1 and 2 multiply and store (see the opening comment). */
template <typename T, class cfg, bool TA, bool TB>
__global__ void __launch_bounds__(cfg::THREADS, 1)
    persist_gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                 const __grid_constant__ CUtensorMap map_c, gk__mma16_args<T> args,
                 gk__persist_epilogue<T> epi, int problems) {
#if GK_WGMMA_DEVICE
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const gk__ring ring = gk__ring_init<cfg>(smem_raw);
  const int warpgroup = threadIdx.x / 128;
  const int tiles_m = (args.m + cfg::BM - 1) / cfg::BM, tiles_n = (args.n + cfg::BN - 1) / cfg::BN;
  const int64_t total = (int64_t)tiles_m * tiles_n * problems;
  const int k_tiles = (args.k + cfg::BK - 1) / cfg::BK;
  int m0, n0, z;

  if (warpgroup == 0) { /* producer */
    gk__setmaxnreg_dec<cfg::PRODUCER_REGS>();
    if (threadIdx.x != 0) return;
    int it = 0; /* k tiles loaded so far: the ring's running slot */
    for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
      gk__tile_origin(t, tiles_m, tiles_n, cfg::BM, cfg::BN, &m0, &n0, &z);
      for (int kt = 0; kt < k_tiles; ++kt, ++it)
        gk__wgmma_produce<cfg, TA, TB>(ring, it, &map_a, &map_b, m0, n0, kt * cfg::BK, z);
    }
    return;
  }

  gk__setmaxnreg_inc<cfg::CONSUMER_REGS>();
  const int consumer = warpgroup - 1;
  const uint32_t staging = ring.smem0 + cfg::STAGING_OFFSET + consumer * cfg::STAGE_C_BYTES;
  unsigned char *staging_ptr = smem_raw + (staging - gk__smem_addr(smem_raw));
  int it = 0;
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    gk__tile_origin(t, tiles_m, tiles_n, cfg::BM, cfg::BN, &m0, &n0, &z);
    float acc[cfg::ACC];
#pragma unroll
    for (int i = 0; i < cfg::ACC; ++i) acc[i] = 0.0f;
    for (int kt = 0; kt < k_tiles; ++kt, ++it)
      gk__wgmma_consume<T, cfg, TA, TB>(ring, it, kt > 0, consumer, acc);
    gk__wgmma_wait<0>();
    if (threadIdx.x % 128 == 0) /* the tile's last slot: free for the producer */
      gk__mbar_arrive(ring.empty0 + 8 * ((it + cfg::STAGES - 1) % cfg::STAGES));
    if (epi.bias == NULL && epi.act == GK_ACT_NONE) /* the plain store has no epilogue code */
      store_tile<T, cfg, false>(&map_c, args, epi, acc, staging, staging_ptr, consumer, m0, n0, z);
    else
      store_tile<T, cfg, true>(&map_c, args, epi, acc, staging, staging_ptr, consumer, m0, n0, z);
  }
  if (threadIdx.x % 128 == 0) gk__bulk_wait_all(); /* C is written before the grid ends */
#else
  (void)map_a, (void)map_b, (void)map_c, (void)args, (void)epi, (void)problems;
#endif
}

/* C as TMA can store it: 16-byte aligned, rows of whole 16-byte units (the batch stride m * n
 * then is too), within the tensor map's ranges. */
bool c_fits(const gk_problem *p) {
  return gk__aligned(p->c, 16) && p->n % 8 == 0 && p->m * p->n * 2 < ((int64_t)1 << 40);
}

template <typename T, class cfg, bool TA, bool TB>
cudaError_t run(const gk_problem *p, int sms, cudaStream_t stream) {
  auto kernel = persist_gemm<T, cfg, TA, TB>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)cfg::SMEM_TOTAL);
  if (err != cudaSuccess) return err;
  const gk__mma16_args<T> args = gk__mma_args<gk__mma16_args<T>, T, float>(p);
  const int64_t tiles = ((p->m + cfg::BM - 1) / cfg::BM) * ((p->n + cfg::BN - 1) / cfg::BN);
  if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
    const gk__mma16_args<T> chunk = gk__args_at(args, first);
    CUtensorMap map_a, map_b, map_c;
    cudaError_t map_err = gk__wgmma_operand_maps(&map_a, &map_b, p, chunk.a, chunk.b, count);
    if (map_err == cudaSuccess)
      map_err = gk__wgmma_map(&map_c, p->dtype == GK_BF16, chunk.c, p->n, p->m, count);
    if (map_err != cudaSuccess) return map_err;
    gk__persist_epilogue<T> epi = {static_cast<const T *>(p->bias), p->bias_stride, p->act};
    if (epi.bias != NULL) epi.bias += first * p->bias_stride;
    const int64_t work = tiles * count;
    const unsigned grid = (unsigned)(work < sms ? work : sms);
    kernel<<<grid, cfg::THREADS, cfg::SMEM_TOTAL, stream>>>(map_a, map_b, map_c, chunk, epi,
                                                            (int)count);
    return cudaGetLastError();
  });
}

template <typename T, class cfg>
cudaError_t launch_with(const gk_problem *p, int sms, cudaStream_t stream) {
  if (p->trans_a)
    return p->trans_b ? run<T, cfg, true, true>(p, sms, stream) : run<T, cfg, true, false>(p, sms, stream);
  return p->trans_b ? run<T, cfg, false, true>(p, sms, stream) : run<T, cfg, false, false>(p, sms, stream);
}

template <typename T>
cudaError_t launch_as(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  const int sms = gk__sm_count(ctx);
  const int64_t wide_tiles = ((p->m + cfg_wide::BM - 1) / cfg_wide::BM) *
                             ((p->n + cfg_wide::BN - 1) / cfg_wide::BN) * p->batch;
  const bool narrow = wide_tiles * 2 <= sms || p->n <= cfg_narrow::BN; /* or half of it idle */
  return narrow ? launch_with<T, cfg_narrow>(p, sms, stream) : launch_with<T, cfg_wide>(p, sms, stream);
}

bool wgmma_f16_persist_supports(const gk_problem *p, int cc) {
  return (p->dtype == GK_F16 || p->dtype == GK_BF16) && cc == 90 && gk__wgmma_fits(p) && c_fits(p);
}

cudaError_t wgmma_f16_persist_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!wgmma_f16_persist_supports(p, 90)) return cudaErrorInvalidValue;
  if (p->dtype == GK_F16) return launch_as<__half>(ctx, p, stream);
  return launch_as<__nv_bfloat16>(ctx, p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_wgmma_f16_persist = {
    "wgmma_f16_persist",
    "f16/bf16, Hopper wgmma + TMA, persistent: 128x256x64 tile, C stored by TMA from its own "
    "staging tile while the next tile loads (15)",
    wgmma_f16_persist_supports,
    wgmma_f16_persist_launch,
    GK_EPILOGUE_FUSED,
};
