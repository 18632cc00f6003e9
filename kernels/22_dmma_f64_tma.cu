/*
 * 22_dmma_f64_tma.cu - "dmma_f64_tma": f64 GEMM on Hopper's FP64 tensor cores (mma.sync m16n8k8
 * .f64) fed by TMA, warp-specialised and persistent, as 15 and 16 are for the 16-bit and TF32
 * types (Hopper has no wgmma for f64, so the consumers still issue mma.sync from registers).
 *
 * Tiling: CTA tile 128 x 128 x 16 (wide), 384 threads: warpgroup 0 is the producer (one thread
 * issues the TMA boxes), warpgroups 1 and 2 the consumers, 64 rows each, as 2 x 2 warps of
 * 32 x 64 (2 x 8 m16n8k8 tiles: 128 accumulator registers, 24 fragment doubles per k8 step, 1.5
 * shared loads per mma against 10's 2); a ring of 6 stages of 32 KB. Where the wide tiles
 * would leave SMs idle, 128 x 96 (warps of 32 x 48, 7 stages of 28 KB: 1000 x 1200 is 104
 * tiles, not 80), 128 x 64 (warps of 32 x 32, 8 stages of 24 KB) or 64 x 64 (two consumers of
 * 32 rows, warps of 16 x 32, 8 stages of 16 KB): see cost() below.
 * A grid of at most one CTA per SM walks the tiles blockIdx.x, + gridDim.x, ... in the
 * grouped order over the batch; the ring runs on across tiles, so the producer loads the next
 * tile while the consumers store C (straight from the accumulators, alpha/beta in f64, beta 0
 * never reading C).
 *
 * The idea, over 10: 10 copies its operands with cp.async from the same warps that multiply
 * (LSU the most-issued pipe, ncu) and runs 64 x 64 / 64 x 128 tiles at 2-3 blocks per SM; here
 * the copy engine fills shared memory, the consumer warps issue only fragment loads and mma,
 * and the bigger tile moves a third (against 64 x 128) to a half (64 x 64) fewer L2 bytes per
 * flop.
 *
 * Bank conflicts: a stage holds each operand as TMA writes it with the 128-byte swizzle, in its
 * global layout: K-major (A m x k, B stored n x k) as one box of 16 k (128 bytes) x rows; M- or
 * N-major (A stored k x m, B k x n) as boxes of 16 k rows x 16 columns (2 KB). A thread (g =
 * lane / 4, t = lane % 4) needs, per row or column of its fragments, the four k values t + 4j
 * (j = 0..3: the two k8 steps' two halves); which physical k of the 16 stands for logical
 * k = t + 4j is free as long as A and B agree (the k sum only changes order):
 *   P(t, j) = t0 | (j0 ^ t1) << 1 | (j1 ^ t0) << 2 | t1 << 3      (t = t1 t0, j = j1 j0).
 * For one load, a half-warp is g = 0..3 (or 4..7) x t = 0..3. K-major: the 8-byte unit within
 * a 128-byte row is ((k >> 1) ^ row % 8) << 1 | k & 1; g spans the chunk's two low bits, so the
 * loads are conflict-free when (k & 1, k >> 3) takes its four values over t: (t0, t1). N-major:
 * the unit is ((col % 16 >> 1) ^ k % 8) << 1 | col & 1; g spans col's bits 0-1, so they are
 * when (k >> 1) & 3 does: (j0 ^ t1, j1 ^ t0). P meets both (identity k = t + 4j meets neither
 * under this swizzle: two-way conflicts). bench/dmma_f64_tma_layout.py models the boxes, these
 * loads and the mma off the GPU: every configuration and layout against NumPy, no conflicts.
 *
 * Contract: f64, compute capability 9.0 exactly, A and B describable by TMA (16-byte-aligned
 * bases, even leading dimensions, sizes within the tensor map's ranges), any m, n, k (TMA
 * zero-fills past the edges, the store masks), both transposes, alpha/beta, any batch. The rest
 * (odd leading dimensions above all) stays with 10. Registered before 10: auto's f64 kernel on
 * Hopper.
 *
 * Measured (H200, bench_kernels against cuBLAS's DGEMM at its best, same run; bench/RESULTS.md,
 * "Round 3, thirteenth session"), as registered now (two fragment sets, 128x80 in the pick,
 * ce2369d): 1024^3 95%, 2048^3 102% (59.7 TFLOP/s), 4096^3 102% (61.2), 8192^3 95%,
 * 1000x1200x800 113%, 8192x8192x64 106%, 64 x 256^3 103%; 10 in the same run 87% / 80% / 77%
 * / 79% / 79% / 86% / 96%. The first version (one fragment set, 3fb044f): 100% / 94% / 93% /
 * 89% / 80% / 102% / 103%; ncu at 4096^3 then: the FP64 tensor pipe busy 83% of the cycles, no
 * spills, 168 registers (setmaxnreg), one CTA per SM.
 *
 * Tried (variants, bench_kernels --variants, run 2 at dc56d03; ratios to cuBLAS at 2048^3 /
 * 4096^3 / 8192^3 / 1000x1200x800): one set 98 / 94 / 90 / 78%, and
 *   _db (128x128_db, 128x96_db): two fragment sets; the next step's fragments (the next stage's
 *     first step across a k tile) load as this step's mma issue and free their registers
 *     (mma_step_prefetch), for the tensor pipe's idle 17% at 4096^3; no spills, no more
 *     registers than one set with the loads interleaved (two whole sets spill at 232). 128x128_db
 *     102 / 105 / 101 / 81%: the registered form now.
 *   _g16 (128x128_g16): 16 tile-rows a group of the persistent walk (8 elsewhere), for 8192^3's
 *     89% against 4096^3's 93%: 98 / 97 / 96 / 79%; with _db (_db_g16) 102 / 104 / 101 / 81%,
 *     nothing over _db alone: not taken.
 *   _db_g16 (128x128_db_g16): both.
 *   128x80, 128x80_db: warps of 16 x 80 (2.4 loads per mma against 128x96's 1.67), 120 tiles
 *     in one round at 1000x1200x800 (80%: 128x96's 104, at 0.75 of the wide tile's work).
 *     128x80_db 83 / 102 / 101 / 118% (1024^3 97%): in the pick, for grids of about one round.
 *   128x128_4wg: 4 consumer warpgroups of 32 rows, 16 consumer warps of 32 x 32 (4 a
 *     scheduler, against 2: more warps to hide the shared loads; 2 loads per mma, 112
 *     registers (one fragment offset an operand, frag_offsets' ONE), no spills; its _db
 *     spills, left out): 98 / 98 / - / 81% (its 8192^3 row failed in the bench, with cuBLAS's
 *     beside it: not looked into, not taken).
 * The waits cannot spin forever: the grid is at most the tile count (every CTA has a tile),
 * k = 0 waits for nothing, and the ring's slot `it` runs on across tiles, so a tile of fewer k
 * tiles than stages waits on phases the producer completes (racecheck is slow on the spins).
 */
