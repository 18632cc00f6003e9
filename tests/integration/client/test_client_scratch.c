/*
 * test_client_scratch.c - libgemmclient's automatic scratch region and leading dimensions,
 * against a float64 reference: odd sizes, every transpose, alpha and beta, lda / ldb / ldc
 * larger than the rows (the gaps poisoned and checked untouched, the result's too), beta 0
 * with C full of NaN, f32 and f64, batches, with the scratch region on (threshold 0, so
 * every gemm goes through it, and the default) and off (the socket, strided operands packed
 * by the library). Sizes big enough for the copy threads (over 1 MiB) too.
 *   test_client_scratch ADDRESS   (exit 0 pass, 1 fail)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemmclient.h"

static int failures;
static unsigned long long seed = 99;
static double rnd(void) {
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return (double)((seed >> 11) & 0xffff) / 32768.0 - 1.0;
}

typedef struct {
  uint64_t m, n, k, batch;
  int ta, tb, f64;
  double alpha, beta;
  uint64_t pad_a, pad_b, pad_c;
} gcase;

static double get(const void *p, int f64, size_t i) {
  return f64 ? ((const double *)p)[i] : ((const float *)p)[i];
}
static void put(void *p, int f64, size_t i, double v) {
  if (f64) ((double *)p)[i] = v;
  else ((float *)p)[i] = (float)v;
}

static void run_case(gc_conn *conn, const gcase *t, const char *what) {
  size_t es = t->f64 ? 8 : 4;
  uint64_t ar = t->ta ? t->k : t->m, ac = t->ta ? t->m : t->k;
  uint64_t br = t->tb ? t->n : t->k, bc = t->tb ? t->k : t->n;
  uint64_t lda = ac + t->pad_a, ldb = bc + t->pad_b, ldc = t->n + t->pad_c;
  size_t an = (size_t)(t->batch * ar * lda), bn = (size_t)(t->batch * br * ldb),
         cn = (size_t)(t->batch * t->m * ldc);
  uint8_t *a = malloc(an * es), *b = malloc(bn * es), *c = malloc(cn * es),
          *out = malloc(cn * es);
  double *want = malloc((size_t)(t->batch * t->m * t->n) * sizeof(double));
  for (size_t i = 0; i < an; i++) put(a, t->f64, i, i % lda >= ac ? NAN : rnd());
  for (size_t i = 0; i < bn; i++) put(b, t->f64, i, i % ldb >= bc ? NAN : rnd());
  for (size_t i = 0; i < cn; i++) put(c, t->f64, i, t->beta == 0 || i % ldc >= t->n ? NAN : rnd());
  for (size_t i = 0; i < cn; i++) put(out, t->f64, i, -7.0); /* poison: gaps must stay */
  for (uint64_t e = 0; e < t->batch; e++)
    for (uint64_t i = 0; i < t->m; i++)
      for (uint64_t j = 0; j < t->n; j++) {
        double s = 0;
        for (uint64_t p = 0; p < t->k; p++) {
          double x = get(a, t->f64, e * ar * lda + (t->ta ? p * lda + i : i * lda + p));
          double y = get(b, t->f64, e * br * ldb + (t->tb ? j * ldb + p : p * ldb + j));
          s += x * y;
        }
        double cv = t->beta == 0 ? 0 : get(c, t->f64, e * t->m * ldc + i * ldc + j);
        want[(e * t->m + i) * t->n + j] = t->alpha * s + t->beta * cv;
      }
  gc_gemm_opts o;
  gc_gemm_opts_init(&o);
  o.m = t->m, o.n = t->n, o.k = t->k, o.batch = t->batch;
  o.trans_a = t->ta, o.trans_b = t->tb;
  o.dtype = t->f64 ? GC_DTYPE_F64 : GC_DTYPE_F32;
  o.alpha = t->alpha, o.beta = t->beta;
  o.lda = t->pad_a ? lda : 0, o.ldb = t->pad_b ? ldb : 0, o.ldc = t->pad_c ? ldc : 0;
  int rc = gc_gemm(conn, &o, a, b, t->beta != 0 ? c : NULL, out, NULL);
  int bad = 0;
  if (rc != 0) {
    fprintf(stderr, "FAIL %s: gc_gemm: %s\n", what, gc_last_error(conn)->message);
    bad = 1;
  }
  double tol = t->f64 ? 1e-12 : 1e-5;
  for (uint64_t e = 0; rc == 0 && e < t->batch; e++)
    for (uint64_t i = 0; i < t->m; i++)
      for (uint64_t j = 0; j < ldc; j++) {
        double got = get(out, t->f64, e * t->m * ldc + i * ldc + j);
        if (j >= t->n) {
          bad += got != -7.0;
          continue;
        }
        double w = want[(e * t->m + i) * t->n + j];
        bad += !(fabs(got - w) <= tol * (double)(t->k + 2) * (1 + fabs(w)));
      }
  if (bad) {
    fprintf(stderr, "FAIL %s: %llux%llux%llu batch %llu ta %d tb %d f64 %d alpha %g beta %g "
            "pads %llu %llu %llu: %d bad\n", what, (unsigned long long)t->m,
            (unsigned long long)t->n, (unsigned long long)t->k, (unsigned long long)t->batch,
            t->ta, t->tb, t->f64, t->alpha, t->beta, (unsigned long long)t->pad_a,
            (unsigned long long)t->pad_b, (unsigned long long)t->pad_c, bad);
    failures++;
  }
  free(a), free(b), free(c), free(out), free(want);
}

static void all(const char *addr, int scratch, uint64_t min, const char *what) {
  gc_connect_opts co;
  gc_connect_opts_init(&co);
  co.scratch = scratch;
  co.scratch_min_bytes = min;
  gc_conn *conn;
  if (gc_connect_with(addr, &co, &conn) != 0) {
    fprintf(stderr, "FAIL connect %s: %s\n", addr, gc_last_error(NULL)->message);
    failures++;
    return;
  }
  static const uint64_t dims[][4] = {{1, 1, 1, 1}, {7, 5, 3, 1}, {33, 17, 65, 2},
                                     {129, 70, 31, 1}, {300, 520, 260, 1}};
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
    for (int v = 0; v < 8; v++) {
      gcase t = {dims[d][0], dims[d][1], dims[d][2], dims[d][3], v & 1, (v >> 1) & 1,
                 (v >> 2) & 1, v == 3 ? -0.5 : 1.25, (v % 3 == 0) ? 0.0 : 0.75,
                 (uint64_t)(v % 3), (uint64_t)(v % 2) * 5, (uint64_t)(v % 4)};
      run_case(conn, &t, what);
    }
  /* the same connection again after the region grew: no stale region */
  gcase t = {64, 64, 64, 1, 0, 0, 0, 1.0, 0.0, 0, 0, 0};
  run_case(conn, &t, what);
  gc_close(conn);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_client_scratch ADDRESS...\n");
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    all(argv[i], 1, 0, "scratch, every gemm");
    all(argv[i], 1, GC_DEFAULT_SCRATCH_MIN_BYTES, "scratch, default threshold");
    all(argv[i], 0, 0, "socket");
  }
  if (failures == 0) printf("test_client_scratch: ok\n");
  return failures ? 1 : 0;
}
