/*
 * gb_gemm.c - the one gemm every entry point ends in: reference BLAS semantics (quick
 * returns, beta == 0 never reads C, alpha == 0 never reads A or B), then the CPU BLAS below
 * GEMMD_BLAS_OFFLOAD_MIN, else gemmd. Column-major C = op(A) op(B) is row-major
 * C^T = op(B)^T op(A)^T: gemmd gets a row-major gemm of n x m with A and B swapped and the
 * leading dimensions as they are (libgemmclient copies rows, never whole transposes).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gb_internal.h"

typedef void (*f77_gemm_fn)(const char *, const char *, const int *, const int *, const int *,
                            const void *, const void *, const int *, const void *, const int *,
                            const void *, void *, const int *, size_t, size_t);

/* The table: each kind's CPU routine, xerbla name, element size and gemmd's dtype (the
 * complex ones as gemmd's c64 / c128: offload() sends alpha_im / beta_im and the
 * conjugations of BLAS's 'C'). */
const gb_kind gb_kind_s = {"sgemm_", "SGEMM ", "cblas_sgemm", 4, 0, GC_DTYPE_F32};
const gb_kind gb_kind_d = {"dgemm_", "DGEMM ", "cblas_dgemm", 8, 0, GC_DTYPE_F64};
const gb_kind gb_kind_c = {"cgemm_", "CGEMM ", "cblas_cgemm", 8, 1, GC_DTYPE_C64};
const gb_kind gb_kind_z = {"zgemm_", "ZGEMM ", "cblas_zgemm", 16, 1, GC_DTYPE_C128};

static int upper(char c) { return c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c; }

int gb_gemm_check(char transa, char transb, int m, int n, int k, int lda, int ldb, int ldc) {
  int nota = upper(transa) == 'N', notb = upper(transb) == 'N';
  int nrowa = nota ? m : k, nrowb = notb ? k : n;
  if (!nota && upper(transa) != 'C' && upper(transa) != 'T') return 1;
  if (!notb && upper(transb) != 'C' && upper(transb) != 'T') return 2;
  if (m < 0) return 3;
  if (n < 0) return 4;
  if (k < 0) return 5;
  if (lda < (nrowa > 1 ? nrowa : 1)) return 8;
  if (ldb < (nrowb > 1 ? nrowb : 1)) return 10;
  if (ldc < (m > 1 ? m : 1)) return 13;
  return 0;
}

/* The scalar at p (one element of kd) as a double pair. */
static void scalar(const gb_kind *kd, const void *p, double *re, double *im) {
  *im = 0;
  if (kd->esize / (kd->complex ? 2 : 1) == 4) {
    *re = ((const float *)p)[0];
    if (kd->complex) *im = ((const float *)p)[1];
  } else {
    *re = ((const double *)p)[0];
    if (kd->complex) *im = ((const double *)p)[1];
  }
}

/* C = beta C (beta == 0: zeros, C not read), as the reference does when alpha or k is 0. */
static void scale_c(const gb_kind *kd, int m, int n, const void *beta, void *c, int ldc) {
  double br, bi;
  scalar(kd, beta, &br, &bi);
  size_t col = (size_t)ldc * kd->esize;
  for (int j = 0; j < n; j++) {
    uint8_t *cj = (uint8_t *)c + (size_t)j * col;
    if (br == 0 && bi == 0) {
      memset(cj, 0, (size_t)m * kd->esize);
      continue;
    }
    for (int i = 0; i < m; i++) {
      if (kd->esize == 4) {
        ((float *)cj)[i] = (float)br * ((float *)cj)[i];
      } else if (kd->esize == 8 && !kd->complex) {
        ((double *)cj)[i] = br * ((double *)cj)[i];
      } else if (kd->esize == 8) {
        float *x = (float *)cj + 2 * i, r = x[0], s = x[1];
        x[0] = (float)br * r - (float)bi * s;
        x[1] = (float)br * s + (float)bi * r;
      } else {
        double *x = (double *)cj + 2 * i, r = x[0], s = x[1];
        x[0] = br * r - bi * s;
        x[1] = br * s + bi * r;
      }
    }
  }
}

static f77_gemm_fn cpu_fn(const gb_kind *kd) {
  static _Atomic(f77_gemm_fn) fns[4];
  int i = kd == &gb_kind_s ? 0 : kd == &gb_kind_d ? 1 : kd == &gb_kind_c ? 2 : 3;
  f77_gemm_fn f = atomic_load(&fns[i]);
  if (f == NULL) {
    f = (f77_gemm_fn)gb_cpu_sym(kd->f77);
    atomic_store(&fns[i], f);
  }
  return f;
}

