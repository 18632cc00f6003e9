/*
 * 01_tiled.cu - "tiled16": the classic shared-memory tiled kernel.
 *
 * The idea. A naive kernel has each thread read a
 * whole row of A and a whole column of B from global memory to make one
 * output: every element of A is read n times and every element of B m times,
 * about 0.25 FLOP per byte, so the kernel waits on memory. Tiling shares the
 * reads: a block of TILE x TILE threads owns a TILE x TILE tile of C (one
 * output per thread). It walks along k one TILE-wide step at a time; in each
 * step every thread copies ONE element of A's tile and ONE of B's tile into
 * shared memory, the block waits at a barrier, then every thread does TILE
 * multiply-adds out of shared memory, and the block waits again before the
 * tiles are overwritten. Each global element is now read n/TILE (or m/TILE)
 * times instead of n (m) times: TILE times less traffic.
 *
 * What this version adds to the textbook kernel, so that it serves every request:
 *   - any m, n, k: loads outside the matrix write 0 into the tile (0 adds
 *     nothing to a dot product), and only threads inside C store;
 *   - transposes: the loads index the stored layout, and a transposed operand
 *     is read along its stored rows (coalesced) and written into the tile
 *     transposed; the tile rows are padded so that the transposed write does
 *     not hit one shared-memory bank TILE times;
 *   - alpha and beta (beta == 0: C is never read, so NaN there stays out);
 *   - batch: grid.z walks the batch, in chunks of 65535 (grid.z's limit), and
 *     grid.y walks row tiles in chunks of 65535 likewise;
 *   - f32, f64, f16, bf16: f16 and bf16 are converted to f32 as they are
 *     loaded and accumulate in f32; f64 accumulates in f64; i8 accumulates in
 *     i32 into an i32 C, alpha and beta in 32-bit arithmetic that wraps; e4m3 and e5m2
 *     accumulate in f32 into an f32 C.
 *
 * Measured on an H200, 4096^3 (bench/RESULTS.md, "Baseline: tiled16"):
 * f32 7.72 TFLOP/s, 15% of cuBLAS SGEMM's 51.0;
 * f64 4.62; f16 and bf16 7.83. The first version, which worked out its 64-bit
 * indices inside the k loop and read tile_a one word at a time, ran 6.20.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "gk_epilogue_dev.cuh" /* gk__i32_axpby */
#include "gk_gpu.h"

namespace {

constexpr int kTile = 16;
constexpr unsigned kGridLimitYZ = 65535; /* gridDim.y and gridDim.z maxima */

/* Accumulator type per storage type: f64 keeps f64, i8 accumulates in i32, everything else
 * f32. C is of type CType: T, but i32 for i8. */
template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };
template <> struct Acc<int8_t> { using type = int32_t; };
template <typename T> struct CType { using type = T; };
template <> struct CType<int8_t> { using type = int32_t; };
template <> struct CType<__nv_fp8_e4m3> { using type = float; }; /* fp8: f32 C */
template <> struct CType<__nv_fp8_e5m2> { using type = float; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type to_acc(T v) { return v; }
template <> __device__ __forceinline__ float to_acc<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_acc<__nv_bfloat16>(__nv_bfloat16 v)
{
  return __bfloat162float(v);
}

template <> __device__ __forceinline__ int32_t to_acc<int8_t>(int8_t v) { return v; }
template <> __device__ __forceinline__ float to_acc<__nv_fp8_e4m3>(__nv_fp8_e4m3 v) { return float(v); }
template <> __device__ __forceinline__ float to_acc<__nv_fp8_e5m2>(__nv_fp8_e5m2 v) { return float(v); }
/* An element of C into the accumulator type. */
template <typename T> __device__ __forceinline__ typename Acc<T>::type c_to_acc(typename CType<T>::type v)
{
  return to_acc<typename CType<T>::type>(v);
}
template <> __device__ __forceinline__ int32_t c_to_acc<int8_t>(int32_t v) { return v; }

template <typename T> __device__ __forceinline__ typename CType<T>::type from_acc(typename Acc<T>::type v)
{
  return v;
}

/* alpha * sum + beta * c0 (c0 read only when beta != 0: NaN in C stays out); in i32, unsigned
 * arithmetic (gk__i32_axpby), which wraps as the hardware does and is defined in C++. */
template <typename AccT>
__device__ __forceinline__ AccT axpby(AccT alpha, AccT sum, AccT beta, const AccT *c0)
{
  return beta != AccT(0) ? alpha * sum + beta * *c0 : alpha * sum;
}
template <>
__device__ __forceinline__ int32_t axpby<int32_t>(int32_t alpha, int32_t sum, int32_t beta,
                                                  const int32_t *c0)
{
  return gk__i32_axpby(alpha, sum, beta, beta != 0 ? *c0 : 0);
}
template <> __device__ __forceinline__ __half from_acc<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v)
{
  return __float2bfloat16_rn(v);
}

