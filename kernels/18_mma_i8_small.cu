/*
 * 18_mma_i8_small.cu - "mma_i8_small": the integer gemm (i8 x i8 -> i32) of small problems, and
 * of the shapes 17 cannot describe by TMA, on mma.sync m16n8k32 (sm_80 and up).
 *
 * Tiling: one CTA per 64 x 64 tile of C (4 warps of 32 x 32), or per 32 x 32 tile (1 warp) where
 * m and n are at most 32; grid.z walks the batch. Each warp multiplies 2 x 4 m16n8k32 tiles per
 * k step of 32, its fragments read straight from global memory (L1 serves the other warps'
 * reads of the same rows): a fragment register is 4 consecutive k values of one row of op(A) or
 * one column of op(B), one 4-byte load where the operand is K-major (A m x k, B n x k) with k a
 * multiple of 4, else 4 byte loads packed. No shared memory, no barriers: a small problem is a
 * few k steps, and its cost is reading A and B once and writing C once.
 * Epilogue fused (gk_kernel.epilogue): alpha * acc + beta * C0 in 32-bit arithmetic that wraps,
 * C0 being C or the bias row, then ReLU.
 *
 * What changed over 17: the tile. 17's 128 x 128 tile ran a batch of 8192 32^3 problems at 46%
 * of cuBLAS and 4096 x 64^3 at 68% (H100): the tile was 16 and 4 times the problem.
 * Measured: see bench/RESULTS.md, "The integer gemm".
 *
 * The kernel and its launcher are 18_mma_i8_small.cuh's, shared with 20 (fp8); this file gives
 * them the s8 mma and the integer epilogue.
 *
 * Contract: i8, compute capability >= 8.0, any m, n, k (int32), every transpose, alpha/beta
 * integers, any batch, aligned or not; selected for m and n <= 64, and wherever 17 does not
 * apply (k not a multiple of 16, unaligned operands, or no Hopper).
 */
#include "18_mma_i8_small.cuh"

extern "C" const gk_kernel gk_kernel_wgmma_i8_persist; /* 17 */

namespace {

/* mma.sync m16n8k32 s32 += s8 x s8, and the integer epilogue. */
struct s8_small_op {
  using acc_t = int32_t;
  static __device__ __forceinline__ void mma(int32_t (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)d, (void)a, (void)b;
#endif
  }
  template <bool EPI>
  static __device__ __forceinline__ int32_t store(const gk__k8_small_args<int32_t> &args, int32_t v, int32_t c0) {
    return gk__k8_store_i32<EPI>(args.alpha, args.beta, args.act, v, c0);
  }
  static int32_t scalar(double v) { return (int32_t)v; } /* integers within int32: checked */
};

/* What the kernel computes: every i8 problem (the launch checks this much: gk_gpu_gemm may
 * hand it the pieces of a problem it was chosen for, a broadcast B's batch folded into m). */
bool runs(const gk_problem *p) {
  return p->dtype == GK_I8 && !p->cast && gk__fits_int32(p) &&
         (p->act == GK_ACT_NONE || p->act == GK_ACT_RELU);
}

bool mma_i8_small_supports(const gk_problem *p, int cc) {
  if (!runs(p) || cc < 80) return false;
  return (p->m <= 64 && p->n <= 64) || !gk_kernel_wgmma_i8_persist.supports(p, cc);
}

cudaError_t mma_i8_small_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (!runs(p)) return cudaErrorInvalidValue;
  return gk__k8_small_launch<s8_small_op>(p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_mma_i8_small = {
    "mma_i8_small",
    "i8 (i32 C), m and n <= 64 or where 17 does not apply: mma.sync m16n8k32 from global "
    "memory, 32x32 or 64x64 tile (18)",
    mma_i8_small_supports,
    mma_i8_small_launch,
    GK_EPILOGUE_FUSED,
};
