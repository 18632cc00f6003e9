/*
 * 07_wgmma_f16.cuh - the Hopper (sm_90a) f16/bf16 GEMM of 07_wgmma_f16.cu as a template over
 * its element type and operand layouts: the tile configuration, the TMA ring's set-up and
 * producer step (shared with 08 and the later Hopper kernels), the warp-specialised kernel and
 * its host launcher; the PTX it issues (mbarrier, TMA, wgmma, setmaxnreg) is gk_wgmma_ptx.cuh's.
 * The design and its reasons are in 07_wgmma_f16.cu's opening comment.
 *
 * Contract: header-only, included by .cu files only. Everything that emits sm_90a instructions
 * sits under GK_WGMMA_DEVICE (gk_wgmma_ptx.cuh), so the compute_80 PTX of the same translation
 * unit holds an empty kernel body and stays loadable (JIT) on older GPUs; the launcher refuses
 * (cudaErrorInvalidValue) any problem gk__wgmma_fits() rejects, and returns the first CUDA or
 * driver error otherwise.
 * The tensor maps are encoded on the host at each launch (a few microseconds); the driver's
 * cuTensorMapEncodeTiled is found once through cudaGetDriverEntryPointByVersion, so nothing
 * links -lcuda. Thread-safe: no mutable state but that function pointer (a C++ static, whose
 * initialisation is thread-safe).
 */
#ifndef GK_07_WGMMA_F16_CUH
#define GK_07_WGMMA_F16_CUH

#include <cuda.h> /* CUtensorMap and its enums: types only, no -lcuda */
#include <cudaTypedefs.h>

#include "04_mma_f16.cuh" /* gk__mma16_args, gk__load2 / gk__store2 for the epilogue */
#include "gk_wgmma_ptx.cuh" /* GK_WGMMA_DEVICE; mbarrier, TMA, wgmma, setmaxnreg */

/* The tile configuration: BM = 128 (two consumer warpgroups of 64 rows), BN = 128 or 256 (one
 * wgmma m64nBNk16 per k16 step), BK = 64 two-byte elements = 128 bytes: one 128-byte swizzle row,
 * so a TMA box of 64 x 64 lands as 64 rows of 128 bytes (8 KB), the unit both operand layouts
 * are built from. */
template <int BN_, int STAGES_>
struct gk__wgmma_cfg {
  static constexpr int BM = 128, BN = BN_, BK = 64, STAGES = STAGES_;
  static constexpr int CONSUMERS = BM / 64;
  static constexpr int THREADS = 128 * (1 + CONSUMERS); /* warpgroup 0 is the producer */
  static constexpr int ACC = BN / 2;                    /* f32 accumulators per consumer thread */
  static constexpr int CHUNK = 64;                      /* rows (or columns) per TMA box */
  static constexpr int CHUNK_BYTES = CHUNK * BK * 2;    /* 8 KB */
  static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  /* The epilogue stages each consumer's 64 x BN f32 tile in the (then idle) ring; rows padded by
   * 32 bytes so that the accumulators' 8-byte stores (8 rows x 4 pairs per half-warp) hit 32
   * different banks. */
  static constexpr int C_PITCH = BN * 4 + 32;
  static constexpr int C_BYTES = CONSUMERS * 64 * C_PITCH;
  /* stages, 1 KB slack to align them to the 128-byte swizzle's 1 KB period, two barriers each */
  static constexpr size_t SMEM_BYTES = (size_t)STAGES * STAGE_BYTES + 1024 + 16 * STAGES;
  /* registers: the producer gives up what the accumulators need (setmaxnreg) */
  static constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
  static_assert(BN == 128 || BN == 256, "wgmma wrappers exist for m64n128k16 and m64n256k16");
  static_assert(BM % CHUNK == 0 && BN % CHUNK == 0, "operand tiles are whole 64-row TMA boxes");
  static_assert(C_BYTES <= STAGES * STAGE_BYTES, "the C staging tile fits in the ring");
  static_assert(SMEM_BYTES <= 227 * 1024, "Hopper gives a block at most 227 KB of shared memory");
  static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 128 * CONSUMERS <= 65536,
                "the register file holds the producer and every consumer warpgroup");
  static_assert(CONSUMER_REGS % 8 == 0 && PRODUCER_REGS % 8 == 0, "setmaxnreg takes multiples of 8");
};

