/*
 * gk_cpu.c - the CPU path: OpenBLAS sgemm/dgemm, with f16 and bf16 widened to
 * f32 per batch element and rounded back (gp_half.h: round to nearest even), i8 widened to
 * f64 (exact) with its i32 result formed in 32-bit arithmetic, fp8 widened to f64 with its f32
 * result rounded once from the double; c64 and c128 by cgemm and zgemm. f32, f64 and the complex
 * dtypes take leading dimensions.
 */
#include "gk_cpu.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "gk_epilogue.h"
#include "gp_half.h"

/* ---- the GEMM ------------------------------------------------------------ */

void gk_cpu_set_blas_threads(int threads) {
  openblas_set_num_threads(threads > 0 ? threads : 1);
}

static bool problem_ok(const gk_problem *p) {
  if (!p || !p->a || !p->b || !p->c)
    return false;
  if ((unsigned)p->act > GK_ACT_GELU_TANH || p->bias_stride < 0)
    return false;
  if (p->m < 1 || p->n < 1 || p->k < 1 || p->batch < 1)
    return false;
  /* CBLAS takes int dimensions and leading dimensions. */
  if (p->m > INT_MAX || p->n > INT_MAX || p->k > INT_MAX)
    return false;
  if (p->dtype == GK_I32)
    return false; /* a result dtype only (an unknown one fails the size check below) */
  if (p->dtype == GK_I8 && (p->act == GK_ACT_GELU || p->act == GK_ACT_GELU_TANH || p->cast))
    return false;
  bool plain_only = gk_dtype_is_complex(p->dtype) || gk_problem_strided(p);
  if (plain_only && (p->cast || p->bias || p->act != GK_ACT_NONE))
    return false; /* complex and strided problems take no epilogue and no cast */
  if (gk_problem_strided(p) && p->dtype != GK_F32 && p->dtype != GK_F64 &&
      !gk_dtype_is_complex(p->dtype))
    return false;
  if ((p->conj_a || p->conj_b) && !gk_dtype_is_complex(p->dtype))
    return false;
  if (gk_problem_lda(p) > INT_MAX || gk_problem_ldb(p) > INT_MAX || gk_problem_ldc(p) > INT_MAX)
    return false;
  return gk_dtype_size(p->dtype) != 0 && gk_problem_cast_ok(p);
}

size_t gk_cpu_scratch_bytes(const gk_problem *p) { return gk_cpu_scratch_bytes_split(p, 1); }

/* Bytes of one widened element: f16/bf16 go through sgemm, i8 and fp8 through dgemm; 0: none. */
static size_t widened_size(gk_dtype dtype) {
  if (dtype == GK_F16 || dtype == GK_BF16)
    return sizeof(float);
  return dtype == GK_I8 || gk_dtype_is_fp8(dtype) ? sizeof(double) : 0;
}

