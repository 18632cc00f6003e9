/*
 * 17_wgmma_i8_persist.cu - "wgmma_i8_persist": the integer gemm (i8 x i8, i32 accumulate, i32 C)
 * on Hopper's wgmma s8 (twice the f16 rate: 32 k values a step in the same 32 bytes), in 15's
 * persistent form: a producer warpgroup fills a TMA ring, two consumer warpgroups multiply 64
 * rows each, and C leaves through TMA stores from staging buffers of its own while the next
 * tile's operands load.
 *
 * Tiling: 15's bytes exactly. A k tile is 128 int8 values, one 128-byte swizzle row, so the
 * 128 x 256 tile (3 stages of 48 KB) and the 128 x 128 tile (5 stages of 32 KB, where the wide
 * one would fill at most half of the SMs) hold the same boxes as f16's, and one k tile is four
 * wgmma m64nBNk32 on descriptors that step 32 bytes. i32 C is f32's size, so each consumer
 * stages its 64 x BN tile in two halves, as 16 does (boxes of 32 columns, 64 rows deep).
 *
 * The integer wgmma reads both operands K-major only (the transpose bits exist for 16-bit
 * types alone): A as m x k rows, B as n x k rows, the layout with trans_b ("NT", cuBLAS's TN).
 * The other three layouts first copy the operand that is not K-major to a K-major one in
 * stream-ordered memory (the context's pool, gk_gpu_ctx_pool; returned with cudaFreeAsync
 * after the gemm), one pass over it at memory speed (bench/RESULTS.md, "i8nn"). Where that
 * memory cannot be had, the problem runs on 18 (mma_i8_small), which reads every layout.
 *
 * Epilogue (gk_kernel.epilogue): alpha * acc + beta * C0 in 32-bit arithmetic that wraps (as
 * CUBLAS_COMPUTE_32I), C0 being C or the bias row, then ReLU, in the store.
 *
 * Measured: see bench/RESULTS.md, "The integer gemm".
 *
 * Contract: i8, compute capability 9.0 exactly, k a multiple of 16 (TMA's 16-byte rows), A and
 * B 16-byte aligned, C 16-byte aligned with n a multiple of 4; any m, n, alpha/beta integers,
 * any batch. The rest runs on 18 (mma_i8_small).
 */
#include "gk_epilogue_dev.cuh"    /* gk__i32_axpby */
#include "gk_fast_wgmma_tf32.cuh" /* gk__tf32_map: a tensor map of any element type */
#include "gk_gpu.h"

extern "C" const gk_kernel gk_kernel_mma_i8_small; /* 18: the fallback that reads every layout */

/* At namespace scope, as 16's: in the compute_80 pass the kernel bodies are empty, and members
 * of an internal class that nothing reads would be warnings (errors here).
 * 15's byte geometry (gk__wgmma_cfg: BM 128, boxes of 64 rows x 128 bytes) with K_TILE int8
 * values a k tile, then one staging buffer of half a consumer's i32 tile per consumer. */
template <int BN_, int STAGES_>
struct gk__i8_cfg : gk__wgmma_cfg<BN_, STAGES_> {
  using base = gk__wgmma_cfg<BN_, STAGES_>;
  using base::BN, base::STAGES, base::STAGE_BYTES, base::CONSUMERS;
  static constexpr int K_TILE = 128;                         /* int8 values: 128 bytes */
  static constexpr int PARTS = 2, PART_COLS = BN / PARTS;    /* staged one after another */
  static constexpr int BOX_COLS = 32;                        /* i32 columns of a C box */
  static constexpr int PART_BYTES = 64 * PART_COLS * 4;
  static constexpr int STAGING_OFFSET = STAGES * STAGE_BYTES + 1024; /* from the ring's start */
  static constexpr size_t SMEM_TOTAL = 1024 + STAGING_OFFSET + (size_t)CONSUMERS * PART_BYTES;
  static_assert(K_TILE == base::BK * 2, "a k tile spans the f16 tile's 128 bytes");
  static_assert(16 * STAGES <= 1024, "the ring's barriers fit before the staging buffers");
  static_assert(SMEM_TOTAL <= 227 * 1024, "Hopper gives a block at most 227 KB of shared memory");
};

