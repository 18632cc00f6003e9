/*
 * gk_cpu.c - the CPU path: OpenBLAS sgemm/dgemm, with f16 and bf16 widened to
 * f32 per batch element and rounded back (gp_half.h: round to nearest even).
 */
#include "gk_cpu.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "gp_half.h"

/* ---- the GEMM ------------------------------------------------------------ */

void gk_cpu_set_blas_threads(int threads) {
  openblas_set_num_threads(threads > 0 ? threads : 1);
}

static bool problem_ok(const gk_problem *p) {
  if (!p || !p->a || !p->b || !p->c)
    return false;
  if (p->m < 1 || p->n < 1 || p->k < 1 || p->batch < 1)
    return false;
  /* CBLAS takes int dimensions and leading dimensions. */
  if (p->m > INT_MAX || p->n > INT_MAX || p->k > INT_MAX)
    return false;
  return gk_dtype_size(p->dtype) != 0;
}

size_t gk_cpu_scratch_bytes(const gk_problem *p) {
  if (p->dtype != GK_F16 && p->dtype != GK_BF16)
    return 0;
  /* one batch element of a, b and c widened to f32 */
  return (size_t)(gk_problem_a_elems(p) + gk_problem_b_elems(p) + gk_problem_c_elems(p)) *
         sizeof(float);
}

static void widen(const uint16_t *in, float *out, int64_t count, gk_dtype dtype) {
  if (dtype == GK_F16) {
    for (int64_t i = 0; i < count; i++)
      out[i] = gp_f16_to_f32(in[i]);
  } else {
    for (int64_t i = 0; i < count; i++)
      out[i] = gp_bf16_to_f32(in[i]);
  }
}

static void narrow(const float *in, uint16_t *out, int64_t count, gk_dtype dtype) {
  if (dtype == GK_F16) {
    for (int64_t i = 0; i < count; i++)
      out[i] = gp_f32_to_f16(in[i]);
  } else {
    for (int64_t i = 0; i < count; i++)
      out[i] = gp_f32_to_bf16(in[i]);
  }
}

typedef struct {
  enum CBLAS_TRANSPOSE ta, tb;
  int m, n, k, lda, ldb, ldc;
} blas_shape;

static blas_shape shape_of(const gk_problem *p) {
  blas_shape s;
  s.ta = p->trans_a ? CblasTrans : CblasNoTrans;
  s.tb = p->trans_b ? CblasTrans : CblasNoTrans;
  s.m = (int)p->m;
  s.n = (int)p->n;
  s.k = (int)p->k;
  s.lda = p->trans_a ? s.m : s.k; /* A stored k x m when transposed */
  s.ldb = p->trans_b ? s.k : s.n; /* B stored n x k when transposed */
  s.ldc = s.n;
  return s;
}

/* beta == 0 must not read C (NaN there must not propagate): clear it and let BLAS add 0 * 0. */
static void run_f32(const blas_shape *s, float alpha, float beta, const float *a, const float *b,
                    float *c) {
  if (beta == 0.0f)
    memset(c, 0, (size_t)s->m * (size_t)s->n * sizeof(float));
  cblas_sgemm(CblasRowMajor, s->ta, s->tb, s->m, s->n, s->k, alpha, a, s->lda, b, s->ldb, beta, c,
              s->ldc);
}

static void run_f64(const blas_shape *s, double alpha, double beta, const double *a,
                    const double *b, double *c) {
  if (beta == 0.0)
    memset(c, 0, (size_t)s->m * (size_t)s->n * sizeof(double));
  cblas_dgemm(CblasRowMajor, s->ta, s->tb, s->m, s->n, s->k, alpha, a, s->lda, b, s->ldb, beta, c,
              s->ldc);
}

static int run_half(const gk_problem *p, const blas_shape *s) {
  int64_t na = gk_problem_a_elems(p), nb = gk_problem_b_elems(p), nc = gk_problem_c_elems(p);
  float *scratch = malloc(gk_cpu_scratch_bytes(p));
  if (!scratch)
    return -ENOMEM;
  float *fa = scratch, *fb = fa + na, *fc = fb + nb;
  const uint16_t *a = p->a, *b = p->b;
  uint16_t *c = p->c;
  for (int64_t i = 0; i < p->batch; i++) {
    widen(a + i * na, fa, na, p->dtype);
    widen(b + i * nb, fb, nb, p->dtype);
    if (p->beta != 0.0)
      widen(c + i * nc, fc, nc, p->dtype);
    run_f32(s, (float)p->alpha, (float)p->beta, fa, fb, fc);
    narrow(fc, c + i * nc, nc, p->dtype);
  }
  free(scratch);
  return 0;
}

int gk_cpu_gemm(const gk_problem *p, const char **kernel) {
  if (kernel)
    *kernel = "openblas";
  if (!problem_ok(p))
    return -EINVAL;
  blas_shape s = shape_of(p);
  int64_t na = gk_problem_a_elems(p), nb = gk_problem_b_elems(p), nc = gk_problem_c_elems(p);
  switch (p->dtype) {
  case GK_F32:
    for (int64_t i = 0; i < p->batch; i++)
      run_f32(&s, (float)p->alpha, (float)p->beta, (const float *)p->a + i * na,
              (const float *)p->b + i * nb, (float *)p->c + i * nc);
    return 0;
  case GK_F64:
    for (int64_t i = 0; i < p->batch; i++)
      run_f64(&s, p->alpha, p->beta, (const double *)p->a + i * na, (const double *)p->b + i * nb,
              (double *)p->c + i * nc);
    return 0;
  case GK_F16:
  case GK_BF16:
    return run_half(p, &s);
  }
  return -EINVAL;
}
