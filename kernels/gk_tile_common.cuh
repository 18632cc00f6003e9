/*
 * gk_tile_common.cuh - device helpers shared by the fast kernels (kernels/NN_*.cu, NN >= 02).
 *
 * What lives here, and why it is shared:
 *   - the problem geometry every kernel needs (leading dimensions, batch strides, alignment tests),
 *   - tile rasterisation: blocks are numbered in groups of GK_GROUP_M tile-rows so that blocks that
 *     run at the same time share A and B tiles in L2 (the "grouped ordering" of Triton's matmul
 *     tutorial),
 *   - the batch loop: grid.z is capped at 65535, so a batch is launched in chunks,
 *   - thin wrappers around the sm_80 PTX the tensor-core kernels use (cp.async with zero-fill,
 *     ldmatrix, mma.sync), so that each kernel file reads as the algorithm,
 *   - the pieces the three mma.sync kernels (04, 05, 06) share: the global -> shared tile and
 *     stage loaders with edge zero-fill and transposes, the alpha/beta epilogue, and their
 *     opening (GK_MMA_TILE_PROLOGUE, at the end).
 *
 * Contract: header-only, device code plus small host helpers; included only by .cu files.
 * Nothing here allocates or synchronises.
 */
#ifndef GK_TILE_COMMON_CUH
#define GK_TILE_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "gk_gpu.h" /* gk_gpu_ctx_props */
#include "gk_problem.h"

/* Tile-rows per rasterisation group: 8 rows of 128 = 1024 rows of A stay hot in L2 while the
 * group sweeps across N. */
#define GK_GROUP_M 8
/* CUDA's limit on gridDim.z. */
#define GK_MAX_GRID_Z 65535

/* ---- host side: geometry ------------------------------------------------------------------- */

/* Row-major leading dimensions of the stored operands (see gk_problem.h). */
static inline int64_t gk__lda(const gk_problem *p) { return p->trans_a ? p->m : p->k; }
static inline int64_t gk__ldb(const gk_problem *p) { return p->trans_b ? p->k : p->n; }

/* The device's SM count, for the launchers that size their grid or tile by it; 132 (the H100
 * SXM's and the H200's) without a context. */
static inline int gk__sm_count(const gk_gpu_ctx *ctx) {
  return ctx != NULL ? gk_gpu_ctx_props(ctx)->multiProcessorCount : 132;
}

static inline bool gk__aligned(const void *ptr, size_t bytes) {
  return ((uintptr_t)ptr % bytes) == 0;
}

/* True when every row of both operands starts on a 16-byte boundary, so 16-byte vector loads of
 * whole rows are legal: base pointers aligned and leading dimensions a multiple of the vector.
 * (The batch stride rows*ld is then a multiple too.) */
static inline bool gk__rows_vectorizable(const gk_problem *p, int elems_per_16b) {
  return gk__aligned(p->a, 16) && gk__aligned(p->b, 16) && gk__lda(p) % elems_per_16b == 0 &&
         gk__ldb(p) % elems_per_16b == 0;
}

/* The problem sizes the kernels index with 32-bit ints. */
static inline bool gk__fits_int32(const gk_problem *p) {
  return p->m >= 1 && p->n >= 1 && p->k >= 1 && p->batch >= 1 && p->m <= INT32_MAX &&
         p->n <= INT32_MAX && p->k <= INT32_MAX;
}

/* Launches `launch_chunk(first, count)` for consecutive batch chunks of at most 65535 problems;
 * stops at (and returns) the first error. */
