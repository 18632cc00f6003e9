/*
 * 21_wgmma_f32x3.cu - "wgmma_f32x3": f32 exact GEMM on Hopper's TF32 tensor cores, each operand
 * split into two TF32 numbers and three products summed, with SGEMM's accuracy.
 *
 * The idea: x = big + small + e, big = x rounded to 11 significant bits (TF32's), small the rest
 * (x - big, exact in f32) rounded to TF32, |e| <= 2^-23 |x| (x has 24 bits, two TF32 numbers
 * 22). x * y ~ small_x big_y + big_x small_y + big_x big_y (small_x small_y, ~2^-22 |x y|, left
 * out), each product exact in the tensor core. The tensor core adds truncating; over a long k
 * that drifts (30x SGEMM's error at k = 8192, bench/f32x3_accuracy.py). So a k tile's twelve
 * wgmmas (4 k8 steps x 3 products, the small ones first, big x big last) go into a second set
 * of accumulators, started afresh per k tile (scale_d 0), and that is added to the tile's sum by
 * an f32 add (round to nearest) once per k tile: the result is as accurate as an FFMA chain
 * (SGEMM's order) or more. The model says: about 1/3 of its error on uniform, normal and
 * cancelling inputs; on par with it where the exponents spread over 2^-30..2^30 and a few terms
 * dominate each output (k >= 1024; at k = 256 1.6x its mean there: the split's rounding and the
 * tensor cores' truncations of the dominant term are then not averaged away).
 * Two-level sum: on short grids with a long k cuBLAS runs split-k, whose shorter chains of adds
 * beat one chain of k / 32 f32 adds on wide-exponent inputs (21 was 1.13x its mean error at
 * 1024x1024x4096; the split's dropped bits are not the cause: with exact operands the model's
 * error falls by 5% only). So the narrow tile (those grids) from k = 2048 folds each k tile's
 * sum into a middle sum, added to the tile's every ~sqrt(k tiles) k tiles: 0.73x cuBLAS's mean
 * there. The wide tile has no 32 registers a thread to spare (64 more spill); its grids are full
 * and cuBLAS runs no split there (4096^3 wide: 0.64x its mean). Below k = 2048 one level costs
 * 1024^3 nothing (the two cost it 10%).
 * The split is integer arithmetic on the bits (add half a TF32 ulp, clear the 13 low bits) and
 * one FP32 subtraction: no conversion unit, and subnormals come out on TF32's grid.
 *
 * Tiling: 16's persistent grid and formulation (D = X * Y^T, X from registers, Y K-major in
 * shared memory; NN as D = C^T; TN refused), tile 128 x 128 x 32, 384 threads (a producer
 * warpgroup whose one thread issues the TMA boxes, two consumer warpgroups of 64 rows each),
 * a 4-stage ring of 32 KB; where that grid would fill at most half of the SMs (1024^3: 64
 * tiles), 128 x 64 (wgmma m64n64k8) and 6 stages of 24 KB. Per k tile each consumer waits for
 * its previous wgmmas, folds their sum into the tile's, then
 *   - splits Y (the stage's 128 x 32 floats, one 128-byte row per thread, or half of one,
 *     conflict-free through the swizzle) into a 32 KB scratch of its own (big, then small, at
 *     the stage's swizzled offsets, so one descriptor form serves the stage and the scratch),
 *   - loads its X fragments (16 floats) from the stage and splits them in registers,
 *   - releases the stage (after a warpgroup barrier: the consumers never wait for each other),
 *   - issues the 12 wgmmas m64n128k8 into the second accumulators, the first with scale_d 0.
 *     (Tile 128 x 64: Y 64 x 32, a 16 KB scratch, m64n64k8.)
 * The other consumer's wgmmas keep the tensor cores busy meanwhile. C is stored from the
 * accumulators (alpha, beta in f32), each warp writing whole 32-byte sectors; the producer runs
 * ahead into the next tile meanwhile.
 *
 * IEEE specials: the tensor cores would not give SGEMM's answer for an infinity (its small
 * part, inf - inf, is NaN: inf x 1 would come out NaN), nor for every NaN (the rounding add
 * turns a NaN of mantissa 0x7ff000 and up, CUDA's own 0x7fffffff among them, into a zero), and
 * near FLT_MAX, truncating, they might give FLT_MAX where SGEMM overflows to infinity. So each
 * thread keeps the largest |x| of its X rows and of its Y row over the tile's k (NaN once one
 * was NaN, and the smallest nonzero); rows of D whose X row reached 2^60 (an infinity, a NaN)
 * and columns whose Y row
 * did, and only those, are recomputed at the end of the tile as plain FFMA chains over the
 * whole k from global memory: exactly what SGEMM gives there (an infinity against a zero: NaN;
 * inf beside -inf: NaN; overflow as SGEMM's), at no cost where no operand is that large (one
 * barrier-reduction per tile). Below 2^60 no product reaches 2^120 and no k tile's sum in the
 * tensor cores overflows. Likewise nonzero operands below 2^-113 (subnormals among them): the
 * split keeps less than 2^-24 of them, its small part falling onto TF32's subnormal grid
 * (2^-136). Data full of such values (or of values past 2^60) is right but slow here.
 *
 * Bound: shared memory. Per k tile and SM the consumers move ~208 KB (wgmma's reads of Y big
 * and small 96 KB, the split's 96 KB, X's fragments 16 KB): ~1,630 cycles at 128 B a cycle,
 * against ~1,540 for the tensor cores' 3.1 MFLOP of TF32: about 145 TFLOP/s of f32 on 132 SMs
 * at 1.755 GHz, 2.8x cuBLAS's SGEMM (51).
 *
 * Measured (H200, bench_kernels against cuBLASLt's SGEMM, bench/RESULTS.md "Round 3"):
 * 73-80 TFLOP/s at 2048^3-8192^3, 147-158% of cuBLAS; 1024^3 128-133%, 1000x1200x800
 * 129-137%, 1024x1024x4096 118% (two levels), 8192x8192x64 143-150%. About 55% of the
 * shared-memory bound above. Accuracy against float64 (test_gpu_kernels' table, 12 rows):
 * below cuBLAS's SGEMM on every row, 0.12-0.74x its max error and 0.19-0.81x its mean; wide
 * exponents (2^-30..2^30) 0.62 / 0.73 at 1024x1024x4096, 0.61 / 0.64 at 4096^3.
 *
 * Contract: f32 with precision exact on compute capability 9.0 exactly, NN, NT and TT, A and B
 * describable by TMA (16-byte aligned, stored rows of a multiple of 4 floats), any m, n, k,
 * alpha/beta (beta == 0: C not read), any batch; C anywhere (no alignment asked). Grids so short
 * that split-K should do better (tiles for at most a quarter of the SMs, k >= 512, and
 * simt_f32_splitk takes the problem) go to simt_f32_splitk. The rest stays with 09 and 02,
 * registered after this kernel.
 */
