/*
 * 17_wgmma_i8_persist.cu - "wgmma_i8_persist": the integer gemm (i8 x i8, i32 accumulate, i32 C)
 * on Hopper's wgmma s8 (twice the f16 rate: 32 k values a step in the same 32 bytes), in 15's
 * persistent form: a producer warpgroup fills a TMA ring, two consumer warpgroups multiply 64
 * rows each, and C leaves through TMA stores from staging buffers of its own while the next
 * tile's operands load.
 *
 * Tiling: 15's bytes exactly. A k tile is 128 int8 values, one 128-byte swizzle row, so the
 * 128 x 256 tile (3 stages of 48 KB) and the 128 x 128 tile (5 stages of 32 KB, where the wide
 * one would fill at most half of the SMs) hold the same boxes as f16's, and one k tile is four
 * wgmma m64nBNk32 on descriptors that step 32 bytes. i32 C is f32's size, so each consumer
 * stages its 64 x BN tile in two halves, as 16 does (boxes of 32 columns, 64 rows deep).
 *
 * The integer wgmma reads both operands K-major only (the transpose bits exist for 16-bit
 * types alone): A as m x k rows, B as n x k rows, the layout with trans_b ("NT", cuBLAS's TN).
 * The other three layouts first copy the operand that is not K-major to a K-major one in
 * stream-ordered memory (the context's pool, gk_gpu_ctx_pool; returned with cudaFreeAsync
 * after the gemm), one pass over it at memory speed (bench/RESULTS.md, "i8nn"). Where that
 * memory cannot be had, the problem runs on 18 (mma_i8_small), which reads every layout.
 *
 * Epilogue (gk_kernel.epilogue): alpha * acc + beta * C0 in 32-bit arithmetic that wraps (as
 * CUBLAS_COMPUTE_32I), C0 being C or the bias row, then ReLU, in the store.
 *
 * Measured: see bench/RESULTS.md, "The integer gemm".
 *
 * The pipeline, the K-major copy and the launcher are in 17_wgmma_i8_persist.cuh, shared with
 * 19 (fp8); this file gives them the s8 wgmma, the i32 accumulator and the integer epilogue.
 *
 * Contract: i8, compute capability 9.0 exactly, k a multiple of 16 (TMA's 16-byte rows), A and
 * B 16-byte aligned, C 16-byte aligned with n a multiple of 4; any m, n, alpha/beta integers,
 * any batch. The rest runs on 18 (mma_i8_small).
 */
#include "17_wgmma_i8_persist.cuh"

extern "C" const gk_kernel gk_kernel_mma_i8_small; /* 18: the fallback that reads every layout */

/* wgmma m64nNk32 s32 += s8 x s8, both operands K-major from shared-memory descriptors (the
 * integer form takes no scale or transpose immediates), the i32 epilogue, and 18 as the
 * fallback. Accumulator layout as f32's. At namespace scope, as gk__k8_cfg (its comment). */
struct gk__s8_op {
  using acc_t = int32_t;

#if GK_WGMMA_DEVICE
  template <int N>
  static __device__ __forceinline__ void mma(int32_t (&d)[N / 2], uint64_t desc_a, uint64_t desc_b) {
    gk__wgmma_m64nNk32_s8<N>(d, desc_a, desc_b);
  }
#endif

  template <bool EPI, class Args>
  static __device__ __forceinline__ int32_t epilogue(const Args &args, int32_t v, int32_t c0) {
    return gk__k8_store_i32<EPI>(args.alpha, args.beta, args.act, v, c0);
  }

  static int32_t scalar(double v) { return (int32_t)v; } /* integers within int32: checked */
  static const gk_kernel &fallback() { return gk_kernel_mma_i8_small; }
};

namespace {

bool wgmma_i8_persist_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_I8 && !p->cast && cc == 90 && gk__k8_fits(p) &&
         (p->act == GK_ACT_NONE || p->act == GK_ACT_RELU);
}

cudaError_t wgmma_i8_persist_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (!wgmma_i8_persist_supports(p, 90)) return cudaErrorInvalidValue;
  return gk__k8_launch<gk__s8_op>(ctx, p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_wgmma_i8_persist = {
    "wgmma_i8_persist",
    "i8 (i32 C), Hopper wgmma s8 + TMA, persistent: 128x256x128 tile, C stored by TMA in halves; "
    "operands made K-major by a pass where they are not (17)",
    wgmma_i8_persist_supports,
    wgmma_i8_persist_launch,
    GK_EPILOGUE_FUSED,
};
