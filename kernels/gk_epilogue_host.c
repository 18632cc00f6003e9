/*
 * gk_epilogue_host.c - the epilogue on host memory (gk_epilogue.h): the CPU path runs it around
 * each part's BLAS call; the tests' fake CUDA runtime runs it around its host GEMM.
 */
#include "gk_epilogue.h"

#include <math.h>
#include <string.h>

#include "gp_fp8.h"
#include "gp_half.h"

static double act_apply(gk_act act, double x) {
  switch (act) {
  case GK_ACT_NONE: return x;
  case GK_ACT_RELU: return x < 0.0 ? 0.0 : x; /* NaN stays NaN, as in PyTorch */
  case GK_ACT_GELU: return 0.5 * x * (1.0 + erf(x * M_SQRT1_2));
  case GK_ACT_GELU_TANH:
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  }
  return x;
}

double gk_host_load(gk_dtype dtype, const void *base, int64_t i) {
  switch (dtype) {
  case GK_F32: return ((const float *)base)[i];
  case GK_F64: return ((const double *)base)[i];
  case GK_F16: return gp_f16_to_f32(((const uint16_t *)base)[i]);
  case GK_BF16: return gp_bf16_to_f32(((const uint16_t *)base)[i]);
  case GK_I8: return ((const int8_t *)base)[i];
  case GK_I32: return ((const int32_t *)base)[i];
  case GK_E4M3: return gp_e4m3_to_f32(((const uint8_t *)base)[i]);
  case GK_E5M2: return gp_e5m2_to_f32(((const uint8_t *)base)[i]);
  case GK_C64:
  case GK_C128: break; /* complex: no one real value (no epilogue nor cast takes one) */
  }
  return 0.0;
}

void gk_host_store(gk_dtype dtype, void *base, int64_t i, double v) {
  switch (dtype) {
  case GK_F32: ((float *)base)[i] = (float)v; break;
  case GK_F64: ((double *)base)[i] = v; break;
  case GK_F16: ((uint16_t *)base)[i] = gp_f64_to_f16(v); break;
  case GK_BF16: ((uint16_t *)base)[i] = gp_f64_to_bf16(v); break;
  case GK_I8: ((int8_t *)base)[i] = (int8_t)(uint8_t)(int64_t)v; break;
  case GK_I32: ((int32_t *)base)[i] = (int32_t)(uint32_t)(int64_t)v; break;
  case GK_E4M3: ((uint8_t *)base)[i] = gp_f64_to_e4m3(v); break;
  case GK_E5M2: ((uint8_t *)base)[i] = gp_f64_to_e5m2(v); break;
  case GK_C64:
  case GK_C128: break; /* complex: see gk_host_load */
  }
}

int32_t gk_host_i32_axpby(int64_t alpha, int64_t acc, int64_t beta, int32_t c0) {
  /* in uint32: wraps as the GPU's 32-bit arithmetic does, with no signed overflow in C */
  uint32_t v = (uint32_t)alpha * (uint32_t)acc;
  if (beta != 0)
    v += (uint32_t)beta * (uint32_t)c0;
  return (int32_t)v;
}

void gk_host_bias_rows(const gk_problem *p, int64_t i, int64_t r0, int64_t rows) {
  if (!p->bias || p->beta == 0.0)
    return;
  size_t es = gk_dtype_size(gk_problem_c_dtype(p)), row_bytes = (size_t)p->n * es;
  const char *src = (const char *)p->bias + (size_t)(i * p->bias_stride) * es;
  char *entry = (char *)p->c + (size_t)(i * gk_problem_c_elems(p)) * es;
  for (int64_t r = r0; r < r0 + rows; r++) {
    char *dst = entry + (size_t)r * row_bytes;
    if (dst != src)
      memcpy(dst, src, row_bytes);
  }
}

/* Row r of batch entry i: its first element's index in C (and in the work area). */
static int64_t row_index(const gk_problem *p, int64_t i, int64_t r) {
  return i * gk_problem_c_elems(p) + r * p->n;
}

void gk_host_act_rows(const gk_problem *p, int64_t i, int64_t r0, int64_t rows) {
  if (p->act == GK_ACT_NONE)
    return;
  int64_t first = row_index(p, i, r0);
  gk_dtype c_dtype = gk_problem_c_dtype(p);
  for (int64_t e = first; e < first + rows * p->n; e++)
    gk_host_store(c_dtype, p->c, e, act_apply(p->act, gk_host_load(c_dtype, p->c, e)));
}

void gk_host_cast_in(const gk_problem *p, int64_t i, int64_t r0, int64_t rows) {
  if (!p->cast || p->beta == 0.0)
    return;
  for (int64_t r = r0; r < r0 + rows; r++) {
    int64_t from = p->bias ? i * p->bias_stride : row_index(p, i, r);
    const void *src = p->bias ? p->bias : p->c;
    int64_t to = row_index(p, i, r);
    for (int64_t j = 0; j < p->n; j++)
      gk_host_store(gk_dtype_result(p->dtype), p->work, to + j,
                    gk_host_load(p->out_dtype, src, from + j));
  }
}

void gk_host_cast_out(const gk_problem *p, int64_t i, int64_t r0, int64_t rows) {
  if (!p->cast)
    return;
  int64_t first = row_index(p, i, r0);
  for (int64_t e = first; e < first + rows * p->n; e++)
    gk_host_store(p->out_dtype, p->c, e, gk_host_load(gk_dtype_result(p->dtype), p->work, e));
}
