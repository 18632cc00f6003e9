/*
 * refgemm.c - float64 reference gemm, error measure and tolerances.
 *
 * The error of an element is measured against bound = |alpha| * sum |a||b| +
 * |beta| * |c| (the classic componentwise bound of a dot product), so that
 * entries that cancel to near zero are judged fairly. A correct gemm stays
 * within  (k + 4) * u_acc + u_in + u_out  of it, with u_acc the unit roundoff
 * of the accumulation (f64: 2^-53; f32, f16, bf16: f32, 2^-24), u_in the
 * rounding of inputs by the kernel (TF32 when precision is fast: 2^-11 each
 * operand) and u_out the rounding of the result into its dtype (f16 2^-11,
 * bf16 2^-8). A result cast to an out dtype (gc_gemm_opts.out_dtype) is compared with the
 * reference rounded to that dtype, and gains u_cast, the out dtype's half ulp (f16 2^-11,
 * bf16 2^-8): the daemon's value and the reference may round to neighbours. The tolerance is
 * four times the sum. Results in the subnormal range (of the out dtype) are also allowed one
 * subnormal spacing of absolute error.
 *
 * The integer gemm (i8, its result i32) has no rounding: the reference is exact (the dot
 * products of int8 values are integers far below 2^53 in double, then alpha and beta are applied
 * in 32-bit two's complement, wrapping as the daemon does), and the result must equal it bit for
 * bit: its error is the largest absolute difference, its tolerance 0.
 *
 * The fp8 gemm (e4m3, e5m2; its result f32) multiplies exactly but may sum with fewer bits than
 * f32 (Hopper's fp8 tensor cores): an element is allowed
 *   |got - ref| <= 2^-10 * sum_l |alpha * scale_a * scale_b * a_il * b_lj| + 2^-22 * |ref| + tiny
 * (before the activation, whose slope scales it; tiny is FLT_MIN, for a GPU that flushes
 * subnormals), plus four half ulps of the out dtype times |ref| when cast. bound[] holds that
 * allowance itself and the tolerance is 1: the error is the share of it used.
 *
 * The complex gemm (c64, c128) is taken part by part: gctl_load and gctl_store index the real
 * and imaginary parts (element e's are parts 2e and 2e + 1), the reference and the bound hold
 * two doubles an element (the bound, |alpha| sum |a||b| + |beta c|, for both parts), and each
 * part is a sum of 2k real products.
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gctl_ref.h"
#include "gp_fp8.h"
#include "gp_half.h"

double gctl_load(gc_dtype dtype, const void *buf, size_t i) {
  switch (dtype) {
    case GC_DTYPE_F64: return ((const double *)buf)[i];
    case GC_DTYPE_F32: return ((const float *)buf)[i];
    case GC_DTYPE_F16: return gp_f16_to_f32(((const uint16_t *)buf)[i]);
    case GC_DTYPE_BF16: return gp_bf16_to_f32(((const uint16_t *)buf)[i]);
    case GC_DTYPE_I8: return ((const int8_t *)buf)[i];
    case GC_DTYPE_I32: return ((const int32_t *)buf)[i];
    case GC_DTYPE_E4M3: return gp_e4m3_to_f32(((const uint8_t *)buf)[i]);
    case GC_DTYPE_E5M2: return gp_e5m2_to_f32(((const uint8_t *)buf)[i]);
    case GC_DTYPE_C64: return ((const float *)buf)[i]; /* part i (see the top) */
    case GC_DTYPE_C128: return ((const double *)buf)[i];
    case GC_DTYPE_DEFAULT: break;
  }
  return NAN;
}

/* v as an integer wrapped to 32 bits (two's complement); v is an integer within int64. */
static int32_t wrap_i32(double v) { return (int32_t)(uint32_t)(uint64_t)(int64_t)v; }

void gctl_store(gc_dtype dtype, void *buf, size_t i, double v) {
  switch (dtype) {
    case GC_DTYPE_F64: ((double *)buf)[i] = v; break;
    case GC_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
    case GC_DTYPE_F16: ((uint16_t *)buf)[i] = gp_f64_to_f16(v); break;
    case GC_DTYPE_BF16: ((uint16_t *)buf)[i] = gp_f64_to_bf16(v); break;
    case GC_DTYPE_I8: ((int8_t *)buf)[i] = (int8_t)wrap_i32(v); break;
    case GC_DTYPE_I32: ((int32_t *)buf)[i] = wrap_i32(v); break;
    case GC_DTYPE_E4M3: ((uint8_t *)buf)[i] = gp_f64_to_e4m3(v); break;
    case GC_DTYPE_E5M2: ((uint8_t *)buf)[i] = gp_f64_to_e5m2(v); break;
    case GC_DTYPE_C64: ((float *)buf)[i] = (float)v; break; /* part i */
    case GC_DTYPE_C128: ((double *)buf)[i] = v; break;
    case GC_DTYPE_DEFAULT: break;
  }
}

