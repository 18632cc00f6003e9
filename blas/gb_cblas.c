/*
 * gb_cblas.c - the CBLAS gemms (cblas_sgemm, _dgemm, _cgemm, _zgemm) and the batched
 * extensions MKL and OpenBLAS users call (cblas_?gemm_batch, cblas_?gemm_batch_strided, with
 * MKL's signatures and LP64 ints). Errors as the reference CBLAS reports them: cblas_xerbla
 * with the position of the bad argument among the C function's own.
 */
#include <stdint.h>

#include "gb_internal.h"

/* CBLAS's enum values (cblas.h). */
enum { ROW_MAJOR = 101, COL_MAJOR = 102 };
enum { NO_TRANS = 111, TRANS = 112, CONJ_TRANS = 113 };

void cblas_xerbla(int p, const char *rout, const char *form, ...);

static char trans_char(int t) { return t == NO_TRANS ? 'N' : t == TRANS ? 'T' : 'C'; }
static int trans_ok(int t) { return t == NO_TRANS || t == TRANS || t == CONJ_TRANS; }

/* The Fortran position of a failed check (of the column-major call, which for row-major has
 * A and B, m and n swapped) as the C argument's: layout is 1, so ColMajor adds one; RowMajor
 * names the argument the swapped one came from. */
static int c_position(int layout, int info) {
  if (layout == COL_MAJOR) return info + 1;
  switch (info) {
    case 3: return 5;   /* its m is our N */
    case 4: return 4;   /* its n is our M */
    case 8: return 11;  /* its lda is our ldb */
    case 10: return 9;  /* its ldb is our lda */
    default: return info + 1;
  }
}