namespace {

using cfg_wide = gk__i8_cfg<256, 3>;
using cfg_narrow = gk__i8_cfg<128, 5>;

/* What the kernel needs besides the tensor maps. */
struct i8_args {
  int32_t *c;
  const int32_t *bias; /* beta multiplies this row (n values, bias_stride apart) instead of C */
  int64_t bias_stride, stride_c;
  int m, n, k;
  int32_t alpha, beta;
  bool beta_zero;
  gk_act act; /* ReLU or none */
};

#if GK_WGMMA_DEVICE
/* wgmma m64nNk32 s32 += s8 x s8, both operands K-major from shared-memory descriptors (the
 * integer form takes no scale or transpose immediates). Accumulator layout as f32's. */
__device__ __forceinline__ void wgmma_m64n128k32_s8(int32_t (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, scale_d;\n"
      "}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
        "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
        "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
        "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ void wgmma_m64n256k32_s8(int32_t (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, scale_d;\n"
      "}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
        "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
        "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
        "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]),
        "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]),
        "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]),
        "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]),
        "+r"(d[88]), "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]),
        "+r"(d[96]), "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]),
        "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]),
        "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]),
        "+r"(d[120]), "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}

template <int N> struct s8_wgmma;
template <> struct s8_wgmma<128> {
  static __device__ __forceinline__ void run(int32_t (&d)[64], uint64_t a, uint64_t b) {
    wgmma_m64n128k32_s8(d, a, b);
  }
};
template <> struct s8_wgmma<256> {
  static __device__ __forceinline__ void run(int32_t (&d)[128], uint64_t a, uint64_t b) {
    wgmma_m64n256k32_s8(d, a, b);
  }
};

/* Consumer side, ring slot `it`: waits for its bytes, issues this warpgroup's four wgmmas on its
 * 64 rows (box `consumer` of A) and keeps them in flight; once the group before is done,
 * releases slot it - 1 when release_prev. Both operands K-major: a k32 step is 32 bytes. */
template <class C>
__device__ __forceinline__ void consume(const gk__ring &ring, int it, bool release_prev, int consumer,
                                        int32_t (&acc)[C::ACC]) {
  const int s = it % C::STAGES;
  gk__mbar_wait(ring.full0 + 8 * s, (it / C::STAGES) & 1);
  const uint32_t sa = ring.smem0 + s * C::STAGE_BYTES + consumer * C::CHUNK_BYTES;
  const uint32_t sb = ring.smem0 + s * C::STAGE_BYTES + C::A_BYTES;
  gk__wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::K_TILE / 32; ++kk)
    s8_wgmma<C::BN>::run(acc, gk__wgmma_desc(sa + kk * 32, 16, 1024), gk__wgmma_desc(sb + kk * 32, 16, 1024));
  gk__wgmma_commit();
  gk__wgmma_wait<1>();
  if (release_prev && threadIdx.x % 128 == 0)
    gk__mbar_arrive(ring.empty0 + 8 * ((it + C::STAGES - 1) % C::STAGES));
}

/* act(alpha * v + beta * C0[row][col]) through gk__i32_axpby;
 * C0 read where inside C: C, or the bias row (already at the problem's row). */
template <bool EPI>
__device__ __forceinline__ int32_t scaled(const i8_args &args, const int32_t *c, const int32_t *bias,
                                          int row, int col, int32_t v) {
  const int32_t c0 = args.beta_zero || row >= args.m || col >= args.n ? 0
                     : EPI && bias != NULL                          ? bias[col]
                                                                    : c[(int64_t)row * args.n + col];
  const int32_t out = gk__i32_axpby(args.alpha, v, args.beta, c0);
  return EPI && args.act == GK_ACT_RELU && out < 0 ? 0 : out;
}

/* One consumer's epilogue for the tile at (m0, n0) of problem z, half by half (16's scheme):
 * wait until the engine has read the buffer, fill it, make it visible to the async proxy, store
 * its boxes. Accumulator layout: thread (warp4, g, t) holds rows warp4 * 16 + g and + 8,
 * columns 8j + 2t and + 1. */
template <class C, bool EPI>
__device__ __forceinline__ void store_tile(const CUtensorMap *map_c, const i8_args &args,
                                           const int32_t (&acc)[C::ACC], uint32_t buffer,
                                           unsigned char *buffer_ptr, int consumer, int m0, int n0,
                                           int z) {
  const int wg_thread = threadIdx.x % 128, warp4 = wg_thread / 32, lane = wg_thread % 32;
  const int g = lane / 4, t = lane % 4;
  const int32_t *c = args.c + (int64_t)z * args.stride_c;
  const int32_t *bias = args.bias != NULL ? args.bias + (int64_t)z * args.bias_stride : NULL;
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
        const int2 v = make_int2(scaled<EPI>(args, c, bias, row0 + r, col0 + col, acc[4 * j + 2 * e]),
                                 scaled<EPI>(args, c, bias, row0 + r, col0 + col + 1, acc[4 * j + 2 * e + 1]));
        *reinterpret_cast<int2 *>(buffer_ptr + gk__swizzled<int32_t>(r, col, 64)) = v;
      }
    }
    gk__fence_proxy_async();
    gk__named_sync(2 + consumer, 128);
    if (wg_thread != 0) continue;
    for (int b = 0; b < C::PART_COLS / C::BOX_COLS; ++b)
      if (row0 < args.m && col0 + b * C::BOX_COLS < args.n)
        gk__tma_store_3d(map_c, buffer + b * 64 * 128, col0 + b * C::BOX_COLS, row0, z);
    gk__bulk_commit();
  }
}
#endif /* GK_WGMMA_DEVICE */