size_t gctl_dtype_size(gc_dtype dtype) {
  switch (dtype) {
    case GC_DTYPE_C128: return 16;
    case GC_DTYPE_F64:
    case GC_DTYPE_C64: return 8;
    case GC_DTYPE_F32:
    case GC_DTYPE_I32: return 4;
    case GC_DTYPE_F16:
    case GC_DTYPE_BF16: return 2;
    case GC_DTYPE_I8:
    case GC_DTYPE_E4M3:
    case GC_DTYPE_E5M2: return 1;
    case GC_DTYPE_DEFAULT: break;
  }
  return 0;
}

bool gctl_dtype_is_int(gc_dtype dtype) { return dtype == GC_DTYPE_I8 || dtype == GC_DTYPE_I32; }

bool gctl_dtype_is_fp8(gc_dtype dtype) { return dtype == GC_DTYPE_E4M3 || dtype == GC_DTYPE_E5M2; }

size_t gctl_dtype_parts(gc_dtype dtype) {
  return dtype == GC_DTYPE_C64 || dtype == GC_DTYPE_C128 ? 2 : 1;
}

gc_dtype gctl_out_dtype(const gc_gemm_opts *o) {
  if (o->out_dtype != GC_DTYPE_DEFAULT) return o->out_dtype;
  if (gctl_dtype_is_fp8(o->dtype)) return GC_DTYPE_F32;
  return o->dtype == GC_DTYPE_I8 ? GC_DTYPE_I32 : o->dtype;
}

double gctl_ref_alpha(const gc_gemm_opts *o) { return o->alpha * o->scale_a * o->scale_b; }

/* Row i of op(A) times op(B) into ref and bound (sums of a*b and of |a*b|). Where B is not
 * transposed the l loop is outside the j loop, so that both walk B along its rows: the dot-product
 * order read B down its columns, a cache miss an element at n = 4096 (a 256-row check of a
 * 4096^3 result took 40 s instead of 3). */
static void ref_row(const gc_gemm_opts *o, const void *a, size_t a0, const void *b, size_t b0,
                    size_t i, double *sum, double *abs_sum) {
  size_t m = o->m, n = o->n, k = o->k;
  if (!o->trans_b) {
    for (size_t j = 0; j < n; j++) sum[j] = abs_sum[j] = 0;
    for (size_t l = 0; l < k; l++) {
      double av = gctl_load(o->dtype, a, a0 + (o->trans_a ? l * m + i : i * k + l));
      if (o->dtype == GC_DTYPE_F32) { /* the common case, without a load's switch */
        const float *b_row = (const float *)b + b0 + l * n;
        for (size_t j = 0; j < n; j++) {
          double p = av * b_row[j];
          sum[j] += p;
          abs_sum[j] += fabs(p);
        }
        continue;
      }
      for (size_t j = 0; j < n; j++) {
        double p = av * gctl_load(o->dtype, b, b0 + l * n + j);
        sum[j] += p;
        abs_sum[j] += fabs(p);
      }
    }
    return;
  }
  for (size_t j = 0; j < n; j++) {
    double s = 0, abs_s = 0;
    for (size_t l = 0; l < k; l++) {
      double p = gctl_load(o->dtype, a, a0 + (o->trans_a ? l * m + i : i * k + l)) *
                 gctl_load(o->dtype, b, b0 + j * k + l);
      s += p;
      abs_s += fabs(p);
    }
    sum[j] = s;
    abs_sum[j] = abs_s;
  }
}

/* One element of an integer gemm from its exact dot product: alpha and beta in 32-bit two's
 * complement (wrapping), then ReLU on the 32-bit value, as the daemon forms them. */
static double ref_int(const gc_gemm_opts *o, double dot, double cv) {
  uint32_t v = (uint32_t)wrap_i32(o->alpha) * (uint32_t)wrap_i32(dot);
  if (o->beta != 0.0) v += (uint32_t)wrap_i32(o->beta) * (uint32_t)wrap_i32(cv);
  int32_t r = (int32_t)v;
  return o->activation == GC_ACT_RELU && r < 0 ? 0.0 : (double)r;
}