static void cpu_gemm(const gb_kind *kd, char transa, char transb, int m, int n, int k,
                     const void *alpha, const void *a, int lda, const void *b, int ldb,
                     const void *beta, void *c, int ldc) {
  cpu_fn(kd)(&transa, &transb, &m, &n, &k, alpha, a, &lda, b, &ldb, beta, c, &ldc, 1, 1);
}

/* The gemm on gemmd: 0, or a failure (C is then as it was: with beta != 0 the result comes
 * into a buffer of its own first, so that the CPU BLAS can start again from C). */
static int offload(const gb_kind *kd, char transa, char transb, int m, int n, int k,
                   const void *alpha, const void *a, int lda, const void *b, int ldb,
                   const void *beta, void *c, int ldc) {
  gc_conn *conn = gb_remote_get();
  if (conn == NULL) return -1;
  const gb_settings *s = gb_env();
  double ar, ai, br, bi;
  scalar(kd, alpha, &ar, &ai);
  scalar(kd, beta, &br, &bi);
  gc_gemm_opts o;
  gc_gemm_opts_init(&o);
  o.dtype = (gc_dtype)kd->remote_dtype;
  o.m = (uint64_t)n;
  o.n = (uint64_t)m;
  o.k = (uint64_t)k;
  o.trans_a = upper(transb) != 'N';
  o.trans_b = upper(transa) != 'N';
  /* 'C' is the conjugate transpose (a plain one for real kinds): op(B)^T of the row-major
   * gemm is then conj(B) as stored */
  o.conj_a = kd->complex && upper(transb) == 'C';
  o.conj_b = kd->complex && upper(transa) == 'C';
  o.lda = (uint64_t)ldb;
  o.ldb = (uint64_t)lda;
  o.alpha = ar;
  o.alpha_im = ai;
  o.beta = br;
  o.beta_im = bi;
  o.precision = s->precision;
  o.timeout_ms = s->call_timeout_ms > 0 ? s->call_timeout_ms : -1;
  int keep_c = br != 0 || bi != 0;
  void *out = c;
  if (keep_c) {
    out = malloc((size_t)m * (size_t)n * kd->esize);
    if (out == NULL) {
      gb_remote_put(conn);
      return -1;
    }
  } else {
    o.ldc = (uint64_t)ldc;
  }
  int rc;
  if (keep_c) {
    /* ldc is one for c and out: a strided c is packed into out first (out may be c) */
    void *cp = c;
    if (ldc != m) {
      cp = out;
      for (int j = 0; j < n; j++)
        memcpy((uint8_t *)out + (size_t)j * m * kd->esize,
               (const uint8_t *)c + (size_t)j * ldc * kd->esize, (size_t)m * kd->esize);
    }
    rc = gc_gemm(conn, &o, b, a, cp, out, NULL);
  } else {
    rc = gc_gemm(conn, &o, b, a, NULL, out, NULL);
  }
  if (rc != 0) {
    gb_remote_fail(conn, rc, gc_last_error(conn)->message);
    if (keep_c) free(out);
    return -1;
  }
  gb_remote_put(conn);
  if (keep_c) {
    for (int j = 0; j < n; j++)
      memcpy((uint8_t *)c + (size_t)j * ldc * kd->esize,
             (const uint8_t *)out + (size_t)j * m * kd->esize, (size_t)m * kd->esize);
    free(out);
  }
  return 0;
}

void gb_gemm(const gb_kind *kd, char transa, char transb, int m, int n, int k, const void *alpha,
             const void *a, int lda, const void *b, int ldb, const void *beta, void *c, int ldc) {
  double ar, ai, br, bi;
  scalar(kd, alpha, &ar, &ai);
  scalar(kd, beta, &br, &bi);
  int alpha_zero = ar == 0 && ai == 0, beta_one = br == 1 && bi == 0;
  if (m == 0 || n == 0 || ((alpha_zero || k == 0) && beta_one)) return;
  if (alpha_zero || k == 0) {
    scale_c(kd, m, n, beta, c, ldc);
    return;
  }
  double flops = 2.0 * m * n * (double)k * (kd->complex ? 4 : 1);
  double mnk = (double)m * n * (double)k;
  if (kd->remote_dtype >= 0 && mnk >= gb_env()->offload_min &&
      offload(kd, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 0) {
    gb_stats_count(1, flops);
    return;
  }
  gb_stats_count(0, flops);
  cpu_gemm(kd, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
