/*
 * gk_fast_common.cuh - device helpers shared by the fast kernels (kernels/NN_*.cu, NN >= 02).
 *
 * What lives here, and why it is shared:
 *   - the problem geometry every kernel needs (leading dimensions, batch strides, alignment tests),
 *   - tile rasterisation: blocks are numbered in groups of GK_GROUP_M tile-rows so that blocks that
 *     run at the same time share A and B tiles in L2 (the "grouped ordering" of Triton's matmul
 *     tutorial),
 *   - the batch loop: grid.z is capped at 65535, so a batch is launched in chunks,
 *   - thin wrappers around the sm_80 PTX the tensor-core kernels use (cp.async with zero-fill,
 *     ldmatrix, mma.sync), so that each kernel file reads as the algorithm.
 *
 * Contract: header-only, device code plus small host helpers; included only by .cu files.
 * Nothing here allocates or synchronises.
 */
#ifndef GK_FAST_COMMON_CUH
#define GK_FAST_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

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

/* ---- device side --------------------------------------------------------------------------- */

/* Maps the linear block id to (tile_m, tile_n) in grouped order (see the file comment). */
__device__ __forceinline__ void gk__raster(int tiles_m, int tiles_n, int *tile_m, int *tile_n) {
  int pid = (int)blockIdx.x;
  int per_group = GK_GROUP_M * tiles_n;
  int group = pid / per_group;
  int first_m = group * GK_GROUP_M;
  int group_rows = min(tiles_m - first_m, GK_GROUP_M);
  int in_group = pid - group * per_group;
  *tile_m = first_m + in_group % group_rows;
  *tile_n = in_group / group_rows;
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

#endif /* GK_FAST_COMMON_CUH */