/* The unit roundoff (half an ulp, relative) of f16 and bf16. */
static double half_ulp(gc_dtype dtype) { return dtype == GC_DTYPE_F16 ? ldexp(1, -11) : ldexp(1, -8); }

/* An fp8 element's allowed error (see the top of this file) from its scaled sum of |a b| (abs),
 * its value before the activation (x) and after it (y). */
static double fp8_allowance(const gc_gemm_opts *o, double abs, double x, double y, double slope) {
  gc_dtype out = gctl_out_dtype(o);
  double u_cast = out != GC_DTYPE_F32 ? 4 * half_ulp(out) : 0;
  return slope * (ldexp(abs, -10) + ldexp(fabs(x), -22)) + u_cast * fabs(y) + 0x1p-126;
}

/* The epilogue's activation in double; *slope bounds |act'| (how it scales an error). */
static double ref_act(gc_activation act, double x, double *slope) {
  *slope = act == GC_ACT_NONE || act == GC_ACT_RELU ? 1.0 : 1.13; /* GELU's |f'| <= 1.13 */
  switch (act) {
    case GC_ACT_RELU: return x < 0.0 ? 0.0 : x;
    case GC_ACT_GELU: return 0.5 * x * (1.0 + erf(x * M_SQRT1_2));
    case GC_ACT_GELU_TANH: return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    default: return x;
  }
}

/* Element (i, j) of one complex batch entry: the sum over l of op(A)[i][l] op(B)[l][j] (conj
 * as asked) into *re, *im, and of |a||b| into *abs. */
static void ref_complex_dot(const gc_gemm_opts *o, const void *a, size_t a0, const void *b,
                            size_t b0, size_t i, size_t j, double *re, double *im, double *abs) {
  size_t m = o->m, n = o->n, k = o->k;
  double sr = 0, si = 0, sa = 0;
  for (size_t l = 0; l < k; l++) {
    size_t ia = a0 + (o->trans_a ? l * m + i : i * k + l);
    size_t ib = b0 + (o->trans_b ? j * k + l : l * n + j);
    double ar = gctl_load(o->dtype, a, 2 * ia), ai = gctl_load(o->dtype, a, 2 * ia + 1);
    double br = gctl_load(o->dtype, b, 2 * ib), bi = gctl_load(o->dtype, b, 2 * ib + 1);
    if (o->conj_a) ai = -ai;
    if (o->conj_b) bi = -bi;
    sr += ar * br - ai * bi;
    si += ar * bi + ai * br;
    sa += hypot(ar, ai) * hypot(br, bi);
  }
  *re = sr, *im = si, *abs = sa;
}

/* The complex gemm's reference: two doubles an element (see the top). */
static void ref_complex(const gc_gemm_opts *o, const void *a, const void *b, const void *c,
                        double *ref, double *bound) {
  size_t m = o->m, n = o->n, k = o->k;
  bool beta_read = o->beta != 0.0 || o->beta_im != 0.0;
  double abs_alpha = hypot(o->alpha, o->alpha_im), abs_beta = hypot(o->beta, o->beta_im);
  for (size_t p = 0; p < o->batch; p++) {
    size_t a0 = p * m * k, b0 = o->broadcast_b ? 0 : p * k * n;
    for (size_t i = 0; i < m; i++)
      for (size_t j = 0; j < n; j++) {
        size_t e = p * m * n + i * n + j;
        double sr, si, sa;
        ref_complex_dot(o, a, a0, b, b0, i, j, &sr, &si, &sa);
        double xr = o->alpha * sr - o->alpha_im * si, xi = o->alpha * si + o->alpha_im * sr;
        double bnd = abs_alpha * sa;
        if (beta_read && c != NULL) {
          double cr = gctl_load(o->dtype, c, 2 * e), ci = gctl_load(o->dtype, c, 2 * e + 1);
          xr += o->beta * cr - o->beta_im * ci;
          xi += o->beta * ci + o->beta_im * cr;
          bnd += abs_beta * hypot(cr, ci);
        }
        ref[2 * e] = xr, ref[2 * e + 1] = xi;
        bound[2 * e] = bound[2 * e + 1] = bnd;
      }
  }
}

/* Row i's sums (ref_row's, or dgemm's) into the reference: alpha and beta * c, the activation;
 * bound the error allowed to scale with. */
