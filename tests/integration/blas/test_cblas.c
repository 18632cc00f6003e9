/*
 * test_cblas.c - libgemmd_blas's C entry points against a float64 reference: cblas_sgemm and
 * cblas_dgemm in both layouts and every transpose, with leading dimensions larger than the
 * matrices (the gaps poisoned and checked untouched), alpha and beta (beta 0 with C full of
 * NaN, alpha 0 with A and B full of NaN), the quick returns, the batched and strided
 * extensions, zgemm with the conjugate transpose and a complex alpha, sgemm_ / dgemm_, and the error positions that
 * cblas_xerbla and xerbla_ receive (both are defined here: the library calls them by their
 * global names). Run by test_blas.py with GEMMD_ADDRESS set and GEMMD_BLAS_OFFLOAD_MIN=0, so
 * every gemm goes to the daemon; exit 0 pass, 1 fail.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

enum { ROW = 101, COL = 102, NT = 111, TR = 112, CT = 113 };
void cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int,
                 float, float *, int);
void cblas_dgemm(int, int, int, int, int, int, double, const double *, int, const double *, int,
                 double, double *, int);
void cblas_zgemm(int, int, int, int, int, int, const void *, const void *, int, const void *,
                 int, const void *, void *, int);
void cblas_sgemm_batch(int, const int *, const int *, const int *, const int *, const int *,
                       const float *, const float **, const int *, const float **, const int *,
                       const float *, float **, const int *, int, const int *);
void cblas_dgemm_batch_strided(int, int, int, int, int, int, double, const double *, int, int,
                               const double *, int, int, double, double *, int, int, int);
void sgemm_(const char *, const char *, const int *, const int *, const int *, const float *,
            const float *, const int *, const float *, const int *, const float *, float *,
            const int *, size_t, size_t);

static int failures;
#define CHECK(cond, ...)                    \
  do {                                      \
    if (!(cond)) {                          \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);         \
      fputc('\n', stderr);                  \
      failures++;                           \
    }                                       \
  } while (0)

/* The errors the library reports. */
static int last_cblas_pos, last_f77_info;
static char last_rout[64];
void cblas_xerbla(int p, const char *rout, const char *form, ...) {
  (void)form;
  last_cblas_pos = p;
  snprintf(last_rout, sizeof last_rout, "%s", rout);
}
void xerbla_(const char *name, const int *info, size_t len) {
  last_f77_info = *info;
  snprintf(last_rout, sizeof last_rout, "%.*s", (int)len, name);
}

static unsigned long long seed = 12345;
static double rnd(void) {
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return (double)((seed >> 11) & 0xffff) / 32768.0 - 1.0;
}

/* Element (i, j) of a matrix stored with layout and leading dimension ld. */
static size_t at(int layout, int i, int j, int ld) {
  return layout == ROW ? (size_t)i * ld + j : (size_t)j * ld + i;
}

