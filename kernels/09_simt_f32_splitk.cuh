/*
 * 09_simt_f32_splitk.cuh - 02's SIMT tile split along k over a thread-block cluster (Hopper),
 * the kernel of 09_simt_f32_splitk.cu.
 *
 * Where the grid of BM x BN tiles is short (1024^3 is 64 tiles of 128 x 128 for 132 SMs, half
 * the machine idle), each tile is computed by a cluster of S blocks instead of one: block r of
 * the cluster runs 02's main loop (gk__simt_cta) over the r-th slice of the k tiles, then
 *   1. stages its BM x BN partial sums in its own shared memory (row pitch BN + 4: the 4-vector
 *      stores of a warp land in distinct banks),
 *   2. cluster barrier,
 *   3. reduces rows [r*BM/S, (r+1)*BM/S) of the tile: reads that slice from every block's shared
 *      memory (distributed shared memory, 16-byte loads) and adds them in rank order 0, 1, ...,
 *      S-1, applies alpha/beta and writes C,
 *   4. cluster barrier again, so no block leaves while another still reads its shared memory.
 * No workspace, no atomics, no second launch, any beta: the result is deterministic (the same
 * sums in the same order every run); it differs from the one-block kernel only by the rounding
 * of S partial sums instead of one chain.
 *
 * One block per SM: the launch asks for more than half of an SM's shared memory. With two
 * blocks' room per SM the cluster scheduler put both blocks of a 2-cluster on one SM (measured:
 * 1024^3 with S = 2 fell from 30.8 to 23.8 TFLOP/s when two fitted), which gains nothing.
 *
 * The split count S (gk__simt_plan) comes from a small cost model in "k tiles of one block
 * alone on an SM": 02 (S = 1) runs two blocks per SM where the grid has more blocks than SMs,
 * each at 1/GK_SIMT_PAIR_RATE of that speed (02 measured 0.306 TFLOP/s per SM alone, 0.34 in
 * pairs: 1.8); a split grid runs ceil(tiles / clusters(S)) rounds, clusters(S) being how many
 * S-clusters fit at once (cudaOccupancyMaxActiveClusters: clusters live in one GPC, so on the
 * H200 only 39 3-clusters fit, 117 of 132 SMs), each round ceil(k_tiles / S) k tiles plus
 * GK_SPLITK_COST for the reduction (fitted to the measured S = 2..8 at 1024^3 and
 * 1000x1200x800); the cheapest S in 1..8 wins (8: the portable cluster size), the smallest on a
 * tie.
 */
#ifndef GK_09_SIMT_F32_SPLITK_CUH
#define GK_09_SIMT_F32_SPLITK_CUH

#include <cooperative_groups.h>

#include <atomic>

#include "02_simt_f32.cuh"

#define GK_SPLITK_MAX 8      /* the portable cluster size */
#define GK_SPLITK_COST 6     /* the reduction of one block, in k tiles of the main loop */
#define GK_SIMT_PAIR_RATE 18 /* tenths: a k tile of two blocks sharing an SM, against one alone */

/* clusters[s]: S-clusters of 09's kernel resident at once on the H200 (132 SMs), as
 * cudaOccupancyMaxActiveClusters reported it there; supports() decides with these, the launch
 * with the device's own. */
static const int gk__splitk_h200_clusters[GK_SPLITK_MAX + 1] = {0, 132, 66, 39, 30, 22, 17, 15, 15};

/* How a problem runs: tiles [0, tiles1) as clusters of s1 blocks, then, in a second launch, the
 * rest as clusters of s2 (0: no second launch). s1 = 1: no split at all (02's kernel). */
struct gk__splitk_plan {
  int s1;
  int64_t tiles1;
  int s2;
};