#include "08_wgmma_tf32.cuh" /* the tile, fragments, producer, maps; gk_wgmma_ptx.cuh */
#include "16_wgmma_tf32_persist.cuh" /* the persistent kernel's opening */
#include "gk_gpu.h"

extern "C" const gk_kernel gk_kernel_simt_f32_splitk; /* 09: the short grids */

/* 16's tile, BS = 128 (or 64 where 128 would fill at most half of the SMs) with a ring of
 * STAGES; after the ring, its barriers and each consumer's BS column and 64 row flags (within
 * 1 KB), then each consumer's BUFFERS scratches (Y big, Y small), 1 KB aligned. BUFFERS 2 (a
 * variant): a consumer splits the next k tile's Y while its wgmmas of this one still read the
 * other scratch. */
template <int BS_, int STAGES_, int BUFFERS_, bool MID_ = false>
struct gk__f32x3_cfg : gk__wgmma_tf32_cfg<BS_, STAGES_> {
  using base = gk__wgmma_tf32_cfg<BS_, STAGES_>;
  using base::STAGES, base::STAGE_BYTES, base::Y_BYTES, base::CONSUMERS, base::BS;
  /* the Y split: each thread takes Y_CHUNKS 16-byte chunks of one row of Y (BS rows of 8) */
  static constexpr int Y_CHUNKS = BS * 8 / 128;
  static constexpr int BUFFERS = BUFFERS_;
  /* Two-level sum (see the opening comment): k tiles folded into a middle sum first. The
   * narrow tile's deep problems take it (short grids with a long k, where cuBLAS runs split-k);
   * the wide tile has no registers to spare for one (64 more a thread spill). */
  static constexpr bool MID = MID_;
  static_assert(!MID || BS == 64, "a middle sum fits the narrow tile's registers only");
  static constexpr int FLAGS_OFFSET = STAGES * STAGE_BYTES + 16 * STAGES; /* from the ring */
  static constexpr int SCRATCH_OFFSET = STAGES * STAGE_BYTES + 1024;
  static constexpr int SCRATCH_BYTES = 2 * Y_BYTES; /* one scratch: big, then small */
  static constexpr size_t SMEM_TOTAL =
      1024 + SCRATCH_OFFSET + (size_t)CONSUMERS * BUFFERS * SCRATCH_BYTES;
  static_assert(16 * STAGES + CONSUMERS * (BS + 64) <= 1024, "the barriers and flags fit there");
  static_assert(SMEM_TOTAL <= 227 * 1024, "Hopper gives a block at most 227 KB of shared memory");
  static_assert(64 * BS * 4 <= SCRATCH_BYTES, "a consumer's tile fits its scratch (specials)");
  static_assert(Y_CHUNKS == 4 || Y_CHUNKS == 8, "one row of Y per thread, or half of one");
};