static void finish_row(const gc_gemm_opts *o, const void *c, size_t c0, size_t i, double *sum,
                       double *abs_sum) {
  size_t n = o->n;
  gc_dtype out = gctl_out_dtype(o); /* c's dtype */
  double alpha = gctl_ref_alpha(o);  /* the scales are 1 but for fp8 */
  for (size_t j = 0; j < n; j++) {
    double cv = c != NULL ? gctl_load(out, c, o->bias ? j : c0 + i * n + j) : 0.0, slope;
    if (o->dtype == GC_DTYPE_I8) { /* exact: no bound to scale an error by */
      sum[j] = ref_int(o, sum[j], cv);
      abs_sum[j] = 0.0;
      continue;
    }
    double x = alpha * sum[j] + (o->beta != 0.0 ? o->beta * cv : 0.0);
    sum[j] = ref_act(o->activation, x, &slope);
    if (gctl_dtype_is_fp8(o->dtype)) { /* the allowance itself, not a sum to scale */
      abs_sum[j] = fp8_allowance(o, fabs(alpha) * abs_sum[j], x, sum[j], slope);
      continue;
    }
    abs_sum[j] = fabs(alpha) * abs_sum[j] + (o->beta != 0.0 ? fabs(o->beta * cv) : 0.0);
    abs_sum[j] *= slope;
  }
}

/* Rows of op(A) a dgemm (or the loop's threads) take at once: few enough that progress moves,
 * many enough to run at speed. */
enum { BLAS_ROWS = 256 };

/* The operands widened to double for dgemm (exactly: every input dtype's values are doubles),
 * each beside its absolute values, which give the bound by a second dgemm. Integer products
 * and their sums stay exact in double (|a b| < 2^14, k <= 2^16), so i8 stays bit-exact; for
 * the float dtypes dgemm's rounding (at most k 2^-53 of the bound, as the loop's) is far below
 * every tolerance. */
typedef struct {
  gctl_dgemm_fn dgemm;
  double *b, *b_abs, *a, *a_abs;
} blas_ref;

static bool blas_open(blas_ref *br, const gc_gemm_opts *o) {
  br->dgemm = gctl_ref_dgemm();
  br->b = br->a = br->b_abs = br->a_abs = NULL;
  if (br->dgemm == NULL) return false;
  size_t kn = (size_t)(o->k * o->n), rk = (size_t)(BLAS_ROWS * o->k);
  br->b = malloc(2 * kn * sizeof(double));
  br->a = malloc(2 * rk * sizeof(double));
  if (br->b == NULL || br->a == NULL) { /* the loop needs no more memory */
    free(br->b);
    free(br->a);
    return false;
  }
  br->b_abs = br->b + kn;
  br->a_abs = br->a + rk;
  return true;
}

static void blas_close(blas_ref *br) {
  free(br->b);
  free(br->a);
}

/* One batch entry's B, as stored (k x n, or n x k when transposed). */
static void blas_widen_b(blas_ref *br, const gc_gemm_opts *o, const void *b, size_t b0) {
  size_t kn = (size_t)(o->k * o->n);
  for (size_t x = 0; x < kn; x++) {
    br->b[x] = gctl_load(o->dtype, b, b0 + x);
    br->b_abs[x] = fabs(br->b[x]);
  }
}

/* Rows [i0, i1) of op(A) times op(B): sums into sum (row-major, n a row), |sums| into abs_sum. */
static void blas_rows(blas_ref *br, const gc_gemm_opts *o, const void *a, size_t a0, size_t i0,
                      size_t i1, double *sum, double *abs_sum) {
  size_t m = o->m, k = o->k;
  for (size_t i = i0; i < i1; i++)
    for (size_t l = 0; l < k; l++) {
      double v = gctl_load(o->dtype, a, a0 + (o->trans_a ? l * m + i : i * k + l));
      br->a[(i - i0) * k + l] = v;
      br->a_abs[(i - i0) * k + l] = fabs(v);
    }
  enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 }; /* cblas.h's values */
  int tb = o->trans_b ? TRANS : NO_TRANS, ldb = (int)(o->trans_b ? o->k : o->n);
  int rows = (int)(i1 - i0), n = (int)o->n, kk = (int)k;
  br->dgemm(ROW_MAJOR, NO_TRANS, tb, rows, n, kk, 1.0, br->a, kk, br->b, ldb, 0.0, sum, n);
  br->dgemm(ROW_MAJOR, NO_TRANS, tb, rows, n, kk, 1.0, br->a_abs, kk, br->b_abs, ldb, 0.0,
            abs_sum, n);
}