/* The cheapest plan by the cost model (file comment) for `tiles` tiles per problem, `batch`
 * problems, k_tiles k tiles, on `sms` SMs holding clusters[s] S-clusters at once. Each slice
 * gets at least 2 k tiles. A second launch (batch 1 only) takes the tiles left over after
 * whole rounds of the first: 1000x1200x800 is 80 tiles, 66 2-clusters fit, so 66 tiles run as
 * 2-clusters and the other 14 as 8-clusters instead of a second, nearly empty round. */
static inline gk__splitk_plan gk__simt_plan(int64_t tiles, int64_t batch, int64_t k_tiles,
                                            int sms, const int *clusters) {
  gk__splitk_plan best = {1, tiles, 0};
  const int64_t all = tiles * batch;
  if (sms < 1 || all < 1 || k_tiles < 1) return best;
  int64_t best_cost = all <= sms ? 10 * k_tiles
                                 : (all + 2 * sms - 1) / (2 * sms) * GK_SIMT_PAIR_RATE * k_tiles;
  /* one round of s-clusters, in tenths of a k tile */
  auto round = [&](int s) { return 10 * ((k_tiles + s - 1) / s + GK_SPLITK_COST); };
  auto usable = [&](int s) { return 2 * s <= k_tiles && clusters[s] >= 1; };
  for (int s = 2; s <= GK_SPLITK_MAX; ++s) {
    if (!usable(s)) continue;
    const int64_t cost = (all + clusters[s] - 1) / clusters[s] * round(s);
    if (cost < best_cost) best = {s, tiles, 0}, best_cost = cost;
    const int64_t full = all / clusters[s], rest = all - full * clusters[s];
    if (batch != 1 || full < 1 || rest == 0) continue;
    for (int s2 = 2; s2 <= GK_SPLITK_MAX; ++s2) {
      if (!usable(s2)) continue;
      const int64_t cost2 = full * round(s) + (rest + clusters[s2] - 1) / clusters[s2] * round(s2);
      if (cost2 < best_cost) best = {s, full * clusters[s], s2}, best_cost = cost2;
    }
  }
  return best;
}

template <typename T, int BM, int BN, int BK, bool ASYNC>
struct gk__simt_splitk_layout {
  static constexpr int RP = BN + 4; /* row pitch of the staged partial tile */
  static constexpr size_t MAIN = (size_t)(2 * BK * (BM + 4) + 2 * BK * (BN + 4)) * sizeof(T);
  static constexpr size_t STAGE = (size_t)BM * RP * sizeof(T);
  static constexpr size_t SMEM_BYTES = MAIN > STAGE ? MAIN : STAGE;
};

/* grid.x = tiles * splits (cluster (splits, 1, 1): the blocks of one tile are consecutive) for
 * the tiles from tile0 on, grid.z = batch entries of this chunk. One block per SM, so the whole register file is there:
 * launch bounds (NT, 1), no spills. */