/* The kernel's arguments: 16's, and the operands themselves for the elements recomputed in
 * FFMA. */
struct gk__f32x3_args : gk__wgmma_tf32_args {
  const float *x, *y;         /* the batch chunk's first X and Y */
  int64_t x_stride, y_stride; /* elements from one problem's X (Y) to the next */
};

namespace {

using cfg = gk__f32x3_cfg<128, 4, 1>;       /* the registered kernel */
using cfg_narrow = gk__f32x3_cfg<64, 6, 1>; /* its narrow tile, for short grids */
using cfg_narrow_deep = gk__f32x3_cfg<64, 6, 1, true>; /* and with a long k: two-level sum */
using cfg_pipe = gk__f32x3_cfg<128, 3, 2>;  /* a variant (bench_kernels --variants) */
using f32x3_args = gk__f32x3_args;

#if GK_WGMMA_DEVICE
/* Operands at least this large (or infinite) are flagged: below it no product reaches 2^120 and
 * no k tile's sum in the tensor cores (96 products) overflows, where the tensor cores, which
 * truncate, might give FLT_MAX instead of SGEMM's infinity. */
constexpr float HUGE_OPERAND = 0x1p60f;
/* Nonzero operands below 2^-113 are flagged too: their small part falls below TF32's smallest
 * normal (2^-126), onto its subnormal grid of 2^-136, which keeps less than 2^-24 of them
 * (subnormal operands lose most of their bits). Kept as 2 |x|'s bits - 2 (0 for the smallest
 * subnormal, 0xfffffffe for a zero, so that a min over them skips zeros). */
constexpr uint32_t TINY_KEY = 2u * (14u << 23) - 2u; /* 2^-113: exponent field 127 - 113 */

/* Per-thread flags of one tile, for the thread's X rows (lo: row_lo, hi: row_lo + 8) and its Y
 * row (the D column s0 + the thread's row): the largest |x|, NaN once a NaN was seen (special
 * from HUGE_OPERAND on, or NaN: the split's rounding add carries a NaN of mantissa 0x7ff000 and
 * up, CUDA's own 0x7fffffff among them, into the sign bit and makes it a zero), and the
 * smallest tiny key (special below TINY_KEY). */
struct flag {
  float huge = 0.0f;
  uint32_t tiny = 0xffffffffu;
  __device__ __forceinline__ bool special() const { return !(huge < HUGE_OPERAND) || tiny < TINY_KEY; }
};
struct flags {
  flag lo, hi, y;
};

/* x split into big (x rounded to TF32's 11 bits, to nearest with ties away, by an integer add
 * on its bits: right for subnormals too) and small (the exact rest x - big, rounded the same
 * way); f takes x in. */
__device__ __forceinline__ void split(float x, uint32_t &big, uint32_t &small, flag &f) {
  big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  const float lo = __fsub_rn(x, __uint_as_float(big));
  small = (__float_as_uint(lo) + 0x1000u) & 0xffffe000u;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(f.huge) : "f"(f.huge), "f"(fabsf(x))); /* NaN sticks */
  f.tiny = min(f.tiny, __float_as_uint(x) * 2u - 2u);
}