#include <algorithm>

#include "06_dmma_f64.cuh"  /* gk__dmma1688, gk__dmma_args, gk__store_pair */
#include "08_wgmma_tf32.cuh" /* the ring, mbarrier / TMA / setmaxnreg wrappers, gk__tf32_map */
#include "gk_gpu.h"

/* A configuration: CTA tile BM x BN x 16, WGS (2) consumer warpgroups of BM / WGS rows, each 4
 * warps as WARPS_M x (4 / WARPS_M) warp tiles; STAGES ring stages; MMA_K 8 (m16n8k8) or 16;
 * FRAG_SETS 1 (load a step's fragments, then its mma) or 2 (the next step's fragments load,
 * the next stage's first step included, while this step's mma issue); GROUP tile-rows per
 * group of the persistent walk's grouped order. */
template <int BM_, int BN_, int WARPS_M_, int STAGES_, int MMA_K_ = 8, int FRAG_SETS_ = 1,
          int GROUP_ = GK_GROUP_M, int WGS_ = 2>
struct gk__dmma_tma_cfg {
  static constexpr int BM = BM_, BN = BN_, BK = 16, STAGES = STAGES_, MMA_K = MMA_K_;
  static constexpr int FRAG_SETS = FRAG_SETS_, GROUP = GROUP_;
  /* frag_offsets keeps one offset an operand, not 8, where the registers are tight */
  static constexpr bool ONE = WGS_ > 2;
  /* warpgroup 0 the producer, then the consumers; the producer gives its registers to them
   * (setmaxnreg: ptxas plans the consumers' code for CONSUMER_REGS, the wide tile's 64
   * accumulators and 24 fragment doubles do not fit the 168 of 384 threads otherwise, nor of
   * 288: registers go to warps by fours; setmaxnreg only moves the registers the launch gave
   * the CTA, LAUNCH_REGS a thread, between its warps: with more consumers the producer keeps
   * setmaxnreg's least, 24, and they share the rest) */
  static constexpr int CONSUMER_WGS = WGS_, THREADS = 128 * (1 + CONSUMER_WGS);
  /* gk__ring_init's arrivals that free a stage: one per consumer warp */
  static constexpr int CONSUMERS = 4 * CONSUMER_WGS;
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = 4 / WARPS_M;
  static constexpr int WG_ROWS = BM / CONSUMER_WGS;
  static constexpr int WM = WG_ROWS / WARPS_M, WN = BN / WARPS_N; /* the warp tile */
  static constexpr int MI = WM / 16, NI = WN / 8;                 /* mma tiles per warp */
  static constexpr int A_FRAG = MMA_K / 2, B_FRAG = MMA_K / 4;    /* doubles per mma */
  static constexpr int A_BYTES = BM * BK * 8, B_BYTES = BN * BK * 8;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int BOX_BYTES = 16 * 16 * 8; /* an M/N-major box: 16 k rows x 16 columns */
  static constexpr int LAUNCH_REGS = 65536 / THREADS / 8 * 8; /* __launch_bounds__(THREADS, 1) */
  static constexpr int PRODUCER_REGS = CONSUMER_WGS == 2 ? 40 : 24;
  static constexpr int CONSUMER_REGS =
      (LAUNCH_REGS * THREADS - PRODUCER_REGS * 128) / (128 * CONSUMER_WGS) / 8 * 8; /* 232, 112 */
  static constexpr size_t SMEM_BYTES = 1024 + (size_t)STAGES * STAGE_BYTES + 16 * STAGES;
  static_assert(MMA_K == 8 || MMA_K == 16, "m16n8k8 or m16n8k16");
  static_assert(FRAG_SETS == 1 || (FRAG_SETS == 2 && BK / MMA_K == 2),
                "two fragment sets: one for each of a stage's two mma steps");
  static_assert(GROUP >= 1, "a group has at least one tile-row");
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tiles of whole m16 tiles and n16 boxes");
  static_assert(BM % 16 == 0 && BN % 16 == 0 && BM <= 256 && BN <= 256, "TMA boxes");
  static_assert(STAGE_BYTES % 1024 == 0, "stages keep the swizzle's 1 KB period");
  static_assert(SMEM_BYTES <= 227 * 1024, "Hopper gives a block at most 227 KB of shared memory");
  static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMER_WGS <= LAUNCH_REGS * THREADS,
                "the launch's registers hold the producer and the consumers (else setmaxnreg.inc waits)");
  static_assert(CONSUMER_REGS % 8 == 0 && CONSUMER_REGS <= 256, "setmaxnreg's range");
};

