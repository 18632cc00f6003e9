/*
 * gk_fast_simt_splitk.cuh - 02's SIMT tile split along k over a thread-block cluster (Hopper),
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
 * The split count S (gk__simt_splits) comes from a small cost model in "k tiles of one block
 * alone on an SM": 02 (S = 1) runs two blocks per SM where the grid has more blocks than SMs,
 * each at 1/GK_SIMT_PAIR_RATE of that speed (02 measured 0.306 TFLOP/s per SM alone, 0.34 in
 * pairs: 1.8); a split grid runs ceil(tiles / clusters(S)) rounds, clusters(S) being how many
 * S-clusters fit at once (cudaOccupancyMaxActiveClusters: clusters live in one GPC, so on the
 * H200 only 39 3-clusters fit, 117 of 132 SMs), each round ceil(k_tiles / S) k tiles plus
 * GK_SPLITK_COST for the reduction (fitted to the measured S = 2..8 at 1024^3 and
 * 1000x1200x800); the cheapest S in 1..8 wins (8: the portable cluster size), the smallest on a
 * tie.
 */
#ifndef GK_FAST_SIMT_SPLITK_CUH
#define GK_FAST_SIMT_SPLITK_CUH

#include <cooperative_groups.h>

#include <atomic>

#include "gk_fast_simt.cuh"

#define GK_SPLITK_MAX 8      /* the portable cluster size */
#define GK_SPLITK_COST 6     /* the reduction of one block, in k tiles of the main loop */
#define GK_SIMT_PAIR_RATE 18 /* tenths: a k tile of two blocks sharing an SM, against one alone */

/* clusters[s]: S-clusters of 09's kernel resident at once on the H200 (132 SMs), as
 * cudaOccupancyMaxActiveClusters reported it there; supports() decides with these, the launch
 * with the device's own. */
static const int gk__splitk_h200_clusters[GK_SPLITK_MAX + 1] = {0, 132, 66, 39, 30, 22, 17, 15, 15};

/* The number of k slices for a grid of `tiles` tiles (the batch included) of k_tiles k tiles
 * each on `sms` SMs that hold clusters[s] S-clusters at once; 1 when splitting does not pay.
 * Every slice gets at least 2 k tiles. */
static inline int gk__simt_splits(int64_t tiles, int64_t k_tiles, int sms, const int *clusters) {
  if (sms < 1 || tiles < 1 || k_tiles < 1) return 1;
  int best = 1;
  int64_t best_cost = tiles <= sms ? 10 * k_tiles
                                   : (tiles + 2 * sms - 1) / (2 * sms) * GK_SIMT_PAIR_RATE * k_tiles;
  for (int s = 2; s <= GK_SPLITK_MAX && 2 * s <= k_tiles; ++s) {
    if (clusters[s] < 1) continue;
    const int64_t rounds = (tiles + clusters[s] - 1) / clusters[s];
    const int64_t cost = 10 * rounds * ((k_tiles + s - 1) / s + GK_SPLITK_COST);
    if (cost < best_cost) best = s, best_cost = cost;
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

/* grid.x = tiles * splits (cluster (splits, 1, 1): the blocks of one tile are consecutive),
 * grid.z = batch entries of this chunk. One block per SM, so the whole register file is there:
 * launch bounds (NT, 1), no spills. */
template <typename T, int BM, int BN, int BK, bool ASYNC, bool TA, bool TB, bool VEC>
__global__ void __launch_bounds__((BM / 8) * (BN / 8), 1)
    gk__simt_splitk_gemm(gk__simt_args<T> args, int splits) {
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
  gk__raster_pid((int)(blockIdx.x / splits), (args.m + BM - 1) / BM, (args.n + BN - 1) / BN,
                 &tile_m, &tile_n);
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
  (void)args, (void)splits; /* sm_90 and later only: supports() refuses older devices */
#endif
}

/* Host side. FIXED_SPLITS 0: the cost model picks S for the device's SM count; otherwise S is
 * that number (the bench's variants). Launches with S = 1 too (one block per cluster). */
template <typename T, int BM, int BN, int BK, bool ASYNC, int FIXED_SPLITS = 0>
struct gk__simt_splitk_launcher {
  using layout = gk__simt_splitk_layout<T, BM, BN, BK, ASYNC>;
  static constexpr int NT = (BM / 8) * (BN / 8);

  static int64_t tiles(const gk_problem *p) {
    return ((p->m + BM - 1) / BM) * ((p->n + BN - 1) / BN);
  }
  static int splits(const gk_problem *p, int sms, const int *clusters) {
    if (FIXED_SPLITS > 0) return FIXED_SPLITS;
    return gk__simt_splits(tiles(p) * p->batch, (p->k + BK - 1) / BK, sms, clusters);
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
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(s * 64, 1, 1);
      cfg.blockDim = dim3(NT, 1, 1);
      cfg.dynamicSmemBytes = smem;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = (unsigned)s;
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      err = cudaOccupancyMaxActiveClusters(&clusters[s], kernel, &cfg);
      if (err != cudaSuccess) return err;
    }
    if (device >= 0 && device < kDevices)
      for (int s = GK_SPLITK_MAX; s >= 0; --s) known[device][s].store(clusters[s]); /* [1] last */
    return cudaSuccess;
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

  template <bool TA, bool TB, bool VEC>
  static cudaError_t run_split(const gk_problem *p, int s, cudaStream_t stream) {
    auto kernel = gk__simt_splitk_gemm<T, BM, BN, BK, ASYNC, TA, TB, VEC>;
    size_t smem = 0;
    cudaError_t err = prepare(kernel, &smem);
    if (err != cudaSuccess) return err;
    const gk__simt_args<T> args = gk__simt_make_args<T>(p);
    const int64_t blocks = tiles(p) * s;
    if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
    return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3((unsigned)blocks, 1, count);
      cfg.blockDim = dim3(NT, 1, 1);
      cfg.dynamicSmemBytes = smem;
      cfg.stream = stream;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = (unsigned)s;
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      return cudaLaunchKernelEx(&cfg, kernel, gk__args_at(args, first), s);
    });
  }

  /* The bench's entry (gk__simt_launcher's signature): S from FIXED_SPLITS or for the H200. */
  template <bool TA, bool TB, bool VEC>
  static cudaError_t run(const gk_problem *p, cudaStream_t stream) {
    return run_split<TA, TB, VEC>(p, splits(p, 132, gk__splitk_h200_clusters), stream);
  }

  static cudaError_t launch_split(const gk_problem *p, int s, cudaStream_t stream) {
    if (!gk__fits_int32(p) || s < 1 || s > GK_SPLITK_MAX) return cudaErrorInvalidValue;
    return gk__with_layout(p, gk__simt_vec<T>(p), [&](auto ta, auto tb, auto vec) {
      return run_split<decltype(ta)::value, decltype(tb)::value, decltype(vec)::value>(p, s, stream);
    });
  }
};

#endif /* GK_FAST_SIMT_SPLITK_CUH */
