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

#include "gk_complex.h"
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

/* What the integer gemm asks besides the rest: integer alpha and beta within int32, no cast,
 * no activation but ReLU. */
static bool gk_i8_problem_ok(const gk_problem *p)
{
  const double scalars[2] = {p->alpha, p->beta};
  for (int i = 0; i < 2; i++)
    if (scalars[i] != floor(scalars[i]) || scalars[i] < -2147483648.0 || scalars[i] > 2147483647.0)
      return false;
  return !p->cast && (p->act == GK_ACT_NONE || p->act == GK_ACT_RELU);
}

extern "C" cudaError_t gk_problem_check(const gk_problem *p)
{
  if (p == NULL || p->a == NULL || p->b == NULL || p->c == NULL)
    return cudaErrorInvalidValue;
  if (p->dtype == GK_I32 || gk_dtype_size(p->dtype) == 0) /* i32: a result dtype only */
    return cudaErrorInvalidValue;
  if (p->dtype == GK_I8 && !gk_i8_problem_ok(p))
    return cudaErrorInvalidValue;
  if (p->m < 1 || p->n < 1 || p->k < 1 || p->batch < 1)
    return cudaErrorInvalidValue;
  if (!isfinite(p->alpha) || !isfinite(p->beta))
    return cudaErrorInvalidValue;
  if ((unsigned)p->act > GK_ACT_GELU_TANH || p->bias_stride < 0 || !gk_problem_cast_ok(p))
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

/* How many bias rows p has: one per batch entry (bias_stride apart), or one for all. */
static int64_t gk_bias_row_count(const gk_problem *p)
{
  return p->bias_stride > 0 ? p->batch : 1;
}

/* True when the bias rows lie outside C: a kernel that fuses the bias reads them while other
 * blocks write C. */
static bool gk_bias_apart(const gk_problem *p)
{
  const size_t size = gk_dtype_size(gk_problem_c_dtype(p));
  const char *bias = (const char *)p->bias, *c = (const char *)p->c;
  const int64_t rows = gk_bias_row_count(p);
  const char *bias_end = bias + ((rows - 1) * p->bias_stride + p->n) * (int64_t)size;
  const char *c_end = c + p->batch * p->m * p->n * (int64_t)size;
  return bias_end <= c || bias >= c_end;
}

/* The bias rows of p copied, on stream, to the context's scratch (one row, or one per batch
 * entry, n apart), so that a fused kernel can read them while C is written: the daemon brings
 * each entry's row at the start of its C. false (the passes then do the bias) when they do not
 * fit the scratch or it cannot be had. */
static bool gk_bias_to_scratch(gk_gpu_ctx *ctx, gk_problem *p, cudaStream_t stream)
{
  const size_t size = gk_dtype_size(gk_problem_c_dtype(p)), row_bytes = (size_t)p->n * size;
  const int64_t rows = gk_bias_row_count(p);
  if (rows > (int64_t)(GK_BIAS_SCRATCH_BYTES / row_bytes))
    return false;
  void *scratch = gk_gpu_ctx_bias_scratch(ctx);
  if (scratch == NULL)
    return false;
  const size_t pitch = p->bias_stride > 0 ? (size_t)p->bias_stride * size : row_bytes;
  if (cudaMemcpy2DAsync(scratch, row_bytes, p->bias, pitch, row_bytes, (size_t)rows,
                        cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
    return false;
  p->bias = scratch;
  p->bias_stride = p->bias_stride > 0 ? p->n : 0;
  return true;
}

/* Which of the epilogue p's kernel does itself (p is one piece: a kernel sees only its piece):
 * with a kernel that fuses the epilogue, ReLU, and the bias when its rows lie apart from C or
 * could be copied apart (p->bias then points at the copy). The rest runs as passes: GELU's erf
 * or tanh on a fusing kernel's storing threads alone cost as much as the pass, which has the
 * whole GPU (H100, 8192 x 8192 x 64 f16: +226 us fused, +228 us as a pass). */
static void gk_fused_parts(gk_gpu_ctx *ctx, gk_problem *p, const gk_kernel *kernel,
                           cudaStream_t stream, bool *bias, bool *act)
{
  const bool fused = (kernel->epilogue & GK_EPILOGUE_FUSED) != 0;
  *act = fused && p->act == GK_ACT_RELU;
  *bias = fused && p->bias != NULL && p->beta != 0.0 &&
          (gk_bias_apart(p) || gk_bias_to_scratch(ctx, p, stream));
}

/* A cast problem to a kernel that casts in its own store (GK_EPILOGUE_CAST), with the bias
 * and ReLU fused too; false (nothing enqueued but maybe the bias's copy to the scratch, which
 * does no harm) when it cannot take the whole epilogue: GELU, or a bias it cannot read apart. */
static bool gk_gpu_gemm_cast_fused(gk_gpu_ctx *ctx, const gk_problem *p, const gk_kernel *kernel,
                                   cudaStream_t stream, cudaError_t *err)
{
  if (!(kernel->epilogue & GK_EPILOGUE_CAST) || (p->act != GK_ACT_NONE && p->act != GK_ACT_RELU) ||
      !kernel->supports(p, gk_gpu_ctx_cc(ctx)))
    return false;
  gk_problem whole = *p;
  bool bias_fused = false, act_fused = false;
  gk_fused_parts(ctx, &whole, kernel, stream, &bias_fused, &act_fused);
  const bool bias_read = p->bias != NULL && p->beta != 0.0;
  if ((bias_read && !bias_fused) || (p->act == GK_ACT_RELU && !act_fused))
    return false;
  if (!bias_read)
    whole.bias = NULL, whole.bias_stride = 0;
  *err = kernel->launch(ctx, &whole, stream);
  return true;
}

/* A cast problem: to a kernel that casts in its store where the plain problem's kernel does;
 * else C0 into the work area, the plain problem there, then the rounding into C. The plain
 * problem's bias is the work area's first row of each entry (fused kernels copy it apart as
 * they do any bias inside C). */
static cudaError_t gk_gpu_gemm_cast(gk_gpu_ctx *ctx, const gk_problem *p, const char *preference,
                                    cudaStream_t stream, const gk_kernel **used)
{
  const gk_problem plain = gk_problem_uncast(p);
  const gk_kernel *kernel =
      gk_problem_pieces(p) == 1 ? gk_select(&plain, gk_gpu_ctx_cc(ctx), preference) : NULL;
  cudaError_t err = cudaSuccess;
  if (kernel != NULL && gk_gpu_gemm_cast_fused(ctx, p, kernel, stream, &err)) {
    if (used != NULL)
      *used = kernel;
    return err;
  }
  err = gk_gpu_cast_in(p, stream);
  if (err == cudaSuccess)
    err = gk_gpu_gemm(ctx, &plain, preference, stream, used);
  if (err == cudaSuccess)
    err = gk_gpu_cast_out(p, stream);
  return err;
}

extern "C" cudaError_t gk_gpu_gemm(gk_gpu_ctx *ctx, const gk_problem *p, const char *preference,
                                   cudaStream_t stream, const gk_kernel **used)
{
  if (used != NULL)
    *used = NULL;
  cudaError_t err = gk_problem_check(p);
  if (err != cudaSuccess)
    return err;
  if (gk_dtype_is_complex(p->dtype)) /* on the real kernels (gk_complex.cu) */
    return gk_gpu_gemm_complex(ctx, p, preference, stream, used);
  if (p->cast)
    return gk_gpu_gemm_cast(ctx, p, preference, stream, used);
  /* A shared B: the kernels batch over grid.z with a B stride of one matrix (some through
   * 3-D tensor maps, which take no stride of 0), so the problem goes as plain pieces. */
  const int64_t pieces = gk_problem_pieces(p);
  const gk_kernel *first = pieces == 1 ? gk_select(p, gk_gpu_ctx_cc(ctx), preference) : NULL;
  gk_problem whole = *p; /* its bias may move to the scratch */
  bool bias_fused = false, act_fused = false;
  if (pieces == 1 && first != NULL)
    gk_fused_parts(ctx, &whole, first, stream, &bias_fused, &act_fused);
  if (!bias_fused) {
    err = gk_gpu_bias_rows(p, stream); /* before the kernel: its beta reads the bias rows */
    if (err != cudaSuccess)
      return err;
  }
  for (int64_t i = 0; i < pieces && err == cudaSuccess; i++) {
    gk_problem q = gk_problem_piece(&whole, i);
    const gk_kernel *kernel = pieces == 1 ? first : gk_select(&q, gk_gpu_ctx_cc(ctx), preference);
    if (kernel == NULL)
      return cudaErrorNotSupported;
    if (used != NULL)
      *used = kernel;
    if (!bias_fused) /* C holds the bias rows already, or there are none */
      q.bias = NULL, q.bias_stride = 0;
    if (!act_fused)
      q.act = GK_ACT_NONE;
    err = kernel->launch(ctx, &q, stream);
  }
  if (err == cudaSuccess && !act_fused)
    err = gk_gpu_act(p, stream);
  return err;
}