/* One cblas gemm of type T (float or double) checked against the float64 reference. */
#define CASE(T, fn, tol)                                                                      \
  static void case_##T(int layout, int ta, int tb, int m, int n, int k, T alpha, T beta,      \
                       int pad) {                                                             \
    int ar = ta == NT ? m : k, ac = ta == NT ? k : m, br = tb == NT ? k : n,                  \
        bc = tb == NT ? n : k;                                                                \
    int lda = (layout == ROW ? ac : ar) + pad, ldb = (layout == ROW ? bc : br) + pad,         \
        ldc = (layout == ROW ? n : m) + pad;                                                  \
    if (lda < 1) lda = 1;                                                                     \
    if (ldb < 1) ldb = 1;                                                                     \
    if (ldc < 1) ldc = 1;                                                                     \
    size_t asz = (size_t)lda * (layout == ROW ? ar : ac) + 1,                                 \
           bsz = (size_t)ldb * (layout == ROW ? br : bc) + 1,                                 \
           csz = (size_t)ldc * (layout == ROW ? m : n) + 1;                                   \
    T *a = malloc(asz * sizeof(T)), *b = malloc(bsz * sizeof(T)), *c = malloc(csz * sizeof(T)); \
    double *want = calloc((size_t)m * n + 1, sizeof(double));                                 \
    for (size_t i = 0; i < asz; i++) a[i] = alpha == 0 ? (T)NAN : (T)rnd();                   \
    for (size_t i = 0; i < bsz; i++) b[i] = alpha == 0 ? (T)NAN : (T)rnd();                   \
    for (size_t i = 0; i < csz; i++) c[i] = beta == 0 ? (T)NAN : (T)rnd();                    \
    for (int i = 0; i < m; i++)                                                               \
      for (int j = 0; j < n; j++) {                                                           \
        double s = 0;                                                                         \
        for (int p = 0; alpha != 0 && p < k; p++) {                                           \
          double x = ta == NT ? a[at(layout, i, p, lda)] : a[at(layout, p, i, lda)];          \
          double y = tb == NT ? b[at(layout, p, j, ldb)] : b[at(layout, j, p, ldb)];          \
          s += x * y;                                                                         \
        }                                                                                     \
        want[(size_t)i * n + j] = alpha * s + (beta == 0 ? 0 : beta * c[at(layout, i, j, ldc)]); \
      }                                                                                       \
    T *before = malloc(csz * sizeof(T));                                                      \
    memcpy(before, c, csz * sizeof(T));                                                       \
    fn(layout, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);                         \
    int bad = 0;                                                                              \
    for (int i = 0; i < m; i++)                                                               \
      for (int j = 0; j < n; j++) {                                                           \
        double got = c[at(layout, i, j, ldc)], w = want[(size_t)i * n + j];                   \
        if (!(fabs(got - w) <= tol * (k + 2) * (1 + fabs(w)))) bad++;                          \
      }                                                                                       \
    /* the gaps between rows (or columns) of C are untouched */                               \
    for (size_t x = 0; x < csz; x++) {                                                        \
      size_t line = x / ldc, off = x % ldc;                                                   \
      int inside = line < (size_t)(layout == ROW ? m : n) && off < (size_t)(layout == ROW ? n : m); \
      if (!inside && memcmp(&c[x], &before[x], sizeof(T)) != 0) bad++;                        \
    }                                                                                         \
    CHECK(bad == 0, #fn " layout %d ta %d tb %d m %d n %d k %d alpha %g beta %g pad %d: %d bad", \
          layout, ta, tb, m, n, k, (double)alpha, (double)beta, pad, bad);                    \
    free(a); free(b); free(c); free(before); free(want);                                      \
  }
CASE(float, cblas_sgemm, 1e-5)
CASE(double, cblas_dgemm, 1e-13)

static void all_cases(void) {
  static const int dims[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 1, 9}, {130, 90, 70},
                                {0, 4, 4}, {4, 0, 4}, {5, 6, 0}};
  static const int trans[] = {NT, TR, CT};
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
    for (int lay = 0; lay < 2; lay++)
      for (int x = 0; x < 3; x++)
        for (int y = 0; y < 3; y++) {
          int layout = lay ? ROW : COL, m = dims[d][0], n = dims[d][1], k = dims[d][2];
          case_float(layout, trans[x], trans[y], m, n, k, 1.0f, 0.0f, 0);
          case_float(layout, trans[x], trans[y], m, n, k, 0.7f, 1.3f, 3);
          case_double(layout, trans[x], trans[y], m, n, k, -1.5, 0.0, 2);
          case_double(layout, trans[x], trans[y], m, n, k, 0.0, 0.5, 1);
          case_double(layout, trans[x], trans[y], m, n, k, 2.0, 1.0, 0);
        }
}