template <typename F>
static inline cudaError_t gk__for_batch_chunks(int64_t batch, F launch_chunk) {
  for (int64_t first = 0; first < batch; first += GK_MAX_GRID_Z) {
    int64_t left = batch - first;
    unsigned count = (unsigned)(left < GK_MAX_GRID_Z ? left : GK_MAX_GRID_Z);
    cudaError_t err = launch_chunk(first, count);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

/* ---- host side: the launch of the mma.sync kernels (04, 05, 06) ---------------------------- */

/* The fields every kernel's argument struct has (a, b, c of T; m, n, k; lda, ldb; batch
 * strides; alpha, beta of S; beta_zero), filled from p; the caller sets the rest. */
template <class Args, typename T, typename S>
static inline Args gk__common_args(const gk_problem *p) {
  Args args;
  args.a = static_cast<const T *>(p->a);
  args.b = static_cast<const T *>(p->b);
  args.c = static_cast<T *>(p->c);
  args.m = (int)p->m, args.n = (int)p->n, args.k = (int)p->k;
  args.lda = gk__lda(p), args.ldb = gk__ldb(p);
  args.stride_a = p->m * p->k, args.stride_b = p->k * p->n, args.stride_c = p->m * p->n;
  args.alpha = (S)p->alpha, args.beta = (S)p->beta;
  args.beta_zero = p->beta == 0.0;
  return args;
}

/* args moved to batch entry `first` (the start of a launch chunk). */
template <class Args>
static inline Args gk__args_at(const Args &args, int64_t first) {
  Args chunk = args;
  chunk.a += first * args.stride_a;
  chunk.b += first * args.stride_b;
  chunk.c += first * args.stride_c;
  return chunk;
}

/* The mma.sync kernels' arguments: the common ones and c_pair (n even and c aligned to two
 * elements, so that the epilogue, gk__store_pair, may store two outputs at once). */
template <class Args, typename T, typename S>
static inline Args gk__mma_args(const gk_problem *p) {
  Args args = gk__common_args<Args, T, S>(p);
  args.c_pair = gk__aligned(p->c, 2 * sizeof(T)) && p->n % 2 == 0;
  return args;
}

/* Launches kernel(args) with one block of NT threads and smem dynamic shared bytes per BM x BN
 * tile of C (grid.x, grouped order: gk__raster) and per problem of each batch chunk (grid.z),
 * after raising the kernel's shared-memory limit to smem. Returns the first CUDA error;
 * cudaErrorInvalidConfiguration when the tiles do not fit grid.x. Call order: after the kernel's
 * checks of p (gk__fits_int32 at least). */
template <int BM, int BN, int NT, class Args, typename Kernel>
static inline cudaError_t gk__launch_tiles(Kernel kernel, size_t smem, const Args &args,
                                           const gk_problem *p, cudaStream_t stream) {
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (err != cudaSuccess) return err;
  const int64_t tiles = ((p->m + BM - 1) / BM) * ((p->n + BN - 1) / BN);
  if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
    kernel<<<dim3((unsigned)tiles, 1, count), NT, smem, stream>>>(gk__args_at(args, first));
    return cudaGetLastError();
  });
}

/* Picks Launcher::run<TA, TB, VEC> for p's transposes and VEC = whole rows of 16-byte vectors of
 * VEC_ELEMS elements (gk__rows_vectorizable); cudaErrorInvalidValue when p's sizes do not fit
 * the kernels' 32-bit indices. */
template <class Launcher, int VEC_ELEMS, bool TA, bool TB>
static inline cudaError_t gk__pick_vec(const gk_problem *p, cudaStream_t stream) {
  return gk__rows_vectorizable(p, VEC_ELEMS) ? Launcher::template run<TA, TB, true>(p, stream)
                                             : Launcher::template run<TA, TB, false>(p, stream);
}
template <class Launcher, int VEC_ELEMS>
static inline cudaError_t gk__launch_layouts(const gk_problem *p, cudaStream_t stream) {
  if (!gk__fits_int32(p)) return cudaErrorInvalidValue;
  if (p->trans_a)
    return p->trans_b ? gk__pick_vec<Launcher, VEC_ELEMS, true, true>(p, stream)
                      : gk__pick_vec<Launcher, VEC_ELEMS, true, false>(p, stream);
  return p->trans_b ? gk__pick_vec<Launcher, VEC_ELEMS, false, true>(p, stream)
                    : gk__pick_vec<Launcher, VEC_ELEMS, false, false>(p, stream);
}

/* ---- device side --------------------------------------------------------------------------- */