namespace {

/* The registered configurations' fragment sets and walk group: two sets (the variants' _db won
 * on every shape of run 2: 2048^3-8192^3 101-105% of cuBLAS against one set's 90-98%); 16
 * tile-rows a walk group gave nothing more with them (_db_g16). */
constexpr int kSets = 2, kGroup = GK_GROUP_M;
using cfg_wide = gk__dmma_tma_cfg<128, 128, 2, 6, 8, kSets, kGroup>; /* warps of 32 x 64 */
using cfg_mid = gk__dmma_tma_cfg<128, 96, 2, 7, 8, kSets, kGroup>;   /* warps of 32 x 48 */
using cfg_half = gk__dmma_tma_cfg<128, 64, 2, 8, 8, kSets, kGroup>;  /* warps of 32 x 32 */
using cfg_small = gk__dmma_tma_cfg<64, 64, 2, 8, 8, kSets, kGroup>;  /* warps of 16 x 32 */
using cfg_half_k16 = gk__dmma_tma_cfg<128, 64, 2, 8, 16>; /* a variant: m16n8k16 */
/* variants: two fragment sets (wide, mid); 16 tile-rows a walk group; both (wide) */
using cfg_wide_db = gk__dmma_tma_cfg<128, 128, 2, 6, 8, 2>;
using cfg_mid_db = gk__dmma_tma_cfg<128, 96, 2, 7, 8, 2>;
using cfg_wide_g16 = gk__dmma_tma_cfg<128, 128, 2, 6, 8, 1, 16>;
using cfg_wide_db_g16 = gk__dmma_tma_cfg<128, 128, 2, 6, 8, 2, 16>;
/* variants: 128 x 80 (warps of 16 x 80, 8 stages of 26 KB: 1000 x 1200 is 120 tiles), one or
 * two fragment sets */
using cfg_80 = gk__dmma_tma_cfg<128, 80, 4, 8>;
using cfg_80_db = gk__dmma_tma_cfg<128, 80, 4, 8, 8, 2>; /* registered too: see the launch */
/* a variant: the wide tile over 4 consumer warpgroups of 32 rows (640 threads, 16 consumer
 * warps of 32 x 32, 112 registers each, one fragment offset an operand; two sets spill) */
using cfg_wide_4wg = gk__dmma_tma_cfg<128, 128, 1, 6, 8, 1, GK_GROUP_M, 4>;

#if GK_WGMMA_DEVICE
/* The physical k (of a stage's 16) holding logical k t + 4j: see the opening comment. */
__device__ __forceinline__ int phys_k(int t, int j) {
  const int t0 = t & 1, t1 = t >> 1, j0 = j & 1, j1 = j >> 1;
  return t0 | (j0 ^ t1) << 1 | (j1 ^ t0) << 2 | t1 << 3;
}
/* A thread's byte offsets into one operand of a stage (MN: M/N-major, boxes of 16 columns x 16
 * k rows; else K-major, rows of 16 k), worked out once: its fragment element at row (K-major) or
 * column (M/N-major) base + c and logical k quarter j is at at(c, j), c a multiple of 8 known
 * at compile time, base == g (lane / 4) mod 8 for K-major, mod 16 for M/N-major (a warp tile's
 * first row or column + g). K-major: row r, k at r * 128 + ((k >> 1) ^ r % 8) * 16 + (k & 1) * 8
 * (the 128-byte swizzle), r % 8 == g. M/N-major: column col, k at (col / 16) * 2048 + k * 128 +
 * (((col % 16) >> 1) ^ k % 8) * 16 + (col & 1) * 8, where col % 16 = g + c % 16: the odd 8 of c
 * flips bit 2 of the chunk (byte offset bit 6). ONE: keep off[0][0] alone and XOR the rest in
 * at each load (for register-tight configurations): phys_k(t, j) == phys_k(t, 0) ^ 2j, and the
 * fields (bit 3, the chunk's bits 4-6, k's bits 7-10 of M/N-major) do not overlap, so off[j][h]
 * is off[0][0] ^ (j << 4) (K-major) or ^ (j << 8) ^ (j << 5) ^ (h << 6) (M/N-major). */
template <bool MN, bool ONE = false>
struct frag_offsets {
  int off[4][2]; /* [j][(c / 8) % 2] */
  __device__ __forceinline__ frag_offsets(int base, int g, int t) {
#pragma unroll
    for (int j = 0; j < (ONE ? 1 : 4); ++j) {
      const int k = phys_k(t, j);
      if (MN) {
        off[j][0] = (base >> 4) * 2048 + k * 128 + (((g >> 1) ^ (k & 7)) << 4) + ((g & 1) << 3);
        off[j][1] = off[j][0] ^ 64;
      } else {
        off[j][0] = off[j][1] = base * 128 + (((k >> 1) ^ g) << 4) + ((k & 1) << 3);
      }
    }
  }
  __device__ __forceinline__ int at(int c, int j) const {
    if (ONE)
      return MN ? (off[0][0] ^ (j << 8) ^ (j << 5) ^ ((c & 8) << 3)) + (c >> 4) * 2048
                : (off[0][0] ^ (j << 4)) + c * 128;
    return MN ? off[j][(c >> 3) & 1] + (c >> 4) * 2048 : off[j][0] + c * 128;
  }
};

/* One mma step's fragments from a stage's A (sa) and B (sb): A(row g + 8 (e % 2), k t + 4 (e / 2))
 * and B(k t + 4e, col g) of each m16 / n8 tile of the warp's, as the sm_90 f64 shapes take them. */
template <class C, bool TA, bool TB>
__device__ __forceinline__ void load_frags(const unsigned char *sa, const unsigned char *sb,
                                           const frag_offsets<TA, C::ONE> &ao,
                                           const frag_offsets<!TB, C::ONE> &bo,
                                           int step, double (&af)[C::MI][C::A_FRAG],
                                           double (&bf)[C::NI][C::B_FRAG]) {
  constexpr int JS = C::MMA_K / 4; /* logical k quarters per mma step */
#pragma unroll
  for (int i = 0; i < C::MI; ++i)
#pragma unroll
    for (int e = 0; e < C::A_FRAG; ++e)
      af[i][e] = *reinterpret_cast<const double *>(sa + ao.at(16 * i + 8 * (e % 2), step * JS + e / 2));
#pragma unroll
  for (int j = 0; j < C::NI; ++j)
#pragma unroll
    for (int e = 0; e < C::B_FRAG; ++e)
      bf[j][e] = *reinterpret_cast<const double *>(sb + bo.at(8 * j, step * JS + e));
}

/* One mma step: every m16 x n8 tile of the warp's takes its k8 (k16) from the fragments. */
template <class C>
__device__ __forceinline__ void mma_step(double (&acc)[C::MI][C::NI][4],
                                         const double (&af)[C::MI][C::A_FRAG],
                                         const double (&bf)[C::NI][C::B_FRAG]) {
#pragma unroll
  for (int i = 0; i < C::MI; ++i)
#pragma unroll
    for (int j = 0; j < C::NI; ++j) {
      if constexpr (C::MMA_K == 16) gk__dmma16816(acc[i][j], af[i], bf[j]);
      else gk__dmma1688(acc[i][j], af[i], bf[j]);
    }
}

/* One mma step on fragments (af, bf) that loads the next step's (step `next_step` of the stage at
 * next_sa) into (na, nb) as this step's registers go dead: na's rows but the last when the last
 * row of mma starts, nb[j] after mma (MI - 1, j), na's last row at the end. Each load then has at
 * least NI - 1 mma issues to land in, and the two sets together hold little more than one. With
 * one row (MI 1) na loads at the start instead (its 4 doubles beside af's). */
template <class C, bool TA, bool TB>
__device__ __forceinline__ void mma_step_prefetch(double (&acc)[C::MI][C::NI][4],
                                                  const double (&af)[C::MI][C::A_FRAG],
                                                  const double (&bf)[C::NI][C::B_FRAG],
                                                  double (&na)[C::MI][C::A_FRAG],
                                                  double (&nb)[C::NI][C::B_FRAG],
                                                  const unsigned char *next_sa,
                                                  const frag_offsets<TA, C::ONE> &ao,
                                                  const frag_offsets<!TB, C::ONE> &bo, int next_step) {
  constexpr int JS = C::MMA_K / 4, EARLY = C::MI > 1 ? C::MI - 1 : 1; /* na's rows loaded first */
  const unsigned char *next_sb = next_sa + C::A_BYTES;
  auto load_a = [&](int i) {
#pragma unroll
    for (int e = 0; e < C::A_FRAG; ++e)
      na[i][e] =
          *reinterpret_cast<const double *>(next_sa + ao.at(16 * i + 8 * (e % 2), next_step * JS + e / 2));
  };
#pragma unroll
  for (int i = 0; i < C::MI; ++i) {
    if (i == C::MI - 1) {
#pragma unroll
      for (int r = 0; r < EARLY; ++r) load_a(r);
    }
#pragma unroll
    for (int j = 0; j < C::NI; ++j) {
      if constexpr (C::MMA_K == 16) gk__dmma16816(acc[i][j], af[i], bf[j]);
      else gk__dmma1688(acc[i][j], af[i], bf[j]);
      if (i == C::MI - 1) {
#pragma unroll
        for (int e = 0; e < C::B_FRAG; ++e)
          nb[j][e] = *reinterpret_cast<const double *>(next_sb + bo.at(8 * j, next_step * JS + e));
      }
    }
  }
#pragma unroll
  for (int r = EARLY; r < C::MI; ++r) load_a(r);
}

/* A tile's k tiles (ring slots it, it + 1, ...) with two fragment sets: set 1 (a stage's second
 * step) loads while set 0's mma issue, and set 0 of the next stage while set 1's do, so the
 * tensor pipe has queued work while the shared loads are in flight. The next stage is waited
 * for after this stage's first step (the last k tile, peeled, loads no further). A stage is
 * freed after its set 1 mma issue (their operands, its last loads, are in registers). */
template <class C, bool TA, bool TB>
__device__ __forceinline__ void consume_two_sets(const gk__ring &ring, const unsigned char *ring_ptr, int it,
                                                 int k_tiles, const frag_offsets<TA, C::ONE> &ao,
                                                 const frag_offsets<!TB, C::ONE> &bo, int lane,
                                                 double (&acc)[C::MI][C::NI][4]) {
  if (k_tiles == 0) return;
  double a0[C::MI][C::A_FRAG], b0[C::NI][C::B_FRAG], a1[C::MI][C::A_FRAG], b1[C::NI][C::B_FRAG];
  int s = it % C::STAGES;
  gk__mbar_wait(ring.full0 + 8 * s, (it / C::STAGES) & 1);
  const unsigned char *sa = ring_ptr + s * C::STAGE_BYTES;
  load_frags<C, TA, TB>(sa, sa + C::A_BYTES, ao, bo, 0, a0, b0);
  for (int kt = 0; kt + 1 < k_tiles; ++kt, ++it) {
    mma_step_prefetch<C, TA, TB>(acc, a0, b0, a1, b1, sa, ao, bo, 1);
    const int freed = s;
    s = (it + 1) % C::STAGES;
    gk__mbar_wait(ring.full0 + 8 * s, ((it + 1) / C::STAGES) & 1);
    sa = ring_ptr + s * C::STAGE_BYTES;
    mma_step_prefetch<C, TA, TB>(acc, a1, b1, a0, b0, sa, ao, bo, 0);
    __syncwarp(); /* every lane's fragments of stage `freed` are in its registers */
    if (lane == 0) gk__mbar_arrive(ring.empty0 + 8 * freed);
  }
  mma_step_prefetch<C, TA, TB>(acc, a0, b0, a1, b1, sa, ao, bo, 1); /* the last k tile */
  mma_step<C>(acc, a1, b1);
  __syncwarp();
  if (lane == 0) gk__mbar_arrive(ring.empty0 + 8 * s);
}

/* Where tile t of the walk starts: gk__tile_origin's grouped order, with C::GROUP tile-rows a
 * group (16 for two CTAs' worth of rows per 132 SMs: the walk's A and B panels in L2 more even). */
template <class C>
__device__ __forceinline__ void tile_origin(int64_t t, int tiles_m, int tiles_n, int *m0, int *n0, int *z) {
  if constexpr (C::GROUP == GK_GROUP_M) {
    gk__tile_origin(t, tiles_m, tiles_n, C::BM, C::BN, m0, n0, z);
  } else {
    const int64_t tiles = (int64_t)tiles_m * tiles_n;
    const int pid = (int)(t % tiles), per_group = C::GROUP * tiles_n, group = pid / per_group;
    const int first_m = group * C::GROUP, rows = min(tiles_m - first_m, C::GROUP);
    const int in_group = pid - group * per_group;
    *z = (int)(t / tiles);
    *m0 = (first_m + in_group % rows) * C::BM, *n0 = (in_group / rows) * C::BN;
  }
}

/* Producer, ring slot `it`: the k tile at k0 of the tile at (m0, n0) of problem z. */
template <class C, bool TA, bool TB>
__device__ __forceinline__ void produce(const gk__ring &ring, int it, const CUtensorMap *map_a,
                                        const CUtensorMap *map_b, int m0, int n0, int k0, int z) {
  const uint32_t bar = gk__ring_produce<C>(ring, it);
  const uint32_t sa = ring.smem0 + (it % C::STAGES) * C::STAGE_BYTES, sb = sa + C::A_BYTES;
  if (TA) {
#pragma unroll
    for (int b = 0; b < C::BM / 16; ++b) gk__tma_load_3d(sa + b * C::BOX_BYTES, map_a, m0 + 16 * b, k0, z, bar);
  } else {
    gk__tma_load_3d(sa, map_a, k0, m0, z, bar);
  }
  if (TB) {
    gk__tma_load_3d(sb, map_b, k0, n0, z, bar);
  } else {
#pragma unroll
    for (int b = 0; b < C::BN / 16; ++b) gk__tma_load_3d(sb + b * C::BOX_BYTES, map_b, n0 + 16 * b, k0, z, bar);
  }
}
#endif /* GK_WGMMA_DEVICE */

template <class C, bool TA, bool TB>
__global__ void __launch_bounds__(C::THREADS, 1)
    dmma_tma_gemm(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                  gk__dmma_args args, int problems) {
#if GK_WGMMA_DEVICE
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const gk__ring ring = gk__ring_init<C>(smem_raw);
  const unsigned char *ring_ptr = smem_raw + (ring.smem0 - gk__smem_addr(smem_raw));
  const int warpgroup = threadIdx.x / 128;
  const int tiles_m = (args.m + C::BM - 1) / C::BM, tiles_n = (args.n + C::BN - 1) / C::BN;
  const int64_t total = (int64_t)tiles_m * tiles_n * problems;
  const int k_tiles = (args.k + C::BK - 1) / C::BK;
  int m0, n0, z;

  if (warpgroup == 0) { /* producer: one thread issues the loads */
    gk__setmaxnreg_dec<C::PRODUCER_REGS>();
    if (threadIdx.x != 0) return;
    int it = 0; /* k tiles loaded so far: the ring's running slot */
    for (int64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
      tile_origin<C>(tile, tiles_m, tiles_n, &m0, &n0, &z);
      for (int kt = 0; kt < k_tiles; ++kt, ++it)
        produce<C, TA, TB>(ring, it, &map_a, &map_b, m0, n0, kt * C::BK, z);
    }
    return;
  }

  gk__setmaxnreg_inc<C::CONSUMER_REGS>();
  const int warp = threadIdx.x / 32 - 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wm = (warp / 4) * C::WG_ROWS + ((warp % 4) / C::WARPS_N) * C::WM; /* in the tile */
  const int wn = ((warp % 4) % C::WARPS_N) * C::WN;
  const frag_offsets<TA, C::ONE> a_offsets(wm + g, g, t);
  const frag_offsets<!TB, C::ONE> b_offsets(wn + g, g, t);
  int it = 0;
  for (int64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
    tile_origin<C>(tile, tiles_m, tiles_n, &m0, &n0, &z);
    double acc[C::MI][C::NI][4];
#pragma unroll
    for (int i = 0; i < C::MI; ++i)
#pragma unroll
      for (int j = 0; j < C::NI; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0;
    if constexpr (C::FRAG_SETS == 2) {
      consume_two_sets<C, TA, TB>(ring, ring_ptr, it, k_tiles, a_offsets, b_offsets, lane, acc);
      it += k_tiles;
    } else {
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const int s = it % C::STAGES;
        gk__mbar_wait(ring.full0 + 8 * s, (it / C::STAGES) & 1);
        const unsigned char *sa = ring_ptr + s * C::STAGE_BYTES, *sb = sa + C::A_BYTES;
#pragma unroll
        for (int step = 0; step < C::BK / C::MMA_K; ++step) {
          double af[C::MI][C::A_FRAG], bf[C::NI][C::B_FRAG];
          load_frags<C, TA, TB>(sa, sb, a_offsets, b_offsets, step, af, bf);
          mma_step<C>(acc, af, bf);
        }
        __syncwarp(); /* every lane's fragments are in its registers: the stage may be refilled */
        if (lane == 0) gk__mbar_arrive(ring.empty0 + 8 * s);
      }
    }
    /* accumulator (i, j): rows g and g + 8 of its m16 tile, columns 2t, 2t + 1 of its n8 */
    double *c = args.c + (int64_t)z * args.stride_c;
#pragma unroll
    for (int i = 0; i < C::MI; ++i)
#pragma unroll
      for (int j = 0; j < C::NI; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          gk__store_pair(args, c, m0 + wm + 16 * i + 8 * h + g, n0 + wn + 8 * j + 2 * t,
                         acc[i][j][2 * h], acc[i][j][2 * h + 1]);
  }
#else
  (void)map_a, (void)map_b, (void)args, (void)problems;
#endif
}

/* ---- host side ------------------------------------------------------------------------------ */

/* A and B as TMA reads them: 16-byte-aligned bases, rows of whole 16-byte units (even leading
 * dimensions; the batch strides then are too), byte strides under 2^40. */
bool operands_fit(const gk_problem *p) {
  return gk__fits_int32(p) && gk__aligned(p->a, 16) && gk__aligned(p->b, 16) && gk__lda(p) % 2 == 0 &&
         gk__ldb(p) % 2 == 0 && p->m * p->k * 8 < ((int64_t)1 << 40) &&
         p->k * p->n * 8 < ((int64_t)1 << 40);
}

/* The tensor maps of a batch chunk (count problems from a and b): K-major operands as boxes of
 * 16 k x BM (BN) rows, M/N-major ones as boxes of 16 columns x 16 k rows. */
template <class C>
cudaError_t operand_maps(CUtensorMap *map_a, CUtensorMap *map_b, const gk_problem *p, const double *a,
                         const double *b, int64_t count) {
  constexpr CUtensorMapDataType F64 = CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
  cudaError_t err = p->trans_a ? gk__tf32_map(map_a, a, p->m, p->k, count, 16, F64, 8)
                               : gk__tf32_map(map_a, a, p->k, p->m, count, C::BM, F64, 8);
  if (err != cudaSuccess) return err;
  return p->trans_b ? gk__tf32_map(map_b, b, p->k, p->n, count, C::BN, F64, 8)
                    : gk__tf32_map(map_b, b, p->n, p->k, count, 16, F64, 8);
}

template <class C, bool TA, bool TB>
cudaError_t run(const gk_problem *p, int sms, cudaStream_t stream) {
  auto kernel = dmma_tma_gemm<C, TA, TB>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)C::SMEM_BYTES);
  if (err != cudaSuccess) return err;
  const gk__dmma_args args = gk__mma_args<gk__dmma_args, double, double>(p);
  const int64_t tiles = ((p->m + C::BM - 1) / C::BM) * ((p->n + C::BN - 1) / C::BN);
  if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
    const gk__dmma_args chunk = gk__args_at(args, first);
    CUtensorMap map_a, map_b;
    const cudaError_t map_err = operand_maps<C>(&map_a, &map_b, p, chunk.a, chunk.b, count);
    if (map_err != cudaSuccess) return map_err;
    const int64_t work = tiles * count;
    const unsigned grid = (unsigned)(work < sms ? work : sms);
    kernel<<<grid, C::THREADS, C::SMEM_BYTES, stream>>>(map_a, map_b, chunk, (int)count);
    return cudaGetLastError();
  });
}

