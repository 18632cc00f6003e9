/*
 * gk_epilogue.cu - the GEMM epilogue on the device (gk_problem.h), run by gk_gpu_gemm around
 * whichever kernel it picked: the bias row copied into every row of C before the product (the
 * kernel's beta then reads it), the activation over C after it.
 *
 * Two passes over C in device memory, for what the kernel does not fuse into its own store
 * (gk_kernel.epilogue: 15 and 16 fuse the bias and ReLU; GELU is always a pass): every other
 * kernel (and cuBLAS, the reference) gets the epilogue the same way, and a pass costs what
 * reading and writing C once costs, 2 * m * n * size bytes at the device's memory bandwidth
 * (0.1 ms for a 4096 x 4096 f32 C on an H100): small beside the GEMM that made C on square
 * shapes, most of it on skinny ones, and far less than a client's own pass on its host.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "gk_epilogue_dev.cuh"
#include "gk_gpu.h"

namespace {

constexpr int kThreads = 256;

/* Blocks for a grid-stride loop over `count` items: enough to fill any current GPU. */
unsigned blocks_for(int64_t count)
{
  int64_t blocks = (count + kThreads - 1) / kThreads;
  return (unsigned)(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

template <typename Bits>
__global__ void bias_rows(Bits *c, const Bits *bias, int64_t bias_stride, int64_t m, int64_t n,
                          int64_t total)
{
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t entry = e / (m * n), col = e % n;
    const Bits *src = bias + entry * bias_stride + col;
    if (c + e != src) /* the bias may be C's own first row: it stays */
      c[e] = *src;
  }
}

__device__ float to_f(float x) { return x; }
__device__ float to_f(__half x) { return __half2float(x); }
__device__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ T from_f(float x);
template <> __device__ float from_f<float>(float x) { return x; }
template <> __device__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T> __global__ void act_all(T *c, gk_act act, int64_t total)
{
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x)
    c[e] = from_f<T>(gk__act<float>(act, to_f(c[e])));
}

__global__ void act_all_f64(double *c, gk_act act, int64_t total)
{
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x)
    c[e] = gk__act<double>(act, c[e]);
}

} // namespace

extern "C" cudaError_t gk_gpu_bias_rows(const gk_problem *p, cudaStream_t stream)
{
  if (p->bias == NULL || p->beta == 0.0)
    return cudaSuccess;
  int64_t total = p->batch * p->m * p->n;
  unsigned blocks = blocks_for(total);
  switch (gk_dtype_size(p->dtype)) {
  case 2:
    bias_rows<<<blocks, kThreads, 0, stream>>>((uint16_t *)p->c, (const uint16_t *)p->bias,
                                               p->bias_stride, p->m, p->n, total);
    break;
  case 4:
    bias_rows<<<blocks, kThreads, 0, stream>>>((uint32_t *)p->c, (const uint32_t *)p->bias,
                                               p->bias_stride, p->m, p->n, total);
    break;
  case 8:
    bias_rows<<<blocks, kThreads, 0, stream>>>((uint64_t *)p->c, (const uint64_t *)p->bias,
                                               p->bias_stride, p->m, p->n, total);
    break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t gk_gpu_act(const gk_problem *p, cudaStream_t stream)
{
  if (p->act == GK_ACT_NONE)
    return cudaSuccess;
  int64_t total = p->batch * p->m * p->n;
  unsigned blocks = blocks_for(total);
  switch (p->dtype) {
  case GK_F32: act_all<<<blocks, kThreads, 0, stream>>>((float *)p->c, p->act, total); break;
  case GK_F64: act_all_f64<<<blocks, kThreads, 0, stream>>>((double *)p->c, p->act, total); break;
  case GK_F16: act_all<<<blocks, kThreads, 0, stream>>>((__half *)p->c, p->act, total); break;
  case GK_BF16:
    act_all<<<blocks, kThreads, 0, stream>>>((__nv_bfloat16 *)p->c, p->act, total);
    break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
