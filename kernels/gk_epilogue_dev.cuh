/*
 * gk_epilogue_dev.cuh - the activations of the GEMM epilogue (gk_problem.h, gk_act) as device
 * functions: used by gk_epilogue.cu's pass over C, and ReLU by the kernels that fuse it into
 * their own store (gk_kernel.epilogue), and the conversions of C's element types. The formulas
 * are proto/PROTOCOL.md's.
 *
 * Contract: header-only, included by .cu files only; F is float or double.
 */
#ifndef GK_EPILOGUE_DEV_CUH
#define GK_EPILOGUE_DEV_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gk_problem.h"

/* An element of C as float, and a float rounded (to nearest even) into C's type: for the
 * passes over C and the stores that write C in its out dtype (the output cast). */
__device__ __forceinline__ float gk__to_f32(float x) { return x; }
__device__ __forceinline__ float gk__to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float gk__to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T gk__from_f32(float x);
template <> __device__ __forceinline__ float gk__from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half gk__from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 gk__from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

/* ReLU, NaN kept (x < 0 is false for it); alone for the kernels that fuse it into their store
 * (gk_kernel.epilogue). */
template <typename F>
__device__ __forceinline__ F gk__relu(F x) {
  return x < (F)0 ? (F)0 : x;
}

/* act(x): ReLU as above; GELU in its erf form or its tanh approximation; GK_ACT_NONE returns
 * x. */
template <typename F>
__device__ __forceinline__ F gk__act(gk_act act, F x) {
  const F half = (F)0.5, one = (F)1;
  switch (act) {
  case GK_ACT_RELU: return gk__relu(x);
  case GK_ACT_GELU: return half * x * (one + erf(x * (F)0.70710678118654752440));
  case GK_ACT_GELU_TANH:
    return half * x * (one + tanh((F)0.7978845608028654 * (x + (F)0.044715 * x * x * x)));
  default: return x;
  }
}

/* The integer gemm's element: alpha * acc + beta * c0 in 32-bit unsigned arithmetic, which
 * wraps as the hardware does and is defined in C++; gk_host_i32_axpby on the host. Pass c0 = 0
 * where C is not read (beta 0, or outside C). */
__device__ __forceinline__ int32_t gk__i32_axpby(int32_t alpha, int32_t acc, int32_t beta, int32_t c0) {
  return (int32_t)((uint32_t)alpha * (uint32_t)acc + (uint32_t)beta * (uint32_t)c0);
}

/* The element an 8-bit gemm's kernel stores (17-20), c0 being 0 where C is not read: the
 * integer gemm's alpha * v + beta * c0 (gk__i32_axpby) then ReLU, and the fp8 gemm's
 * act(alpha * v + beta * c0) in f32; without EPI, no activation. */
template <bool EPI>
__device__ __forceinline__ int32_t gk__k8_store_i32(int32_t alpha, int32_t beta, gk_act act, int32_t v,
                                                    int32_t c0) {
  const int32_t out = gk__i32_axpby(alpha, v, beta, c0);
  return EPI && act == GK_ACT_RELU && out < 0 ? 0 : out;
}
template <bool EPI>
__device__ __forceinline__ float gk__k8_store_f32(float alpha, float beta, gk_act act, float v, float c0) {
  const float out = alpha * v + beta * c0;
  return EPI ? gk__act<float>(act, out) : out;
}
/* Two neighbouring elements of such a C as one 8-byte store. */
template <typename T> struct gk__k8_pair;
template <> struct gk__k8_pair<int32_t> {
  using type = int2;
  static __device__ __forceinline__ int2 make(int32_t x, int32_t y) { return make_int2(x, y); }
};
template <> struct gk__k8_pair<float> {
  using type = float2;
  static __device__ __forceinline__ float2 make(float x, float y) { return make_float2(x, y); }
};

#endif /* GK_EPILOGUE_DEV_CUH */