/* The kernel: grid.x CTAs walk the batch chunk's `problems` x tiles; warpgroup 0 (one thread)
 * loads, warpgroups 1 and 2 multiply and store (15's loop). */
template <class C>
__global__ void __launch_bounds__(C::THREADS, 1)
    persist_i8(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
               const __grid_constant__ CUtensorMap map_c, i8_args args, int problems) {
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
    int32_t acc[C::ACC];
#pragma unroll
    for (int i = 0; i < C::ACC; ++i) acc[i] = 0;
    for (int kt = 0; kt < k_tiles; ++kt, ++it) consume<C>(ring, it, kt > 0, consumer, acc);
    gk__wgmma_wait<0>();
    if (threadIdx.x % 128 == 0) /* the tile's last slot: free for the producer */
      gk__mbar_arrive(ring.empty0 + 8 * ((it + C::STAGES - 1) % C::STAGES));
    if (args.bias == NULL && args.act == GK_ACT_NONE) /* the plain store has no epilogue code */
      store_tile<C, false>(&map_c, args, acc, buffer, buffer_ptr, consumer, m0, n0, z);
    else
      store_tile<C, true>(&map_c, args, acc, buffer, buffer_ptr, consumer, m0, n0, z);
  }
  if (threadIdx.x % 128 == 0) gk__bulk_wait_all(); /* C is written before the grid ends */
#else
  (void)map_a, (void)map_b, (void)map_c, (void)args, (void)problems;
#endif
}

/* dst[z][c][r] = src[z][r][c] for `batch` rows x cols int8 matrices: an operand made K-major.
 * 64 x 64 tiles through shared memory; with VEC (cols and rows multiples of 4, 4-byte aligned
 * bases) every global access is a 4-byte word, so that a warp reads and writes 128 bytes of
 * rows at once (byte by byte the pass ran at a fraction of memory speed: 8192^3 with B k x n
 * took 240 us more than with B n x k on an H100). */
