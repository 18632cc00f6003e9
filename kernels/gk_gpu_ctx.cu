/*
 * gk_gpu_ctx.cu - per-device state for the kernels: the device ordinal, its
 * properties (read once: a cudaGetDeviceProperties call costs far more than
 * a launch), a cuBLAS handle created on first use, so that a daemon that
 * never names "cublas" does not pay for its workspace, and, also on first use,
 * GK_BIAS_SCRATCH_BYTES of device memory for the bias rows of a fused epilogue, and a
 * stream-ordered memory pool for the kernels' passing copies.
 */
#include <cublas_v2.h>

#include <stdlib.h>

#include "gk_gpu.h"

struct gk_gpu_ctx {
  int device;
  int cc; /* major * 10 + minor */
  cudaDeviceProp props;
  cublasHandle_t cublas; /* NULL until gk_gpu_ctx_cublas() first succeeds (retried after a
                          * failure: an out-of-memory moment should not disable it for good) */
  void *bias_scratch;    /* NULL until gk_gpu_ctx_bias_scratch() first succeeds (the same) */
  cudaMemPool_t pool;    /* NULL until gk_gpu_ctx_pool() first succeeds (the same) */
  uint64_t pool_keep;    /* bytes the pool keeps mapped between uses */
};

extern "C" cudaError_t gk_gpu_ctx_create(int device, gk_gpu_ctx **out)
{
  *out = NULL;
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess)
    return err;
  gk_gpu_ctx *ctx = (gk_gpu_ctx *)calloc(1, sizeof(*ctx));
  if (ctx == NULL)
    return cudaErrorMemoryAllocation;
  err = cudaGetDeviceProperties(&ctx->props, device);
  if (err != cudaSuccess) {
    free(ctx);
    return err;
  }
  ctx->device = device;
  ctx->cc = ctx->props.major * 10 + ctx->props.minor;
  ctx->pool_keep = GK_POOL_KEEP_BYTES;
  *out = ctx;
  return cudaSuccess;
}

extern "C" void gk_gpu_ctx_destroy(gk_gpu_ctx *ctx)
{
  if (ctx == NULL)
    return;
  if (ctx->cublas != NULL) {
    /* cublasDestroy acts on the current device: make it the handle's own. Failures here
     * cannot be acted on (the device may already be lost); the memory is freed anyway. */
    (void)cudaSetDevice(ctx->device);
    (void)cublasDestroy(ctx->cublas);
  }
  if (ctx->bias_scratch != NULL) {
    (void)cudaSetDevice(ctx->device);
    (void)cudaFree(ctx->bias_scratch); /* waits for the work that read it */
  }
  if (ctx->pool != NULL) {
    (void)cudaSetDevice(ctx->device);
    (void)cudaMemPoolDestroy(ctx->pool); /* every allocation went back on its stream */
  }
  free(ctx);
}

extern "C" int gk_gpu_ctx_cc(const gk_gpu_ctx *ctx) { return ctx->cc; }

extern "C" int gk_gpu_ctx_device(const gk_gpu_ctx *ctx) { return ctx->device; }

extern "C" const struct cudaDeviceProp *gk_gpu_ctx_props(const gk_gpu_ctx *ctx)
{
  return &ctx->props;
}

extern "C" struct cublasContext *gk_gpu_ctx_cublas(gk_gpu_ctx *ctx)
{
  if (ctx->cublas == NULL) {
    cublasHandle_t handle = NULL;
    if (cudaSetDevice(ctx->device) != cudaSuccess || cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
      return NULL;
    ctx->cublas = handle;
  }
  return ctx->cublas;
}

extern "C" void *gk_gpu_ctx_bias_scratch(gk_gpu_ctx *ctx)
{
  if (ctx->bias_scratch == NULL) {
    void *scratch = NULL;
    if (cudaSetDevice(ctx->device) != cudaSuccess ||
        cudaMalloc(&scratch, GK_BIAS_SCRATCH_BYTES) != cudaSuccess)
      return NULL;
    ctx->bias_scratch = scratch;
  }
  return ctx->bias_scratch;
}

/* The pool keeps up to pool_keep bytes between uses (GK_POOL_KEEP_BYTES unless set): without it, memory freed on a stream is
 * returned at the next synchronisation and mapped again on the next allocation, which cost an
 * H100 tens of microseconds per gemm (1024^3 i8 with B k x n: 35 TFLOP/s with the device's
 * default pool, which keeps nothing). */
extern "C" cudaMemPool_t gk_gpu_ctx_pool(gk_gpu_ctx *ctx)
{
  if (ctx->pool == NULL) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = ctx->device;
    cudaMemPool_t pool = NULL;
    if (cudaSetDevice(ctx->device) != cudaSuccess || cudaMemPoolCreate(&pool, &props) != cudaSuccess)
      return NULL;
    uint64_t keep = ctx->pool_keep;
    if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
      (void)cudaMemPoolDestroy(pool);
      return NULL;
    }
    ctx->pool = pool;
  }
  return ctx->pool;
}

extern "C" void gk_gpu_ctx_set_pool_keep(gk_gpu_ctx *ctx, uint64_t bytes)
{
  ctx->pool_keep = bytes;
  if (ctx->pool != NULL) /* the attribute of a live pool; a failure leaves the old amount */
    (void)cudaMemPoolSetAttribute(ctx->pool, cudaMemPoolAttrReleaseThreshold, &bytes);
}