/* Maps the linear tile id pid to (tile_m, tile_n) in grouped order (see the file comment). */
__device__ __forceinline__ void gk__raster_pid(int pid, int tiles_m, int tiles_n, int *tile_m,
                                               int *tile_n) {
  int per_group = GK_GROUP_M * tiles_n;
  int group = pid / per_group;
  int first_m = group * GK_GROUP_M;
  int group_rows = min(tiles_m - first_m, GK_GROUP_M);
  int in_group = pid - group * per_group;
  *tile_m = first_m + in_group % group_rows;
  *tile_n = in_group / group_rows;
}
/* The same for one block per tile: pid = blockIdx.x. */
__device__ __forceinline__ void gk__raster(int tiles_m, int tiles_n, int *tile_m, int *tile_n) {
  gk__raster_pid((int)blockIdx.x, tiles_m, tiles_n, tile_m, tile_n);
}

/* For persistent grids (15, 16): where tile t of a batch chunk of tiles_m x tiles_n tiles of
 * bm x bn each starts (row m0, column n0 of problem z), in the grouped order within each problem. */
__device__ __forceinline__ void gk__tile_origin(int64_t t, int tiles_m, int tiles_n, int bm, int bn,
                                                int *m0, int *n0, int *z) {
  const int64_t tiles = (int64_t)tiles_m * tiles_n;
  int tile_m, tile_n;
  *z = (int)(t / tiles);
  gk__raster_pid((int)(t % tiles), tiles_m, tiles_n, &tile_m, &tile_n);
  *m0 = tile_m * bm, *n0 = tile_n * bn;
}

__device__ __forceinline__ uint32_t gk__smem_addr(const void *ptr) {
  return (uint32_t)__cvta_generic_to_shared(ptr);
}

/* 16-byte asynchronous copy global -> shared; src_bytes < 16 zero-fills the rest (0: all zeros,
 * nothing read). .cg: bypass L1, the tile is used once from shared memory. */
__device__ __forceinline__ void gk__cp_async16(void *smem, const void *gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(gk__smem_addr(smem)),
               "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void gk__cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void gk__cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Four 8x8 b16 matrices from shared memory; lane l gives the row address of matrix l/8, row l%8. */
__device__ __forceinline__ void gk__ldmatrix_x4(uint32_t r[4], const void *smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(gk__smem_addr(smem)));
}
__device__ __forceinline__ void gk__ldmatrix_x4_trans(uint32_t r[4], const void *smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(gk__smem_addr(smem)));
}

/* ---- the generic tile loader (global -> shared) -------------------------------------------- */

/*
 * Copies a ROWS x COLS tile of a row-major matrix into shared memory with row pitch PITCH
 * (elements), zero-filling everything outside rows_left x cols_left (so edge tiles compute with
 * zeros instead of branching in the inner loop). NT threads share the work, 16 bytes each step.
 *
 * VEC: 16-byte cp.async; requires a 16-byte-aligned row start for every row (checked on the host
 * by gk__rows_vectorizable) and cols_left a multiple of the vector, so a vector is wholly in or
 * out. Otherwise scalar predicated loads and shared stores: slower, but
 * the same kernel and the same pipeline, for any shape and alignment.
 */
template <typename T, int ROWS, int COLS, int PITCH, int NT, bool VEC>
__device__ __forceinline__ void gk__load_tile(T *smem, const T *gtile, int64_t ld, int rows_left,
                                              int cols_left, int tid) {
  constexpr int V = 16 / (int)sizeof(T);
  constexpr int CHUNKS_PER_ROW = COLS / V;
  constexpr int CHUNKS = ROWS * CHUNKS_PER_ROW;
  static_assert(COLS % V == 0, "a tile row must be a whole number of 16-byte vectors");
  static_assert(CHUNKS % NT == 0, "every thread must copy the same number of vectors");
  static_assert((PITCH * sizeof(T)) % 16 == 0, "the shared row pitch must keep 16-byte alignment");
#pragma unroll
  for (int i = 0; i < CHUNKS / NT; ++i) {
    int chunk = tid + i * NT;
    int row = chunk / CHUNKS_PER_ROW;
    int col = (chunk % CHUNKS_PER_ROW) * V;
    T *dst = smem + row * PITCH + col;
    if (VEC) {
      bool in = row < rows_left && col < cols_left;
      const T *src = in ? gtile + row * ld + col : gtile;
      gk__cp_async16(dst, src, in ? 16 : 0);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        bool in = row < rows_left && col + e < cols_left;
        dst[e] = in ? gtile[row * ld + col + e] : T(0.0f);
      }
    }
  }
}

