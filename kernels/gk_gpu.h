/*
 * gk_gpu.h - the GPU kernel interface and selector.
 *
 * Every GPU kernel (the classic tiled kernel, the fast tiled kernels, the
 * tensor-core kernels, cuBLAS as the reference) is one gk_kernel entry in a
 * registry. The selector picks one by dtype, precision, shape and the
 * device's compute capability, or takes the one a config names.
 *
 * Pointers in the problem are device pointers. Launches are asynchronous on
 * the given stream; errors are returned as cudaError_t values (0 = success)
 * from the launch itself; faults inside a kernel surface at the next
 * synchronising call on that stream, as with any CUDA work.
 *
 * Adding a kernel (kernels/NN_name.cu):
 *   - define it with C linkage and an explicit `extern` (a namespace-scope
 *     const is internal in C++ otherwise):
 *       extern "C" const gk_kernel gk_kernel_NAME = {"NAME", "one line", supports, launch};
 *   - add two lines to kernels/fast.cmake:
 *       list(APPEND GK_GPU_SOURCES NN_name.cu)
 *       list(APPEND GK_FAST_KERNELS gk_kernel_NAME)
 *   The registry lists the fast kernels in the order of GK_FAST_KERNELS, then
 *   tiled16, then cublas. Code is built for sm_90a and compute_80 PTX: guard
 *   Hopper-only instructions with `#if __CUDA_ARCH__ >= 900` and let
 *   supports() refuse cc < 90.
 */
#ifndef GK_GPU_H
#define GK_GPU_H

#include <cuda_runtime_api.h>

#include "gk_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-device state the kernels need (cuBLAS handle, device properties, a scratch buffer). One
 * per device and stream: not thread-safe, and the scratch is ordered by that stream; create one
 * per worker thread and stream. */
typedef struct gk_gpu_ctx gk_gpu_ctx;

typedef struct {
  const char *name;        /* stable, shown in info and in each reply: "tiled16", "cublas", ... */
  const char *description; /* one line for `info` */
  /* true when this kernel computes p correctly on a device of compute capability cc (major*10+minor) */
  bool (*supports)(const gk_problem *p, int cc);
  /* enqueue p on stream; cudaSuccess or the launch error */
  cudaError_t (*launch)(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream);
  /* 0: the kernel ignores p->bias and p->act, and gk_gpu_gemm runs the epilogue as passes over
   * C around it; GK_EPILOGUE_FUSED: it applies the bias and ReLU in its own store when they
   * are set (a bias row read where p->bias points, never aliasing C; ReLU last), and
   * gk_gpu_gemm sets them only for a one-piece problem (GELU stays a pass) and clears them
   * otherwise. */
  unsigned epilogue;
} gk_kernel;

#define GK_EPILOGUE_FUSED 1u
/* The kernel also takes a p->cast problem itself (C, C0 and the bias in the out dtype, rounded
 * in its store; p->work unused): gk_gpu_gemm then gives it the cast problem (one piece, and an
 * epilogue it fuses whole: none, or with GK_EPILOGUE_FUSED the bias and ReLU) instead of
 * widening C0 and rounding C in passes. */
#define GK_EPILOGUE_CAST 2u

/* The two kernels that are always registered; the fast ones are reached through gk_kernels(). */
extern const gk_kernel gk_kernel_tiled16; /* the classic 16x16 shared-memory tiled kernel: every problem */
extern const gk_kernel gk_kernel_cublas;  /* cuBLAS, the reference; only when named */

/* Creates the context for `device` (makes it current on the calling thread). cudaSuccess and
 * *out set, or the error (cudaErrorInvalidDevice, cudaErrorMemoryAllocation, ...) and *out NULL. */
cudaError_t gk_gpu_ctx_create(int device, gk_gpu_ctx **out);
/* Frees the context (and its cuBLAS handle, which waits for that handle's work). NULL is a no-op. */
void gk_gpu_ctx_destroy(gk_gpu_ctx *ctx);
int gk_gpu_ctx_cc(const gk_gpu_ctx *ctx);
int gk_gpu_ctx_device(const gk_gpu_ctx *ctx);
/* Properties read once at creation (multiProcessorCount, sharedMemPerBlockOptin, l2CacheSize...). */
const struct cudaDeviceProp *gk_gpu_ctx_props(const gk_gpu_ctx *ctx);
/* The context's cuBLAS handle (cublasHandle_t), created on first use; NULL when cuBLAS cannot
 * be initialised. Same thread rules as the context. */