#if GK_WGMMA_DEVICE
/* ---- the TMA ring shared by 07 and 08 ------------------------------------------------------ */

/* Shared addresses of the ring: STAGES stages of C::STAGE_BYTES from the first 1 KB boundary of
 * the dynamic shared memory (the 128-byte swizzle pattern repeats every 1 KB), then STAGES
 * "full" and STAGES "empty" mbarriers of 8 bytes each. */
struct gk__ring {
  uint32_t smem0, full0, empty0;
};

/* Lays the ring out over smem_raw and (thread 0) initialises its barriers: full[s] completes on
 * the producer's expect_tx plus the TMA bytes, empty[s] on one arrival per consumer warpgroup.
 * Every thread of the block must call it (it ends with __syncthreads). */
template <class C>
__device__ __forceinline__ gk__ring gk__ring_init(unsigned char *smem_raw) {
  gk__ring ring;
  ring.smem0 = (gk__smem_addr(smem_raw) + 1023u) & ~1023u;
  ring.full0 = ring.smem0 + C::STAGES * C::STAGE_BYTES;
  ring.empty0 = ring.full0 + 8 * C::STAGES;
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::STAGES; ++s) {
      gk__mbar_init(ring.full0 + 8 * s, 1);
      gk__mbar_init(ring.empty0 + 8 * s, C::CONSUMERS);
    }
    gk__mbar_init_fence();
  }
  __syncthreads();
  return ring;
}

/* Producer side, k tile kt: waits until its stage (kt % STAGES) is free, arms the stage's full
 * barrier for C::STAGE_BYTES and returns that barrier for the TMA loads. */
template <class C>
__device__ __forceinline__ uint32_t gk__ring_produce(const gk__ring &ring, int kt) {
  const int s = kt % C::STAGES;
  if (kt >= C::STAGES) gk__mbar_wait(ring.empty0 + 8 * s, ((kt / C::STAGES) + 1) & 1);
  const uint32_t bar = ring.full0 + 8 * s;
  gk__mbar_expect_tx(bar, C::STAGE_BYTES); /* out-of-bounds box parts count: zero-filled */
  return bar;
}

/* Producer side, ring slot `it` (the running count of k tiles this CTA has loaded): the k tile
 * at k0 of the BM x BN tile at (m0, n0) of problem z, 2 + BN / 64 TMA boxes on the slot's full
 * barrier. TA / TB: the stored layouts, as in the kernel below. */
template <class C, bool TA, bool TB>
__device__ __forceinline__ void gk__wgmma_produce(const gk__ring &ring, int it, const CUtensorMap *map_a,
                                                  const CUtensorMap *map_b, int m0, int n0, int k0,
                                                  int z) {
  constexpr int CHUNK = C::CHUNK;
  const int s = it % C::STAGES;
  const uint32_t bar = gk__ring_produce<C>(ring, it);
  const uint32_t sa = ring.smem0 + s * C::STAGE_BYTES, sb = sa + C::A_BYTES;
#pragma unroll
  for (int c = 0; c < C::BM / CHUNK; ++c) {
    if (TA) gk__tma_load_3d(sa + c * C::CHUNK_BYTES, map_a, m0 + c * CHUNK, k0, z, bar);
    else gk__tma_load_3d(sa + c * C::CHUNK_BYTES, map_a, k0, m0 + c * CHUNK, z, bar);
  }
#pragma unroll
  for (int c = 0; c < C::BN / CHUNK; ++c) {
    if (TB) gk__tma_load_3d(sb + c * C::CHUNK_BYTES, map_b, k0, n0 + c * CHUNK, z, bar);
    else gk__tma_load_3d(sb + c * C::CHUNK_BYTES, map_b, n0 + c * CHUNK, k0, z, bar);
  }
}

