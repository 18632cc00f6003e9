/*
 * gk_cpu.c - the CPU path: OpenBLAS sgemm/dgemm, with f16 and bf16 widened to
 * f32 per batch element and rounded back (round to nearest even).
 */
#include "gk_cpu.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- conversions --------------------------------------------------------- */

float gk_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  float mag;
  if (exp == 0) {
    mag = ldexpf((float)mant, -24); /* zero or subnormal: mant * 2^-24 */
  } else if (exp == 31) {
    mag = mant ? NAN : INFINITY;
  } else {
    mag = ldexpf((float)(mant | 0x400u), (int)exp - 25);
  }
  union { float f; uint32_t u; } v = {.f = mag};
  v.u |= sign;
  return v.f;
}

uint16_t gk_f32_to_f16(float f) {
  union { float f; uint32_t u; } v = {.f = f};
  uint16_t sign = (uint16_t)((v.u >> 16) & 0x8000u);
  uint32_t abs = v.u & 0x7fffffffu;
  if (abs >= 0x7f800000u) /* inf or nan (nan keeps a quiet payload bit) */
    return (uint16_t)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
    return (uint16_t)(sign | 0x7c00u);
  if (abs < 0x38800000u) { /* below 2^-14: subnormal half (or zero) */
    if (abs < 0x33000000u) /* below half of the smallest subnormal: rounds to 0 */
      return sign;
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp; /* 14..24: bits dropped to land on 2^-24 units */
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half & 1u)))
      half++;
    return (uint16_t)(sign | half);
  }
  /* normal: rebias the exponent and round 13 dropped bits to nearest even */
  uint32_t r = abs - 0x38000000u; /* exponent 127 -> 15 */
  uint32_t half = r >> 13;
  uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u)))
    half++; /* a carry into the exponent is the right answer */
  return (uint16_t)(sign | half);
}

float gk_bf16_to_f32(uint16_t h) {
  union { float f; uint32_t u; } v = {.u = (uint32_t)h << 16};
  return v.f;
}

uint16_t gk_f32_to_bf16(float f) {
  union { float f; uint32_t u; } v = {.f = f};
  if ((v.u & 0x7fffffffu) > 0x7f800000u) /* nan: keep it a (quiet) nan */
    return (uint16_t)((v.u >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
  return (uint16_t)((v.u + rounding) >> 16);
}

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
      out[i] = gk_f16_to_f32(in[i]);
  } else {
    for (int64_t i = 0; i < count; i++)
      out[i] = gk_bf16_to_f32(in[i]);
  }
}

static void narrow(const float *in, uint16_t *out, int64_t count, gk_dtype dtype) {
  if (dtype == GK_F16) {
    for (int64_t i = 0; i < count; i++)
      out[i] = gk_f32_to_f16(in[i]);
  } else {
    for (int64_t i = 0; i < count; i++)
      out[i] = gk_f32_to_bf16(in[i]);
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