struct cublasContext *gk_gpu_ctx_cublas(gk_gpu_ctx *ctx);
/* GK_BIAS_SCRATCH_BYTES of device memory, allocated on first use, for the bias rows that a
 * fused epilogue must read from outside C (gk_gpu_gemm copies them there on its stream, so the
 * context's one stream orders its uses); NULL when it cannot be allocated. */
#define GK_BIAS_SCRATCH_BYTES ((size_t)1 << 20)
void *gk_gpu_ctx_bias_scratch(gk_gpu_ctx *ctx);
/* A stream-ordered memory pool of the context's device, created on first use, for the passing
 * copies a kernel makes (17's K-major operands: cudaMallocFromPoolAsync / cudaFreeAsync on the
 * launch's stream); it keeps up to GK_POOL_KEEP_BYTES (or what gk_gpu_ctx_set_pool_keep set)
 * mapped between uses. NULL when it cannot be created. */
#define GK_POOL_KEEP_BYTES ((uint64_t)64 << 20)
cudaMemPool_t gk_gpu_ctx_pool(gk_gpu_ctx *ctx);
/* How many bytes the pool keeps mapped between uses (0: it returns everything at each
 * synchronisation); the daemon's gpu.kernel_pool_bytes. */
void gk_gpu_ctx_set_pool_keep(gk_gpu_ctx *ctx, uint64_t bytes);

/* Shape and pointer checks shared by every launch path: m, n, k, batch >= 1, dtype known,
 * a, b, c non-NULL, alpha and beta finite. cudaSuccess or cudaErrorInvalidValue. */
cudaError_t gk_problem_check(const gk_problem *p);

/* The registry: every kernel, in order of preference within a dtype (fast kernels in the order
 * they were registered, then tiled16, then cublas). Static storage; never NULL. */
const gk_kernel *const *gk_kernels(size_t *count);
/* The kernel of that name, or NULL. */
const gk_kernel *gk_kernel_by_name(const char *name);

/* Picks the kernel for p: `preference` is "auto" (or NULL: the first registered kernel, cuBLAS
 * excepted, whose supports() accepts p), or a kernel name (used when it supports p, else auto).
 * Never NULL for a valid problem: the tiled kernel supports everything. */
const gk_kernel *gk_select(const gk_problem *p, int cc, const char *preference);

/* The epilogue's two passes over C (gk_epilogue.cu), enqueued on stream: the bias row into every
 * row (nothing without a bias or with beta 0), and the activation (nothing for GK_ACT_NONE).
 * gk_gpu_gemm runs them around the kernel; cudaSuccess or the launch error. */
cudaError_t gk_gpu_bias_rows(const gk_problem *p, cudaStream_t stream);
cudaError_t gk_gpu_act(const gk_problem *p, cudaStream_t stream);
/* The output cast's two passes (p->cast; nothing otherwise): C0 widened into the work area
 * (beta != 0: C, or the bias rows to each entry's first row there, as gk_problem_uncast's bias
 * expects), and the work area rounded once into C. cudaSuccess or the launch error. */
cudaError_t gk_gpu_cast_in(const gk_problem *p, cudaStream_t stream);
cudaError_t gk_gpu_cast_out(const gk_problem *p, cudaStream_t stream);

/* Checks p, selects and launches in one call, with the epilogue (bias, activation, and the
 * output cast of a p->cast problem) around it; *used (may be NULL) gets the kernel chosen
 * (NULL when p failed its checks). */
cudaError_t gk_gpu_gemm(gk_gpu_ctx *ctx, const gk_problem *p, const char *preference,
                        cudaStream_t stream, const gk_kernel **used);

#ifdef __cplusplus
}
#endif
#endif /* GK_GPU_H */
