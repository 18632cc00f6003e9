/*
 * gk_gpu.h - the GPU kernel interface and selector.
 *
 * Every GPU kernel (the seeds' tiled kernel, the fast tiled kernels, the
 * tensor-core kernels, cuBLAS as the reference) is one gk_kernel entry in a
 * registry. The selector picks one by dtype, precision, shape and the
 * device's compute capability, or takes the one a config names.
 *
 * Pointers in the problem are device pointers. Launches are asynchronous on
 * the given stream; errors are returned as cudaError_t values (0 = success)
 * from the launch itself; faults inside a kernel surface at the next
 * synchronising call on that stream, as with any CUDA work.
 */
#ifndef GK_GPU_H
#define GK_GPU_H

#include <cuda_runtime_api.h>

#include "gk_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-device state the kernels need (cuBLAS handle, device properties). One per device and
 * stream user; not thread-safe, create one per worker thread. */
typedef struct gk_gpu_ctx gk_gpu_ctx;

typedef struct {
  const char *name;        /* stable, shown in info and in each reply: "tiled16", "cublas", ... */
  const char *description; /* one line for `info` */
  /* true when this kernel computes p correctly on a device of compute capability cc (major*10+minor) */
  bool (*supports)(const gk_problem *p, int cc);
  /* enqueue p on stream; cudaSuccess or the launch error */
  cudaError_t (*launch)(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream);
} gk_kernel;

/* Creates the context for `device` (makes it current on the calling thread). */
cudaError_t gk_gpu_ctx_create(int device, gk_gpu_ctx **out);
void gk_gpu_ctx_destroy(gk_gpu_ctx *ctx);
int gk_gpu_ctx_cc(const gk_gpu_ctx *ctx);

/* The registry: every kernel, in order of preference within a dtype. */
const gk_kernel *const *gk_kernels(size_t *count);
const gk_kernel *gk_kernel_by_name(const char *name);

/* Picks the kernel for p: `preference` is "auto" (fastest that supports p), or a kernel name
 * (used when it supports p, else auto). Never NULL for a valid problem: the tiled kernel
 * supports everything. */
const gk_kernel *gk_select(const gk_problem *p, int cc, const char *preference);

/* Select and launch in one call; *used (may be NULL) gets the kernel chosen. */
cudaError_t gk_gpu_gemm(gk_gpu_ctx *ctx, const gk_problem *p, const char *preference,
                        cudaStream_t stream, const gk_kernel **used);

#ifdef __cplusplus
}
#endif
#endif /* GK_GPU_H */