struct TiledArgs {
  int64_t m, n, k;
  bool trans_a, trans_b;
  int64_t row_tile0; /* first row tile of this launch (grid.y chunking) */
  int64_t batch0;    /* first batch index of this launch (grid.z chunking) */
};

template <typename T, int TILE>
__global__ void __launch_bounds__(TILE *TILE)
    tiled_gemm(TiledArgs args, typename Acc<T>::type alpha, typename Acc<T>::type beta,
               const T *__restrict__ a, const T *__restrict__ b,
               typename CType<T>::type *__restrict__ c)
{
  using AccT = typename Acc<T>::type;
  static_assert(TILE >= 1, "TILE is the side of the square tile and of the thread block");
  static_assert(TILE * TILE <= 1024,
                "one thread per output of a TILE x TILE tile: CUDA caps a block at 1024 threads");
  static_assert((TILE * TILE) % 32 == 0,
                "the block should be whole warps (TILE*TILE a multiple of 32), else lanes idle");
  static_assert(TILE % 4 == 0,
                "tile_a's rows are read 16 bytes at a time: TILE must be a multiple of 4");
  static_assert(TILE * ((TILE + 4) + (TILE + 1)) * sizeof(AccT) <= 48 * 1024,
                "the two padded tiles must fit the 48 KiB of static shared memory");

  /* Padding: a transposed operand is written into its tile down a column, and with rows of
   * exactly TILE words a warp's stores would pile onto two banks. tile_b's rows get one extra
   * word (conflict-free). tile_a's get four, which keeps each row 16-byte aligned so the inner
   * loop reads tile_a[ty][l..l+3] as one vector load, at the price of 2-way conflicts on the
   * transposed stores, once per k step. */
  __shared__ __align__(16) AccT tile_a[TILE][TILE + 4];
  __shared__ AccT tile_b[TILE][TILE + 1];

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t m = args.m, n = args.n, k = args.k;
  const int64_t row0 = (args.row_tile0 + blockIdx.y) * TILE; /* this block's first C row */
  const int64_t col0 = (int64_t)blockIdx.x * TILE;           /* and first C column */
  const int64_t z = args.batch0 + blockIdx.z;
  a += z * m * k;
  b += z * k * n;
  c += z * m * n;

  /* Each thread copies one element of each tile per k step. Where it reads, where it writes
   * in the tile, and which bounds it checks depend only on the transpose flags, so they are
   * worked out once here and the loop just steps an offset (one 64-bit add) per tile:
   *   A stored m x k: row row0+ty, column k0+tx   -> tile_a[ty][tx], step TILE
   *   A stored k x m: row k0+ty, column row0+tx   -> tile_a[tx][ty], step TILE*m
   *   B stored k x n: row k0+ty, column col0+tx   -> tile_b[ty][tx], step TILE*n
   *   B stored n x k: row col0+ty, column k0+tx   -> tile_b[tx][ty], step TILE
   * so tile_a[i][l] = op(A)[row0+i][k0+l] and tile_b[l][j] = op(B)[k0+l][col0+j], and a warp
   * always reads along a stored row (coalesced). */
  const bool ta = args.trans_a, tb = args.trans_b;
  const bool a_inside = ta ? row0 + tx < m : row0 + ty < m; /* this thread's row of op(A) */
  const int a_kl = ta ? ty : tx;                             /* its k offset within the tile */
  int64_t a_off = ta ? (int64_t)ty * m + row0 + tx : (row0 + ty) * k + tx;
  const int64_t a_step = ta ? (int64_t)TILE * m : TILE;
  AccT *const a_dst = ta ? &tile_a[tx][ty] : &tile_a[ty][tx];
  const bool b_inside = tb ? col0 + ty < n : col0 + tx < n; /* this thread's column of op(B) */
  const int b_kl = tb ? tx : ty;
  int64_t b_off = tb ? (col0 + ty) * k + tx : (int64_t)ty * n + col0 + tx;
  const int64_t b_step = tb ? TILE : (int64_t)TILE * n;
  AccT *const b_dst = tb ? &tile_b[tx][ty] : &tile_b[ty][tx];

  AccT sum = 0;
  for (int64_t k0 = 0; k0 < k; k0 += TILE) {
    /* Outside the matrix: 0, which adds nothing to the dot products. */
    *a_dst = (a_inside && k0 + a_kl < k) ? to_acc(a[a_off]) : AccT(0);
    *b_dst = (b_inside && k0 + b_kl < k) ? to_acc(b[b_off]) : AccT(0);
    a_off += a_step;
    b_off += b_step;
    __syncthreads(); /* both tiles complete before anyone reads them */

#pragma unroll
    for (int l = 0; l < TILE; l++)
      sum += tile_a[ty][l] * tile_b[l][tx];
    __syncthreads(); /* everyone done reading before the next step overwrites the tiles */
  }

  const int64_t i = row0 + ty, j = col0 + tx;
  if (i < m && j < n) {
    AccT c0 = 0;
    if (beta != AccT(0)) /* beta == 0: C is not read, as in BLAS */
      c0 = c_to_acc<T>(c[i * n + j]);
    c[i * n + j] = from_acc<T>(axpby<AccT>(alpha, sum, beta, &c0));
  }
}

