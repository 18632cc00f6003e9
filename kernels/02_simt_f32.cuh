/*
 * 02_simt_f32.cuh - the register-tiled SIMT GEMM shared by 02_simt_f32.cu and 03_simt_f64.cu.
 *
 * Tiling (BM x BN block tile, BK deep; every thread owns an 8x8 tile of C):
 *
 *   block  BM x BN, (BM/8)*(BN/8) threads, warps laid out (BM/64) x (BN/32)
 *   warp   64 x 32: lane (lm, ln) = (lane/4, lane%4) owns four 4x4 sub-tiles of C at rows
 *          {lm*4, 32 + lm*4} and columns {ln*4, 16 + ln*4} of the warp tile.
 *
 * Each k step a thread reads two 4-vectors of A and two of B from shared memory (16-byte LDS for
 * f32) and does 64 FMAs: 8 FMAs per shared-memory load instead of tiled16's 1/2. A is stored
 * transposed in shared memory (As[k][m]) so the 8 A values a thread needs are contiguous too.
 * Within a warp the A reads touch 8 consecutive 16-byte vectors and the B reads 4: no bank
 * conflicts, and lanes with the same lm (ln) get a broadcast.
 *
 * Global -> shared: double buffering. The next k tile is loaded into registers (16-byte LDG when
 * rows are 16-byte aligned, see VEC) while the current one is multiplied from shared memory,
 * then stored into the other shared buffer: one __syncthreads per k tile. A (and B^T) must be
 * transposed on the way into shared memory, which the registers do for free; cp.async copies
 * bytes unchanged, so with ASYNC only the operand that needs no transpose takes it, which frees
 * that operand's staging registers (02 measured +6 points of cuBLAS from it: the spills went).
 * The transposed store pads each shared row by 4 elements: with pitch BM the two threads that
 * share a row of A would hit the same bank.
 *
 * Edges: loads outside m/n/k are zero-filled, so the inner loop has no branch; the epilogue stores
 * only what lies inside C. Transposes are template parameters: they change only which global
 * dimension is contiguous, i.e. the load code, never the inner loop.
 */
#ifndef GK_02_SIMT_F32_CUH
#define GK_02_SIMT_F32_CUH

#include <type_traits>

#include "gk_tile_common.cuh"

template <typename T>
struct gk__simt_args {
  const T *a, *b;
  T *c;
  int m, n, k;
  int64_t lda, ldb;
  int64_t stride_a, stride_b, stride_c; /* elements between batch entries */
  T alpha, beta;
  bool beta_zero; /* C is not read (BLAS semantics: NaN in C does not propagate) */
  bool c_vec;     /* C rows are 16-byte aligned for 4-vectors: n % 4 == 0, c aligned */
};

/* 4 consecutive elements: one 16-byte access for f32, two for f64. */
template <typename T>
struct gk__v4 {
  T v[4];
};
template <typename T>
__device__ __forceinline__ gk__v4<T> gk__ld4(const T *p) {
  gk__v4<T> r;
  if (sizeof(T) == 4) {
    float4 f = *reinterpret_cast<const float4 *>(p);
    r.v[0] = f.x, r.v[1] = f.y, r.v[2] = f.z, r.v[3] = f.w;
  } else {
    double2 d0 = *reinterpret_cast<const double2 *>(p);
    double2 d1 = *reinterpret_cast<const double2 *>(p + 2);
    r.v[0] = d0.x, r.v[1] = d0.y, r.v[2] = d1.x, r.v[3] = d1.y;
  }
  return r;
}
template <typename T>
__device__ __forceinline__ void gk__st4(T *p, const gk__v4<T> &r) {
  if (sizeof(T) == 4) {
    *reinterpret_cast<float4 *>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  } else {
    *reinterpret_cast<double2 *>(p) = make_double2(r.v[0], r.v[1]);
    *reinterpret_cast<double2 *>(p + 2) = make_double2(r.v[2], r.v[3]);
  }
}

/*
 * One operand's global -> register -> shared path. The stored tile is ROWS x COLS with COLS
 * contiguous in global memory; TRANSPOSE_INTO_SMEM stores element (r, c) at smem[c][r] instead
 * of smem[r][c]. Each thread moves PER_THREAD 4-vectors.
 */
template <typename T, int ROWS, int COLS, int PITCH, int NT, bool VEC, bool TRANSPOSE_INTO_SMEM>
struct gk__simt_stage {
  static constexpr int VECS_PER_ROW = COLS / 4;
  static constexpr int PER_THREAD = ROWS * COLS / 4 / NT;
  static_assert(COLS % 4 == 0, "a tile row is loaded as 4-vectors");
  static_assert((ROWS * COLS / 4) % NT == 0, "every thread loads the same number of 4-vectors");

