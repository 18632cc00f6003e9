/*
 * gk_wgmma_ptx.cuh - the sm_90a PTX of the machinery the Hopper wgmma kernels (07, 08, 15, 16,
 * 17, 19, 21) share, written once: mbarrier, TMA loads and stores, bulk groups, proxy fences,
 * named barriers, setmaxnreg, the wgmma fence / commit / wait and shared-memory descriptors, and
 * every wgmma.mma_async form they use:
 *   m64nNk16 f16 / bf16, both operands from shared memory, with transpose immediates (07, 15);
 *   m64nNk8 tf32, A from registers (08, 16, 21);
 *   m64nNk32 s8 (17) and e4m3 / e5m2 (19), both operands K-major from shared memory.
 * scripts/check-layers.py keeps wgmma.mma_async out of every other file.
 *
 * Contract: header-only, included by .cu files only (through the kernels' headers). Everything
 * that emits sm_90a instructions sits under GK_WGMMA_DEVICE, so the compute_80 PTX of the same
 * translation unit holds empty kernel bodies and stays loadable (JIT) on older GPUs.
 */
#ifndef GK_WGMMA_PTX_CUH
#define GK_WGMMA_PTX_CUH

#include <cuda.h> /* CUtensorMap: types only, no -lcuda */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GK_WGMMA_DEVICE 1
#else
#define GK_WGMMA_DEVICE 0
#endif

#if GK_WGMMA_DEVICE
/* ---- sm_90a PTX wrappers (device pass for compute_90a only) ------------------------------- */

__device__ __forceinline__ void gk__mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* Makes the initialised barriers visible to the async proxy (TMA) before first use. */
__device__ __forceinline__ void gk__mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void gk__mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void gk__mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* Spins until the barrier's phase with this parity has completed. */
__device__ __forceinline__ void gk__mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

/* One TMA box of a 3-D tensor map (inner, outer, batch) into shared memory; completes on bar. */
__device__ __forceinline__ void gk__tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                                int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
/* The other direction (15): one box from shared memory to a 3-D tensor map, in this thread's
 * bulk group; the copy engine clips the parts outside the matrix. The writes that filled the
 * box must be made visible to the async proxy first (gk__fence_proxy_async by every writer,
 * then a barrier). */
__device__ __forceinline__ void gk__tma_store_3d(const CUtensorMap *map, uint32_t src, int c0, int c1,
                                                 int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void gk__fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void gk__bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/* Waits until this thread's bulk groups have finished reading shared memory (the source may be
 * rewritten) / have completed (the writes are done). */
__device__ __forceinline__ void gk__bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
__device__ __forceinline__ void gk__bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void gk__wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void gk__wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void gk__wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Named barrier `id` (1..15; 0 is __syncthreads) over `count` threads, a multiple of 32. */
__device__ __forceinline__ void gk__named_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
template <int REGS>
__device__ __forceinline__ void gk__setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void gk__setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

/*
 * A wgmma shared-memory matrix descriptor for a 128-byte-swizzled operand (PTX ISA, "Matrix
 * Descriptor Format"): start address, leading and stride byte offsets (all >> 4), swizzle mode
 * 1 = 128 B in bits 62-63. Our two layouts, each built from 64-row boxes of 128-byte rows:
 *   K-major  (k contiguous): rows of 64 k, 8-row groups 1 KB apart (SBO); LBO unused (one 128-byte
 *            swizzle row spans the whole BK), a k16 step moves the start by 32 bytes;
 *   MN-major (m or n contiguous): each box holds 64 k rows of 64 m/n; 8-k-row groups 1 KB apart
 *            (SBO), 64-wide m/n chunks one box (8 KB) apart (LBO); a k16 step moves 16 rows = 2 KB.
 */
__device__ __forceinline__ uint64_t gk__wgmma_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
         ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}

/* The accumulator operands of a wgmma asm statement, d's N/2 registers per thread ("+f" f32,
 * "+r" s32: GK__WGMMA_ACC_F / _R name the constraint), and their names in the instruction's
 * text (%0 ... %N/2-1); the statement's other operands are numbered after them. */
