/*
 * gb_fortran.c - the Fortran BLAS gemms (sgemm_, dgemm_, cgemm_, zgemm_): gfortran's calling
 * convention (every argument by reference, the character arguments' lengths after the
 * others), the reference's argument check and xerbla_ with the routine's name.
 */
#include "gb_internal.h"

#define F77_GEMM(fn, kind)                                                                   \
  GB_API void fn(const char *transa, const char *transb, const int *m, const int *n,        \
                 const int *k, const void *alpha, const void *a, const int *lda,             \
                 const void *b, const int *ldb, const void *beta, void *c, const int *ldc,  \
                 size_t transa_len, size_t transb_len) {                                    \
    (void)transa_len;                                                                        \
    (void)transb_len;                                                                        \
    int info = gb_gemm_check(*transa, *transb, *m, *n, *k, *lda, *ldb, *ldc);               \
    if (info != 0) {                                                                         \
      xerbla_((kind).xname, &info, 6);                                                       \
      return;                                                                                \
    }                                                                                        \
    gb_gemm(&(kind), *transa, *transb, *m, *n, *k, alpha, a, *lda, b, *ldb, beta, c, *ldc); \
  }

F77_GEMM(sgemm_, gb_kind_s)
F77_GEMM(dgemm_, gb_kind_d)
F77_GEMM(cgemm_, gb_kind_c)
F77_GEMM(zgemm_, gb_kind_z)