  gk__v4<T> regs[PER_THREAD];

  /* gtile: element (0,0) of the tile; rows_left/cols_left: valid extent from there. */
  __device__ __forceinline__ void load(const T *gtile, int64_t ld, int rows_left, int cols_left,
                                       int tid) {
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
      int idx = tid + i * NT;
      int row = idx / VECS_PER_ROW;
      int col = (idx % VECS_PER_ROW) * 4;
      const T *src = gtile + row * ld + col;
      if (VEC) {
        /* cols_left is a multiple of 4 here: the vector is wholly in or out */
        if (row < rows_left && col < cols_left) {
          regs[i] = gk__ld4(src);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) regs[i].v[e] = T(0);
        }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          regs[i].v[e] = (row < rows_left && col + e < cols_left) ? src[e] : T(0);
      }
    }
  }

  __device__ __forceinline__ void store(T *smem, int tid) const {
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
      int idx = tid + i * NT;
      int row = idx / VECS_PER_ROW;
      int col = (idx % VECS_PER_ROW) * 4;
      if (TRANSPOSE_INTO_SMEM) {
#pragma unroll
        for (int e = 0; e < 4; ++e) smem[(col + e) * PITCH + row] = regs[i].v[e];
      } else {
        gk__st4(smem + row * PITCH + col, regs[i]);
      }
    }
  }
};

/*
 * One block's work, shared by the kernels below (gk__simt_gemm: one block per tile of C;
 * gk__simt_splitk_gemm in 09: a cluster of blocks per tile, each over a slice of k).
 * ASYNC: the operand that needs no transpose (A when trans_a, B when not trans_b) goes global ->
 * shared by cp.async instead of through registers (only with VEC), freeing its staging
 * registers.
 */
template <typename T, int BM, int BN, int BK, bool ASYNC, bool TA, bool TB, bool VEC, int JG = 2>
struct gk__simt_cta {
  /* JG: column groups of 4 per thread, 16 columns apart: 2 (8 x 8 outputs, warp 64 x 32) or 4
   * (8 x 16, warp 64 x 64: B read as 4 vectors a k step, 128 FMAs for 6 shared loads) */
  static constexpr int TN = 4 * JG, WN = 16 * JG;
  static constexpr int NT = (BM / 8) * (BN / TN);
  static constexpr int PAD = 4;
  static constexpr int PA = BM + PAD, PB = BN + PAD;
  /* shared memory of the main loop: two buffers of each operand's k tile */
  static constexpr int A_ELEMS = 2 * BK * PA, B_ELEMS = 2 * BK * PB;
  static_assert(BM % 64 == 0 && BN % WN == 0, "the block tile is a grid of 64 x WN warp tiles");
  static_assert(BK % 4 == 0, "k tiles are loaded as 4-vectors");

  /* A tile: stored BM x BK (k contiguous, transposed into smem) or BK x BM when trans_a. */
  using stage_a = gk__simt_stage<T, TA ? BK : BM, TA ? BM : BK, PA, NT, VEC, !TA>;
  /* B tile: stored BK x BN (n contiguous) or BN x BK when trans_b (transposed into smem). */
  using stage_b = gk__simt_stage<T, TB ? BN : BK, TB ? BK : BN, PB, NT, VEC, TB>;
  static constexpr bool A_DIRECT = ASYNC && VEC && TA, B_DIRECT = ASYNC && VEC && !TB;

