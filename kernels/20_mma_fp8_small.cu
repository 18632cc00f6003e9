/*
 * 20_mma_fp8_small.cu - "mma_fp8_small": the fp8 gemm (e4m3 or e5m2, f32 C) of small problems,
 * and of the shapes 19 cannot describe by TMA, on mma.sync m16n8k32 e4m3/e5m2 (sm_89 and up).
 *
 * What it adds over 18: the fp8 mma with an f32 accumulator; the tiling is 18's, shared
 * through 18_mma_i8_small.cuh: one CTA per 64 x 64 tile of C (4 warps of 32 x 32), or per
 * 32 x 32 tile (1 warp) where m and n are at most 32, fragments straight from global memory,
 * C in 8-byte stores. Epilogue fused (gk_kernel.epilogue): act(alpha * acc + beta * C0) in f32,
 * C0 being C or the bias row, any activation.
 *
 * Measured: see bench/RESULTS.md, "The fp8 gemm".
 *
 * Contract: e4m3 or e5m2, no output cast, compute capability >= 8.9, any m, n, k (int32), every
 * transpose, any batch, aligned or not; selected for m and n <= 64, and wherever 19 does not
 * apply (k not a multiple of 16, unaligned operands, or an Ada GPU).
 */
#include "18_mma_i8_small.cuh"

extern "C" const gk_kernel gk_kernel_wgmma_fp8_persist; /* 19 */

namespace {

/* mma.sync m16n8k32 f32 += fp8 x fp8 (E5M2: e5m2, else e4m3), and the f32 epilogue. */
template <bool E5M2>
struct fp8_small_op {
  using acc_t = float;
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define GK__FP8_MMA(TYPES)                                                                         \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." TYPES ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
               "{%8,%9}, {%0,%1,%2,%3};\n"                                                         \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                    \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
    if constexpr (E5M2)
      GK__FP8_MMA("e5m2.e5m2");
    else
      GK__FP8_MMA("e4m3.e4m3");
#undef GK__FP8_MMA
#else
    (void)d, (void)a, (void)b;
#endif
  }
  template <bool EPI>
  static __device__ __forceinline__ float store(const gk__k8_small_args<float> &args, float v, float c0) {
    return gk__k8_store_f32<EPI>(args.alpha, args.beta, args.act, v, c0);
  }
  static float scalar(double v) { return (float)v; }
};

/* What the kernel computes: every fp8 problem without the cast (the launch checks this much, as
 * 18's does). */
bool runs(const gk_problem *p) { return gk_dtype_is_fp8(p->dtype) && !p->cast && gk__fits_int32(p); }

bool mma_fp8_small_supports(const gk_problem *p, int cc) {
  if (!runs(p) || cc < 89) return false;
  return (p->m <= 64 && p->n <= 64) || !gk_kernel_wgmma_fp8_persist.supports(p, cc);
}

cudaError_t mma_fp8_small_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (!runs(p)) return cudaErrorInvalidValue;
  if (p->dtype == GK_E5M2) return gk__k8_small_launch<fp8_small_op<true>>(p, stream);
  return gk__k8_small_launch<fp8_small_op<false>>(p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_mma_fp8_small = {
    "mma_fp8_small",
    "e4m3/e5m2 (f32 C), m and n <= 64 or where 19 does not apply: mma.sync m16n8k32 fp8 from "
    "global memory, 32x32 or 64x64 tile (20)",
    mma_fp8_small_supports,
    mma_fp8_small_launch,
    GK_EPILOGUE_FUSED,
};
