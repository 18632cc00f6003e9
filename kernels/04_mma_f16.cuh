/*
 * 04_mma_f16.cuh - the mma.sync f16/bf16 GEMM of 04_mma_f16.cu, as a template over its tile
 * configuration (so that bench_kernels can time other configurations beside the registered one).
 * The design and its reasons are in 04_mma_f16.cu's opening comment.
 */
#ifndef GK_04_MMA_F16_CUH
#define GK_04_MMA_F16_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gk_tile_common.cuh"


/* A tile configuration: block tile BM x BN x BK, WARPS_M x WARPS_N warps, STAGES cp.async stages. */
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct gk__mma16_cfg {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, STAGES = STAGES_;
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, NT = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N; /* the warp tile */
  static constexpr int MI = WM / 16, NI = WN / 8;            /* mma tiles per warp */
  static constexpr int PAD = 8;                              /* 16 bytes of half per shared row */
  static_assert(WM % 16 == 0 && WN % 16 == 0, "a warp tile is a grid of 16x16 mma pairs");
  static_assert(NI % 2 == 0, "B fragments are loaded two n8 tiles per ldmatrix.x4");
  static_assert(BK % 16 == 0, "the k tile is a whole number of mma k16 steps");
};

/* Shared layout of one stage: operands keep their global layout (see the file comment). */
template <class C, bool TA, bool TB>
struct gk__mma16_smem {
  static constexpr int BM = C::BM, BN = C::BN, BK = C::BK, PAD = C::PAD, STAGES = C::STAGES;
  static constexpr int A_ROWS = TA ? BK : BM, A_COLS = TA ? BM : BK, A_PITCH = A_COLS + PAD;
  static constexpr int B_ROWS = TB ? BN : BK, B_COLS = TB ? BK : BN, B_PITCH = B_COLS + PAD;
  static constexpr int A_ELEMS = A_ROWS * A_PITCH, B_ELEMS = B_ROWS * B_PITCH;
  static constexpr int STAGE_ELEMS = A_ELEMS + B_ELEMS;
  static constexpr size_t BYTES = (size_t)STAGES * STAGE_ELEMS * 2;
};

template <typename T>
struct gk__mma16_args {
  const T *a, *b;
  T *c;
  int m, n, k;
  int64_t lda, ldb, stride_a, stride_b, stride_c;
  float alpha, beta;
  bool beta_zero;
  bool c_pair; /* n even and c 4-byte aligned: two outputs per store */
};

template <typename T>
__device__ __forceinline__ void gk__mma16816(float d[4], const uint32_t a[4], const uint32_t b[2]);
template <>
__device__ __forceinline__ void gk__mma16816<__half>(float d[4], const uint32_t a[4],
                                                 const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void gk__mma16816<__nv_bfloat16>(float d[4], const uint32_t a[4],
                                                        const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ float2 gk__load2(const __half *p) {
  return __half22float2(*reinterpret_cast<const __half2 *>(p));
}
__device__ __forceinline__ float2 gk__load2(const __nv_bfloat16 *p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p));
}
__device__ __forceinline__ void gk__store2(__half *p, float v0, float v1) {
  *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(v0, v1);
}
__device__ __forceinline__ void gk__store2(__nv_bfloat16 *p, float v0, float v1) {
  *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(v0, v1);
}

template <typename T, class C, bool TA, bool TB, bool VEC>
__global__ void __launch_bounds__(C::NT) gk__mma16_gemm(gk__mma16_args<T> args) {
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK, STAGES = C::STAGES, NT = C::NT;
  constexpr int WARPS_N = C::WARPS_N, WM = C::WM, WN = C::WN, MI = C::MI, NI = C::NI;
  using L = gk__mma16_smem<C, TA, TB>;
  GK_MMA_TILE_PROLOGUE(T, L);
  /* ldmatrix.x4: lane l addresses row l%8 of matrix l/8 */
  const int lrow = lane % 8, lmat = lane / 8;

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

#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t af[MI][4], bf[NI][2];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const int r0 = wm + i * 16;
        if (TA) /* stored [k][m]: matrix j covers m (j%2)*8.., k (j/2)*8.. */
          gk__ldmatrix_x4_trans(af[i], sa + (kk + (lmat / 2) * 8 + lrow) * L::A_PITCH + r0 +
                                           (lmat % 2) * 8);
        else /* stored [m][k] */
          gk__ldmatrix_x4(af[i], sa + (r0 + (lmat % 2) * 8 + lrow) * L::A_PITCH + kk +
                                     (lmat / 2) * 8);
      }
#pragma unroll
      for (int j = 0; j < NI; j += 2) {
        const int c0 = wn + j * 8;
        uint32_t r[4];
        if (TB) /* stored [n][k]: matrix q covers n (q/2)*8.., k (q%2)*8.. */
          gk__ldmatrix_x4(r, sb + (c0 + (lmat / 2) * 8 + lrow) * L::B_PITCH + kk + (lmat % 2) * 8);
        else /* stored [k][n] */
          gk__ldmatrix_x4_trans(r, sb + (kk + (lmat % 2) * 8 + lrow) * L::B_PITCH + c0 +
                                       (lmat / 2) * 8);
        bf[j][0] = r[0], bf[j][1] = r[1], bf[j + 1][0] = r[2], bf[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) gk__mma16816<T>(acc[i][j], af[i], bf[j]);
    }
  }
  gk__cp_async_wait<0>(); /* no copy may outlive the block (the last groups are empty) */
  gk__store_m16n8(args, c, m0 + wm, n0 + wn, lane / 4, lane % 4, acc);
}

/* Host side: the launcher for one configuration C. */
template <typename T, class C>
struct gk__mma16_launcher {
  template <bool TA, bool TB, bool VEC>
  static cudaError_t run(const gk_problem *p, cudaStream_t stream) {
    const auto kernel = gk__mma16_gemm<T, C, TA, TB, VEC>;
    const size_t smem = gk__mma16_smem<C, TA, TB>::BYTES;
    const auto args = gk__mma_args<gk__mma16_args<T>, T, float>(p);
    return gk__launch_tiles<C::BM, C::BN, C::NT>(kernel, smem, args, p, stream);
  }

  static cudaError_t launch(const gk_problem *p, cudaStream_t stream) {
    return gk__launch_layouts<gk__mma16_launcher<T, C>, 8>(p, stream);
  }
};

#endif /* GK_04_MMA_F16_CUH */
