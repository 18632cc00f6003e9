/*
 * 08_wgmma_tf32.cuh - the pieces of the Hopper TF32 kernels (08_wgmma_tf32.cu, and its
 * persistent form 16_wgmma_tf32_persist.cu, and 21): the tile configuration, the
 * swizzled fragment loads, one k tile's producer and consumer steps, and the
 * tensor maps; the register-A wgmma itself is gk_wgmma_ptx.cuh's. The design and its reasons
 * are in 08_wgmma_tf32.cu's opening comment.
 *
 * Contract: header-only, included by .cu files only; sm_90a code under GK_WGMMA_DEVICE, as in
 * 07_wgmma_f16.cuh.
 */
#ifndef GK_08_WGMMA_TF32_CUH
#define GK_08_WGMMA_TF32_CUH

#include <type_traits>

#include "07_wgmma_f16.cuh" /* the TMA ring; gk_wgmma_ptx.cuh: mbarrier, TMA, wgmma, setmaxnreg */

/* The tile configuration (see 08's opening comment). At namespace scope: in the compute_80 pass
 * the kernel bodies are empty, and members of an internal class that nothing reads would be
 * warnings (errors here). */
template <int BS_, int STAGES_>
struct gk__wgmma_tf32_cfg {
  static constexpr int BR = 128, BS = BS_, BK = 32, STAGES = STAGES_;
  static constexpr int CONSUMERS = BR / 64;
  static constexpr int THREADS = 128 * (1 + CONSUMERS); /* warpgroup 0 is the producer */
  static constexpr int ACC = BS / 2;                    /* f32 accumulators per consumer thread */
  static constexpr int ROW_BYTES = BK * 4;              /* 128: one swizzle row */
  static constexpr int KBOX_ROWS = 64, KBOX_BYTES = KBOX_ROWS * ROW_BYTES;   /* K-major boxes */
  static constexpr int MNBOX_COLS = 32, MNBOX_BYTES = BK * ROW_BYTES;        /* MN-major boxes */
  static constexpr int X_BYTES = BR * ROW_BYTES, Y_BYTES = BS * ROW_BYTES;
  static constexpr int STAGE_BYTES = X_BYTES + Y_BYTES;
  /* C staging, in the idle ring: direct rows (pitch +32 B, as 07) or transposed (64 + 4 words) */
  static constexpr int C_PITCH = BS * 4 + 32, CT_PITCH = 64 * 4 + 16;
  static constexpr int C_BYTES = CONSUMERS * 64 * C_PITCH, CT_BYTES = CONSUMERS * BS * CT_PITCH;
  static constexpr size_t SMEM_BYTES = (size_t)STAGES * STAGE_BYTES + 1024 + 16 * STAGES;
  static constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
  static_assert(BS == 64 || BS == 128 || BS == 256,
                "wgmma wrappers exist for m64n64k8 (21's narrow tile), m64n128k8 and m64n256k8");
  static_assert(BS % KBOX_ROWS == 0 && BR % KBOX_ROWS == 0 && 64 % MNBOX_COLS == 0,
                "operand tiles are whole TMA boxes, and a consumer's 64 rows whole boxes");
  static_assert(ROW_BYTES == 128, "BK spans exactly one 128-byte swizzle row");
  static_assert(C_BYTES <= STAGES * STAGE_BYTES && CT_BYTES <= STAGES * STAGE_BYTES,
                "the C staging tile fits in the ring");
  static_assert(SMEM_BYTES <= 227 * 1024, "Hopper gives a block at most 227 KB of shared memory");
  static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536,
                "the register file holds the producer and every consumer warpgroup");
};

/* What the kernel needs besides the tensor maps: D's shape (rows R, columns S) and C's. */
struct gk__wgmma_tf32_args {
  float *c;
  int rows, cols, k; /* R, S, K of D = X * Y^T */
  int m, n;          /* C is m x n, row-major */
  int64_t stride_c;
  float alpha, beta;
  bool beta_zero;
  /* the fused epilogue (16 only; 08 leaves it to gk_gpu_gemm's passes): with bias set, beta
   * multiplies the bias row (n floats, bias_stride apart per problem) instead of C; act (ReLU
   * or none) last */
  const float *bias;
  int64_t bias_stride;
  gk_act act;
};