static void errors(void) {
  float a[16] = {0}, b[16] = {0}, c[16] = {0};
  last_cblas_pos = 0;
  cblas_sgemm(99, NT, NT, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2);
  CHECK(last_cblas_pos == 1 && strcmp(last_rout, "cblas_sgemm") == 0, "layout: %d %s",
        last_cblas_pos, last_rout);
  cblas_sgemm(COL, 5, NT, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2);
  CHECK(last_cblas_pos == 2, "transa: %d", last_cblas_pos);
  cblas_sgemm(ROW, NT, 5, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2);
  CHECK(last_cblas_pos == 3, "transb: %d", last_cblas_pos);
  cblas_sgemm(COL, NT, NT, -1, 2, 2, 1, a, 2, b, 2, 0, c, 2);
  CHECK(last_cblas_pos == 4, "m: %d", last_cblas_pos);
  cblas_sgemm(ROW, NT, NT, 2, -1, 2, 1, a, 2, b, 2, 0, c, 2);
  CHECK(last_cblas_pos == 5, "n row-major: %d", last_cblas_pos);
  cblas_sgemm(COL, NT, NT, 2, 2, -1, 1, a, 2, b, 2, 0, c, 2);
  CHECK(last_cblas_pos == 6, "k: %d", last_cblas_pos);
  cblas_sgemm(COL, NT, NT, 3, 2, 2, 1, a, 2, b, 2, 0, c, 3);
  CHECK(last_cblas_pos == 9, "lda col: %d", last_cblas_pos);
  cblas_sgemm(ROW, NT, NT, 2, 2, 3, 1, a, 2, b, 2, 0, c, 2);
  CHECK(last_cblas_pos == 9, "lda row: %d", last_cblas_pos);
  cblas_sgemm(ROW, NT, NT, 2, 3, 2, 1, a, 2, b, 2, 0, c, 3);
  CHECK(last_cblas_pos == 11, "ldb row: %d", last_cblas_pos);
  cblas_sgemm(ROW, NT, NT, 2, 3, 2, 1, a, 2, b, 3, 0, c, 2);
  CHECK(last_cblas_pos == 14, "ldc row: %d", last_cblas_pos);
  int m = 2, n = 2, k = 2, lda = 1, ld = 2;
  float one = 1, zero = 0;
  last_f77_info = 0;
  sgemm_("N", "N", &m, &n, &k, &one, a, &lda, b, &ld, &zero, c, &ld, 1, 1);
  CHECK(last_f77_info == 8 && strcmp(last_rout, "SGEMM ") == 0, "sgemm_ lda: %d '%s'",
        last_f77_info, last_rout);
  sgemm_("X", "N", &m, &n, &k, &one, a, &ld, b, &ld, &zero, c, &ld, 1, 1);
  CHECK(last_f77_info == 1, "sgemm_ transa: %d", last_f77_info);
}

static void batched(void) {
  /* two groups: 2 gemms of 3x4x5 NT/NT, 1 of 6x2x3 T/N; checked against cblas_sgemm itself */
  int ta[2] = {NT, TR}, tb[2] = {NT, NT}, m[2] = {3, 6}, n[2] = {4, 2}, k[2] = {5, 3};
  int lda[2] = {5, 6}, ldb[2] = {4, 2}, ldc[2] = {4, 2}, size[2] = {2, 1};
  float alpha[2] = {1.0f, 0.5f}, beta[2] = {0.0f, 2.0f};
  float A[3][64], B[3][64], C[3][64], W[3][64];
  const float *ap[3], *bp[3];
  float *cp[3];
  for (int i = 0; i < 3; i++) {
    for (int x = 0; x < 64; x++) {
      A[i][x] = (float)rnd();
      B[i][x] = (float)rnd();
      C[i][x] = W[i][x] = (float)rnd();
    }
    ap[i] = A[i];
    bp[i] = B[i];
    cp[i] = C[i];
  }
  cblas_sgemm_batch(ROW, ta, tb, m, n, k, alpha, ap, lda, bp, ldb, beta, cp, ldc, 2, size);
  for (int i = 0; i < 3; i++) {
    int g = i < 2 ? 0 : 1;
    cblas_sgemm(ROW, ta[g], tb[g], m[g], n[g], k[g], alpha[g], A[i], lda[g], B[i], ldb[g],
                beta[g], W[i], ldc[g]);
    CHECK(memcmp(W[i], C[i], sizeof W[i]) == 0, "sgemm_batch entry %d", i);
  }
  double sa[3 * 20], sb[3 * 20], sc[3 * 16], sw[3 * 16];
  for (int i = 0; i < 60; i++) sa[i] = rnd(), sb[i] = rnd();
  for (int i = 0; i < 48; i++) sc[i] = sw[i] = rnd();
  cblas_dgemm_batch_strided(COL, NT, TR, 4, 4, 5, 1.5, sa, 4, 20, sb, 4, 20, 0.5, sc, 4, 16, 3);
  for (int i = 0; i < 3; i++)
    cblas_dgemm(COL, NT, TR, 4, 4, 5, 1.5, sa + 20 * i, 4, sb + 20 * i, 4, 0.5, sw + 16 * i, 4);
  CHECK(memcmp(sw, sc, sizeof sw) == 0, "dgemm_batch_strided");
}