/* bar.red.or over named barrier id: true in every thread when v was in any. */
__device__ __forceinline__ bool named_sync_or(int id, int count, bool v) {
  uint32_t any;
  asm volatile(
      "{\n.reg .pred p, q;\n"
      "setp.ne.u32 q, %3, 0;\n"
      "bar.red.or.pred p, %1, %2, q;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(any)
      : "r"(id), "r"(count), "r"((uint32_t)v)
      : "memory");
  return any != 0;
}

/* Keeps the fragment registers' values where they are computed, ahead of the wgmma fence, so
 * that ptxas need not wait for the wgmmas between them (C7519). */
__device__ __forceinline__ void pin(uint32_t (&r)[4]) {
  asm volatile("" : "+r"(r[0]), "+r"(r[1]), "+r"(r[2]), "+r"(r[3]));
}

/* Registers that in-flight wgmmas read or write, pinned after their wait: the compiler sees the
 * wgmma's operands as done when it is issued, and might otherwise move their next reads or
 * writes above the wait (as CUTLASS's warpgroup_fence_operand). */
template <int N>
__device__ __forceinline__ void pin_after_wait(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
__device__ __forceinline__ void pin_after_wait(uint32_t (&r)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(r[i][0]), "+r"(r[i][1]), "+r"(r[i][2]), "+r"(r[i][3])::"memory");
}

/* A k tile's sum (part) into the tile's, rounded to nearest: straight into acc, or (C::MID)
 * into mid, and mid into acc where a group of k tiles ends (group_end), mid then afresh. */
template <class C>
__device__ __forceinline__ void fold(float (&acc)[C::ACC], float (&mid)[C::ACC],
                                     const float (&part)[C::ACC], bool group_end) {
  if constexpr (!C::MID) {
#pragma unroll
    for (int i = 0; i < C::ACC; ++i) acc[i] += part[i];
  } else {
#pragma unroll
    for (int i = 0; i < C::ACC; ++i) mid[i] += part[i];
    if (group_end)
#pragma unroll
      for (int i = 0; i < C::ACC; ++i) acc[i] += mid[i], mid[i] = 0.0f;
  }
}

/* One k tile of a consumer (ring slot it; kt: its index in the tile; folded: the k tiles
 * folded into mid since it was last added, up to `group`). See the opening
 * comment for the order of things; with two scratches (C::BUFFERS), Y is split before the wait
 * for the previous k tile's wgmmas, into the scratch they do not read. */