#if GK_WGMMA_DEVICE
/* Byte offset, within a stage's X tile, of element (row r, k) of X, for the thread's rows and
 * the TMA's 128-byte swizzle (16-byte chunk c of 128-byte line l sits at chunk c ^ (l % 8); every
 * box starts on a 1 KB boundary, so line parity is address parity).
 *   K-major X: 64-row boxes of lines of 32 k;   MN-major X: 32-column boxes of lines of 32 r. */
template <class C, bool X_MN>
__device__ __forceinline__ uint32_t gk__tf32_x_offset(int r, int k) {
  if (X_MN) {
    const int box = r / C::MNBOX_COLS, col = r % C::MNBOX_COLS;
    return box * C::MNBOX_BYTES + k * C::ROW_BYTES + ((((col >> 2) ^ (k & 7))) << 4) + (col & 3) * 4;
  }
  const int box = r / C::KBOX_ROWS, line = r % C::KBOX_ROWS;
  return box * C::KBOX_BYTES + line * C::ROW_BYTES + ((((k >> 2) ^ (line & 7))) << 4) + (k & 3) * 4;
}

/* Byte offset of element (row, col) of type T in a staging buffer of boxes `box_rows` deep and
 * one 128-byte swizzle row (32 floats or int32s, 64 halves) wide, in the 128-byte swizzle
 * (16-byte chunk c of row r at chunk c ^ (r % 8)): where 16 and 17 stage C for TMA stores. */
template <typename T>
__device__ __forceinline__ int gk__swizzled(int row, int col, int box_rows) {
  constexpr int BOX = 128 / sizeof(T), PER_CHUNK = 16 / sizeof(T);
  return (col / BOX) * box_rows * 128 + row * 128 + ((((col % BOX) / PER_CHUNK) ^ (row % 8)) << 4) +
         (col % PER_CHUNK) * (int)sizeof(T);
}

/* One k tile of a consumer: its m64k8 fragments (four k8 steps) from the stage into `frag`, four
 * wgmmas with Y from the stage's descriptor, and the release of the stage no longer read: by
 * default this tile's, once its group is complete (the other consumer warpgroup keeps the tensor
 * cores busy meanwhile); with IN_FLIGHT (a variant, measured slower) the previous tile's, one
 * group left in flight. */
template <class C, bool X_MN, bool IN_FLIGHT>
__device__ __forceinline__ void gk__tf32_consume(float (&acc)[C::ACC], uint32_t (&frag)[C::BK / 8][4],
                                             int kt, const unsigned char *ring, uint32_t smem0,
                                             uint32_t full0, uint32_t empty0, int row_lo, int t,
                                             int wg_thread) {
  const int s = kt % C::STAGES;
  gk__mbar_wait(full0 + 8 * s, (kt / C::STAGES) & 1);
  const unsigned char *tile_x = ring + s * C::STAGE_BYTES;
  const uint32_t sy = smem0 + s * C::STAGE_BYTES + C::X_BYTES;
#pragma unroll
  for (int kk = 0; kk < C::BK / 8; ++kk) {
    const int k = kk * 8 + t;
    frag[kk][0] = *reinterpret_cast<const uint32_t *>(tile_x + gk__tf32_x_offset<C, X_MN>(row_lo, k));
    frag[kk][1] = *reinterpret_cast<const uint32_t *>(tile_x + gk__tf32_x_offset<C, X_MN>(row_lo + 8, k));
    frag[kk][2] = *reinterpret_cast<const uint32_t *>(tile_x + gk__tf32_x_offset<C, X_MN>(row_lo, k + 4));
    frag[kk][3] = *reinterpret_cast<const uint32_t *>(tile_x + gk__tf32_x_offset<C, X_MN>(row_lo + 8, k + 4));
  }
  gk__wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::BK / 8; ++kk)
    gk__tf32_wgmma<C::BS>::run(acc, frag[kk], gk__wgmma_desc(sy + kk * 32, 16, 1024));
  gk__wgmma_commit();
  if (IN_FLIGHT) {
    /* keep this tile's group in flight; the previous one is done, so its stage is free */
    gk__wgmma_wait<1>();
    if (kt > 0 && wg_thread == 0) gk__mbar_arrive(empty0 + 8 * ((kt - 1) % C::STAGES));
  } else {
    gk__wgmma_wait<0>();
    if (wg_thread == 0) gk__mbar_arrive(empty0 + 8 * s);
  }
}