template <class C>
cudaError_t launch_with(const gk_problem *p, int sms, cudaStream_t stream) {
  if (p->trans_a)
    return p->trans_b ? run<C, true, true>(p, sms, stream) : run<C, true, false>(p, sms, stream);
  return p->trans_b ? run<C, false, true>(p, sms, stream) : run<C, false, false>(p, sms, stream);
}

/* The time of p on configuration C in units of one wide tile's work: rounds of sms tiles, each
 * as long as C's tile, over the share of the wide tile's rate that C's tile keeps (smaller warp
 * tiles load more per mma). The rates are measured (H200, bench_kernels --variants at 2048^3
 * and 4096^3, each config's ratio to cuBLAS over its rounds' fill, relative to the wide tile's):
 * 128x96 0.87 (0.86, 0.88), 128x64 0.90 (0.91, 0.89), 64x64 0.72 (0.72, 0.72). 1000x1200x800
 * stays on 128x96 (104 tiles, one round; 0.75 / 0.87 of the wide tile's one round of 80): that
 * run's variant rows gave 128x128 76% and 128x96 73%, but the registered row on 128x96 80%,
 * the spread of one --quick run. */
template <class C>
double cost(const gk_problem *p, int sms, double rate) {
  const int64_t tiles = ((p->m + C::BM - 1) / C::BM) * ((p->n + C::BN - 1) / C::BN) * p->batch;
  const int64_t rounds = (tiles + sms - 1) / sms;
  return (double)rounds * C::BM * C::BN / (128.0 * 128.0) / rate;
}