/* Rows [i0, i1) of one batch entry: the loop's sums (unless dgemm gave them) and the finish,
 * rows i0 + t, i0 + t + nt, ... of them for thread t of nt. */
typedef struct {
  const gc_gemm_opts *o;
  const void *a, *b, *c;
  size_t a0, b0, c0, i0, i1, t, nt;
  bool sums_done;
  double *ref, *bound;
} rows_job;

static void *rows_main(void *arg) {
  const rows_job *j = arg;
  size_t n = j->o->n;
  for (size_t i = j->i0 + j->t; i < j->i1; i += j->nt) {
    double *sum = j->ref + j->c0 + i * n, *abs_sum = j->bound + j->c0 + i * n;
    if (!j->sums_done) ref_row(j->o, j->a, j->a0, j->b, j->b0, i, sum, abs_sum);
    finish_row(j->o, j->c, j->c0, i, sum, abs_sum);
  }
  return NULL;
}

enum { LOOP_THREADS_MAX = 16 };

/* Where there is no OpenBLAS the loop runs on every core (a thread that cannot be started
 * leaves its rows to this one). */
static void run_rows(const rows_job *proto, size_t threads) {
  pthread_t tid[LOOP_THREADS_MAX];
  rows_job jobs[LOOP_THREADS_MAX];
  bool started[LOOP_THREADS_MAX] = {false};
  for (size_t t = 0; t < threads; t++) {
    jobs[t] = *proto;
    jobs[t].t = t;
    jobs[t].nt = threads;
    if (t > 0) started[t] = pthread_create(&tid[t], NULL, rows_main, &jobs[t]) == 0;
  }
  rows_main(&jobs[0]);
  for (size_t t = 1; t < threads; t++) {
    if (started[t]) (void)pthread_join(tid[t], NULL);
    else rows_main(&jobs[t]);
  }
}

static size_t loop_threads(bool blas) {
  long cores = blas ? 1 : sysconf(_SC_NPROCESSORS_ONLN); /* dgemm's rows need only the finish */
  return cores < 1 ? 1 : cores > LOOP_THREADS_MAX ? LOOP_THREADS_MAX : (size_t)cores;
}

void gctl_ref_gemm_progress(const gc_gemm_opts *o, const void *a, const void *b, const void *c,
                            double *ref, double *bound, gctl_ref_progress_fn progress,
                            void *arg) {
  size_t m = o->m, n = o->n, k = o->k;
  if (gctl_dtype_parts(o->dtype) == 2) { /* complex: the plain loops, two doubles an element */
    ref_complex(o, a, b, c, ref, bound);
    if (progress != NULL) progress(arg, (uint64_t)m * o->batch, (uint64_t)m * o->batch);
    return;
  }
  blas_ref br;
  bool blas = blas_open(&br, o);
  size_t threads = loop_threads(blas);
  uint64_t rows_done = 0, rows_total = (uint64_t)m * o->batch;
  for (size_t p = 0; p < o->batch; p++) {
    size_t a0 = p * m * k, b0 = o->broadcast_b ? 0 : p * k * n, c0 = p * m * n;
    if (blas && (p == 0 || !o->broadcast_b)) blas_widen_b(&br, o, b, b0);
    for (size_t i0 = 0; i0 < m; i0 += BLAS_ROWS) {
      size_t i1 = i0 + BLAS_ROWS < m ? i0 + BLAS_ROWS : m;
      if (blas) blas_rows(&br, o, a, a0, i0, i1, ref + c0 + i0 * n, bound + c0 + i0 * n);
      rows_job job = {o, a, b, c, a0, b0, c0, i0, i1, 0, 1, blas, ref, bound};
      run_rows(&job, threads);
      rows_done += i1 - i0;
      if (progress != NULL) progress(arg, rows_done, rows_total);
    }
  }
  if (blas) blas_close(&br);
}

void gctl_ref_gemm(const gc_gemm_opts *o, const void *a, const void *b, const void *c,
                   double *ref, double *bound) {
  gctl_ref_gemm_progress(o, a, b, c, ref, bound, NULL, NULL);
}

/* The spacing of the dtype's subnormals: a result that small is rounded to a multiple of it,
 * an error no bound relative to the inputs covers. */
