/*
 * 08_wgmma_tf32.cu - "wgmma_tf32": f32 GEMM with precision "fast" on Hopper's TF32 tensor cores
 * through wgmma (sm_90a), fed by TMA: 07_wgmma_f16's machinery (gk_fast_wgmma.cuh: mbarrier
 * ring, producer/consumer warpgroups, setmaxnreg, 128-byte swizzle, C through shared memory)
 * for 4-byte elements.
 *
 * The catch: tf32 wgmma has no transpose bits. An operand read from shared memory through a
 * descriptor must be K-major (k contiguous), and of our stored layouts only A (m x k) and a
 * transposed B (n x k) are. wgmma's A operand may instead come from registers, loaded by the
 * threads with ordinary shared loads in whatever layout the tile has. So each CTA computes
 *     D (R x S) = X (R x K, registers) * Y^T (Y: S x K, K-major in shared memory)
 * and the stored layouts pick X, Y and where D goes:
 *   NN (A m x k, B k x n): X = B^T (R = n, B's tile is MN-major: k rows of n), Y = A (S = m);
 *                          D = C^T, written transposed through shared memory;
 *   NT (A m x k, B n x k): X = A (R = m, K-major), Y = B (S = n); D = C;
 *   TT (A k x m, B n x k): X = A^T (R = m, A's tile MN-major), Y = B (S = n); D = C;
 *   TN (A k x m, B k x n): both tiles MN-major, neither formulation is legal: refused here, so
 *                          the selector keeps it on mma_tf32 (05).
 *
 * Tiling: BR = 128 rows of D (two consumer warpgroups of 64), BS = 256 columns (128 when the
 * wide grid would fill at most half of the SMs, as 07), BK = 32 floats = one 128-byte swizzle
 * row. Per k tile the producer's one thread issues TMA boxes of 32 x 64 (K-major: 8 KB) or
 * 32 x 32 (MN-major X: 4 KB) into a 4-stage ring (6 for BS = 128) of 48 KB (32 KB) stages.
 * Each consumer thread loads its m64k8 fragment (4 registers: rows g and g + 8 of its warp's
 * 16, k = t and t + 4; the PTX "register fragment" layout for 32-bit A) for the four k8 steps
 * of the tile with 32-bit shared loads that undo the swizzle (K-major X: conflict-free; MN-major
 * X: two-way conflicts), then issues four wgmma m64nBSk8 with Y from its descriptor (K-major,
 * a k8 step moves the start by 32 bytes, 8-row groups 1 KB apart), waits for them and releases
 * the stage. Waiting per tile leaves the tensor cores to the other consumer warpgroup meanwhile,
 * and measured 5-8% faster than keeping one group in flight across tiles (which needs two
 * fragment sets: wgmma reads its register operand asynchronously); that variant is kept behind
 * GK_WGMMA_TF32_VARIANTS for tuning builds.
 * Epilogue: direct D goes to shared memory in rows (pitch BS * 4 + 32 bytes, as 07); D = C^T is
 * stored transposed, as rows of C of 64 floats (pitch 68 words: the accumulators' scalar stores,
 * columns 2t and 2t + 1 for rows g, land on banks 8t + g: conflict-free), so either way C is then
 * written (and with beta read) in whole 16-byte groups along its rows, alpha/beta in f32.
 * The f32 bits go to the tensor cores as they are (hardware truncation to TF32), as in 05.
 * What changed over 05 (mma.sync, 52% / 47% of cuBLAS): 05 sat on the ~5 TB/s L2 -> SM wall at
 * 32 KB of operands per MFLOP with a 128 x 128 tile read through ldmatrix; here the copy engine
 * fills a 128 x 256 tile (24 KB per MFLOP) and the tensor cores read the wide operand themselves.
 *
 * Measured (H200, bench_kernels --kernel wgmma_tf32 --dtype tf32, two runs, bench/RESULTS.md,
 * "08 wgmma_tf32"): 392.8 / 351.4 TFLOP/s at 4096^3 / 8192^3 = 107% / 98% of cuBLAS TF32 (368 /
 * 360 that run); 2048^3 114%, 1024^3 114%, 1000x1200x800 141%, batch 64 x 256^3 137%, skinny
 * 8192x8192x64 94% (88% in the repeat). Rel. diff to cuBLAS 7.8e-4 (truncated vs rounded TF32).
 *
 * Contract: f32 with precision "fast" on compute capability 9.0 exactly, any m, n, k, the
 * transposes NN, NT and TT, alpha/beta (beta == 0: C not read), any batch, when TMA can
 * describe the operands: A and B 16-byte aligned and their stored rows a multiple of 4 elements
 * (16 bytes). Everything else stays with mma_tf32, registered after this kernel.
 */