bool dmma_f64_tma_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_F64 && cc == 90 && operands_fit(p);
}

/* The configuration that finishes p first by cost() (ties: the bigger tile). */
cudaError_t dmma_f64_tma_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!dmma_f64_tma_supports(p, 90)) return cudaErrorInvalidValue;
  const int sms = gk__sm_count(ctx);
  /* rates of the two-set tiles (run 2, --variants): 128x96 0.97, 128x80 0.93 of the wide
   * tile's over their rounds; 128x64 and 64x64 were measured with one set only (0.9 and 0.72
   * at 2048^3-4096^3, but 0.69 where one round of them met 128x80's at 1024^3): 0.7 and 0.6, so
   * that they take only the grids the others leave mostly idle */
  const double wide = cost<cfg_wide>(p, sms, 1.0), mid = cost<cfg_mid>(p, sms, 0.97),
               c80 = cost<cfg_80_db>(p, sms, 0.93), half = cost<cfg_half>(p, sms, 0.7),
               small = cost<cfg_small>(p, sms, 0.6);
  const double best = std::min(std::min(std::min(wide, mid), std::min(c80, half)), small);
  if (wide == best) return launch_with<cfg_wide>(p, sms, stream);
  if (mid == best) return launch_with<cfg_mid>(p, sms, stream);
  if (c80 == best) return launch_with<cfg_80_db>(p, sms, stream);
  if (half == best) return launch_with<cfg_half>(p, sms, stream);
  return launch_with<cfg_small>(p, sms, stream);
}

