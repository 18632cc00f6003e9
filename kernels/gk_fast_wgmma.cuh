/*
 * gk_fast_wgmma.cuh - the Hopper (sm_90a) f16/bf16 GEMM of 07_wgmma_f16.cu as a template over
 * its element type and operand layouts: the PTX wrappers (mbarrier, TMA, wgmma, setmaxnreg),
 * the TMA ring's set-up and producer step (shared with 08_wgmma_tf32.cu), the warp-specialised
 * kernel and its host launcher. The design and its reasons are in
 * 07_wgmma_f16.cu's opening comment.
 *
 * Contract: header-only, included by .cu files only. Everything that emits sm_90a instructions
 * sits under GK_WGMMA_DEVICE, so the compute_80 PTX of the same translation unit holds an empty
 * kernel body and stays loadable (JIT) on older GPUs; the launcher refuses (cudaErrorInvalidValue)
 * any problem gk__wgmma_fits() rejects, and returns the first CUDA or driver error otherwise.
 * The tensor maps are encoded on the host at each launch (a few microseconds); the driver's
 * cuTensorMapEncodeTiled is found once through cudaGetDriverEntryPointByVersion, so nothing
 * links -lcuda. Thread-safe: no mutable state but that function pointer (a C++ static, whose
 * initialisation is thread-safe).
 */
#ifndef GK_FAST_WGMMA_CUH
#define GK_FAST_WGMMA_CUH

#include <cuda.h> /* CUtensorMap and its enums: types only, no -lcuda */
#include <cudaTypedefs.h>

#include "04_mma_f16.cuh" /* gk__mma16_args, gk__load2 / gk__store2 for the epilogue */

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GK_WGMMA_DEVICE 1
#else
#define GK_WGMMA_DEVICE 0
#endif

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

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void gk__wgmma_m64n128k16_f16(float (&d)[64], uint64_t desc_a,
                                                  uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %68, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, scale_d, 1, 1, %66, %67;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "n"(TRANS_A), "n"(TRANS_B), "r"(1));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void gk__wgmma_m64n128k16_bf16(float (&d)[64], uint64_t desc_a,
                                                  uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %68, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, scale_d, 1, 1, %66, %67;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "n"(TRANS_A), "n"(TRANS_B), "r"(1));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void gk__wgmma_m64n256k16_f16(float (&d)[128], uint64_t desc_a,
                                                  uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %132, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, scale_d, 1, 1, %130, %131;\n"
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
      : "l"(desc_a), "l"(desc_b), "n"(TRANS_A), "n"(TRANS_B), "r"(1));
}

template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void gk__wgmma_m64n256k16_bf16(float (&d)[128], uint64_t desc_a,
                                                  uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred scale_d;\n"
      "setp.ne.b32 scale_d, %132, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, scale_d, 1, 1, %130, %131;\n"
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
      : "l"(desc_a), "l"(desc_b), "n"(TRANS_A), "n"(TRANS_B), "r"(1));
}

/* wgmma m64nNk16 (f32 += f16/bf16 x f16/bf16), both operands from shared memory; TRANS_A /
 * TRANS_B: 0 = K-major, 1 = M/N-major (the transpose bits exist for 16-bit types only). The
 * accumulator is d's N/2 registers per thread (PTX "Register fragment" layout, as mma.sync's
 * m16n8 per 8 columns: d[4j..4j+1] at (row g, cols 8j+2t..), d[4j+2..4j+3] at row g+8). */
template <typename T, int N, int TRANS_A, int TRANS_B>
struct gk__wgmma_op;
#define GK_WGMMA_OP(TYPE, N, SUFFIX)                                                              \
  template <int TRANS_A, int TRANS_B>                                                             \
  struct gk__wgmma_op<TYPE, N, TRANS_A, TRANS_B> {                                                \
    static __device__ __forceinline__ void run(float (&d)[N / 2], uint64_t da, uint64_t db) {     \
      gk__wgmma_m64n##N##k16_##SUFFIX<TRANS_A, TRANS_B>(d, da, db);                               \
    }                                                                                             \
  };
GK_WGMMA_OP(__half, 128, f16)
GK_WGMMA_OP(__nv_bfloat16, 128, bf16)
GK_WGMMA_OP(__half, 256, f16)
GK_WGMMA_OP(__nv_bfloat16, 256, bf16)
#undef GK_WGMMA_OP

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

#endif /* GK_FAST_WGMMA_CUH */