template <class C, bool X_MN>
__device__ __forceinline__ void consume(float (&acc)[C::ACC], float (&mid)[C::ACC],
                                        float (&part)[C::ACC], uint32_t (&xb)[4][4],
                                        uint32_t (&xs)[4][4], int it, int kt, int &folded,
                                        int group,
                                        const unsigned char *ring, uint32_t full0,
                                        uint32_t empty0, unsigned char *scratch_ptr,
                                        uint32_t scratch, int consumer, int row_lo, int t,
                                        int wg_thread, flags &f) {
  const int s = it % C::STAGES;
  gk__mbar_wait(full0 + 8 * s, (it / C::STAGES) & 1);
  /* the previous k tile's wgmmas done: its scratch and xb / xs are free, its sum is in part */
  auto previous_done = [&] {
    gk__wgmma_wait<0>();
    pin_after_wait(part);
    pin_after_wait(xb);
    pin_after_wait(xs);
    if (kt > 0) { /* the previous k tile's sum into the tile's, rounded to nearest */
      const bool group_end = C::MID && ++folded == group;
      if (group_end) folded = 0;
      fold<C>(acc, mid, part, group_end);
    }
  };
  if (C::BUFFERS == 1) previous_done();
  const int buffer = C::BUFFERS == 1 ? 0 : it % C::BUFFERS;
  scratch += buffer * C::SCRATCH_BYTES, scratch_ptr += buffer * C::SCRATCH_BYTES;
  const unsigned char *tile_x = ring + s * C::STAGE_BYTES, *tile_y = tile_x + C::X_BYTES;
  /* Y: this thread's row of 32 k (BS 128: row wg_thread; 64: half of row wg_thread / 2), chunk
   * by chunk in logical order (so a quarter warp's eight rows hit eight different bank groups),
   * big and small at the same offsets */
  {
    const int r = wg_thread * C::Y_CHUNKS / 8, j0 = wg_thread * C::Y_CHUNKS % 8;
#pragma unroll
    for (int jj = 0; jj < C::Y_CHUNKS; ++jj) {
      const int off = r * C::ROW_BYTES + (((j0 + jj) ^ (r & 7)) << 4);
      const float4 v = *reinterpret_cast<const float4 *>(tile_y + off);
      uint4 big, small;
      split(v.x, big.x, small.x, f.y);
      split(v.y, big.y, small.y, f.y);
      split(v.z, big.z, small.z, f.y);
      split(v.w, big.w, small.w, f.y);
      *reinterpret_cast<uint4 *>(scratch_ptr + off) = big;
      *reinterpret_cast<uint4 *>(scratch_ptr + C::Y_BYTES + off) = small;
    }
  }
  if (C::BUFFERS > 1) previous_done();
  /* X: the m64k8 fragments of the four k8 steps (rows row_lo and + 8, k = t and t + 4) */
#pragma unroll
  for (int kk = 0; kk < C::BK / 8; ++kk) {
    const int k = kk * 8 + t;
    const int rows[4] = {row_lo, row_lo + 8, row_lo, row_lo + 8}, ks[4] = {k, k, k + 4, k + 4};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float v = *reinterpret_cast<const float *>(
          tile_x + gk__tf32_x_offset<C, X_MN>(rows[q], ks[q]));
      split(v, xb[kk][q], xs[kk][q], q % 2 == 0 ? f.lo : f.hi);
    }
    pin(xb[kk]);
    pin(xs[kk]);
  }
  gk__fence_proxy_async(); /* the scratch's generic writes, before wgmma reads them */
  gk__named_sync(2 + consumer, 128);
  if (wg_thread == 0) gk__mbar_arrive(empty0 + 8 * s); /* every read of the stage is done */
  gk__wgmma_fence();
  const uint32_t big = scratch, small = scratch + C::Y_BYTES;
#pragma unroll /* the first starts the k tile's sum afresh (scale_d 0) */
  for (int kk = 0; kk < C::BK / 8; ++kk)
    gk__tf32_wgmma<C::BS>::run(part, xs[kk], gk__wgmma_desc(big + kk * 32, 16, 1024), kk > 0);
#pragma unroll
  for (int kk = 0; kk < C::BK / 8; ++kk)
    gk__tf32_wgmma<C::BS>::run(part, xb[kk], gk__wgmma_desc(small + kk * 32, 16, 1024));
#pragma unroll
  for (int kk = 0; kk < C::BK / 8; ++kk)
    gk__tf32_wgmma<C::BS>::run(part, xb[kk], gk__wgmma_desc(big + kk * 32, 16, 1024));
  gk__wgmma_commit();
}

/* k tiles per middle sum: about the square root of their number, so that neither sum's chain
 * of adds is long (bench/f32x3_accuracy.py: on wide-exponent inputs at k = 4096 the mean error
 * falls by a quarter, to below cuBLAS's split-k SGEMM). */
__device__ __forceinline__ int mid_group(int k_tiles) {
  int g = 1;
  while (g * g < k_tiles) ++g;
  return g;
}

/* D (r, s) of problem z as an FFMA chain over the whole k, from global memory: SGEMM's answer
 * for the elements whose operands hold an infinity, a NaN, a huge or a tiny value. */
template <bool X_MN>
__device__ __forceinline__ float exact_dot(const f32x3_args &args, int z, int r, int s) {
  const float *x = args.x + (int64_t)z * args.x_stride;
  const float *y = args.y + (int64_t)z * args.y_stride + (int64_t)s * args.k;
  float sum = 0.0f;
  for (int l = 0; l < args.k; ++l)
    sum = fmaf(X_MN ? x[(int64_t)l * args.rows + r] : x[(int64_t)r * args.k + l], y[l], sum);
  return sum;
}

/* The flagged elements of this consumer's tile recomputed (see the opening comment); a no-op,
 * but for one barrier-reduction, where no operand was special. The tile goes through the
 * scratch (64 x 128 floats, free now), so that the flagged elements are shared out evenly and
 * acc is indexed by constants only (else it would live in local memory). */
