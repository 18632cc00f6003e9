/*
 * gk_registry.cu - the table of GPU kernels and the selector.
 *
 * The table is explicit: the fast kernels come from gk_registry_fast.inc,
 * which kernels/gpu.cmake writes from the GK_FAST_KERNELS list of
 * kernels/fast.cmake (one GK_FAST_KERNEL(symbol) line each), so adding a
 * kernel never means editing this file. Order is preference: fast kernels as
 * registered, then the tiled kernel (supports everything), then cuBLAS, which
 * "auto" never picks: it is the reference we measure against, and a daemon
 * serves it only when its config names it.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gk_gpu.h"

#define GK_FAST_KERNEL(symbol) extern "C" const gk_kernel symbol;
#include "gk_registry_fast.inc"
#undef GK_FAST_KERNEL

static const gk_kernel *const gk_registry[] = {
#define GK_FAST_KERNEL(symbol) &symbol,
#include "gk_registry_fast.inc"
#undef GK_FAST_KERNEL
    &gk_kernel_tiled16,
    &gk_kernel_cublas,
};

static const size_t gk_registry_count = sizeof(gk_registry) / sizeof(gk_registry[0]);

extern "C" const gk_kernel *const *gk_kernels(size_t *count)
{
  if (count != NULL)
    *count = gk_registry_count;
  return gk_registry;
}

extern "C" const gk_kernel *gk_kernel_by_name(const char *name)
{
  if (name == NULL)
    return NULL;
  for (size_t i = 0; i < gk_registry_count; i++)
    if (strcmp(gk_registry[i]->name, name) == 0)
      return gk_registry[i];
  return NULL;
}

/* a * b without overflow into *out (both >= 0). */
static bool gk_mul_ok(int64_t a, int64_t b, int64_t *out)
{
  if (a != 0 && b > INT64_MAX / a)
    return false;
  *out = a * b;
  return true;
}

extern "C" cudaError_t gk_problem_check(const gk_problem *p)
{
  if (p == NULL || p->a == NULL || p->b == NULL || p->c == NULL)
    return cudaErrorInvalidValue;
  if (p->dtype != GK_F32 && p->dtype != GK_F64 && p->dtype != GK_F16 && p->dtype != GK_BF16)
    return cudaErrorInvalidValue;
  if (p->m < 1 || p->n < 1 || p->k < 1 || p->batch < 1)
    return cudaErrorInvalidValue;
  if (!isfinite(p->alpha) || !isfinite(p->beta))
    return cudaErrorInvalidValue;
  if ((unsigned)p->act > GK_ACT_GELU_TANH || p->bias_stride < 0)
    return cudaErrorInvalidValue;
  /* Every kernel indexes with int64 offsets: batch * rows * cols must fit, with room for a
   * byte count (x 8). */
  int64_t elems;
  const int64_t dims[3][2] = {{p->m, p->k}, {p->k, p->n}, {p->m, p->n}};
  for (int i = 0; i < 3; i++)
    if (!gk_mul_ok(dims[i][0], dims[i][1], &elems) || !gk_mul_ok(elems, p->batch, &elems) ||
        !gk_mul_ok(elems, 8, &elems))
      return cudaErrorInvalidValue;
  return cudaSuccess;
}

static bool gk_is_auto(const char *preference)
{
  return preference == NULL || preference[0] == '\0' || strcmp(preference, "auto") == 0;
}

extern "C" const gk_kernel *gk_select(const gk_problem *p, int cc, const char *preference)
{
  if (!gk_is_auto(preference)) {
    const gk_kernel *named = gk_kernel_by_name(preference);
    if (named != NULL && named->supports(p, cc))
      return named;
  }
  for (size_t i = 0; i < gk_registry_count; i++) {
    const gk_kernel *kernel = gk_registry[i];
    if (kernel != &gk_kernel_cublas && kernel->supports(p, cc))
      return kernel;
  }
  return NULL; /* unreachable for a problem that passed gk_problem_check: tiled16 takes all */
}

extern "C" cudaError_t gk_gpu_gemm(gk_gpu_ctx *ctx, const gk_problem *p, const char *preference,
                                   cudaStream_t stream, const gk_kernel **used)
{
  if (used != NULL)
    *used = NULL;
  cudaError_t err = gk_problem_check(p);
  if (err != cudaSuccess)
    return err;
  err = gk_gpu_bias_rows(p, stream); /* before the kernel: its beta reads the bias rows */
  if (err != cudaSuccess)
    return err;
  /* A shared B: the kernels batch over grid.z with a B stride of one matrix (some through
   * 3-D tensor maps, which take no stride of 0), so the problem goes as plain pieces. */
  int64_t pieces = gk_problem_pieces(p);
  for (int64_t i = 0; i < pieces && err == cudaSuccess; i++) {
    gk_problem q = gk_problem_piece(p, i);
    const gk_kernel *kernel = gk_select(&q, gk_gpu_ctx_cc(ctx), preference);
    if (kernel == NULL)
      return cudaErrorNotSupported;
    if (used != NULL)
      *used = kernel;
    err = kernel->launch(ctx, &q, stream);
  }
  if (err == cudaSuccess)
    err = gk_gpu_act(p, stream);
  return err;
}