#define GK__WGMMA_ACC_R(x) "+r"(x)
#define GK__WGMMA_ACC_F(x) "+f"(x)
#define GK__WGMMA_ACC8(C, d, i)                                                                    \
  C(d[i]), C(d[i + 1]), C(d[i + 2]), C(d[i + 3]), C(d[i + 4]), C(d[i + 5]), C(d[i + 6]), C(d[i + 7])
#define GK__WGMMA_ACC32(C, d, i)                                                                   \
  GK__WGMMA_ACC8(C, d, i), GK__WGMMA_ACC8(C, d, i + 8), GK__WGMMA_ACC8(C, d, i + 16),              \
      GK__WGMMA_ACC8(C, d, i + 24)
#define GK__WGMMA_ACC64(C, d, i) GK__WGMMA_ACC32(C, d, i), GK__WGMMA_ACC32(C, d, i + 32)
#define GK__WGMMA_ACC128(C, d) GK__WGMMA_ACC64(C, d, 0), GK__WGMMA_ACC64(C, d, 64)
#define GK__WGMMA_REGS32                                                                           \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                         \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define GK__WGMMA_REGS64                                                                           \
  GK__WGMMA_REGS32 ", "                                                                            \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "               \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define GK__WGMMA_REGS128                                                                          \
  GK__WGMMA_REGS64 ", "                                                                            \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "               \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "               \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "   \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

/* wgmma m64nNk16 (f32 += f16/bf16 x f16/bf16), both operands from shared memory; TRANS_A /
 * TRANS_B: 0 = K-major, 1 = M/N-major (the transpose bits exist for 16-bit types only). The
 * accumulator is d's N/2 registers per thread (PTX "Register fragment" layout, as mma.sync's
 * m16n8 per 8 columns: d[4j..4j+1] at (row g, cols 8j+2t..), d[4j+2..4j+3] at row g+8).
 * After the accumulators: the two descriptors, the two transpose immediates, the scale-d flag
 * (DESCS, TRANS, FLAG: their names). */
template <typename T, int N, int TRANS_A, int TRANS_B>
struct gk__wgmma_op;
#define GK_WGMMA_OP(TYPE, N, TYPES, REGS, ACC, DESCS, TRANS, FLAG)                                \
  template <int TRANS_A, int TRANS_B>                                                             \
  struct gk__wgmma_op<TYPE, N, TRANS_A, TRANS_B> {                                                \
    static __device__ __forceinline__ void run(float (&d)[N / 2], uint64_t desc_a,                \
                                               uint64_t desc_b) {                                 \
      asm volatile("{\n.reg .pred scale_d;\nsetp.ne.b32 scale_d, " FLAG ", 0;\n"                 \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPES " {" REGS "}, " DESCS \
                   ", scale_d, 1, 1, " TRANS ";\n}\n"                                             \
                   : ACC                                                                          \
                   : "l"(desc_a), "l"(desc_b), "n"(TRANS_A), "n"(TRANS_B), "r"(1));               \
    }                                                                                             \
  };
GK_WGMMA_OP(__half, 128, "f16.f16", GK__WGMMA_REGS64, GK__WGMMA_ACC64(GK__WGMMA_ACC_F, d, 0),
            "%64, %65", "%66, %67", "%68")
GK_WGMMA_OP(__nv_bfloat16, 128, "bf16.bf16", GK__WGMMA_REGS64,
            GK__WGMMA_ACC64(GK__WGMMA_ACC_F, d, 0), "%64, %65", "%66, %67", "%68")
GK_WGMMA_OP(__half, 256, "f16.f16", GK__WGMMA_REGS128, GK__WGMMA_ACC128(GK__WGMMA_ACC_F, d),
            "%128, %129", "%130, %131", "%132")
GK_WGMMA_OP(__nv_bfloat16, 256, "bf16.bf16", GK__WGMMA_REGS128,
            GK__WGMMA_ACC128(GK__WGMMA_ACC_F, d), "%128, %129", "%130, %131", "%132")
#undef GK_WGMMA_OP

/* wgmma m64nNk8 f32 += tf32 x tf32: A (64 x 8) from four registers per thread, B (N x 8) from a
 * K-major shared-memory descriptor. tf32 takes no transpose immediates. scale_d 0: d = A B, its
 * old contents ignored (21 starts each k tile's sum so). After the accumulators: A's registers,
 * the descriptor, the scale-d flag (A, DESC, FLAG: their names). */
