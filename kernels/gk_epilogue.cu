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

template <typename T> __global__ void act_all(T *c, gk_act act, int64_t total)
{
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x)
    c[e] = gk__from_f32<T>(gk__act<float>(act, gk__to_f32(c[e])));
}

/* The integer gemm's C: ReLU, the one activation it takes. */
__global__ void relu_all_i32(int32_t *c, int64_t total)
{
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x)
    c[e] = c[e] < 0 ? 0 : c[e];
}

__global__ void act_all_f64(double *c, gk_act act, int64_t total)
{
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x)
    c[e] = gk__act<double>(act, c[e]);
}

/* rows x n elements from src (pitch src_pitch elements) to dst (pitch dst_pitch), converted:
 * the cast's widening of C0 (exact) and its rounding of the result (once, to nearest even; f64
 * goes straight to 16 bits). */
__device__ float cast_to(__half x, float *) { return gk__to_f32(x); }
__device__ float cast_to(__nv_bfloat16 x, float *) { return gk__to_f32(x); }
__device__ double cast_to(__half x, double *) { return (double)gk__to_f32(x); }
__device__ double cast_to(__nv_bfloat16 x, double *) { return (double)gk__to_f32(x); }
__device__ __half cast_to(float x, __half *) { return gk__from_f32<__half>(x); }
__device__ __nv_bfloat16 cast_to(float x, __nv_bfloat16 *) { return gk__from_f32<__nv_bfloat16>(x); }
__device__ __half cast_to(double x, __half *) { return __double2half(x); }
__device__ __nv_bfloat16 cast_to(double x, __nv_bfloat16 *) { return __double2bfloat16(x); }

template <typename From, typename To>
__global__ void cast_rows(const From *src, int64_t src_pitch, To *dst, int64_t dst_pitch,
                          int64_t n, int64_t total)
{
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t row = e / n, col = e % n;
    dst[row * dst_pitch + col] = cast_to(src[row * src_pitch + col], (To *)nullptr);
  }
}

/* Dense and aligned: four elements a step, no row arithmetic (the whole-C passes: 8192 x 8192
 * f32 into bf16 took 200 us row by row on an H100, near half its memory bandwidth). */
template <typename From, typename To>
__global__ void cast_dense4(const From *src, To *dst, int64_t quads)
{
  struct alignas(4 * sizeof(From)) In { From v[4]; };
  struct alignas(4 * sizeof(To)) Out { To v[4]; };
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < quads;
       e += (int64_t)gridDim.x * blockDim.x) {
    const In x = reinterpret_cast<const In *>(src)[e];
    Out y;
#pragma unroll
    for (int i = 0; i < 4; i++)
      y.v[i] = cast_to(x.v[i], (To *)nullptr);
    reinterpret_cast<Out *>(dst)[e] = y;
  }
}

template <typename From, typename To>
cudaError_t cast_launch(const void *src, int64_t src_pitch, void *dst, int64_t dst_pitch,
                        int64_t rows, int64_t n, cudaStream_t stream)
{
  int64_t total = rows * n;
  if (src_pitch == n && dst_pitch == n && total % 4 == 0 &&
      (uintptr_t)src % (4 * sizeof(From)) == 0 && (uintptr_t)dst % (4 * sizeof(To)) == 0)
    cast_dense4<<<blocks_for(total / 4), kThreads, 0, stream>>>((const From *)src, (To *)dst,
                                                               total / 4);
  else
    cast_rows<<<blocks_for(total), kThreads, 0, stream>>>((const From *)src, src_pitch,
                                                          (To *)dst, dst_pitch, n, total);
  return cudaGetLastError();
}

/* The one of the four (compute, 16-bit) pairs; widen: from the 16-bit type to the compute one. */
template <typename Wide>
cudaError_t cast_pick_narrow(gk_dtype narrow, bool widen, const void *src, int64_t src_pitch,
                             void *dst, int64_t dst_pitch, int64_t rows, int64_t n,
                             cudaStream_t stream)
{
  if (narrow == GK_F16)
    return widen ? cast_launch<__half, Wide>(src, src_pitch, dst, dst_pitch, rows, n, stream)
                 : cast_launch<Wide, __half>(src, src_pitch, dst, dst_pitch, rows, n, stream);
  return widen ? cast_launch<__nv_bfloat16, Wide>(src, src_pitch, dst, dst_pitch, rows, n, stream)
               : cast_launch<Wide, __nv_bfloat16>(src, src_pitch, dst, dst_pitch, rows, n, stream);
}

cudaError_t cast_pick(const gk_problem *p, bool widen, const void *src, int64_t src_pitch,
                      void *dst, int64_t dst_pitch, int64_t rows, cudaStream_t stream)
{
  if (gk_dtype_result(p->dtype) == GK_F32)
    return cast_pick_narrow<float>(p->out_dtype, widen, src, src_pitch, dst, dst_pitch, rows,
                                   p->n, stream);
  return cast_pick_narrow<double>(p->out_dtype, widen, src, src_pitch, dst, dst_pitch, rows,
                                  p->n, stream);
}

} // namespace

extern "C" cudaError_t gk_gpu_cast_in(const gk_problem *p, cudaStream_t stream)
{
  if (!p->cast || p->beta == 0.0)
    return cudaSuccess;
  if (!gk_problem_cast_ok(p))
    return cudaErrorInvalidValue;
  const int64_t mn = p->m * p->n;
  if (p->bias == NULL) /* C as a whole: batch * m rows of n, dense */
    return cast_pick(p, true, p->c, p->n, p->work, p->n, p->batch * p->m, stream);
  /* one row per entry (bias_stride apart) to each entry's first row, or one row for all */
  const int64_t rows = p->bias_stride > 0 ? p->batch : 1;
  return cast_pick(p, true, p->bias, p->bias_stride > 0 ? p->bias_stride : p->n, p->work, mn,
                   rows, stream);
}

extern "C" cudaError_t gk_gpu_cast_out(const gk_problem *p, cudaStream_t stream)
{
  if (!p->cast)
    return cudaSuccess;
  if (!gk_problem_cast_ok(p))
    return cudaErrorInvalidValue;
  return cast_pick(p, false, p->work, p->n, p->c, p->n, p->batch * p->m, stream);
}

extern "C" cudaError_t gk_gpu_bias_rows(const gk_problem *p, cudaStream_t stream)
{
  if (p->bias == NULL || p->beta == 0.0)
    return cudaSuccess;
  int64_t total = p->batch * p->m * p->n;
  unsigned blocks = blocks_for(total);
  switch (gk_dtype_size(gk_problem_c_dtype(p))) {
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
  switch (gk_problem_c_dtype(p)) {
  case GK_F32: act_all<<<blocks, kThreads, 0, stream>>>((float *)p->c, p->act, total); break;
  case GK_F64: act_all_f64<<<blocks, kThreads, 0, stream>>>((double *)p->c, p->act, total); break;
  case GK_F16: act_all<<<blocks, kThreads, 0, stream>>>((__half *)p->c, p->act, total); break;
  case GK_BF16:
    act_all<<<blocks, kThreads, 0, stream>>>((__nv_bfloat16 *)p->c, p->act, total);
    break;
  case GK_I32:
    if (p->act != GK_ACT_RELU)
      return cudaErrorInvalidValue;
    relu_all_i32<<<blocks, kThreads, 0, stream>>>((int32_t *)p->c, total);
    break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
