/*
 * 06_dmma_f64.cuh - the FP64 tensor-core GEMM of 06_dmma_f64.cu, as a template over its tile
 * configuration (bench_kernels times other configurations beside the registered one).
 * The design and its reasons are in 06_dmma_f64.cu's opening comment.
 */
#ifndef GK_06_DMMA_F64_CUH
#define GK_06_DMMA_F64_CUH

#include "gk_tile_common.cuh"

/* A tile configuration: block tile BM x BN x BK, WARPS_M x WARPS_N warps, STAGES cp.async
 * stages; MMA_K 4: mma.sync m8n8k4 (sm_80); 8 or 16: m16n8k8 / m16n8k16 (sm_90 only,
 * 10_dmma16_f64.cu). */
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_, int MMA_K_ = 4,
          int FRAG_SETS_ = 2, int MIN_BLOCKS_ = 1>
struct gk__dmma_cfg {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_, MMA_K = MMA_K_;
  /* FRAG_SETS 2: the next k step's fragments load while this one's mma run (more registers);
   * 1: one set, the other warps hide the loads. MIN_BLOCKS: __launch_bounds__'s blocks per SM,
   * which caps the registers a thread may use. */
  static constexpr int FRAG_SETS = FRAG_SETS_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, NT = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N; /* the warp tile */
  static constexpr int MMA_M = MMA_K == 4 ? 8 : 16;          /* the mma tile: MMA_M x 8 x MMA_K */
  static constexpr int MI = WM / MMA_M, NI = WN / 8;         /* mma tiles per warp */
  static constexpr int A_FRAG = MMA_M * MMA_K / 32, B_FRAG = MMA_K / 4; /* doubles per thread */
  static constexpr int C_FRAG = MMA_M / 4;
  static_assert(MMA_K == 4 || MMA_K == 8 || MMA_K == 16, "m8n8k4, m16n8k8 or m16n8k16");
  static_assert(WM % MMA_M == 0 && WN % 8 == 0, "a warp tile is a grid of mma tiles");
  static_assert(BK % (2 * MMA_K) == 0, "an even number of mma k steps per tile (fragment buffers alternate)");
  static_assert(FRAG_SETS == 1 || FRAG_SETS == 2, "one or two fragment sets");
};

/* Shared layout of one stage: operands keep their global layout. Row pitches are 4 doubles
 * more than the row (P = 4 mod 16): the fragment pattern (row g, col t) or (row t, col g) of a
 * half-warp then covers the 32 banks once (bank pair = 8g + 2t or 8t + 2g). */
template <class C, bool TA, bool TB>
struct gk__dmma_smem {
  static constexpr int BM = C::BM, BN = C::BN, BK = C::BK, STAGES = C::STAGES;
  static constexpr int A_ROWS = TA ? BK : BM, A_COLS = TA ? BM : BK, A_PITCH = A_COLS + 4;
  static constexpr int B_ROWS = TB ? BN : BK, B_COLS = TB ? BK : BN, B_PITCH = B_COLS + 4;
  static_assert(A_PITCH % 16 == 4 || A_PITCH % 16 == 12, "A pitch must spread the banks");
  static_assert(B_PITCH % 16 == 4 || B_PITCH % 16 == 12, "B pitch must spread the banks");
  static constexpr int A_ELEMS = A_ROWS * A_PITCH, B_ELEMS = B_ROWS * B_PITCH;
  static constexpr int STAGE_ELEMS = A_ELEMS + B_ELEMS;
  static constexpr size_t BYTES = (size_t)STAGES * STAGE_ELEMS * sizeof(double);
};

struct gk__dmma_args {
  const double *a, *b;
  double *c;
  int m, n, k;
  int64_t lda, ldb, stride_a, stride_b, stride_c;
  double alpha, beta;
  bool beta_zero;
  bool c_pair; /* n even and c 16-byte aligned: two outputs per store */
};

__device__ __forceinline__ void gk__dmma884(double d[2], double a, double b) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%0,%1};\n"
               : "+d"(d[0]), "+d"(d[1])
               : "d"(a), "d"(b));
}

/* m16n8k16, f64 (sm_90): a[i] is A(g + 8*(i%2), t + 4*(i/2)), b[i] is B(t + 4*i, g), d[i] is
 * D(g + 8*(i/2), 2t + i%2), with g = lane/4, t = lane%4. */
__device__ __forceinline__ void gk__dmma16816(double d[4], const double a[8], const double b[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
               : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
               : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]),
                 "d"(a[7]), "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
#else
  (void)d, (void)a, (void)b; /* the kernels that use it are for cc >= 9.0 only */
#endif
}