/* One pipeline stage of the mma.sync kernels (04, 05, 06): the A and B k tiles starting at k0,
 * each in its global layout (TA: A stored [k][m]; TB: B stored [n][k]), into sa and sb. L is
 * the kernel's shared layout (BM, BN, BK, A_PITCH, B_PITCH); a and b point at this batch
 * entry's operands. Issues the copies only: the caller commits the cp.async group. */
template <typename T, class L, int NT, bool TA, bool TB, bool VEC>
__device__ __forceinline__ void gk__load_stage(T *sa, T *sb, const T *a, const T *b, int64_t lda,
                                               int64_t ldb, int m0, int n0, int k0, int m_left,
                                               int n_left, int k_left, int tid) {
  constexpr int BM = L::BM, BN = L::BN, BK = L::BK;
  if (TA)
    gk__load_tile<T, BK, BM, L::A_PITCH, NT, VEC>(sa, a + (int64_t)k0 * lda + m0, lda, k_left,
                                                  m_left, tid);
  else
    gk__load_tile<T, BM, BK, L::A_PITCH, NT, VEC>(sa, a + (int64_t)m0 * lda + k0, lda, m_left,
                                                  k_left, tid);
  if (TB)
    gk__load_tile<T, BN, BK, L::B_PITCH, NT, VEC>(sb, b + (int64_t)n0 * ldb + k0, ldb, n_left,
                                                  k_left, tid);
  else
    gk__load_tile<T, BK, BN, L::B_PITCH, NT, VEC>(sb, b + (int64_t)k0 * ldb + n0, ldb, k_left,
                                                  n_left, tid);
}

/* ---- the cp.async pipeline over k tiles (04, 05, 06) ---------------------------------------- */

/* The pipeline's start: k tiles 0 .. STAGES - 2 set on their way, one commit group each (empty
 * past the last tile, so that the wait counts stay in step). Each kernel's loop then waits for
 * one tile and starts the one STAGES - 1 ahead (04 and 05 before multiplying it, 06 after its
 * last step). */
template <int STAGES, class Load>
__device__ __forceinline__ void gk__pipeline_fill(int k_tiles, Load &load_stage) {
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    gk__cp_async_commit();
  }
}

/* ---- the epilogue: two neighbouring outputs after alpha/beta ------------------------------- */

/* Paired loads/stores of C elements, computing in S (float for float/half/bf16, double for
 * double). 04_mma_f16.cuh adds the __half and __nv_bfloat16 overloads (found by argument-
 * dependent lookup when gk__store_pair is instantiated). */
__device__ __forceinline__ float2 gk__load2(const float *p) {
  return *reinterpret_cast<const float2 *>(p);
}
__device__ __forceinline__ double2 gk__load2(const double *p) {
  return *reinterpret_cast<const double2 *>(p);
}
__device__ __forceinline__ void gk__store2(float *p, float v0, float v1) {
  *reinterpret_cast<float2 *>(p) = make_float2(v0, v1);
}
__device__ __forceinline__ void gk__store2(double *p, double v0, double v1) {
  *reinterpret_cast<double2 *>(p) = make_double2(v0, v1);
}
__device__ __forceinline__ float gk__fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double gk__fma(double a, double b, double c) { return fma(a, b, c); }

/*
 * Stores (row, col) and (row, col + 1) of the row-major m x n matrix c as alpha * v + beta * c
 * (c not read when beta_zero), skipping what lies outside m x n. Args: the kernel's argument
 * struct (m, n, alpha, beta of type S, beta_zero, c_pair). c_pair promises n even and c aligned
 * to two elements, so with col even one paired access covers both outputs.
 */