/* Consumer side, ring slot `it`: waits for its bytes, issues this warpgroup's BK / 16 wgmmas on
 * its 64 rows (box `consumer` of A in either layout) and keeps them in flight; once the group
 * before is done, releases slot it - 1 when release_prev (that slot held this CTA's previous k
 * tile). The caller waits for the last group (gk__wgmma_wait<0>) before reading acc. */
template <typename T, class C, bool TA, bool TB>
__device__ __forceinline__ void gk__wgmma_consume(const gk__ring &ring, int it, bool release_prev,
                                                  int consumer, float (&acc)[C::ACC]) {
  /* byte offsets per k16 step and descriptor strides, by layout (see gk__wgmma_desc) */
  constexpr uint32_t A_STEP = TA ? 16 * 128 : 32, B_STEP = TB ? 32 : 16 * 128;
  constexpr uint32_t A_LBO = TA ? C::CHUNK_BYTES : 16, B_LBO = TB ? 16 : C::CHUNK_BYTES;
  const int s = it % C::STAGES;
  gk__mbar_wait(ring.full0 + 8 * s, (it / C::STAGES) & 1);
  const uint32_t sa = ring.smem0 + s * C::STAGE_BYTES + consumer * C::CHUNK_BYTES;
  const uint32_t sb = ring.smem0 + s * C::STAGE_BYTES + C::A_BYTES;
  gk__wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::BK / 16; ++kk)
    gk__wgmma_op<T, C::BN, TA ? 1 : 0, TB ? 0 : 1>::run(acc, gk__wgmma_desc(sa + kk * A_STEP, A_LBO, 1024),
                                                       gk__wgmma_desc(sb + kk * B_STEP, B_LBO, 1024));
  gk__wgmma_commit();
  /* keep this k tile's group in flight; the previous one is done, so its stage is free */
  gk__wgmma_wait<1>();
  if (release_prev && threadIdx.x % 128 == 0)
    gk__mbar_arrive(ring.empty0 + 8 * ((it + C::STAGES - 1) % C::STAGES));
}

/* Four neighbouring outputs (row, col..col+3) after alpha/beta; vec4 (n % 4 == 0, C 8-byte
 * aligned): the group is wholly inside, two 4-byte accesses; else element by element. */
template <typename T>
__device__ __forceinline__ void gk__wgmma_store4(const gk__mma16_args<T> &args, T *c, int row,
                                                 int col, float4 v, bool vec4) {
  T *dst = c + (int64_t)row * args.n + col;
  float r[4] = {v.x * args.alpha, v.y * args.alpha, v.z * args.alpha, v.w * args.alpha};
  if (vec4) {
    if (!args.beta_zero) {
      const float2 lo = gk__load2(dst), hi = gk__load2(dst + 2);
      r[0] = fmaf(args.beta, lo.x, r[0]), r[1] = fmaf(args.beta, lo.y, r[1]);
      r[2] = fmaf(args.beta, hi.x, r[2]), r[3] = fmaf(args.beta, hi.y, r[3]);
    }
    gk__store2(dst, r[0], r[1]);
    gk__store2(dst + 2, r[2], r[3]);
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (col + e >= args.n) break;
    if (!args.beta_zero) r[e] = fmaf(args.beta, (float)dst[e], r[e]);
    dst[e] = T(r[e]);
  }
}
#endif /* GK_WGMMA_DEVICE */

/*
 * The kernel: one CTA per 128 x BN tile of C (grouped order), blockIdx.z = the problem within
 * the batch chunk. Warpgroup 0 (one elected thread) fills the STAGES-deep ring by TMA; warpgroups
 * 1..CONSUMERS each multiply their 64 rows of the tile. full[s]: the producer's expect_tx plus
 * the TMA bytes; empty[s]: one arrival per consumer warpgroup once its wgmmas reading s are done.
 * TA / TB: the stored layouts (gk_problem.h): A stored k x m (M-major) / B stored n x k (K-major).
 */