  /* acc[i][j] is the tile's element (row_of(i), col_of(j)) (see the file comment). */
  static __device__ __forceinline__ int row_of(int i) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    return (warp / (BN / WN)) * 64 + (i / 4) * 32 + (lane / 4) * 4 + (i % 4);
  }
  static __device__ __forceinline__ int col_of(int j) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    return (warp % (BN / WN)) * WN + (j / 4) * 16 + (lane % 4) * 4 + (j % 4);
  }

  /* acc = the BM x BN tile at (m0, n0) of A*B over k tiles [kt0, kt1) (acc = 0 when empty);
   * a, b: this batch entry's operands; as, bs: A_ELEMS and B_ELEMS of shared memory. Ends
   * with a __syncthreads, so the caller may reuse as and bs at once. */
  static __device__ __forceinline__ void mainloop(const gk__simt_args<T> &args, const T *a,
                                                  const T *b, int m0, int n0, int kt0, int kt1,
                                                  T *as, T *bs, T (&acc)[8][TN]) {
    const int tid = threadIdx.x;
    /* Each operand's tile origin and how it advances per k tile. */
    const T *a_tile = TA ? a + (int64_t)kt0 * BK * args.lda + m0
                         : a + (int64_t)m0 * args.lda + (int64_t)kt0 * BK;
    const T *b_tile = TB ? b + (int64_t)n0 * args.ldb + (int64_t)kt0 * BK
                         : b + (int64_t)kt0 * BK * args.ldb + n0;
    const int64_t a_step = TA ? (int64_t)BK * args.lda : BK;
    const int64_t b_step = TB ? BK : (int64_t)BK * args.ldb;
    const int m_left = args.m - m0, n_left = args.n - n0;

    stage_a ga;
    stage_b gb;
    /* Loads k tile k0: direct operands by cp.async into shared buffer buf, the others into
     * registers (stored by store_k_tile after the FMAs). */
    int k_left = args.k - kt0 * BK; /* of the next k tile to load */
    auto load_k_tile = [&](int buf) {
      T *as_buf = as + buf * (BK * PA), *bs_buf = bs + buf * (BK * PB);
      if (A_DIRECT) gk__load_tile<T, BK, BM, PA, NT, true>(as_buf, a_tile, args.lda, k_left, m_left, tid);
      else if (TA)  ga.load(a_tile, args.lda, k_left, m_left, tid);
      else          ga.load(a_tile, args.lda, m_left, k_left, tid);
      if (B_DIRECT) gk__load_tile<T, BK, BN, PB, NT, true>(bs_buf, b_tile, args.ldb, k_left, n_left, tid);
      else if (TB)  gb.load(b_tile, args.ldb, n_left, k_left, tid);
      else          gb.load(b_tile, args.ldb, k_left, n_left, tid);
      if (A_DIRECT || B_DIRECT) gk__cp_async_commit();
      a_tile += a_step;
      b_tile += b_step;
      k_left -= BK;
    };
    auto store_k_tile = [&](int buf) {
      if (!A_DIRECT) ga.store(as + buf * (BK * PA), tid);
      if (!B_DIRECT) gb.store(bs + buf * (BK * PB), tid);
      if (A_DIRECT || B_DIRECT) gk__cp_async_wait<0>();
    };

    const int warp = tid / 32, lane = tid % 32;
    const int wm = (warp / (BN / WN)) * 64, wn = (warp % (BN / WN)) * WN;
    const int lm = lane / 4, ln = lane % 4;

#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = T(0);
    if (kt0 >= kt1) return;

    load_k_tile(0);
    store_k_tile(0);
    __syncthreads();

    const int count = kt1 - kt0;
    for (int kt = 0; kt < count; ++kt) {
      const int cur = kt & 1;
      if (kt + 1 < count) load_k_tile(cur ^ 1); /* in flight during the FMAs */
      const T *as_cur = as + cur * (BK * PA), *bs_cur = bs + cur * (BK * PB);

#pragma unroll
      for (int kk = 0; kk < BK; ++kk) {
        const T *arow = as_cur + kk * PA + wm + lm * 4;
        const T *brow = bs_cur + kk * PB + wn + ln * 4;
        gk__v4<T> a_lo = gk__ld4(arow), a_hi = gk__ld4(arow + 32);
        T av[8] = {a_lo.v[0], a_lo.v[1], a_lo.v[2], a_lo.v[3],
                   a_hi.v[0], a_hi.v[1], a_hi.v[2], a_hi.v[3]};
        T bv[TN];
#pragma unroll
        for (int g = 0; g < JG; ++g) {
          const gk__v4<T> b4 = gk__ld4(brow + 16 * g);
#pragma unroll
          for (int e = 0; e < 4; ++e) bv[4 * g + e] = b4.v[e];
        }
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int j = 0; j < TN; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
      }

      if (kt + 1 < count) store_k_tile(cur ^ 1);
      __syncthreads();
    }
  }

  /* acc[i][jh*4 .. jh*4 + 3]: four neighbours in a row of the tile, at (row_of(i), col_of(jh*4)). */
  static __device__ __forceinline__ gk__v4<T> acc4(const T (&acc)[8][TN], int i, int jh) {
    gk__v4<T> v;
#pragma unroll
    for (int e = 0; e < 4; ++e) v.v[e] = acc[i][jh * 4 + e];
    return v;
  }

  /* C(row, col .. col + 3) = alpha * sum + beta * C, only what lies inside C (row < m). */
  static __device__ __forceinline__ void store4(const gk__simt_args<T> &args, T *c, int row,
                                                int col, const gk__v4<T> &sum) {
    if (row >= args.m) return;
    T *crow = c + (int64_t)row * args.n;
    gk__v4<T> out;
#pragma unroll
    for (int e = 0; e < 4; ++e) out.v[e] = args.alpha * sum.v[e];
    if (args.c_vec && col + 3 < args.n) {
      if (!args.beta_zero) {
        gk__v4<T> old = gk__ld4(crow + col);
#pragma unroll
        for (int e = 0; e < 4; ++e) out.v[e] = fma(args.beta, old.v[e], out.v[e]);
      }
      gk__st4(crow + col, out);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (col + e >= args.n) break;
        T v = out.v[e];
        if (!args.beta_zero) v = fma(args.beta, crow[col + e], v);
        crow[col + e] = v;
      }
    }
  }
};