template <typename T, typename S, class Args>
__device__ __forceinline__ void gk__store_pair(const Args &args, T *c, int row, int col, S v0,
                                               S v1) {
  if (row >= args.m || col >= args.n) return;
  T *dst = c + (int64_t)row * args.n + col;
  v0 *= args.alpha, v1 *= args.alpha;
  if (args.c_pair) { /* n even and col even: col + 1 < n too */
    if (!args.beta_zero) {
      auto old = gk__load2(dst);
      v0 = gk__fma(args.beta, (S)old.x, v0), v1 = gk__fma(args.beta, (S)old.y, v1);
    }
    gk__store2(dst, v0, v1);
    return;
  }
  if (!args.beta_zero) v0 = gk__fma(args.beta, (S)dst[0], v0);
  dst[0] = T(v0);
  if (col + 1 < args.n) {
    if (!args.beta_zero) v1 = gk__fma(args.beta, (S)dst[1], v1);
    dst[1] = T(v1);
  }
}

/* A warp's MI x NI accumulators of m16n8 mma.sync (04, 05) into C: accumulator (i, j) holds
 * c0,c1 at (g, 2t..2t+1) and c2,c3 at (g+8, 2t..2t+1) of its 16x8 tile (g = lane / 4,
 * t = lane % 4); the warp's tile starts at C's (row0, col0). */
template <int MI, int NI, typename T, class Args>
__device__ __forceinline__ void gk__store_m16n8(const Args &args, T *c, int row0, int col0, int g,
                                                int t, const float (&acc)[MI][NI][4]) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const int row = row0 + i * 16 + g, col = col0 + j * 8 + 2 * t;
      gk__store_pair(args, c, row, col, acc[i][j][0], acc[i][j][1]);
      gk__store_pair(args, c, row + 8, col, acc[i][j][2], acc[i][j][3]);
    }
}

/*
 * The opening of the three mma.sync kernels (04, 05, 06): the dynamic shared memory as T, the
 * thread's warp and lane, the block's tile of C (grouped order, gk__raster) and its problem in
 * the batch (blockIdx.z), the operands' bases, what is left of m and n past the tile's corner,
 * load_stage(s, kt) (issues the copies of k tile kt into stage s; the caller commits the group)
 * and the warp's corner (wm, wn) in the tile. A macro, so that each kernel compiles exactly as
 * when it was written out in each: it declares smem_raw, smem, tid, warp, lane, tile_m, tile_n,
 * m0, n0, z, a, b, c, m_left, n_left, load_stage, wm and wn, and reads the kernel's args, BM, BN,
 * BK, NT, TA, TB, VEC, WARPS_N, WM and WN. L: the kernel's shared-memory layout (STAGE_ELEMS,
 * A_ELEMS, as gk__load_stage reads it).
 */
#define GK_MMA_TILE_PROLOGUE(T, L)                                                                 \
  extern __shared__ __align__(16) unsigned char smem_raw[];                                        \
  T *smem = reinterpret_cast<T *>(smem_raw);                                                       \
                                                                                                   \
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;                                   \
  int tile_m, tile_n;                                                                              \
  gk__raster((args.m + BM - 1) / BM, (args.n + BN - 1) / BN, &tile_m, &tile_n);                    \
  const int m0 = tile_m * BM, n0 = tile_n * BN;                                                    \
  const int64_t z = blockIdx.z;                                                                    \
  const T *a = args.a + z * args.stride_a;                                                         \
  const T *b = args.b + z * args.stride_b;                                                         \
  T *c = args.c + z * args.stride_c;                                                               \
  const int m_left = args.m - m0, n_left = args.n - n0;                                            \
                                                                                                   \
  auto load_stage = [&](int s, int kt) {                                                           \
    const int k0 = kt * BK;                                                                        \
    T *sa = smem + s * L::STAGE_ELEMS;                                                             \
    gk__load_stage<T, L, NT, TA, TB, VEC>(sa, sa + L::A_ELEMS, a, b, args.lda, args.ldb, m0, n0,   \
                                          k0, m_left, n_left, args.k - k0, tid);                   \
  };                                                                                               \
                                                                                                   \
  const int wm = (warp / WARPS_N) * WM, wn = (warp % WARPS_N) * WN

#endif /* GK_TILE_COMMON_CUH */