template <bool VEC>
__global__ void __launch_bounds__(256) transpose_i8(const int8_t *__restrict__ src,
                                                    int8_t *__restrict__ dst, int64_t rows,
                                                    int64_t cols) {
  __shared__ int8_t tile[64][68]; /* rows 4-byte aligned; the pad spreads a column's banks */
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
      const uint32_t word = (uint32_t)(uint8_t)tile[4 * tx][i] | (uint32_t)(uint8_t)tile[4 * tx + 1][i] << 8 |
                            (uint32_t)(uint8_t)tile[4 * tx + 2][i] << 16 | (uint32_t)(uint8_t)tile[4 * tx + 3][i] << 24;
      *reinterpret_cast<uint32_t *>(dst + c * rows + r) = word;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (r + e < rows) dst[c * rows + r + e] = tile[4 * tx + e][i];
    }
  }
}

cudaError_t transpose_launch(const void *src, void *dst, int64_t rows, int64_t cols, int64_t batch,
                             cudaStream_t stream) {
  const int64_t bx = (cols + 63) / 64, by = (rows + 63) / 64;
  if (bx > INT32_MAX || by > 65535) return cudaErrorInvalidValue;
  const bool vec = rows % 4 == 0 && cols % 4 == 0 && gk__aligned(src, 4) && gk__aligned(dst, 4);
  return gk__for_batch_chunks(batch, [&](int64_t first, unsigned count) {
    const int64_t offset = first * rows * cols;
    const dim3 grid((unsigned)bx, (unsigned)by, count);
    const int8_t *from = static_cast<const int8_t *>(src) + offset;
    int8_t *to = static_cast<int8_t *>(dst) + offset;
    if (vec) transpose_i8<true><<<grid, 256, 0, stream>>>(from, to, rows, cols);
    else transpose_i8<false><<<grid, 256, 0, stream>>>(from, to, rows, cols);
    return cudaGetLastError();
  });
}

/* A and B as TMA reads them K-major (rows of k bytes, 16-byte aligned), C as TMA stores it. */
bool fits(const gk_problem *p) {
  return gk__fits_int32(p) && p->k % 16 == 0 && gk__aligned(p->a, 16) && gk__aligned(p->b, 16) &&
         gk__aligned(p->c, 16) && p->n % 4 == 0 && p->m * p->k < ((int64_t)1 << 40) &&
         p->n * p->k < ((int64_t)1 << 40) && p->m * p->n * 4 < ((int64_t)1 << 40);
}

template <class C>
cudaError_t run(const gk_problem *p, const void *a, const void *b, int sms, cudaStream_t stream) {
  auto kernel = persist_i8<C>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)C::SMEM_TOTAL);
  if (err != cudaSuccess) return err;
  const int64_t tiles = ((p->m + C::BM - 1) / C::BM) * ((p->n + C::BN - 1) / C::BN);
  if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  i8_args args;
  args.m = (int)p->m, args.n = (int)p->n, args.k = (int)p->k;
  args.stride_c = p->m * p->n, args.bias_stride = p->bias_stride;
  args.alpha = (int32_t)p->alpha, args.beta = (int32_t)p->beta, args.beta_zero = p->beta == 0.0;
  args.act = p->act;
  return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
    i8_args chunk = args;
    chunk.c = static_cast<int32_t *>(p->c) + first * args.stride_c;
    chunk.bias = p->bias != NULL ? static_cast<const int32_t *>(p->bias) + first * p->bias_stride : NULL;
    const int8_t *ca = static_cast<const int8_t *>(a) + first * p->m * p->k;
    const int8_t *cb = static_cast<const int8_t *>(b) + first * p->n * p->k;
    CUtensorMap map_a, map_b, map_c;
    cudaError_t map_err = gk__tf32_map(&map_a, ca, p->k, p->m, count, C::CHUNK, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1);
    if (map_err == cudaSuccess)
      map_err = gk__tf32_map(&map_b, cb, p->k, p->n, count, C::CHUNK, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1);
    if (map_err == cudaSuccess)
      map_err = gk__tf32_map(&map_c, chunk.c, p->n, p->m, count, 64, CU_TENSOR_MAP_DATA_TYPE_INT32, 4);
    if (map_err != cudaSuccess) return map_err;
    const int64_t work = tiles * count;
    const unsigned grid = (unsigned)(work < sms ? work : sms);
    kernel<<<grid, C::THREADS, C::SMEM_TOTAL, stream>>>(map_a, map_b, map_c, chunk, (int)count);
    return cudaGetLastError();
  });
}