/* One configuration alone, for the variants below; the m16n8k16 one in NN only (what
 * bench_kernels --variants times), the others in every layout (test_gpu_kernels --f64). */
template <class C>
cudaError_t variant_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!dmma_f64_tma_supports(p, 90)) return cudaErrorInvalidValue;
  return launch_with<C>(p, gk__sm_count(ctx), stream);
}
bool nn_supports(const gk_problem *p, int cc) {
  return dmma_f64_tma_supports(p, cc) && !p->trans_a && !p->trans_b;
}
template <class C>
cudaError_t nn_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!nn_supports(p, 90)) return cudaErrorInvalidValue;
  return run<C, false, false>(p, gk__sm_count(ctx), stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_dmma_f64_tma = {
    "dmma_f64_tma",
    "f64, Hopper FP64 tensor cores mma.sync m16n8k8 fed by TMA, warp-specialised, persistent: "
    "128x128x16 (or 128x96, 128x80, 128x64, 64x64) tiles, 2 consumer warpgroups, fragments a "
    "step ahead (22)",
    dmma_f64_tma_supports,
    dmma_f64_tma_launch,
    0,
};

/* Its configurations one by one (not registered): for bench_kernels --variants, and for
 * test_gpu_kernels --f64, which runs each on every shape beside the registered kernels. */
extern "C" const gk_kernel gk_kernel_dmma_f64_tma_128x128 = {
    "dmma_f64_tma_128x128", "22's wide tile alone", dmma_f64_tma_supports, variant_launch<cfg_wide>, 0};
extern "C" const gk_kernel gk_kernel_dmma_f64_tma_128x96 = {
    "dmma_f64_tma_128x96", "22's 128x96 tile alone", dmma_f64_tma_supports, variant_launch<cfg_mid>, 0};
extern "C" const gk_kernel gk_kernel_dmma_f64_tma_128x64 = {
    "dmma_f64_tma_128x64", "22's 128x64 tile alone", dmma_f64_tma_supports, variant_launch<cfg_half>, 0};
extern "C" const gk_kernel gk_kernel_dmma_f64_tma_64x64 = {
    "dmma_f64_tma_64x64", "22's 64x64 tile alone", dmma_f64_tma_supports, variant_launch<cfg_small>, 0};
extern "C" const gk_kernel gk_kernel_dmma_f64_tma_128x64_k16 = {
    "dmma_f64_tma_128x64_k16", "22's 128x64 tile with m16n8k16, NN only", nn_supports,
    nn_launch<cfg_half_k16>, 0};
/* The tuning variants (the opening comment's "tried" list), each a configuration alone. */
#define GK22_VARIANT(NAME, DESC, CFG)                                                              \
  extern "C" const gk_kernel gk_kernel_dmma_f64_tma_##NAME = {                                     \
      "dmma_f64_tma_" #NAME, "22's " DESC, dmma_f64_tma_supports, variant_launch<CFG>, 0}
GK22_VARIANT(128x128_db, "wide tile, two fragment sets", cfg_wide_db);
GK22_VARIANT(128x96_db, "128x96 tile, two fragment sets", cfg_mid_db);
GK22_VARIANT(128x80, "128x80 tile (warps of 16x80)", cfg_80);
GK22_VARIANT(128x80_db, "128x80 tile (warps of 16x80), two fragment sets", cfg_80_db);
GK22_VARIANT(128x128_g16, "wide tile, 16 tile-rows a walk group", cfg_wide_g16);
GK22_VARIANT(128x128_db_g16, "wide tile, two fragment sets, 16 tile-rows a walk group", cfg_wide_db_g16);
GK22_VARIANT(128x128_4wg, "wide tile over 4 consumer warpgroups", cfg_wide_4wg);