template <class C, bool X_MN>
__device__ __forceinline__ void fix_specials(const f32x3_args &args, float (&acc)[C::ACC],
                                          const flags &f, unsigned char *flag_bytes,
                                          float *tile, int consumer, int d_row0, int s0, int z,
                                          int wg_thread) {
  unsigned char *col_flags = flag_bytes, *row_flags = flag_bytes + C::BS;
  const int warp4 = wg_thread / 32, g = (wg_thread % 32) / 4, t = wg_thread % 4;
  /* a row's fragments are spread over its four t lanes. Every lane shuffles, with | and not
   * ||: a lane whose own flag was set skipped the shuffle of `flag || shfl(...)`, a full-mask
   * shuffle that part of the warp never reached (undefined; the first run with specials hung
   * there), and its partners read a lane that did not take part. */
  int row_flag[2] = {f.lo.special(), f.hi.special()};
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    row_flag[e] |= __shfl_xor_sync(0xffffffffu, row_flag[e], 1);
    row_flag[e] |= __shfl_xor_sync(0xffffffffu, row_flag[e], 2);
    if (t == 0) row_flags[warp4 * 16 + g + 8 * e] = row_flag[e] != 0;
  }
  /* D column s0 + the thread's row of Y (half of it each, two threads, where BS is 64) */
  int y = f.y.special();
  if (C::Y_CHUNKS < 8) y |= __shfl_xor_sync(0xffffffffu, y, 1);
  if (wg_thread * C::Y_CHUNKS % 8 == 0) col_flags[wg_thread * C::Y_CHUNKS / 8] = y != 0;
#pragma unroll
  for (int i = 0; i < C::ACC; ++i) {
    const int j = i / 4, e = (i / 2) % 2, h = i % 2;
    tile[(warp4 * 16 + g + 8 * e) * C::BS + 8 * j + 2 * t + h] = acc[i];
  }
  gk__named_sync(2 + consumer, 128);
  for (int i = wg_thread; i < 64 * C::BS; i += 128) {
    const int r = i / C::BS, col = i % C::BS;
    if ((row_flags[r] || col_flags[col]) && d_row0 + r < args.rows && s0 + col < args.cols)
      tile[i] = exact_dot<X_MN>(args, z, d_row0 + r, s0 + col);
  }
  gk__named_sync(2 + consumer, 128);
#pragma unroll
  for (int i = 0; i < C::ACC; ++i) {
    const int j = i / 4, e = (i / 2) % 2, h = i % 2;
    acc[i] = tile[(warp4 * 16 + g + 8 * e) * C::BS + 8 * j + 2 * t + h];
  }
  gk__named_sync(2 + consumer, 128); /* read back before the next tile's split writes there */
}

/* alpha v + beta C0 for C's element idx (C0 not read where beta is 0). */
__device__ __forceinline__ float scaled(const f32x3_args &args, const float *c, int64_t idx, float v) {
  v *= args.alpha;
  return args.beta_zero ? v : fmaf(args.beta, c[idx], v);
}

/* One consumer's 64 x 128 tile of D from its accumulators (thread (warp4, g, t): D rows
 * warp4 * 16 + g and + 8, columns 8j + 2t and + 1) into C: D = C, pairs along C's rows (8-byte
 * stores where aligned); D = C^T, each element on its own, eight consecutive floats of a row of
 * C per quarter warp. Either way a warp's store fills whole 32-byte sectors. */
template <class C, bool OUT_T>
__device__ __forceinline__ void store_tile(const f32x3_args &args, const float (&acc)[C::ACC],
                                           int d_row0, int s0, int z, int wg_thread) {
  float *c = args.c + (int64_t)z * args.stride_c;
  const int warp4 = wg_thread / 32, g = (wg_thread % 32) / 4, t = wg_thread % 4;
#pragma unroll
  for (int j = 0; j < C::BS / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int d_row = d_row0 + warp4 * 16 + g + 8 * e, d_col = s0 + 8 * j + 2 * t;
      if (d_row >= args.rows || d_col >= args.cols) continue;
      const float v0 = acc[4 * j + 2 * e], v1 = acc[4 * j + 2 * e + 1];
      const bool second = d_col + 1 < args.cols;
      if (OUT_T) { /* D (d_row, d_col) is C (d_col, d_row) */
        const int64_t idx = (int64_t)d_col * args.n + d_row;
        c[idx] = scaled(args, c, idx, v0);
        if (second) c[idx + args.n] = scaled(args, c, idx + args.n, v1);
        continue;
      }
      const int64_t idx = (int64_t)d_row * args.n + d_col;
      if (second && (reinterpret_cast<uintptr_t>(c + idx) & 7) == 0) {
        float2 pair = make_float2(v0 * args.alpha, v1 * args.alpha);
        if (!args.beta_zero) {
          const float2 old = *reinterpret_cast<const float2 *>(c + idx);
          pair.x = fmaf(args.beta, old.x, pair.x), pair.y = fmaf(args.beta, old.y, pair.y);
        }
        *reinterpret_cast<float2 *>(c + idx) = pair;
      } else {
        c[idx] = scaled(args, c, idx, v0);
        if (second) c[idx + 1] = scaled(args, c, idx + 1, v1);
      }
    }
}
#endif /* GK_WGMMA_DEVICE */

