/*
 * 19_wgmma_fp8_persist.cu - "wgmma_fp8_persist": the fp8 gemm (e4m3 x e4m3 or e5m2 x e5m2, f32
 * accumulate, f32 C) on Hopper's wgmma e4m3/e5m2, the rate of s8: 32 k values a step in the same
 * 32 bytes, twice f16's.
 *
 * What it adds over 17: a float accumulator behind the same bytes. The pipeline is 17's, shared
 * through 17_wgmma_i8_persist.cuh: the persistent TMA ring of 15's geometry (128 x 256 x 128
 * tile with 3 stages, or 128 x 128 with 5 where the wide one would fill at most half of the SMs),
 * four wgmma m64nBNk32 a k tile, C staged in halves and TMA-stored. The fp8 wgmma, as the integer
 * one, reads both operands K-major only: the native layout is B stored n x k (trans_b, cuBLASLt's
 * only fp8 layout, "TN"); the others first copy the operand that is not K-major, one pass at
 * memory speed, into memory of the context's pool (gk_gpu_ctx_pool).
 *
 * Epilogue (gk_kernel.epilogue): act(alpha * acc + beta * C0) in f32, C0 being C or the bias
 * row, any activation; the per-tensor scales reach it folded into alpha (PROTOCOL.md, "The fp8
 * gemm"). The wgmma's own scale immediates are 1: they can only negate. With the output cast
 * (an f16 / bf16 C, the usual fp8 layer's output) and B n x k, each result is rounded in the
 * store (GK_EPILOGUE_CAST): no f32 work area and no pass over C, half the bytes stored.
 *
 * Accuracy: Hopper's fp8 wgmma adds its products into the f32 accumulator with fewer bits than
 * a float's (the products are exact; the sum is truncated); the tests' tolerance for fp8 is
 * fitted to it (tests/gpu/test_gpu_kernels.c) and cuBLASLt's fp8 gemm has the same property.
 *
 * Measured: see bench/RESULTS.md, "The fp8 gemm".
 *
 * Contract: e4m3 or e5m2, the output cast only with B n x k and n a multiple of 8 (elsewhere
 * gk_gpu_gemm's passes make it around the plain problem), compute capability 9.0
 * exactly, k a multiple of 16 (TMA's 16-byte rows), A and B 16-byte aligned, C 16-byte aligned
 * with n a multiple of 4; any m, n, alpha, beta, activation, any batch. The rest runs on 20
 * (mma_fp8_small).
 */
#include "17_wgmma_i8_persist.cuh"

extern "C" const gk_kernel gk_kernel_mma_fp8_small; /* 20: the fallback that reads every layout */

/* wgmma m64nNk32 f32 += fp8 x fp8 (E5M2: e5m2, else e4m3), both operands K-major, scale-a and
 * scale-b 1; the f32 epilogue; 20 as the fallback. At namespace scope, as gk__k8_cfg. */
template <bool E5M2>
struct gk__fp8_op {
  using acc_t = float;

#if GK_WGMMA_DEVICE
  template <int N>
  static __device__ __forceinline__ void mma(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b) {
    gk__wgmma_m64nNk32_fp8<N, E5M2>(d, desc_a, desc_b);
  }
#endif

  template <bool EPI, class Args> /* Args: gk__k8_args<float, C's type> */
  static __device__ __forceinline__ float epilogue(const Args &args, float v, float c0) {
    return gk__k8_store_f32<EPI>(args.alpha, args.beta, args.act, v, c0);
  }

  static float scalar(double v) { return (float)v; }
  static const gk_kernel &fallback() { return gk_kernel_mma_fp8_small; }
};

namespace {

/* The output cast in the store (f16 / bf16 C): in the native layout only (the others copy an
 * operand first, and their fallback, 20, has no cast), with rows of whole 16-byte units. */
bool cast_fits(const gk_problem *p) {
  return gk_problem_cast_ok(p) && !p->trans_a && p->trans_b && p->n % 8 == 0;
}

bool wgmma_fp8_persist_supports(const gk_problem *p, int cc) {
  return gk_dtype_is_fp8(p->dtype) && (!p->cast || cast_fits(p)) && cc == 90 && gk__k8_fits(p);
}

template <bool E5M2>
cudaError_t launch_format(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  return gk__with_c_type(p, [&](auto c_type) {
    using T = typename decltype(c_type)::type; /* float, or the cast's __half / __nv_bfloat16 */
    return gk__k8_launch<gk__fp8_op<E5M2>, T>(ctx, p, stream);
  });
}

cudaError_t wgmma_fp8_persist_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!wgmma_fp8_persist_supports(p, 90)) return cudaErrorInvalidValue;
  return p->dtype == GK_E5M2 ? launch_format<true>(ctx, p, stream) : launch_format<false>(ctx, p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_wgmma_fp8_persist = {
    "wgmma_fp8_persist",
    "e4m3/e5m2 (f32 C), Hopper wgmma fp8 + TMA, persistent: 128x256x128 tile, C stored by TMA "
    "in halves, or cast to f16/bf16 in the store (B n x k); operands made K-major by a pass "
    "where they are not (19)",
    wgmma_fp8_persist_supports,
    wgmma_fp8_persist_launch,
    GK_EPILOGUE_FUSED | GK_EPILOGUE_CAST,
};