template <typename T, class C, bool TA, bool TB>
__global__ void __launch_bounds__(C::THREADS, 1)
    gk__wgmma_gemm(const __grid_constant__ CUtensorMap map_a,
                   const __grid_constant__ CUtensorMap map_b, gk__mma16_args<T> args) {
#if GK_WGMMA_DEVICE
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const gk__ring ring = gk__ring_init<C>(smem_raw);
  const int warpgroup = threadIdx.x / 128, wg_thread = threadIdx.x % 128;

  int tile_m, tile_n;
  gk__raster((args.m + BM - 1) / BM, (args.n + BN - 1) / BN, &tile_m, &tile_n);
  const int m0 = tile_m * BM, n0 = tile_n * BN, z = (int)blockIdx.z;
  const int k_tiles = (args.k + BK - 1) / BK;

  if (warpgroup == 0) { /* producer */
    gk__setmaxnreg_dec<C::PRODUCER_REGS>();
    if (wg_thread != 0) return;
    for (int kt = 0; kt < k_tiles; ++kt)
      gk__wgmma_produce<C, TA, TB>(ring, kt, &map_a, &map_b, m0, n0, kt * BK, z);
    return;
  }

  /* consumers: warpgroup w multiplies rows (w-1)*64 .. +64 of the tile */
  gk__setmaxnreg_inc<C::CONSUMER_REGS>();
  const int consumer = warpgroup - 1;
  float acc[C::ACC];
#pragma unroll
  for (int i = 0; i < C::ACC; ++i) acc[i] = 0.0f;

  for (int kt = 0; kt < k_tiles; ++kt) gk__wgmma_consume<T, C, TA, TB>(ring, kt, kt > 0, consumer, acc);
  gk__wgmma_wait<0>();

  /* Epilogue through shared memory, so that C is written (and, with beta, read) in whole rows:
   * once both consumers are done with the ring, each puts its 64 x BN f32 tile there in the
   * accumulator layout (thread (warp w4, lane g*4+t) holds rows w4*16+g and +8), then reads it
   * back four columns per thread, a warp along a row. alpha/beta in f32, one rounding to T. */
  gk__named_sync(1, 128 * C::CONSUMERS);
  unsigned char *stage_c = smem_raw + (ring.smem0 - gk__smem_addr(smem_raw)) + consumer * 64 * C::C_PITCH;
  {
    const int warp4 = wg_thread / 32, lane = wg_thread % 32, g = lane / 4, t = lane % 4;
    unsigned char *row0 = stage_c + (warp4 * 16 + g) * C::C_PITCH + 8 * t;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      *reinterpret_cast<float2 *>(row0 + 32 * j) = make_float2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<float2 *>(row0 + 8 * C::C_PITCH + 32 * j) =
          make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
  gk__named_sync(2 + consumer, 128); /* this warpgroup's tile is complete */
  T *c = args.c + (int64_t)z * args.stride_c;
  const bool vec4 = args.n % 4 == 0 && reinterpret_cast<uintptr_t>(c) % 8 == 0;
  constexpr int GROUPS = BN / 4; /* four-column groups per row */
#pragma unroll 4
  for (int idx = wg_thread; idx < 64 * GROUPS; idx += 128) {
    const int r = idx / GROUPS, group = idx % GROUPS;
    const int row = m0 + consumer * 64 + r, col = n0 + group * 4;
    if (row >= args.m || col >= args.n) continue;
    const float4 v = *reinterpret_cast<const float4 *>(stage_c + r * C::C_PITCH + group * 16);
    gk__wgmma_store4(args, c, row, col, v, vec4);
  }
#else
  (void)map_a, (void)map_b, (void)args;
#endif
}

/* ---- host side ------------------------------------------------------------------------------ */

/* True when TMA can describe both operands: 16-byte-aligned bases, row strides (and so the batch
 * strides) multiples of 16 bytes, every size within the tensor map's and the kernel's ranges. */
static inline bool gk__wgmma_fits(const gk_problem *p) {
  const int64_t max_dim = (int64_t)1 << 31; /* int32 coordinates in the kernel */
  return gk__fits_int32(p) && gk__aligned(p->a, 16) && gk__aligned(p->b, 16) &&
         (gk__lda(p) * 2) % 16 == 0 && (gk__ldb(p) * 2) % 16 == 0 && p->m < max_dim &&
         p->n < max_dim && p->k < max_dim && p->m * p->k * 2 < ((int64_t)1 << 40) &&
         p->k * p->n * 2 < ((int64_t)1 << 40);
}

/* cuTensorMapEncodeTiled from the driver, found once; NULL when the driver lacks it. */
static inline PFN_cuTensorMapEncodeTiled_v12000 gk__tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *ptr = NULL;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      ptr = NULL;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

/* A 3-D map (inner, outer, batch) over `batch` row-major matrices of outer x inner 16-bit
 * elements, read as 64 x 64 boxes with the 128-byte swizzle, zero fill out of bounds. */
static inline cudaError_t gk__wgmma_map(CUtensorMap *map, bool bf16, const void *base, int64_t inner,
                                        int64_t outer, int64_t batch) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = gk__tensor_map_encoder();
  if (encode == NULL) return cudaErrorNotSupported;
  const cuuint64_t dims[3] = {(cuuint64_t)inner, (cuuint64_t)outer, (cuuint64_t)batch};
  const cuuint64_t strides[2] = {(cuuint64_t)inner * 2, (cuuint64_t)(inner * outer) * 2};
  const cuuint32_t box[3] = {64, 64, 1}, unit[3] = {1, 1, 1};
  CUresult rc = encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                       3, const_cast<void *>(base), dims, strides, box, unit,
                       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return rc == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/* The tensor maps of a batch chunk's A and B (count problems from a and b): stored A is m x k
 * (K-major) or, with trans_a, k x m; stored B is k x n or, with trans_b, n x k (K-major). */
static inline cudaError_t gk__wgmma_operand_maps(CUtensorMap *map_a, CUtensorMap *map_b,
                                                 const gk_problem *p, const void *a, const void *b,
                                                 int64_t count) {
  const bool bf16 = p->dtype == GK_BF16;
  cudaError_t err = p->trans_a ? gk__wgmma_map(map_a, bf16, a, p->m, p->k, count)
                               : gk__wgmma_map(map_a, bf16, a, p->k, p->m, count);
  if (err != cudaSuccess) return err;
  return p->trans_b ? gk__wgmma_map(map_b, bf16, b, p->k, p->n, count)
                    : gk__wgmma_map(map_b, bf16, b, p->n, p->k, count);
}

template <typename T, class C>
struct gk__wgmma_launcher {
  template <bool TA, bool TB>
  static cudaError_t run(const gk_problem *p, cudaStream_t stream) {
    auto kernel = gk__wgmma_gemm<T, C, TA, TB>;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)C::SMEM_BYTES);
    if (err != cudaSuccess) return err;
    const gk__mma16_args<T> args = gk__mma_args<gk__mma16_args<T>, T, float>(p);
    const int64_t tiles = ((p->m + C::BM - 1) / C::BM) * ((p->n + C::BN - 1) / C::BN);
    if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
    return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
      const gk__mma16_args<T> chunk = gk__args_at(args, first);
      CUtensorMap map_a, map_b;
      const cudaError_t map_err = gk__wgmma_operand_maps(&map_a, &map_b, p, chunk.a, chunk.b, count);
      if (map_err != cudaSuccess) return map_err;
      kernel<<<dim3((unsigned)tiles, 1, count), C::THREADS, C::SMEM_BYTES, stream>>>(map_a, map_b,
                                                                                     chunk);
      return cudaGetLastError();
    });
  }

  static cudaError_t launch(const gk_problem *p, cudaStream_t stream) {
    if (!gk__wgmma_fits(p) || (p->dtype != GK_F16 && p->dtype != GK_BF16))
      return cudaErrorInvalidValue;
    if (p->trans_a) return p->trans_b ? run<true, true>(p, stream) : run<true, false>(p, stream);
    return p->trans_b ? run<false, true>(p, stream) : run<false, false>(p, stream);
  }
};

#endif /* GK_07_WGMMA_F16_CUH */