/* Producer side, ring slot `it` (the running count of k tiles this CTA has loaded): the k tile
 * at k0 of the BR x BS tile of D at (r0, s0) of problem z. X_MN: X's stored tile is MN-major. */
template <class C, bool X_MN>
__device__ __forceinline__ void gk__tf32_produce(const gk__ring &ring, int it, const CUtensorMap *map_x,
                                                 const CUtensorMap *map_y, int r0, int s0, int k0,
                                                 int z) {
  const int s = it % C::STAGES;
  const uint32_t bar = gk__ring_produce<C>(ring, it);
  const uint32_t sx = ring.smem0 + s * C::STAGE_BYTES, sy = sx + C::X_BYTES;
  if (X_MN) {
#pragma unroll
    for (int b = 0; b < C::BR / C::MNBOX_COLS; ++b)
      gk__tma_load_3d(sx + b * C::MNBOX_BYTES, map_x, r0 + b * C::MNBOX_COLS, k0, z, bar);
  } else {
#pragma unroll
    for (int b = 0; b < C::BR / C::KBOX_ROWS; ++b)
      gk__tma_load_3d(sx + b * C::KBOX_BYTES, map_x, k0, r0 + b * C::KBOX_ROWS, z, bar);
  }
#pragma unroll
  for (int b = 0; b < C::BS / C::KBOX_ROWS; ++b)
    gk__tma_load_3d(sy + b * C::KBOX_BYTES, map_y, k0, s0 + b * C::KBOX_ROWS, z, bar);
}

/* The producer of the persistent kernels (16, 21): one thread loads every k tile of the CTA's
 * tiles of D (blockIdx.x, + gridDim.x, ... of `total` over the batch chunk, in the grouped
 * order) into the ring, whose running slot goes on across tiles as the consumers' does. */
template <class C, bool X_MN>
__device__ __forceinline__ void gk__tf32_produce_tiles(const gk__ring &ring, const CUtensorMap *map_x,
                                                       const CUtensorMap *map_y, int tiles_r,
                                                       int tiles_s, int64_t total, int k_tiles) {
  int it = 0, r0, s0, z;
  for (int64_t t = blockIdx.x; t < total; t += gridDim.x) {
    gk__tile_origin(t, tiles_r, tiles_s, C::BR, C::BS, &r0, &s0, &z);
    for (int kt = 0; kt < k_tiles; ++kt, ++it)
      gk__tf32_produce<C, X_MN>(ring, it, map_x, map_y, r0, s0, kt * C::BK, z);
  }
}
#endif /* GK_WGMMA_DEVICE */

/* True when TMA can describe both operands: 16-byte-aligned bases, stored rows (and so the batch
 * strides) multiples of 16 bytes, sizes within the tensor map's ranges (strides < 2^40 bytes). */
static inline bool gk__tf32_fits(const gk_problem *p) {
  return gk__fits_int32(p) && gk__aligned(p->a, 16) && gk__aligned(p->b, 16) &&
         (gk__lda(p) * 4) % 16 == 0 && (gk__ldb(p) * 4) % 16 == 0 &&
         p->m * p->k * 4 < ((int64_t)1 << 40) && p->k * p->n * 4 < ((int64_t)1 << 40);
}

/* A 3-D map (inner, outer, batch) over `batch` row-major matrices of outer x inner floats (or
 * elements of `elem` bytes of `type`), read as boxes of 128 bytes x box_outer with the 128-byte
 * swizzle, zero fill out of bounds. */