template <typename T, int BM, int BN, int BK, bool ASYNC, bool TA, bool TB, bool VEC>
__global__ void __launch_bounds__((BM / 8) * (BN / 8), 1)
    gk__simt_splitk_gemm(gk__simt_args<T> args, int splits, int tile0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using cta = gk__simt_cta<T, BM, BN, BK, ASYNC, TA, TB, VEC>;
  using layout = gk__simt_splitk_layout<T, BM, BN, BK, ASYNC>;
  constexpr int RP = layout::RP;
  extern __shared__ __align__(16) unsigned char gk__splitk_smem[];
  T *smem = reinterpret_cast<T *>(gk__splitk_smem);

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = (int)cluster.block_rank();
  int tile_m, tile_n;
  gk__raster_pid(tile0 + (int)(blockIdx.x / splits), (args.m + BM - 1) / BM,
                 (args.n + BN - 1) / BN, &tile_m, &tile_n);
  const int m0 = tile_m * BM, n0 = tile_n * BN;
  const int64_t z = blockIdx.z;
  const int k_tiles = (args.k + BK - 1) / BK;
  const int kt0 = (int)((int64_t)k_tiles * rank / splits);
  const int kt1 = (int)((int64_t)k_tiles * (rank + 1) / splits);

  T acc[8][8];
  cta::mainloop(args, args.a + z * args.stride_a, args.b + z * args.stride_b, m0, n0, kt0, kt1,
                smem, smem + cta::A_ELEMS, acc);

  /* 1. the partial tile into this block's shared memory (the main loop's buffers are free) */
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int jh = 0; jh < 2; ++jh)
      gk__st4(smem + cta::row_of(i) * RP + cta::col_of(jh * 4), cta::acc4(acc, i, jh));
  cluster.sync(); /* 2. */

  /* 3. this block's rows of the tile, summed over the cluster in rank order */
  T *c = args.c + z * args.stride_c;
  const int r0 = BM * rank / splits, r1 = BM * (rank + 1) / splits;
  const int vecs = (r1 - r0) * (BN / 4);
  for (int v = threadIdx.x; v < vecs; v += cta::NT) {
    const int row = r0 + v / (BN / 4), col = (v % (BN / 4)) * 4;
    /* every block's part first (independent loads, all in flight), then the sum in rank order */
    gk__v4<T> parts[GK_SPLITK_MAX];
#pragma unroll
    for (int s = 0; s < GK_SPLITK_MAX; ++s)
      if (s < splits) parts[s] = gk__ld4(cluster.map_shared_rank(smem, s) + row * RP + col);
    gk__v4<T> sum = parts[0];
#pragma unroll
    for (int s = 1; s < GK_SPLITK_MAX; ++s)
      if (s < splits)
#pragma unroll
        for (int e = 0; e < 4; ++e) sum.v[e] += parts[s].v[e];
    cta::store4(args, c, m0 + row, n0 + col, sum);
  }
  cluster.sync(); /* 4. */
#else
  (void)args, (void)splits, (void)tile0; /* sm_90 and later only: supports() refuses older devices */
#endif
}

/* A launch of blocks x count blocks of NT threads in clusters of s along x, with smem bytes of
 * dynamic shared memory; attr: storage for the one attribute. */