/* m16n8k8, f64 (sm_90): the same pattern with a[0..3], b[0..1]. */
__device__ __forceinline__ void gk__dmma1688(double d[4], const double a[4], const double b[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
               : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
#else
  (void)d, (void)a, (void)b; /* the kernels that use it are for cc >= 9.0 only */
#endif
}

template <class C, bool TA, bool TB, bool VEC>
__global__ void __launch_bounds__(C::NT, C::MIN_BLOCKS) gk__dmma_gemm(gk__dmma_args args) {
  using T = double;
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK, STAGES = C::STAGES, NT = C::NT;
  constexpr int WARPS_N = C::WARPS_N, WM = C::WM, WN = C::WN, MI = C::MI, NI = C::NI;
  using L = gk__dmma_smem<C, TA, TB>;
  GK_MMA_TILE_PROLOGUE(T, L);
  const int g = lane / 4, t = lane % 4; /* fragment: A (row g, k t), B (k t, col g), + offsets */
  constexpr int MMA_M = C::MMA_M, MMA_K = C::MMA_K, AF = C::A_FRAG, BF = C::B_FRAG;

  /* One mma k step's fragments: element e of A's (of an MMA_M x MMA_K tile) is at row
   * g + 8*(e%2), k t + 4*(e/2); element e of B's (MMA_K x 8) at k t + 4*e, column g. */
  auto load_frags = [&](double(&af)[MI][AF], double(&bf)[NI][BF], int st, int kk) {
    const T *sa = smem + st * L::STAGE_ELEMS, *sb = sa + L::A_ELEMS;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int e = 0; e < AF; ++e) {
        const int r = wm + i * MMA_M + g + 8 * (e % 2), kc = kk + t + 4 * (e / 2);
        af[i][e] = TA ? sa[kc * L::A_PITCH + r] : sa[r * L::A_PITCH + kc];
      }
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < BF; ++e) {
        const int col = wn + j * 8 + g, kr = kk + t + 4 * e;
        bf[j][e] = TB ? sb[col * L::B_PITCH + kr] : sb[kr * L::B_PITCH + col];
      }
  };

  double acc[MI][NI][C::C_FRAG];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < C::C_FRAG; ++e) acc[i][j][e] = 0.0;

  /* Pipeline as in 04_mma_f16.cuh: STAGES tiles in flight, two fragment sets. */
  constexpr int KSTEPS = BK / MMA_K;
  const int k_tiles = (args.k + BK - 1) / BK;
  gk__pipeline_fill<STAGES>(k_tiles, load_stage);
  gk__cp_async_wait<STAGES - 2>();
  __syncthreads();
  if (STAGES - 1 < k_tiles) load_stage(STAGES - 1, STAGES - 1);
  gk__cp_async_commit();

  auto mma_step = [&](const double(&a_set)[MI][AF], const double(&b_set)[NI][BF]) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        if constexpr (MMA_K == 16) gk__dmma16816(acc[i][j], a_set[i], b_set[j]);
        else if constexpr (MMA_K == 8) gk__dmma1688(acc[i][j], a_set[i], b_set[j]);
        else gk__dmma884(acc[i][j], a_set[i][0], b_set[j][0]);
      }
  };
  /* After the last k step reads stage st (tile kt): wait for tile kt+1, refill st. */
  auto advance = [&](int st, int kt) {
    gk__cp_async_wait<STAGES - 2>(); /* tile kt+1 landed; stage st no longer read */
    __syncthreads();
    if (kt + STAGES < k_tiles) load_stage(st, kt + STAGES);
    gk__cp_async_commit();
  };
  if constexpr (C::FRAG_SETS == 1) { /* the loads of one step wait; other warps run meanwhile */
    double af1[MI][AF], bf1[NI][BF];
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int st = kt % STAGES;
#pragma unroll
      for (int step = 0; step < KSTEPS; ++step) {
        load_frags(af1, bf1, st, step * MMA_K);
        mma_step(af1, bf1);
      }
      if (kt + 1 < k_tiles) advance(st, kt);
    }
  } else { /* two sets: the next step's fragments load under this step's mma */
    double af[2][MI][AF], bf[2][NI][BF];
    load_frags(af[0], bf[0], 0, 0);
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int st = kt % STAGES;
#pragma unroll
      for (int step = 0; step < KSTEPS; ++step) {
        const int cur = step & 1, nxt = cur ^ 1;
        if (step + 1 < KSTEPS) {
          load_frags(af[nxt], bf[nxt], st, (step + 1) * MMA_K);
        } else if (kt + 1 < k_tiles) {
          advance(st, kt);
          load_frags(af[nxt], bf[nxt], (kt + 1) % STAGES, 0);
        }
        mma_step(af[cur], bf[cur]);
      }
    }
  }
  gk__cp_async_wait<0>(); /* no copy may outlive the block (the last groups are empty) */

  /* Accumulator (i, j), pair h: (row g + 8h, cols 2t, 2t+1) of the MMA_M x 8 tile. */
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int h = 0; h < C::C_FRAG / 2; ++h)
        gk__store_pair(args, c, m0 + wm + i * MMA_M + 8 * h + g, n0 + wn + j * 8 + 2 * t,
                       acc[i][j][2 * h], acc[i][j][2 * h + 1]);
}

/* Host side: the launcher for one configuration C. */
template <class C>
struct gk__dmma_launcher {
  template <bool TA, bool TB, bool VEC>
  static cudaError_t run(const gk_problem *p, cudaStream_t stream) {
    const auto kernel = gk__dmma_gemm<C, TA, TB, VEC>;
    const size_t smem = gk__dmma_smem<C, TA, TB>::BYTES;
    const auto args = gk__mma_args<gk__dmma_args, double, double>(p);
    return gk__launch_tiles<C::BM, C::BN, C::NT>(kernel, smem, args, p, stream);
  }

  static cudaError_t launch(const gk_problem *p, cudaStream_t stream) {
    return gk__launch_layouts<gk__dmma_launcher<C>, 2>(p, stream);
  }
};

#endif /* GK_06_DMMA_F64_CUH */