#include "gk_fast_wgmma.cuh" /* mbarrier, TMA, wgmma fence/commit/wait, setmaxnreg, descriptors */
#include "gk_gpu.h"

/* The tile configuration (see the file comment). Outside the anonymous namespace: in the
 * compute_80 pass the kernel body is empty, and members of an internal class that nothing reads
 * would be warnings (errors here). */
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
  static_assert(BS == 128 || BS == 256, "wgmma wrappers exist for m64n128k8 and m64n256k8");
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
};

namespace {

using tf32_args = gk__wgmma_tf32_args;
template <int BS, int STAGES>
using tf32_cfg = gk__wgmma_tf32_cfg<BS, STAGES>;

#if GK_WGMMA_DEVICE
/* wgmma m64nNk8 f32 += tf32 x tf32: A (64 x 8) from four registers per thread, B (N x 8) from a
 * K-major shared-memory descriptor. tf32 takes no transpose immediates. */
__device__ __forceinline__ void gk__wgmma_m64n128k8_tf32_rs(float (&d)[64], const uint32_t (&a)[4],
                                                     uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, scale_d, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ void gk__wgmma_m64n256k8_tf32_rs(float (&d)[128], const uint32_t (&a)[4],
                                                     uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "{%128, %129, %130, %131}, %132, scale_d, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

template <int N>
struct tf32_wgmma;
template <>
struct tf32_wgmma<128> {
  static __device__ __forceinline__ void run(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
    gk__wgmma_m64n128k8_tf32_rs(d, a, db);
  }
};
template <>
struct tf32_wgmma<256> {
  static __device__ __forceinline__ void run(float (&d)[128], const uint32_t (&a)[4], uint64_t db) {
    gk__wgmma_m64n256k8_tf32_rs(d, a, db);
  }
};

/* Byte offset, within a stage's X tile, of element (row r, k) of X, for the thread's rows and
 * the TMA's 128-byte swizzle (16-byte chunk c of 128-byte line l sits at chunk c ^ (l % 8); every
 * box starts on a 1 KB boundary, so line parity is address parity).
 *   K-major X: 64-row boxes of lines of 32 k;   MN-major X: 32-column boxes of lines of 32 r. */
template <class C, bool X_MN>
__device__ __forceinline__ uint32_t x_offset(int r, int k) {
  if (X_MN) {
    const int box = r / C::MNBOX_COLS, col = r % C::MNBOX_COLS;
    return box * C::MNBOX_BYTES + k * C::ROW_BYTES + ((((col >> 2) ^ (k & 7))) << 4) + (col & 3) * 4;
  }
  const int box = r / C::KBOX_ROWS, line = r % C::KBOX_ROWS;
  return box * C::KBOX_BYTES + line * C::ROW_BYTES + ((((k >> 2) ^ (line & 7))) << 4) + (k & 3) * 4;
}

/* Four outputs C[row][col..col+3] after alpha/beta; vec4 (n % 4 == 0, C 16-byte aligned): the
 * group is wholly inside, one 16-byte access each way; else element by element. */
__device__ __forceinline__ void store4(const tf32_args &args, float *c, int row, int col, float4 v,
                                       bool vec4) {
  if (row >= args.m || col >= args.n) return;
  float *dst = c + (int64_t)row * args.n + col;
  float r[4] = {v.x * args.alpha, v.y * args.alpha, v.z * args.alpha, v.w * args.alpha};
  if (vec4) {
    if (!args.beta_zero) {
      const float4 old = *reinterpret_cast<const float4 *>(dst);
      r[0] = fmaf(args.beta, old.x, r[0]), r[1] = fmaf(args.beta, old.y, r[1]);
      r[2] = fmaf(args.beta, old.z, r[2]), r[3] = fmaf(args.beta, old.w, r[3]);
    }
    *reinterpret_cast<float4 *>(dst) = make_float4(r[0], r[1], r[2], r[3]);
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (col + e >= args.n) break;
    if (!args.beta_zero) r[e] = fmaf(args.beta, dst[e], r[e]);
    dst[e] = r[e];
  }
}

/* One k tile of a consumer: its m64k8 fragments (four k8 steps) from the stage into `frag`, four
 * wgmmas with Y from the stage's descriptor, and the release of the stage no longer read: by
 * default this tile's, once its group is complete (the other consumer warpgroup keeps the tensor
 * cores busy meanwhile); with IN_FLIGHT (a variant, measured slower) the previous tile's, one
 * group left in flight. */
template <class C, bool X_MN, bool IN_FLIGHT>
__device__ __forceinline__ void consume_tile(float (&acc)[C::ACC], uint32_t (&frag)[C::BK / 8][4],
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
    frag[kk][0] = *reinterpret_cast<const uint32_t *>(tile_x + x_offset<C, X_MN>(row_lo, k));
    frag[kk][1] = *reinterpret_cast<const uint32_t *>(tile_x + x_offset<C, X_MN>(row_lo + 8, k));
    frag[kk][2] = *reinterpret_cast<const uint32_t *>(tile_x + x_offset<C, X_MN>(row_lo, k + 4));
    frag[kk][3] = *reinterpret_cast<const uint32_t *>(tile_x + x_offset<C, X_MN>(row_lo + 8, k + 4));
  }
  gk__wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::BK / 8; ++kk)
    tf32_wgmma<C::BS>::run(acc, frag[kk], gk__wgmma_desc(sy + kk * 32, 16, 1024));
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
#endif /* GK_WGMMA_DEVICE */

/*
 * The kernel: one CTA per 128 x BS tile of D (grouped order), blockIdx.z = the problem within the
 * batch chunk. Warpgroup 0 (one elected thread) fills the ring by TMA; warpgroups 1 and 2 each
 * multiply 64 rows of the tile. X_MN: X's stored tile is MN-major (k rows); OUT_T: D = C^T.
 */
template <class C, bool X_MN, bool OUT_T, bool IN_FLIGHT>
__global__ void __launch_bounds__(C::THREADS, 1)
    tf32_gemm(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_y,
              tf32_args args) {
#if GK_WGMMA_DEVICE
  constexpr int BR = C::BR, BS = C::BS, BK = C::BK, STAGES = C::STAGES;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const gk__ring ring_addr = gk__ring_init<C>(smem_raw); /* gk_fast_wgmma.cuh */
  const uint32_t smem0 = ring_addr.smem0, full0 = ring_addr.full0, empty0 = ring_addr.empty0;
  unsigned char *ring = smem_raw + (smem0 - gk__smem_addr(smem_raw));
  const int warpgroup = threadIdx.x / 128, wg_thread = threadIdx.x % 128;

  int tile_r, tile_s;
  gk__raster((args.rows + BR - 1) / BR, (args.cols + BS - 1) / BS, &tile_r, &tile_s);
  const int r0 = tile_r * BR, s0 = tile_s * BS, z = (int)blockIdx.z;
  const int k_tiles = (args.k + BK - 1) / BK;

  if (warpgroup == 0) { /* producer */
    gk__setmaxnreg_dec<C::PRODUCER_REGS>();
    if (wg_thread != 0) return;
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % STAGES, k0 = kt * BK;
      const uint32_t bar = gk__ring_produce<C>(ring_addr, kt);
      const uint32_t sx = smem0 + s * C::STAGE_BYTES, sy = sx + C::X_BYTES;
      if (X_MN) {
#pragma unroll
        for (int b = 0; b < BR / C::MNBOX_COLS; ++b)
          gk__tma_load_3d(sx + b * C::MNBOX_BYTES, &map_x, r0 + b * C::MNBOX_COLS, k0, z, bar);
      } else {
#pragma unroll
        for (int b = 0; b < BR / C::KBOX_ROWS; ++b)
          gk__tma_load_3d(sx + b * C::KBOX_BYTES, &map_x, k0, r0 + b * C::KBOX_ROWS, z, bar);
      }
#pragma unroll
      for (int b = 0; b < BS / C::KBOX_ROWS; ++b)
        gk__tma_load_3d(sy + b * C::KBOX_BYTES, &map_y, k0, s0 + b * C::KBOX_ROWS, z, bar);
    }
    return;
  }

  /* consumers: warpgroup w multiplies rows (w-1)*64 .. +64 of the tile */
  gk__setmaxnreg_inc<C::CONSUMER_REGS>();
  const int consumer = warpgroup - 1;
  const int warp4 = wg_thread / 32, lane = wg_thread % 32, g = lane / 4, t = lane % 4;
  float acc[C::ACC];
#pragma unroll
  for (int i = 0; i < C::ACC; ++i) acc[i] = 0.0f;

  /* this thread's fragment rows: g and g + 8 of its warp's 16 within the consumer's 64 */
  const int row_lo = consumer * 64 + warp4 * 16 + g;
  if (IN_FLIGHT) {
    /* two fragment sets, so that the registers of the group still in flight are never
     * overwritten (wgmma reads its register operand asynchronously) */
    uint32_t frag_even[BK / 8][4], frag_odd[BK / 8][4];
    for (int kt = 0; kt < k_tiles; kt += 2) {
      consume_tile<C, X_MN, true>(acc, frag_even, kt, ring, smem0, full0, empty0, row_lo, t,
                                  wg_thread);
      if (kt + 1 < k_tiles)
        consume_tile<C, X_MN, true>(acc, frag_odd, kt + 1, ring, smem0, full0, empty0, row_lo, t,
                                    wg_thread);
    }
  } else {
    uint32_t frag[BK / 8][4];
    for (int kt = 0; kt < k_tiles; ++kt)
      consume_tile<C, X_MN, false>(acc, frag, kt, ring, smem0, full0, empty0, row_lo, t, wg_thread);
  }
  gk__wgmma_wait<0>();

  /* Epilogue through shared memory (see the file comment): once both consumers are done with
   * the ring, each stages its 64 x BS tile of D, then writes its part of C along C's rows.
   * Accumulator layout: thread (warp4, g, t) holds D rows warp4*16 + g and + 8, columns 8j + 2t
   * and + 1 in acc[4j..4j+1] and acc[4j+2..4j+3]. */
  gk__named_sync(1, 128 * C::CONSUMERS);
  float *c = args.c + (int64_t)z * args.stride_c;
  const bool vec4 = args.n % 4 == 0 && reinterpret_cast<uintptr_t>(c) % 16 == 0;
  if (OUT_T) {
    /* stage[s][r]: row s of the tile = a row of C (64 floats, this consumer's columns) */
    unsigned char *stage = ring + consumer * BS * C::CT_PITCH;
    const int r = warp4 * 16 + g;
#pragma unroll
    for (int j = 0; j < BS / 8; ++j) {
      float *col0 = reinterpret_cast<float *>(stage + (8 * j + 2 * t) * C::CT_PITCH) + r;
      float *col1 = reinterpret_cast<float *>(stage + (8 * j + 2 * t + 1) * C::CT_PITCH) + r;
      col0[0] = acc[4 * j], col1[0] = acc[4 * j + 1];
      col0[8] = acc[4 * j + 2], col1[8] = acc[4 * j + 3];
    }
    gk__named_sync(2 + consumer, 128); /* this warpgroup's tile is complete */
    constexpr int GROUPS = 64 / 4;     /* four-column groups per staged row */
#pragma unroll 4
    for (int idx = wg_thread; idx < BS * GROUPS; idx += 128) {
      const int srow = idx / GROUPS, group = idx % GROUPS;
      const float4 v = *reinterpret_cast<const float4 *>(stage + srow * C::CT_PITCH + group * 16);
      store4(args, c, s0 + srow, r0 + consumer * 64 + group * 4, v, vec4);
    }
  } else {
    unsigned char *stage = ring + consumer * 64 * C::C_PITCH;
    unsigned char *row_g = stage + (warp4 * 16 + g) * C::C_PITCH + 8 * t;
#pragma unroll
    for (int j = 0; j < BS / 8; ++j) {
      *reinterpret_cast<float2 *>(row_g + 32 * j) = make_float2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<float2 *>(row_g + 8 * C::C_PITCH + 32 * j) =
          make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
    gk__named_sync(2 + consumer, 128);
    constexpr int GROUPS = BS / 4;
#pragma unroll 4
    for (int idx = wg_thread; idx < 64 * GROUPS; idx += 128) {
      const int srow = idx / GROUPS, group = idx % GROUPS;
      const float4 v = *reinterpret_cast<const float4 *>(stage + srow * C::C_PITCH + group * 16);
      store4(args, c, r0 + consumer * 64 + srow, s0 + group * 4, v, vec4);
    }
  }
#else
  (void)map_x, (void)map_y, (void)args;
#endif
}

/* ---- host side ------------------------------------------------------------------------------ */

/* True when TMA can describe both operands: 16-byte-aligned bases, stored rows (and so the batch
 * strides) multiples of 16 bytes, sizes within the tensor map's ranges (strides < 2^40 bytes). */
bool tf32_fits(const gk_problem *p) {
  return gk__fits_int32(p) && gk__aligned(p->a, 16) && gk__aligned(p->b, 16) &&
         (gk__lda(p) * 4) % 16 == 0 && (gk__ldb(p) * 4) % 16 == 0 &&
         p->m * p->k * 4 < ((int64_t)1 << 40) && p->k * p->n * 4 < ((int64_t)1 << 40);
}

/* A 3-D map (inner, outer, batch) over `batch` row-major matrices of outer x inner floats, read
 * as boxes of 32 (128 bytes) x box_outer with the 128-byte swizzle, zero fill out of bounds. */
cudaError_t tf32_map(CUtensorMap *map, const float *base, int64_t inner, int64_t outer,
                     int64_t batch, unsigned box_outer) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = gk__tensor_map_encoder();
  if (encode == NULL) return cudaErrorNotSupported;
  const cuuint64_t dims[3] = {(cuuint64_t)inner, (cuuint64_t)outer, (cuuint64_t)batch};
  const cuuint64_t strides[2] = {(cuuint64_t)inner * 4, (cuuint64_t)(inner * outer) * 4};
  const cuuint32_t box[3] = {32, box_outer, 1}, unit[3] = {1, 1, 1};
  CUresult rc = encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<float *>(base), dims,
                       strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return rc == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/* One formulation (see the file comment): X stored x_inner x x_outer per problem, Y stored S x K
 * (K-major); D is R x S. */
template <class C, bool X_MN, bool OUT_T, bool IN_FLIGHT>
cudaError_t run(const gk_problem *p, cudaStream_t stream) {
  auto kernel = tf32_gemm<C, X_MN, OUT_T, IN_FLIGHT>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)C::SMEM_BYTES);
  if (err != cudaSuccess) return err;
  /* NN: X = B (k x n), Y = A (m x k); NT / TT: X = A (m x k or k x m), Y = B (n x k) */
  const float *x = static_cast<const float *>(OUT_T ? p->b : p->a);
  const float *y = static_cast<const float *>(OUT_T ? p->a : p->b);
  const int64_t rows = OUT_T ? p->n : p->m, cols = OUT_T ? p->m : p->n;
  const int64_t x_stride = OUT_T ? p->k * p->n : p->m * p->k, y_stride = OUT_T ? p->m * p->k : p->k * p->n;
  tf32_args args;
  args.c = static_cast<float *>(p->c);
  args.rows = (int)rows, args.cols = (int)cols, args.k = (int)p->k;
  args.m = (int)p->m, args.n = (int)p->n;
  args.stride_c = p->m * p->n;
  args.alpha = (float)p->alpha, args.beta = (float)p->beta;
  args.beta_zero = p->beta == 0.0;
  const int64_t tiles = ((rows + C::BR - 1) / C::BR) * ((cols + C::BS - 1) / C::BS);
  if (tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  return gk__for_batch_chunks(p->batch, [&](int64_t first, unsigned count) {
    tf32_args chunk = args;
    chunk.c += first * args.stride_c;
    CUtensorMap map_x, map_y;
    cudaError_t map_err =
        X_MN ? tf32_map(&map_x, x + first * x_stride, rows, p->k, count, C::BK)
             : tf32_map(&map_x, x + first * x_stride, p->k, rows, count, C::KBOX_ROWS);
    if (map_err != cudaSuccess) return map_err;
    map_err = tf32_map(&map_y, y + first * y_stride, p->k, cols, count, C::KBOX_ROWS);
    if (map_err != cudaSuccess) return map_err;
    kernel<<<dim3((unsigned)tiles, 1, count), C::THREADS, C::SMEM_BYTES, stream>>>(map_x, map_y,
                                                                                   chunk);
    return cudaGetLastError();
  });
}

/* The registered configurations: D tiles of 128 x 256 with 4 stages (4 x 48 KB), and 128 x 128
 * with 6 stages (6 x 32 KB) for grids the wide tile would leave at most half full (as 07). */
using cfg_wide = tf32_cfg<256, 4>;
using cfg_narrow = tf32_cfg<128, 6>;

bool use_narrow(const gk_gpu_ctx *ctx, const gk_problem *p) {
  const int sms = ctx != NULL ? gk_gpu_ctx_props(ctx)->multiProcessorCount : 132;
  const int64_t rows = p->trans_b ? p->m : p->n, cols = p->trans_b ? p->n : p->m;
  const int64_t wide_tiles = ((rows + cfg_wide::BR - 1) / cfg_wide::BR) *
                             ((cols + cfg_wide::BS - 1) / cfg_wide::BS) * p->batch;
  return wide_tiles * 2 <= sms;
}

template <class C, bool IN_FLIGHT>
cudaError_t launch_with(const gk_problem *p, cudaStream_t stream) {
  if (!p->trans_a && !p->trans_b) return run<C, true, true, IN_FLIGHT>(p, stream); /* NN: C^T = B^T A^T */
  if (!p->trans_a && p->trans_b) return run<C, false, false, IN_FLIGHT>(p, stream); /* NT */
  if (p->trans_a && p->trans_b) return run<C, true, false, IN_FLIGHT>(p, stream);   /* TT */
  return cudaErrorInvalidValue;                                                  /* TN: mma_tf32 */
}

bool wgmma_tf32_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_F32 && p->fast && cc == 90 && !(p->trans_a && !p->trans_b) && tf32_fits(p);
}