static inline cudaLaunchConfig_t gk__cluster_config(int64_t blocks, unsigned count, int nt,
                                                    size_t smem, int s, cudaStream_t stream,
                                                    cudaLaunchAttribute *attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)blocks, 1, count);
  cfg.blockDim = dim3((unsigned)nt, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = (unsigned)s;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

/* Host side. FIXED_SPLITS 0: the cost model plans the launches for the device; otherwise one
 * launch with S = FIXED_SPLITS (the bench's variants). */
template <typename T, int BM, int BN, int BK, bool ASYNC, int FIXED_SPLITS = 0>
struct gk__simt_splitk_launcher {
  using layout = gk__simt_splitk_layout<T, BM, BN, BK, ASYNC>;
  static constexpr int NT = (BM / 8) * (BN / 8);

  static int64_t tiles(const gk_problem *p) {
    return ((p->m + BM - 1) / BM) * ((p->n + BN - 1) / BN);
  }
  static gk__splitk_plan plan(const gk_problem *p, int sms, const int *clusters) {
    if (FIXED_SPLITS > 0) return {FIXED_SPLITS, tiles(p), 0};
    return gk__simt_plan(tiles(p), p->batch, (p->k + BK - 1) / BK, sms, clusters);
  }

  /* Sets kernel's shared-memory limits for one block per SM (see the file comment); *smem: the
   * dynamic shared memory to launch it with. */
  template <typename K>
  static cudaError_t prepare(K kernel, size_t *smem) {
    int device = 0, per_sm = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess)
      err = cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
    if (err != cudaSuccess) return err;
    *smem = layout::SMEM_BYTES > (size_t)per_sm / 2 ? layout::SMEM_BYTES : (size_t)per_sm / 2 + 1024;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared);
    if (err != cudaSuccess) return err;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)*smem);
  }

  /* clusters[s] for s = 1..GK_SPLITK_MAX on the current device (clusters[0] = 0): asked once
   * per device and kept (the answer depends only on the device and this kernel). */
  static cudaError_t clusters_at_once(int clusters[GK_SPLITK_MAX + 1]) {
    constexpr int kDevices = 64;
    static std::atomic<int> known[kDevices][GK_SPLITK_MAX + 1];
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    if (device >= 0 && device < kDevices && known[device][1].load() > 0) {
      for (int s = 0; s <= GK_SPLITK_MAX; ++s) clusters[s] = known[device][s].load();
      return cudaSuccess;
    }
    auto kernel = gk__simt_splitk_gemm<T, BM, BN, BK, ASYNC, false, false, true>;
    size_t smem = 0;
    err = prepare(kernel, &smem);
    if (err != cudaSuccess) return err;
    clusters[0] = 0;
    for (int s = 1; s <= GK_SPLITK_MAX; ++s) {
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t cfg = gk__cluster_config(s * 64, 1, NT, smem, s, 0, &attr);
      err = cudaOccupancyMaxActiveClusters(&clusters[s], kernel, &cfg);
      if (err != cudaSuccess) return err;
    }
    if (device >= 0 && device < kDevices)
      for (int s = GK_SPLITK_MAX; s >= 0; --s) known[device][s].store(clusters[s]); /* [1] last */
    return cudaSuccess;
  }

  /* One launch: tiles [tile0, tile0 + ntiles) of every problem as s-clusters. */
  template <bool TA, bool TB, bool VEC>
  static cudaError_t run_split(const gk_problem *p, int s, int64_t tile0, int64_t ntiles,
                               cudaStream_t stream) {
    auto kernel = gk__simt_splitk_gemm<T, BM, BN, BK, ASYNC, TA, TB, VEC>;
    size_t smem = 0;
    cudaError_t err = prepare(kernel, &smem);
    if (err != cudaSuccess) return err;
    const gk__simt_args<T> args = gk__simt_make_args<T>(p);
    const int64_t blocks = ntiles * s;
    if (blocks > INT32_MAX || tile0 + ntiles > INT32_MAX) return cudaErrorInvalidConfiguration;
    return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
      cudaLaunchAttribute attr;
      const cudaLaunchConfig_t cfg = gk__cluster_config(blocks, count, NT, smem, s, stream, &attr);
      return cudaLaunchKernelEx(&cfg, kernel, gk__args_at(args, first), s, (int)tile0);
    });
  }

  /* The bench's entry (gk__simt_launcher's signature): one launch, S = FIXED_SPLITS. */
  template <bool TA, bool TB, bool VEC>
  static cudaError_t run(const gk_problem *p, cudaStream_t stream) {
    static_assert(FIXED_SPLITS > 0, "the bench's variants fix the split count");
    return run_split<TA, TB, VEC>(p, FIXED_SPLITS, 0, tiles(p), stream);
  }

  /* The plan's one or two launches (pl.s1 >= 1). */
  static cudaError_t launch_plan(const gk_problem *p, const gk__splitk_plan &pl, cudaStream_t stream) {
    if (!gk__fits_int32(p) || pl.s1 < 1 || pl.s1 > GK_SPLITK_MAX || pl.s2 < 0 ||
        pl.s2 > GK_SPLITK_MAX || pl.tiles1 < 1 || pl.tiles1 > tiles(p))
      return cudaErrorInvalidValue;
    return gk__with_layout(p, gk__simt_vec<T>(p), [&](auto ta, auto tb, auto vec) {
      constexpr bool TA = decltype(ta)::value, TB = decltype(tb)::value, VEC = decltype(vec)::value;
      cudaError_t err = run_split<TA, TB, VEC>(p, pl.s1, 0, pl.tiles1, stream);
      if (err == cudaSuccess && pl.s2 > 0 && pl.tiles1 < tiles(p))
        err = run_split<TA, TB, VEC>(p, pl.s2, pl.tiles1, tiles(p) - pl.tiles1, stream);
      return err;
    });
  }
};

#endif /* GK_09_SIMT_F32_SPLITK_CUH */
