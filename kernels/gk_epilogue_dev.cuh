/*
 * gk_epilogue_dev.cuh - the activations of the GEMM epilogue (gk_problem.h, gk_act) as device
 * functions: used by gk_epilogue.cu's pass over C and by the kernels that fuse the epilogue
 * into their own store (gk_kernel.epilogue). The formulas are proto/PROTOCOL.md's.
 *
 * Contract: header-only, included by .cu files only; F is float or double.
 */
#ifndef GK_EPILOGUE_DEV_CUH
#define GK_EPILOGUE_DEV_CUH

#include "gk_problem.h"

/* act(x): ReLU keeps NaN (x < 0 is false for it); GELU in its erf form or its tanh
 * approximation; GK_ACT_NONE returns x. */
template <typename F>
__device__ __forceinline__ F gk__act(gk_act act, F x) {
  const F half = (F)0.5, one = (F)1;
  switch (act) {
  case GK_ACT_RELU: return x < (F)0 ? (F)0 : x;
  case GK_ACT_GELU: return half * x * (one + erf(x * (F)0.70710678118654752440));
  case GK_ACT_GELU_TANH:
    return half * x * (one + tanh((F)0.7978845608028654 * (x + (F)0.044715 * x * x * x)));
  default: return x;
  }
}

/* The same, called rather than inlined: for the kernels' stores, where inlined copies of erf
 * and tanh in an unrolled store of a whole tile multiply the code and the registers (15 ran at
 * a third of its speed with them inlined, even without an activation); the call is paid once
 * per output element, and only where an activation is asked for. */
template <typename F>
__device__ __noinline__ F gk__act_call(gk_act act, F x) {
  return gk__act(act, x);
}

#endif /* GK_EPILOGUE_DEV_CUH */