static void complex_zgemm(void) {
  double a[2 * 6], b[2 * 6], c[2 * 4], alpha[2] = {1, 1}, beta[2] = {0, 0};
  for (int i = 0; i < 12; i++) a[i] = rnd(), b[i] = rnd();
  cblas_zgemm(ROW, NT, CT, 2, 2, 3, alpha, a, 3, b, 3, beta, c, 2);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      double re = 0, im = 0;
      for (int p = 0; p < 3; p++) {
        double xr = a[2 * (i * 3 + p)], xi = a[2 * (i * 3 + p) + 1];
        double yr = b[2 * (j * 3 + p)], yi = -b[2 * (j * 3 + p) + 1];
        re += xr * yr - xi * yi;
        im += xr * yi + xi * yr;
      }
      double wr = re - im, wi = re + im; /* times 1 + i */
      CHECK(fabs(c[2 * (i * 2 + j)] - wr) < 1e-12 && fabs(c[2 * (i * 2 + j) + 1] - wi) < 1e-12,
            "zgemm (%d, %d)", i, j);
    }
}

/* Several threads at once, each with a call in flight: their own connections, and the copy
 * threads shared (C is over 1 MiB). */
#define TM 520
#define TN 520
#define TK 100
static void *thread_gemms(void *arg) {
  unsigned long long s = 1000 + (unsigned long long)(uintptr_t)arg;
  float *a = malloc(sizeof(float) * TM * TK), *b = malloc(sizeof(float) * TK * TN),
        *c = malloc(sizeof(float) * TM * TN);
  for (int i = 0; i < TM * TK; i++) a[i] = (float)((s = s * 6364136223846793005ull + 1) >> 60);
  for (int i = 0; i < TK * TN; i++) b[i] = (float)((s = s * 6364136223846793005ull + 1) >> 60);
  int bad = 0;
  for (int rep = 0; rep < 2; rep++) {
    cblas_sgemm(ROW, NT, NT, TM, TN, TK, 1.0f, a, TK, b, TN, 0.0f, c, TN);
    for (int i = 0; i < TM; i += 7)
      for (int j = 0; j < TN; j++) {
        double w = 0;
        for (int p = 0; p < TK; p++) w += (double)a[i * TK + p] * b[p * TN + j];
        bad += c[i * TN + j] != (float)w; /* small integers: exact */
      }
  }
  free(a), free(b), free(c);
  return (void *)(uintptr_t)bad;
}

static void threads(void) {
  pthread_t t[4];
  for (uintptr_t i = 0; i < 4; i++) pthread_create(&t[i], NULL, thread_gemms, (void *)i);
  for (int i = 0; i < 4; i++) {
    void *bad;
    pthread_join(t[i], &bad);
    CHECK(bad == NULL, "thread %d: %d wrong elements", i, (int)(uintptr_t)bad);
  }
}

int main(void) {
  threads();
  all_cases();
  errors();
  batched();
  complex_zgemm();
  if (failures) fprintf(stderr, "%d failures\n", failures);
  else printf("test_cblas: ok\n");
  return failures ? 1 : 0;
}