static double subnormal_spacing(gc_dtype dtype) {
  switch (dtype) {
    case GC_DTYPE_F16: return ldexp(1, -24);
    case GC_DTYPE_BF16: return ldexp(1, -133);
    case GC_DTYPE_F32: return ldexp(1, -149);
    default: return 0x1p-1074;
  }
}

/* The reference as the result holds it: rounded to the out dtype when the result is cast. */
static double ref_as_out(const gc_gemm_opts *o, double ref) {
  gc_dtype out = gctl_out_dtype(o);
  if (out == o->dtype) return ref;
  uint64_t bits; /* room for any dtype's element (fp8's f32 result included) */
  gctl_store(out, &bits, 0, ref);
  return gctl_load(out, &bits, 0);
}

/* The integer gemm's error: the largest |out - ref| (0 when bit-exact). */
static double int_error(const gc_gemm_opts *o, const void *out, const double *ref) {
  double worst = 0;
  size_t total = (size_t)(o->m * o->n * o->batch);
  for (size_t i = 0; i < total; i++) {
    double diff = fabs(gctl_load(GC_DTYPE_I32, out, i) - ref[i]);
    if (diff > worst) worst = diff;
  }
  return worst;
}

double gctl_ref_error(const gc_gemm_opts *o, const void *out, const double *ref,
                      const double *bound) {
  if (o->dtype == GC_DTYPE_I8) return int_error(o, out, ref);
  gc_dtype out_dtype = gctl_out_dtype(o);
  double worst = 0, spacing = subnormal_spacing(out_dtype);
  size_t total = (size_t)(o->m * o->n * o->batch) * gctl_dtype_parts(out_dtype);
  for (size_t i = 0; i < total; i++) {
    double got = gctl_load(out_dtype, out, i), want = ref_as_out(o, ref[i]);
    double diff = got == want ? 0 : fabs(got - want); /* the same infinity is no error */
    diff = diff <= spacing ? 0 : diff - spacing;
    double e = bound[i] > 0 ? diff / bound[i] : (diff == 0 ? 0 : INFINITY);
    if (!(e <= worst)) worst = e; /* NaN (an unwritten, poisoned element) wins */
  }
  return worst;
}

double gctl_ref_tolerance(const gc_gemm_opts *o) {
  if (o->dtype == GC_DTYPE_I8) return 0; /* bit-exact */
  if (gctl_dtype_is_fp8(o->dtype)) return 1; /* bound[] is the allowance */
  bool f64 = o->dtype == GC_DTYPE_F64 || o->dtype == GC_DTYPE_C128;
  double u_acc = f64 ? ldexp(1, -53) : ldexp(1, -24);
  bool tf32 = o->dtype == GC_DTYPE_F32 || o->dtype == GC_DTYPE_C64; /* may use TF32 when fast */
  double u_in = tf32 && o->precision == GC_PRECISION_FAST ? ldexp(1, -10) : 0;
  double u_out = o->dtype == GC_DTYPE_F16 || o->dtype == GC_DTYPE_BF16 ? half_ulp(o->dtype)
                                                                       : u_acc;
  gc_dtype out = gctl_out_dtype(o);
  double u_cast = out != o->dtype ? half_ulp(out) : 0;
  /* a complex part sums 2k real products */
  return 4 * ((double)(o->k * gctl_dtype_parts(o->dtype) + 4) * u_acc + u_in + u_out + u_cast);
}

void gctl_fill_random(gc_dtype dtype, void *buf, size_t n, uint64_t *seed) {
  n *= gctl_dtype_parts(dtype); /* complex: both parts of every element */
  for (size_t i = 0; i < n; i++) {
    /* splitmix64: cheap, good enough, and reproducible from the seed */
    uint64_t z = (*seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    if (gctl_dtype_is_int(dtype)) { /* the top bits, wrapped: the type's whole range */
      gctl_store(dtype, buf, i, (double)(int64_t)(z >> (dtype == GC_DTYPE_I8 ? 56 : 32)));
      continue;
    }
    double u = (double)(z >> 11) * ldexp(1, -53); /* [0, 1) */
    gctl_store(dtype, buf, i, 2 * u - 1);
  }
}

void gctl_poison(gc_dtype dtype, void *buf, size_t n) {
  /* integers have no NaN: a value no small gemm makes (ReLU's results are >= 0) */
  double poison = gctl_dtype_is_int(dtype) ? (double)INT32_MIN + 7 : NAN;
  n *= gctl_dtype_parts(dtype);
  for (size_t i = 0; i < n; i++) gctl_store(dtype, buf, i, poison);
}