/* One CBLAS gemm, checked; rout names the routine for cblas_xerbla. */
static void cblas_gemm(const gb_kind *kd, const char *rout, int layout, int ta, int tb, int m,
                       int n, int k, const void *alpha, const void *a, int lda, const void *b,
                       int ldb, const void *beta, void *c, int ldc) {
  if (layout != ROW_MAJOR && layout != COL_MAJOR) {
    cblas_xerbla(1, rout, "Illegal layout setting, %d\n", layout);
    return;
  }
  if (!trans_ok(ta)) {
    cblas_xerbla(2, rout, "Illegal TransA setting, %d\n", ta);
    return;
  }
  if (!trans_ok(tb)) {
    cblas_xerbla(3, rout, "Illegal TransB setting, %d\n", tb);
    return;
  }
  char tac = trans_char(ta), tbc = trans_char(tb);
  int info = layout == COL_MAJOR ? gb_gemm_check(tac, tbc, m, n, k, lda, ldb, ldc)
                                 : gb_gemm_check(tbc, tac, n, m, k, ldb, lda, ldc);
  if (info != 0) {
    cblas_xerbla(c_position(layout, info), rout, "");
    return;
  }
  if (layout == COL_MAJOR)
    gb_gemm(kd, tac, tbc, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    gb_gemm(kd, tbc, tac, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
}

#define CBLAS_REAL(name, kind, T)                                                            \
  GB_API void name(int layout, int ta, int tb, int m, int n, int k, T alpha, const T *a,     \
                   int lda, const T *b, int ldb, T beta, T *c, int ldc) {                    \
    cblas_gemm(&(kind), #name, layout, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc); \
  }
#define CBLAS_COMPLEX(name, kind)                                                             \
  GB_API void name(int layout, int ta, int tb, int m, int n, int k, const void *alpha,        \
                   const void *a, int lda, const void *b, int ldb, const void *beta, void *c, \
                   int ldc) {                                                                 \
    cblas_gemm(&(kind), #name, layout, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); \
  }

CBLAS_REAL(cblas_sgemm, gb_kind_s, float)
CBLAS_REAL(cblas_dgemm, gb_kind_d, double)
CBLAS_COMPLEX(cblas_cgemm, gb_kind_c)
CBLAS_COMPLEX(cblas_zgemm, gb_kind_z)

/* MKL's grouped batch: group g has group_size[g] gemms sharing its parameters; a, b, c are
 * arrays of pointers over all groups in order. */
static void batch(const gb_kind *kd, const char *rout, int layout, const int *ta, const int *tb,
                  const int *m, const int *n, const int *k, const uint8_t *alpha,
                  const void *const *a, const int *lda, const void *const *b, const int *ldb,
                  const uint8_t *beta, void *const *c, const int *ldc, int group_count,
                  const int *group_size) {
  if (group_count < 0) {
    cblas_xerbla(15, rout, "Illegal group_count, %d\n", group_count);
    return;
  }
  size_t at = 0;
  for (int g = 0; g < group_count; g++) {
    if (group_size[g] < 0) {
      cblas_xerbla(16, rout, "Illegal group_size[%d], %d\n", g, group_size[g]);
      return;
    }
    for (int i = 0; i < group_size[g]; i++, at++)
      cblas_gemm(kd, rout, layout, ta[g], tb[g], m[g], n[g], k[g], alpha + g * kd->esize, a[at],
                 lda[g], b[at], ldb[g], beta + g * kd->esize, c[at], ldc[g]);
  }
}

/* MKL's strided batch: batch_size gemms, operand i at a + i * stridea elements, and so on. */
static void strided(const gb_kind *kd, const char *rout, int layout, int ta, int tb, int m,
                    int n, int k, const void *alpha, const uint8_t *a, int lda, int stridea,
                    const uint8_t *b, int ldb, int strideb, const void *beta, uint8_t *c,
                    int ldc, int stridec, int batch_size) {
  if (batch_size < 0) {
    cblas_xerbla(18, rout, "Illegal batch_size, %d\n", batch_size);
    return;
  }
  for (int i = 0; i < batch_size; i++)
    cblas_gemm(kd, rout, layout, ta, tb, m, n, k, alpha, a + (size_t)i * stridea * kd->esize,
               lda, b + (size_t)i * strideb * kd->esize, ldb, beta,
               c + (size_t)i * stridec * kd->esize, ldc);
}

#define CBLAS_BATCH(name, kind, T)                                                             \
  GB_API void name(int layout, const int *ta, const int *tb, const int *m, const int *n,       \
                   const int *k, const T *alpha, const T **a, const int *lda, const T **b,     \
                   const int *ldb, const T *beta, T **c, const int *ldc, int group_count,      \
                   const int *group_size) {                                                    \
    batch(&(kind), #name, layout, ta, tb, m, n, k, (const uint8_t *)alpha,                     \
          (const void *const *)a, lda, (const void *const *)b, ldb, (const uint8_t *)beta,     \
          (void *const *)c, ldc, group_count, group_size);                                     \
  }
#define CBLAS_STRIDED(name, kind, T)                                                           \
  GB_API void name(int layout, int ta, int tb, int m, int n, int k, T alpha, const T *a,       \
                   int lda, int stridea, const T *b, int ldb, int strideb, T beta, T *c,       \
                   int ldc, int stridec, int batch_size) {                                     \
    strided(&(kind), #name, layout, ta, tb, m, n, k, &alpha, (const uint8_t *)a, lda, stridea, \
            (const uint8_t *)b, ldb, strideb, &beta, (uint8_t *)c, ldc, stridec, batch_size);  \
  }
#define CBLAS_STRIDED_COMPLEX(name, kind)                                                      \
  GB_API void name(int layout, int ta, int tb, int m, int n, int k, const void *alpha,         \
                   const void *a, int lda, int stridea, const void *b, int ldb, int strideb,   \
                   const void *beta, void *c, int ldc, int stridec, int batch_size) {          \
    strided(&(kind), #name, layout, ta, tb, m, n, k, alpha, (const uint8_t *)a, lda, stridea,  \
            (const uint8_t *)b, ldb, strideb, beta, (uint8_t *)c, ldc, stridec, batch_size);   \
  }

CBLAS_BATCH(cblas_sgemm_batch, gb_kind_s, float)
CBLAS_BATCH(cblas_dgemm_batch, gb_kind_d, double)
CBLAS_BATCH(cblas_cgemm_batch, gb_kind_c, void)
CBLAS_BATCH(cblas_zgemm_batch, gb_kind_z, void)
CBLAS_STRIDED(cblas_sgemm_batch_strided, gb_kind_s, float)
CBLAS_STRIDED(cblas_dgemm_batch_strided, gb_kind_d, double)
CBLAS_STRIDED_COMPLEX(cblas_cgemm_batch_strided, gb_kind_c)
CBLAS_STRIDED_COMPLEX(cblas_zgemm_batch_strided, gb_kind_z)