/* Enqueues the whole problem: grid.x covers column tiles; grid.y row tiles and grid.z the batch,
 * each in chunks no larger than their 65535 limit. */
template <typename T>
cudaError_t launch_typed(const gk_problem *p, cudaStream_t stream)
{
  using AccT = typename Acc<T>::type;
  const int64_t col_tiles = (p->n + kTile - 1) / kTile;
  const int64_t row_tiles = (p->m + kTile - 1) / kTile;
  if (col_tiles > INT32_MAX) /* gridDim.x limit, 2^31 - 1 */
    return cudaErrorInvalidValue;
  const dim3 block(kTile, kTile);
  const T *a = static_cast<const T *>(p->a);
  const T *b = static_cast<const T *>(p->b);
  typename CType<T>::type *c = static_cast<typename CType<T>::type *>(p->c);

  for (int64_t z0 = 0; z0 < p->batch; z0 += kGridLimitYZ) {
    const int64_t zn = p->batch - z0 < kGridLimitYZ ? p->batch - z0 : kGridLimitYZ;
    for (int64_t y0 = 0; y0 < row_tiles; y0 += kGridLimitYZ) {
      const int64_t yn = row_tiles - y0 < kGridLimitYZ ? row_tiles - y0 : kGridLimitYZ;
      const TiledArgs args = {p->m, p->n, p->k, p->trans_a, p->trans_b, y0, z0};
      const dim3 grid((unsigned)col_tiles, (unsigned)yn, (unsigned)zn);
      tiled_gemm<T, kTile><<<grid, block, 0, stream>>>(args, (AccT)p->alpha, (AccT)p->beta, a, b, c);
      const cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess)
        return err;
    }
  }
  return cudaSuccess;
}

bool tiled_supports(const gk_problem *p, int cc)
{
  (void)cc; /* plain CUDA C: runs on every device the build targets */
  /* Every shape, transpose, batch and dtype: the selector's last resort. Pointers are not
   * looked at (a caller may select before it allocates); the launch checks them. */
  return p->dtype == GK_F32 || p->dtype == GK_F64 || p->dtype == GK_F16 || p->dtype == GK_BF16 ||
         p->dtype == GK_I8 || gk_dtype_is_fp8(p->dtype);
}

cudaError_t tiled_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream)
{
  (void)ctx;
  const cudaError_t err = gk_problem_check(p);
  if (err != cudaSuccess)
    return err;
  switch (p->dtype) {
  case GK_F32: return launch_typed<float>(p, stream);
  case GK_F64: return launch_typed<double>(p, stream);
  case GK_F16: return launch_typed<__half>(p, stream);
  case GK_BF16: return launch_typed<__nv_bfloat16>(p, stream);
  case GK_I8: return launch_typed<int8_t>(p, stream);
  case GK_E4M3: return launch_typed<__nv_fp8_e4m3>(p, stream);
  case GK_E5M2: return launch_typed<__nv_fp8_e5m2>(p, stream);
  case GK_I32: break; /* a result dtype only: gk_problem_check refuses it */
  case GK_C64:
  case GK_C128: break; /* gk_gpu_gemm runs complex problems on real ones (gk_complex.cu) */
  }
  return cudaErrorInvalidValue;
}

} // namespace

extern "C" const gk_kernel gk_kernel_tiled16 = {
    "tiled16",
    "the classic 16x16 shared-memory tiled kernel: every dtype (i8 and fp8 too), shape, "
    "transpose and batch",
    tiled_supports,
    tiled_launch,
    0,
};
