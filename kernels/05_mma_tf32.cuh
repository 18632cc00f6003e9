/*
 * 05_mma_tf32.cuh - the mma.sync TF32 GEMM of 05_mma_tf32.cu, as a template over its tile
 * configuration (so that bench_kernels can time other configurations beside the registered one).
 * The design and its reasons are in 05_mma_tf32.cu's opening comment.
 */
#ifndef GK_05_MMA_TF32_CUH
#define GK_05_MMA_TF32_CUH

#include "gk_tile_common.cuh"


/* A tile configuration: block tile BM x BN x BK, WARPS_M x WARPS_N warps, STAGES cp.async stages. */
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct gk__tf32_cfg {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_;
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, NT = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N; /* the warp tile */
  static constexpr int MI = WM / 16, NI = WN / 8;            /* mma tiles per warp */
  static_assert(WM % 16 == 0 && WN % 16 == 0, "a warp tile is a grid of 16x16 mma pairs");
  static_assert(NI % 2 == 0, "B fragments are loaded two n8 tiles per ldmatrix.x4");
  static_assert(BK % 8 == 0, "the k tile is a whole number of mma k8 steps");
};

/* Shared layout of one stage: operands keep their global layout (see the file comment). */
template <class C, bool TA, bool TB>
struct gk__tf32_smem {
  static constexpr int BM = C::BM, BN = C::BN, BK = C::BK, STAGES = C::STAGES;
  /* pad: 8 floats for k-strided rows, 4 for k-contiguous rows (bank argument in the file comment) */
  static constexpr int A_ROWS = TA ? BK : BM, A_COLS = TA ? BM : BK, A_PITCH = A_COLS + (TA ? 8 : 4);
  static constexpr int B_ROWS = TB ? BN : BK, B_COLS = TB ? BK : BN, B_PITCH = B_COLS + (TB ? 4 : 8);
  static constexpr int A_ELEMS = A_ROWS * A_PITCH, B_ELEMS = B_ROWS * B_PITCH;
  static constexpr int STAGE_ELEMS = A_ELEMS + B_ELEMS;
  static constexpr size_t BYTES = (size_t)STAGES * STAGE_ELEMS * sizeof(float);
};

struct gk__tf32_args {
  const float *a, *b;
  float *c;
  int m, n, k;
  int64_t lda, ldb, stride_a, stride_b, stride_c;
  float alpha, beta;
  bool beta_zero;
  bool c_pair; /* n even and c 8-byte aligned: two outputs per store */
};

__device__ __forceinline__ void gk__mma1688(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <class C, bool TA, bool TB, bool VEC>
__global__ void __launch_bounds__(C::NT) gk__tf32_gemm(gk__tf32_args args) {
  using T = float;
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK, STAGES = C::STAGES, NT = C::NT;
  constexpr int WARPS_N = C::WARPS_N, WM = C::WM, WN = C::WN, MI = C::MI, NI = C::NI;
  using L = gk__tf32_smem<C, TA, TB>;
  GK_MMA_TILE_PROLOGUE(T, L);
  /* ldmatrix.x4: lane l addresses row l%8 of matrix l/8 */
  const int lrow = lane % 8, lmat = lane / 8;
  /* fragment coordinates: group g = lane/4, thread-in-group t = lane%4 */
  const int g = lane / 4, t = lane % 4;

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int k_tiles = (args.k + BK - 1) / BK;
  gk__pipeline_fill<STAGES>(k_tiles, load_stage);

  for (int kt = 0; kt < k_tiles; ++kt) {
    gk__cp_async_wait<STAGES - 2>(); /* tile kt has landed (this thread's copies) */
    __syncthreads();                 /* ... everyone's; and stage (kt-1) is no longer read */
    {
      const int next = kt + STAGES - 1;
      if (next < k_tiles) load_stage(next % STAGES, next);
      gk__cp_async_commit();
    }
    const T *sa = smem + (kt % STAGES) * L::STAGE_ELEMS, *sb = sa + L::A_ELEMS;

    const uint32_t *sau = reinterpret_cast<const uint32_t *>(sa);
    const uint32_t *sbu = reinterpret_cast<const uint32_t *>(sb);
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      uint32_t af[MI][4], bf[NI][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const int r0 = wm + i * 16;
        if (TA) { /* stored [k][m]: a0 (g,t) a1 (g+8,t) a2 (g,t+4) a3 (g+8,t+4) */
          const uint32_t *p = sau + (kk + t) * L::A_PITCH + r0 + g;
          af[i][0] = p[0], af[i][1] = p[8];
          af[i][2] = p[4 * L::A_PITCH], af[i][3] = p[4 * L::A_PITCH + 8];
        } else { /* stored [m][k]: matrix j = rows (j%2)*8.., k (j/2)*4.. */
          gk__ldmatrix_x4(af[i], sa + (r0 + (lmat % 2) * 8 + lrow) * L::A_PITCH + kk +
                                     (lmat / 2) * 4);
        }
      }
#pragma unroll
      for (int j = 0; j < NI; j += 2) {
        const int c0 = wn + j * 8;
        if (TB) { /* stored [n][k]: matrix q = n (q/2)*8.., k (q%2)*4.. */
          uint32_t r[4];
          gk__ldmatrix_x4(r, sb + (c0 + (lmat / 2) * 8 + lrow) * L::B_PITCH + kk + (lmat % 2) * 4);
          bf[j][0] = r[0], bf[j][1] = r[1], bf[j + 1][0] = r[2], bf[j + 1][1] = r[3];
        } else { /* stored [k][n]: b0 (k=t, n=g), b1 (k=t+4, n=g) */
          const uint32_t *p = sbu + (kk + t) * L::B_PITCH + c0 + g;
          bf[j][0] = p[0], bf[j][1] = p[4 * L::B_PITCH];
          bf[j + 1][0] = p[8], bf[j + 1][1] = p[4 * L::B_PITCH + 8];
        }
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) gk__mma1688(acc[i][j], af[i], bf[j]);
    }
  }
  gk__cp_async_wait<0>(); /* no copy may outlive the block (the last groups are empty) */
  gk__store_m16n8(args, c, m0 + wm, n0 + wn, g, t, acc);
}

/* Host side: the launcher for one configuration C. */
template <class C>
struct gk__tf32_launcher {
  template <bool TA, bool TB, bool VEC>
  static cudaError_t run(const gk_problem *p, cudaStream_t stream) {
    const auto kernel = gk__tf32_gemm<C, TA, TB, VEC>;
    const size_t smem = gk__tf32_smem<C, TA, TB>::BYTES;
    const auto args = gk__mma_args<gk__tf32_args, float, float>(p);
    return gk__launch_tiles<C::BM, C::BN, C::NT>(kernel, smem, args, p, stream);
  }

  static cudaError_t launch(const gk_problem *p, cudaStream_t stream) {
    return gk__launch_layouts<gk__tf32_launcher<C>, 4>(p, stream);
  }
};

#endif /* GK_05_MMA_TF32_CUH */