cudaError_t wgmma_tf32_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!wgmma_tf32_supports(p, 90)) return cudaErrorInvalidValue;
  return use_narrow(ctx, p) ? launch_with<cfg_narrow, false>(p, stream)
                            : launch_with<cfg_wide, false>(p, stream);
}

#ifdef GK_WGMMA_TF32_VARIANTS
/* For tuning builds only (a temporary registration): one wgmma group kept in flight across k
 * tiles, two fragment sets (bench/RESULTS.md, 08: slower than waiting per tile). */
cudaError_t wgmma_tf32_in_flight_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!wgmma_tf32_supports(p, 90)) return cudaErrorInvalidValue;
  return use_narrow(ctx, p) ? launch_with<cfg_narrow, true>(p, stream)
                            : launch_with<cfg_wide, true>(p, stream);
}
#endif

} // namespace
extern "C" const gk_kernel gk_kernel_wgmma_tf32 = {
    "wgmma_tf32",
    "f32 precision fast, Hopper wgmma tf32 + TMA: 128x256x32 tile (128x128 for small grids), "
    "A operand from registers, C^T = B^T A^T for NN; not TN (08)",
    wgmma_tf32_supports,
    wgmma_tf32_launch,
};
#ifdef GK_WGMMA_TF32_VARIANTS
extern "C" const gk_kernel gk_kernel_wgmma_tf32_in_flight = {
    "wgmma_tf32_in_flight", "08 with one wgmma group kept in flight across k tiles",
    wgmma_tf32_supports, wgmma_tf32_in_flight_launch};
#endif