/* The K-major operands a and b (p's own, or copies) through the tile that suits the grid. */
cudaError_t run_k_major(gk_gpu_ctx *ctx, const gk_problem *p, const void *a, const void *b,
                        cudaStream_t stream) {
  const int sms = gk__sm_count(ctx);
  const int64_t wide_tiles = ((p->m + cfg_wide::BM - 1) / cfg_wide::BM) *
                             ((p->n + cfg_wide::BN - 1) / cfg_wide::BN) * p->batch;
  const bool narrow = wide_tiles * 2 <= sms || p->n <= cfg_narrow::BN; /* or half of it idle */
  return narrow ? run<cfg_narrow>(p, a, b, sms, stream) : run<cfg_wide>(p, a, b, sms, stream);
}

bool wgmma_i8_persist_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_I8 && !p->cast && cc == 90 && fits(p) &&
         (p->act == GK_ACT_NONE || p->act == GK_ACT_RELU);
}

/* K-major copies of the operands that are not (A stored k x m, B stored k x n) in one
 * stream-ordered allocation, the gemm on them, and the allocation's return; 18 where the
 * allocation fails. */
cudaError_t wgmma_i8_persist_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!wgmma_i8_persist_supports(p, 90)) return cudaErrorInvalidValue;
  if (!p->trans_a && p->trans_b) return run_k_major(ctx, p, p->a, p->b, stream);
  const size_t a_bytes = p->trans_a ? (size_t)(p->batch * p->m * p->k) : 0;
  const size_t b_bytes = !p->trans_b ? (size_t)(p->batch * p->n * p->k) : 0;
  const size_t a_round = (a_bytes + 255) & ~(size_t)255;
  void *copies = NULL;
  cudaMemPool_t pool = ctx != NULL ? gk_gpu_ctx_pool(ctx) : NULL;
  if (pool == NULL || cudaMallocFromPoolAsync(&copies, a_round + b_bytes, pool, stream) != cudaSuccess) {
    (void)cudaGetLastError(); /* not sticky: clear it, and read every layout as it is */
    return gk_kernel_mma_i8_small.launch(ctx, p, stream);
  }
  int8_t *a_t = static_cast<int8_t *>(copies), *b_t = a_t + a_round;
  cudaError_t err = cudaSuccess;
  if (p->trans_a) err = transpose_launch(p->a, a_t, p->k, p->m, p->batch, stream);
  if (err == cudaSuccess && !p->trans_b) err = transpose_launch(p->b, b_t, p->k, p->n, p->batch, stream);
  if (err == cudaSuccess)
    err = run_k_major(ctx, p, p->trans_a ? a_t : p->a, p->trans_b ? p->b : b_t, stream);
  const cudaError_t freed = cudaFreeAsync(copies, stream);
  return err != cudaSuccess ? err : freed;
}

} // namespace

extern "C" const gk_kernel gk_kernel_wgmma_i8_persist = {
    "wgmma_i8_persist",
    "i8 (i32 C), Hopper wgmma s8 + TMA, persistent: 128x256x128 tile, C stored by TMA in halves; "
    "operands made K-major by a pass where they are not (17)",
    wgmma_i8_persist_supports,
    wgmma_i8_persist_launch,
    GK_EPILOGUE_FUSED,
};