/* One block per BM x BN tile of C over all of k. MIN_BLOCKS: blocks per SM the register budget
 * must allow (launch bounds). */
template <typename T, int BM, int BN, int BK, int MIN_BLOCKS, bool ASYNC, bool TA, bool TB,
          bool VEC, int JG = 2>
__global__ void __launch_bounds__((BM / 8) * (BN / (4 * JG)), MIN_BLOCKS)
    gk__simt_gemm(gk__simt_args<T> args) {
  using cta = gk__simt_cta<T, BM, BN, BK, ASYNC, TA, TB, VEC, JG>;
  __shared__ __align__(16) T as[cta::A_ELEMS];
  __shared__ __align__(16) T bs[cta::B_ELEMS];

  int tile_m, tile_n;
  gk__raster((args.m + BM - 1) / BM, (args.n + BN - 1) / BN, &tile_m, &tile_n);
  const int m0 = tile_m * BM, n0 = tile_n * BN;
  const int64_t z = blockIdx.z;
  T acc[8][cta::TN];
  cta::mainloop(args, args.a + z * args.stride_a, args.b + z * args.stride_b, m0, n0, 0,
                (args.k + BK - 1) / BK, as, bs, acc);

  T *c = args.c + z * args.stride_c;
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int jh = 0; jh < JG; ++jh)
      cta::store4(args, c, m0 + cta::row_of(i), n0 + cta::col_of(jh * 4), cta::acc4(acc, i, jh));
}

/* Host side: the kernel arguments for p (the whole batch; launchers offset them per chunk). */
template <typename T>
static inline gk__simt_args<T> gk__simt_make_args(const gk_problem *p) {
  gk__simt_args<T> args = gk__common_args<gk__simt_args<T>, T, T>(p);
  args.c_vec = gk__aligned(p->c, 16) && p->n % 4 == 0;
  return args;
}

/* Calls f(TA, TB, VEC) with p's transposes and vec as std::bool_constant arguments: the one
 * place that turns the run-time layout into template instantiations. */
template <typename F>
static inline cudaError_t gk__with_layout(const gk_problem *p, bool vec, F f) {
  using yes = std::true_type;
  using no = std::false_type;
  if (p->trans_a) {
    if (p->trans_b) return vec ? f(yes(), yes(), yes()) : f(yes(), yes(), no());
    return vec ? f(yes(), no(), yes()) : f(yes(), no(), no());
  }
  if (p->trans_b) return vec ? f(no(), yes(), yes()) : f(no(), yes(), no());
  return vec ? f(no(), no(), yes()) : f(no(), no(), no());
}

/* Whether the SIMT kernels may use 4-vector loads of whole rows: for f32 a 4-vector is one
 * 16-byte load, for f64 two, so 16-byte row alignment with ld % 4 == 0 covers both. */
template <typename T>
static inline bool gk__simt_vec(const gk_problem *p) {
  return gk__rows_vectorizable(p, 4) && gk__rows_vectorizable(p, (int)(16 / sizeof(T)));
}

/* Host side: builds the arguments, picks the instantiation, launches every batch chunk. */
template <typename T, int BM, int BN, int BK, int MIN_BLOCKS, bool ASYNC = false, int JG = 2>
struct gk__simt_launcher {
  template <bool TA, bool TB, bool VEC>
  static cudaError_t run(const gk_problem *p, cudaStream_t stream) {
    const gk__simt_args<T> args = gk__simt_make_args<T>(p);
    const int64_t tiles = ((p->m + BM - 1) / BM) * ((p->n + BN - 1) / BN);
    if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
    return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
      dim3 grid((unsigned)tiles, 1, count);
      gk__simt_gemm<T, BM, BN, BK, MIN_BLOCKS, ASYNC, TA, TB, VEC, JG>
          <<<grid, (BM / 8) * (BN / (4 * JG)), 0, stream>>>(gk__args_at(args, first));
      return cudaGetLastError();
    });
  }

  static cudaError_t launch(const gk_problem *p, cudaStream_t stream) {
    if (!gk__fits_int32(p)) return cudaErrorInvalidValue;
    return gk__with_layout(p, gk__simt_vec<T>(p), [&](auto ta, auto tb, auto vec) {
      return run<decltype(ta)::value, decltype(tb)::value, decltype(vec)::value>(p, stream);
    });
  }
};

#endif /* GK_02_SIMT_F32_CUH */