static inline cudaError_t gk__tf32_map(CUtensorMap *map, const void *base, int64_t inner, int64_t outer,
                     int64_t batch, unsigned box_outer,
                     CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32, unsigned elem = 4) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = gk__tensor_map_encoder();
  if (encode == NULL) return cudaErrorNotSupported;
  const cuuint64_t dims[3] = {(cuuint64_t)inner, (cuuint64_t)outer, (cuuint64_t)batch};
  const cuuint64_t strides[2] = {(cuuint64_t)inner * elem, (cuuint64_t)(inner * outer) * elem};
  const cuuint32_t box[3] = {128 / elem, box_outer, 1}, unit[3] = {1, 1, 1}; /* a swizzle row */
  CUresult rc = encode(map, type, 3, const_cast<void *>(base), dims,
                       strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return rc == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/* One formulation's operands and the kernel's arguments (see 08's opening comment): NN: X = B
 * (k x n), Y = A (m x k), D = C^T (out_t); NT / TT: X = A (m x k or k x m), Y = B (n x k), D = C. */
struct gk__tf32_plan {
  const float *x, *y;
  int64_t x_stride, y_stride; /* elements from one problem's X (Y) to the next */
  gk__wgmma_tf32_args args;
};

static inline gk__tf32_plan gk__tf32_plan_for(const gk_problem *p, bool out_t) {
  gk__tf32_plan plan;
  plan.x = static_cast<const float *>(out_t ? p->b : p->a);
  plan.y = static_cast<const float *>(out_t ? p->a : p->b);
  plan.x_stride = p->m * p->k, plan.y_stride = p->k * p->n;
  if (out_t) plan.x_stride = p->k * p->n, plan.y_stride = p->m * p->k;
  gk__wgmma_tf32_args &args = plan.args;
  args.c = static_cast<float *>(p->c);
  args.rows = (int)(out_t ? p->n : p->m), args.cols = (int)(out_t ? p->m : p->n), args.k = (int)p->k;
  args.m = (int)p->m, args.n = (int)p->n;
  args.stride_c = p->m * p->n;
  args.alpha = (float)p->alpha, args.beta = (float)p->beta;
  args.beta_zero = p->beta == 0.0;
  args.bias = static_cast<const float *>(p->bias), args.bias_stride = p->bias_stride;
  args.act = p->act;
  return plan;
}

/* The kernel's arguments for the batch chunk from problem `first` on: C and the bias rows, of
 * C's element type T (float, or the output cast's __half / __nv_bfloat16: args.c and args.bias
 * then point at elements of T, which the stores reinterpret). */
template <typename T = float>
static inline gk__wgmma_tf32_args gk__tf32_args_at(const gk__tf32_plan &plan, int64_t first) {
  gk__wgmma_tf32_args chunk = plan.args;
  chunk.c = reinterpret_cast<float *>(reinterpret_cast<T *>(plan.args.c) + first * plan.args.stride_c);
  if (chunk.bias != NULL)
    chunk.bias = reinterpret_cast<const float *>(reinterpret_cast<const T *>(plan.args.bias) +
                                                 first * plan.args.bias_stride);
  return chunk;
}

/* C's element type for p, as a tag: float, or the output cast's __half / __nv_bfloat16. f is
 * called with gk__c_type<T>() for the one that applies (the launchers' one typed dispatch). */
template <typename T> struct gk__c_type { using type = T; };
template <class F> static inline cudaError_t gk__with_c_type(const gk_problem *p, F f) {
  if (!p->cast) return f(gk__c_type<float>());
  if (p->out_dtype == GK_F16) return f(gk__c_type<__half>());
  return f(gk__c_type<__nv_bfloat16>());
}

/* The tensor-map type of C's element type T (int32_t: the integer gemm's C, 17). */
template <typename T> constexpr CUtensorMapDataType gk__tf32_c_map_type() {
  return std::is_same<T, int32_t>::value ? CU_TENSOR_MAP_DATA_TYPE_INT32
         : sizeof(T) == 4                ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                        : std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                         : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}


/* The tensor maps of X and Y for `count` problems from problem `first`: X stored MN-major (k rows
 * of R, X_MN) or K-major (R rows of k), Y always K-major (S rows of k). */
template <class C, bool X_MN>
static inline cudaError_t gk__tf32_operand_maps(CUtensorMap *map_x, CUtensorMap *map_y,
                                                const gk__tf32_plan &plan, int64_t k, int64_t first,
                                                int64_t count) {
  const float *x = plan.x + first * plan.x_stride, *y = plan.y + first * plan.y_stride;
  const cudaError_t err = X_MN ? gk__tf32_map(map_x, x, plan.args.rows, k, count, C::BK)
                               : gk__tf32_map(map_x, x, k, plan.args.rows, count, C::KBOX_ROWS);
  if (err != cudaSuccess) return err;
  return gk__tf32_map(map_y, y, k, plan.args.cols, count, C::KBOX_ROWS);
}

#endif /* GK_08_WGMMA_TF32_CUH */