template <int N>
struct gk__tf32_wgmma;
#define GK_TF32_WGMMA(N, REGS, ACC, A, DESC, FLAG)                                                \
  template <>                                                                                     \
  struct gk__tf32_wgmma<N> {                                                                      \
    static __device__ __forceinline__ void run(float (&d)[N / 2], const uint32_t (&a)[4],         \
                                               uint64_t desc_b, int scale_d = 1) {                \
      asm volatile("{\n.reg .pred scale_d;\nsetp.ne.b32 scale_d, " FLAG ", 0;\n"                 \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k8.f32.tf32.tf32 {" REGS "}, {" A     \
                   "}, " DESC ", scale_d, 1, 1;\n}\n"                                             \
                   : ACC                                                                          \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));      \
    }                                                                                             \
  };
GK_TF32_WGMMA(64, GK__WGMMA_REGS32, GK__WGMMA_ACC32(GK__WGMMA_ACC_F, d, 0),
              "%32, %33, %34, %35", "%36", "%37")
GK_TF32_WGMMA(128, GK__WGMMA_REGS64, GK__WGMMA_ACC64(GK__WGMMA_ACC_F, d, 0),
              "%64, %65, %66, %67", "%68", "%69")
GK_TF32_WGMMA(256, GK__WGMMA_REGS128, GK__WGMMA_ACC128(GK__WGMMA_ACC_F, d),
              "%128, %129, %130, %131", "%132", "%133")
#undef GK_TF32_WGMMA

/* wgmma m64nNk32 s32 += s8 x s8 (N = 128 or 256), both operands K-major from shared-memory
 * descriptors (the integer form takes no scale or transpose immediates). */
template <int N>
__device__ __forceinline__ void gk__wgmma_m64nNk32_s8(int32_t (&d)[N / 2], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (N == 128)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {" GK__WGMMA_REGS64 "}, %64, %65, p;\n}\n"
                 : GK__WGMMA_ACC64(GK__WGMMA_ACC_R, d, 0)
                 : "l"(desc_a), "l"(desc_b), "r"(1));
  else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {" GK__WGMMA_REGS128 "}, %128, %129, p;\n}\n"
                 : GK__WGMMA_ACC128(GK__WGMMA_ACC_R, d)
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}

/* wgmma m64nNk32 f32 += fp8 x fp8 (E5M2: e5m2, else e4m3), both operands K-major, scale-a and
 * scale-b 1. */
#define GK__FP8_WGMMA(SHAPE, TYPES, REGS, DESCS, FLAG, ACC)                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " FLAG ", 0;\n"                                   \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPES " {" REGS "}, " DESCS ", p, 1, 1;\n}\n" \
               : ACC                                                                               \
               : "l"(desc_a), "l"(desc_b), "r"(1))
template <int N, bool E5M2>
__device__ __forceinline__ void gk__wgmma_m64nNk32_fp8(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (N == 128 && E5M2)
    GK__FP8_WGMMA("m64n128k32", "e5m2.e5m2", GK__WGMMA_REGS64, "%64, %65", "%66", GK__WGMMA_ACC64(GK__WGMMA_ACC_F, d, 0));
  else if constexpr (N == 128)
    GK__FP8_WGMMA("m64n128k32", "e4m3.e4m3", GK__WGMMA_REGS64, "%64, %65", "%66", GK__WGMMA_ACC64(GK__WGMMA_ACC_F, d, 0));
  else if constexpr (E5M2)
    GK__FP8_WGMMA("m64n256k32", "e5m2.e5m2", GK__WGMMA_REGS128, "%128, %129", "%130", GK__WGMMA_ACC128(GK__WGMMA_ACC_F, d));
  else
    GK__FP8_WGMMA("m64n256k32", "e4m3.e4m3", GK__WGMMA_REGS128, "%128, %129", "%130", GK__WGMMA_ACC128(GK__WGMMA_ACC_F, d));
}
#undef GK__FP8_WGMMA
#endif /* GK_WGMMA_DEVICE */

#endif /* GK_WGMMA_PTX_CUH */
