/*
 * gk_gpu_ctx.cu - per-device state for the kernels: the device ordinal, its
 * properties (read once: a cudaGetDeviceProperties call costs far more than
 * a launch), a cuBLAS handle created on first use, so that a daemon that
 * never names "cublas" does not pay for its workspace, and, also on first use,
 * GK_BIAS_SCRATCH_BYTES of device memory for the bias rows of a fused epilogue.
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