/* The kernel: grid.x CTAs walk the batch chunk's `problems` x tiles of D in the grouped order;
 * warpgroup 0 (one thread) loads, warpgroups 1 and 2 split, multiply and store. */
template <class C, bool X_MN, bool OUT_T>
__global__ void __launch_bounds__(C::THREADS, 1)
    f32x3_gemm(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_y,
               f32x3_args args, int problems) {
#if GK_WGMMA_DEVICE
  GK_TF32_PERSIST_PROLOGUE(C, X_MN);
  const int scratch_offset = C::SCRATCH_OFFSET + consumer * C::BUFFERS * C::SCRATCH_BYTES;
  const uint32_t scratch = ring.smem0 + scratch_offset;
  unsigned char *scratch_ptr = ring_ptr + scratch_offset;
  unsigned char *flag_bytes = ring_ptr + C::FLAGS_OFFSET + consumer * (C::BS + 64);
  int it = 0;
  const int group = C::MID ? mid_group(k_tiles) : 0;
  float part[C::ACC]; /* each k tile's sum: its first wgmma overwrites it */
#pragma unroll
  for (int i = 0; i < C::ACC; ++i) part[i] = 0.0f;
  for (int64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
    gk__tile_origin(tile, tiles_r, tiles_s, C::BR, C::BS, &r0, &s0, &z);
    float acc[C::ACC], mid[C::ACC];
#pragma unroll
    for (int i = 0; i < C::ACC; ++i) acc[i] = 0.0f, mid[i] = 0.0f;
    uint32_t xb[4][4], xs[4][4];
    flags f;
    int folded = 0;
    for (int kt = 0; kt < k_tiles; ++kt, ++it)
      consume<C, X_MN>(acc, mid, part, xb, xs, it, kt, folded, group, ring_ptr, ring.full0, ring.empty0,
                       scratch_ptr, scratch, consumer, row_lo, t4, wg_thread, f);
    gk__wgmma_wait<0>();
    pin_after_wait(part);
    fold<C>(acc, mid, part, true);
    const int d_row0 = r0 + consumer * 64;
    const bool special = f.lo.special() || f.hi.special() || f.y.special();
    if (named_sync_or(2 + consumer, 128, special))
      fix_specials<C, X_MN>(args, acc, f, flag_bytes, reinterpret_cast<float *>(scratch_ptr), consumer,
                         d_row0, s0, z, wg_thread);
    store_tile<C, OUT_T>(args, acc, d_row0, s0, z, wg_thread);
  }
#else
  (void)map_x, (void)map_y, (void)args, (void)problems;
#endif
}

template <class C, bool X_MN, bool OUT_T>
cudaError_t run(const gk_problem *p, int sms, cudaStream_t stream) {
  auto kernel = f32x3_gemm<C, X_MN, OUT_T>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)C::SMEM_TOTAL);
  if (err != cudaSuccess) return err;
  const gk__tf32_plan plan = gk__tf32_plan_for(p, OUT_T);
  const int64_t tiles = ((plan.args.rows + C::BR - 1) / C::BR) * ((plan.args.cols + C::BS - 1) / C::BS);
  if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
    f32x3_args chunk;
    static_cast<gk__wgmma_tf32_args &>(chunk) = gk__tf32_args_at<float>(plan, first);
    chunk.x = plan.x + first * plan.x_stride, chunk.y = plan.y + first * plan.y_stride;
    chunk.x_stride = plan.x_stride, chunk.y_stride = plan.y_stride;
    CUtensorMap map_x, map_y;
    const cudaError_t map_err = gk__tf32_operand_maps<C, X_MN>(&map_x, &map_y, plan, p->k, first, count);
    if (map_err != cudaSuccess) return map_err;
    const int64_t work = tiles * count;
    const unsigned grid = (unsigned)(work < sms ? work : sms);
    kernel<<<grid, C::THREADS, C::SMEM_TOTAL, stream>>>(map_x, map_y, chunk, (int)count);
    return cudaGetLastError();
  });
}