size_t gk_cpu_scratch_bytes_split(const gk_problem *p, int64_t parts) {
  if (parts < 1)
    parts = 1;
  /* Each part widens its own rows of op(A) and C and a whole B: the rows add up to one A and
   * one C, the copies of B to `parts`. */
  return (size_t)(gk_problem_a_elems(p) + parts * gk_problem_b_elems(p) + gk_problem_c_elems(p)) *
         widened_size(p->dtype);
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

/* One CBLAS call: rows [r0, r0 + rows) of C for one batch element. */
typedef struct {
  enum CBLAS_TRANSPOSE ta, tb;
  int m, n, k, lda, ldb, ldc;
} blas_shape;

static blas_shape shape_of(const gk_problem *p, int64_t rows) {
  blas_shape s;
  s.ta = p->trans_a ? CblasTrans : CblasNoTrans;
  s.tb = p->trans_b ? CblasTrans : CblasNoTrans;
  s.m = (int)rows;
  s.n = (int)p->n;
  s.k = (int)p->k;
  s.lda = (int)gk_problem_lda(p); /* A stored k x m when transposed */
  s.ldb = (int)gk_problem_ldb(p); /* B stored n x k when transposed */
  s.ldc = (int)gk_problem_ldc(p);
  if (p->conj_a) /* complex only (problem_ok): OpenBLAS's ConjNoTrans conjugates in place */
    s.ta = p->trans_a ? CblasConjTrans : CblasConjNoTrans;
  if (p->conj_b)
    s.tb = p->trans_b ? CblasConjTrans : CblasConjNoTrans;
  return s;
}

/* Where row r0 of op(A) starts: a row of A, or a column of A stored k x m when transposed. */
static int64_t a_row_offset(const gk_problem *p, int64_t r0) {
  return p->trans_a ? r0 : r0 * gk_problem_lda(p);
}

/* beta == 0 must not read C (NaN there must not propagate): clear its rows and let BLAS add
 * 0 * 0. */
static void clear_rows(const blas_shape *s, void *c, size_t elem) {
  for (int r = 0; r < s->m; r++)
    memset((char *)c + (size_t)r * (size_t)s->ldc * elem, 0, (size_t)s->n * elem);
}

static void run_f32(const blas_shape *s, float alpha, float beta, const float *a, const float *b,
                    float *c) {
  if (beta == 0.0f)
    clear_rows(s, c, sizeof(float));
  cblas_sgemm(CblasRowMajor, s->ta, s->tb, s->m, s->n, s->k, alpha, a, s->lda, b, s->ldb, beta, c,
              s->ldc);
}

static void run_f64(const blas_shape *s, double alpha, double beta, const double *a,
                    const double *b, double *c) {
  if (beta == 0.0)
    clear_rows(s, c, sizeof(double));
  cblas_dgemm(CblasRowMajor, s->ta, s->tb, s->m, s->n, s->k, alpha, a, s->lda, b, s->ldb, beta, c,
              s->ldc);
}

/* f16/bf16 rows [r0, r0 + rows) of batch element i: widen this part's rows of op(A) (a column
 * block of A when transposed, gathered to a dense k x rows block), all of B and (beta != 0) the
 * rows of C into scratch, sgemm, round back. */
static void run_half_rows(const gk_problem *p, int64_t i, int64_t r0, int64_t rows,
                          float *scratch) {
  int64_t na = gk_problem_a_elems(p), nb = gk_problem_b_elems(p), nc = gk_problem_c_elems(p);
  int64_t k = p->k, n = p->n, m = p->m;
  const uint16_t *a = (const uint16_t *)p->a + i * na;
  const uint16_t *b = (const uint16_t *)p->b + i * gk_problem_b_stride(p);
  uint16_t *c = (uint16_t *)p->c + i * nc + r0 * n;
  float *fa = scratch, *fb = fa + rows * k, *fc = fb + nb;
  blas_shape s = shape_of(p, rows);
  if (p->trans_a) {
    for (int64_t kk = 0; kk < k; kk++)
      widen(a + kk * m + r0, fa + kk * rows, rows, p->dtype);
    s.lda = (int)rows;
  } else {
    widen(a + r0 * k, fa, rows * k, p->dtype);
  }
  widen(b, fb, nb, p->dtype);
  if (p->beta != 0.0)
    widen(c, fc, rows * n, p->dtype);
  run_f32(&s, (float)p->alpha, (float)p->beta, fa, fb, fc);
  narrow(fc, c, rows * n, p->dtype);
}

/* Rows [r0, r0 + rows) of batch element i's op(A) times its B, from 8-bit operands (i8, fp8)
 * widened to double, by dgemm into the dense rows x n block scratch + rows * k + k * n (returned):
 * exact for every int8 dot product (an integer far below 2^53), and for fp8 products (8
 * significant bits at most) up to the sum's rounding in double. */
static double *dgemm_widened_rows(const gk_problem *p, int64_t i, int64_t r0, int64_t rows,
                                  double *scratch) {
  int64_t k = p->k, m = p->m, nb = gk_problem_b_elems(p);
  int64_t a0 = i * gk_problem_a_elems(p), b0 = i * gk_problem_b_stride(p);
  double *da = scratch, *db = da + rows * k, *dc = db + nb;
  blas_shape s = shape_of(p, rows);
  if (p->trans_a) {
    for (int64_t kk = 0; kk < k; kk++)
      for (int64_t r = 0; r < rows; r++)
        da[kk * rows + r] = gk_host_load(p->dtype, p->a, a0 + kk * m + r0 + r);
    s.lda = (int)rows;
  } else {
    for (int64_t e = 0; e < rows * k; e++)
      da[e] = gk_host_load(p->dtype, p->a, a0 + r0 * k + e);
  }
  for (int64_t e = 0; e < nb; e++)
    db[e] = gk_host_load(p->dtype, p->b, b0 + e);
  run_f64(&s, 1.0, 0.0, da, db, dc);
  return dc;
}

/* i8 rows: alpha and beta in 32-bit arithmetic, as the GPU forms them. */
static void run_i8_rows(const gk_problem *p, int64_t i, int64_t r0, int64_t rows,
                        double *scratch) {
  const double *dc = dgemm_widened_rows(p, i, r0, rows, scratch);
  int32_t *c = (int32_t *)p->c + i * gk_problem_c_elems(p) + r0 * p->n;
  int64_t alpha = (int64_t)p->alpha, beta = (int64_t)p->beta;
  for (int64_t e = 0; e < rows * p->n; e++)
    c[e] = gk_host_i32_axpby(alpha, (int64_t)dc[e], beta, beta != 0 ? c[e] : 0);
}

/* fp8 rows: alpha (the scales folded in) and beta in double, C rounded to f32 once. */
static void run_fp8_rows(const gk_problem *p, int64_t i, int64_t r0, int64_t rows,
                         double *scratch) {
  const double *dc = dgemm_widened_rows(p, i, r0, rows, scratch);
  float *c = (float *)p->c + i * gk_problem_c_elems(p) + r0 * p->n;
  for (int64_t e = 0; e < rows * p->n; e++)
    c[e] = (float)(p->alpha * dc[e] + (p->beta != 0.0 ? p->beta * (double)c[e] : 0.0));
}

/* c64 and c128: alpha and beta as CBLAS takes them, {re, im} pairs passed by address. */
static void run_complex(const gk_problem *p, const blas_shape *s, const void *a, const void *b,
                        void *c) {
  bool beta_zero = p->beta == 0.0 && p->beta_im == 0.0;
  if (p->dtype == GK_C64) {
    float alpha[2] = {(float)p->alpha, (float)p->alpha_im};
    float beta[2] = {(float)p->beta, (float)p->beta_im};
    if (beta_zero)
      clear_rows(s, c, 2 * sizeof(float));
    cblas_cgemm(CblasRowMajor, s->ta, s->tb, s->m, s->n, s->k, alpha, a, s->lda, b, s->ldb, beta,
                c, s->ldc);
  } else {
    double alpha[2] = {p->alpha, p->alpha_im}, beta[2] = {p->beta, p->beta_im};
    if (beta_zero)
      clear_rows(s, c, 2 * sizeof(double));
    cblas_zgemm(CblasRowMajor, s->ta, s->tb, s->m, s->n, s->k, alpha, a, s->lda, b, s->ldb, beta,
                c, s->ldc);
  }
}

/* Rows [r0, r0 + rows) of batch element i, the epilogue around them: C's rows take the bias
 * first (beta then reads it), the activation runs last. */
static void run_rows(const gk_problem *p, int64_t i, int64_t r0, int64_t rows, void *scratch) {
  gk_host_bias_rows(p, i, r0, rows);
  int64_t na = gk_problem_a_stride(p), nb = gk_problem_b_stride(p), nc = gk_problem_c_stride(p);
  blas_shape s = shape_of(p, rows);
  int64_t ao = i * na + a_row_offset(p, r0), co = i * nc + r0 * gk_problem_ldc(p);
  size_t es = gk_dtype_size(p->dtype);
  switch (p->dtype) {
  case GK_F32:
    run_f32(&s, (float)p->alpha, (float)p->beta, (const float *)p->a + ao,
            (const float *)p->b + i * nb, (float *)p->c + co);
    break;
  case GK_F64:
    run_f64(&s, p->alpha, p->beta, (const double *)p->a + ao, (const double *)p->b + i * nb,
            (double *)p->c + co);
    break;
  case GK_F16:
  case GK_BF16:
    run_half_rows(p, i, r0, rows, (float *)scratch);
    break;
  case GK_I8:
    run_i8_rows(p, i, r0, rows, (double *)scratch);
    break;
  case GK_E4M3:
  case GK_E5M2:
    run_fp8_rows(p, i, r0, rows, (double *)scratch);
    break;
  case GK_C64:
  case GK_C128:
    run_complex(p, &s, (const char *)p->a + (size_t)ao * es,
                (const char *)p->b + (size_t)(i * nb) * es, (char *)p->c + (size_t)co * es);
    break;
  case GK_I32: /* a result dtype only: problem_ok refuses it */
    break;
  }
  gk_host_act_rows(p, i, r0, rows);
}

int gk_cpu_gemm(const gk_problem *p, const char **kernel) {
  return gk_cpu_gemm_part(p, 0, 1, kernel);
}

/* The rows of all batch elements, batch * m of them, cut into `parts` near-equal runs; a run
 * may cross from one batch element into the next. */
int gk_cpu_gemm_part(const gk_problem *p, int64_t part, int64_t parts, const char **kernel) {
  if (kernel)
    *kernel = "openblas";
  if (!problem_ok(p) || parts < 1 || part < 0 || part >= parts)
    return -EINVAL;
  if (p->batch > INT64_MAX / p->m || p->batch * p->m > INT64_MAX / parts)
    return -EINVAL;
  int64_t total = p->batch * p->m;
  int64_t first = total * part / parts, last = total * (part + 1) / parts;
  void *scratch = NULL;
  if (widened_size(p->dtype) != 0) {
    int64_t rows = last - first < p->m ? last - first : p->m;
    size_t bytes = (size_t)(rows * p->k + gk_problem_b_elems(p) + rows * p->n) *
                   widened_size(p->dtype);
    scratch = malloc(bytes ? bytes : 1);
    if (!scratch)
      return -ENOMEM;
  }
  /* A cast problem runs plain in its work area, whose rows take C0 first (the bias included:
   * each row its own copy, so no part reads another's rows) and go to C last. */
  gk_problem plain = p->cast ? gk_problem_uncast(p) : *p;
  if (p->cast)
    plain.bias = NULL, plain.bias_stride = 0;
  for (int64_t row = first; row < last;) {
    int64_t i = row / p->m, r0 = row % p->m;
    int64_t rows = p->m - r0 < last - row ? p->m - r0 : last - row;
    gk_host_cast_in(p, i, r0, rows);
    run_rows(&plain, i, r0, rows, scratch);
    gk_host_cast_out(p, i, r0, rows);
    row += rows;
  }
  free(scratch);
  return 0;
}