bool wgmma_f32x3_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_F32 && !p->fast && cc == 90 && !(p->trans_a && !p->trans_b) &&
         gk__tf32_fits(p);
}

/* 128 x 128 tiles of p (either formulation: they are square). */
int64_t tiles_128(const gk_problem *p) {
  return ((p->m + cfg::BR - 1) / cfg::BR) * ((p->n + cfg::BS - 1) / cfg::BS) * p->batch;
}

/* Grids this short with a long k, where 09 splits k, go to 09: with one CTA per tile and a
 * quarter of the SMs or fewer busy, 09's clusters of 4-8 CTAs per tile (30 4-clusters fit) should
 * do better if 21 runs ~3x 09's rate per SM, once k amortises 09's reduction (~48 k): 09 ~ k / 4
 * + 48 against 21 ~ k / 3, so from k ~ 512 (to be measured: bench_kernels --kernel
 * wgmma_f32x3,simt_f32_splitk). */
constexpr int64_t SPLIT_MIN_K = 512;
bool split_k_better(const gk_problem *p, int sms) {
  return tiles_128(p) * 4 <= sms && p->k >= SPLIT_MIN_K && gk_kernel_simt_f32_splitk.supports(p, 90);
}

template <class C>
cudaError_t launch_with(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!wgmma_f32x3_supports(p, 90)) return cudaErrorInvalidValue;
  const int sms = gk__sm_count(ctx);
  if (split_k_better(p, sms)) return gk_kernel_simt_f32_splitk.launch(ctx, p, stream);
  if (!p->trans_a && !p->trans_b) return run<C, true, true>(p, sms, stream); /* NN: C^T = B^T A^T */
  if (!p->trans_a && p->trans_b) return run<C, false, false>(p, sms, stream); /* NT */
  return run<C, true, false>(p, sms, stream);                                 /* TT */
}

/* From this k the narrow tile sums in two levels: 64 k tiles and more. Below, one level is as
 * accurate as cuBLAS's (which splits k on such grids only when k is long) and 1024^3 kept its
 * speed (the middle sum cost it 10%). */
constexpr int64_t MID_MIN_K = 2048;

/* 128 x 64 tiles where 128 x 128 would fill at most half of the SMs (1024^3: 64 tiles), as 08
 * and 16 narrow theirs */
cudaError_t wgmma_f32x3_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (tiles_128(p) * 2 > gk__sm_count(ctx)) return launch_with<cfg>(ctx, p, stream);
  return p->k >= MID_MIN_K ? launch_with<cfg_narrow_deep>(ctx, p, stream)
                           : launch_with<cfg_narrow>(ctx, p, stream);
}
cudaError_t wgmma_f32x3_pipe_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  return launch_with<cfg_pipe>(ctx, p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_wgmma_f32x3 = {
    "wgmma_f32x3",
    "f32 exact at SGEMM's accuracy, Hopper TF32 tensor cores: each operand split into two TF32 "
    "numbers, three products per k tile summed in f32; 16's persistent 128x128x32 tile; auto's "
    "f32 exact on Hopper but for TN, rows TMA cannot read and short grids with long k (21)",
    wgmma_f32x3_supports,
    wgmma_f32x3_launch,
    0,
};

/* A variant for bench_kernels --variants, not registered: two scratches per consumer (the next k
 * tile's Y split while this one's wgmmas run), a ring of 3 stages. */
extern "C" const gk_kernel gk_kernel_wgmma_f32x3_pipe = {
    "wgmma_f32x3_pipe",
    "21 with two Y scratches per consumer and 3 stages (a variant for bench_kernels --variants)",
    wgmma_f32x3_supports,
    wgmma_f32x3_pipe_launch,
    0,
};
