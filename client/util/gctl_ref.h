/*
 * gctl_ref.h - the float64 reference gemm that gemmctl verify and the client
 * tests check the daemon against, and the tolerance fitted to each dtype (the
 * integer gemm, i8: an exact reference and no tolerance; the fp8 gemm, e4m3 and
 * e5m2: an allowance per element fitted to fp8 accumulation).
 */
#ifndef GCTL_REF_H
#define GCTL_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gemmclient.h"

/* The dtype of the result and of c: o->out_dtype, or the gemm's uncast result when that is
 * GC_DTYPE_DEFAULT (o->dtype; i32 for i8, f32 for e4m3 and e5m2). */
gc_dtype gctl_out_dtype(const gc_gemm_opts *o);
/* What multiplies op(A) op(B): alpha * scale_a * scale_b (the scales are 1 but for fp8). */
double gctl_ref_alpha(const gc_gemm_opts *o);

/* Bytes of one element (0 for GC_DTYPE_DEFAULT). */
size_t gctl_dtype_size(gc_dtype dtype);
/* i8 or i32. */
bool gctl_dtype_is_int(gc_dtype dtype);
/* e4m3 or e5m2 (uint8_t bytes). */
bool gctl_dtype_is_fp8(gc_dtype dtype);
/* Parts of one element: 2 for c64 and c128 (re, im), else 1. gctl_load and gctl_store index
 * parts; gctl_ref_gemm's ref and bound hold this many doubles an element. */
size_t gctl_dtype_parts(gc_dtype dtype);

/* Element i of a buffer of dtype, as double (f16/bf16 are uint16_t bits, fp8 uint8_t). */
double gctl_load(gc_dtype dtype, const void *buf, size_t i);
/* Stores v, rounded once to dtype (nearest even; an integer v wrapped to i8 or i32; fp8
 * saturating at its largest finite value), as element i. */
void gctl_store(gc_dtype dtype, void *buf, size_t i, double v);

/*
 * ref[b][i][j] = act(alpha * sum_l op(A)[b][i][l] * op(B)[b][l][j] + beta * C[b][i][j]) in
 * double, from the values as stored (c, in the out dtype, may be NULL when beta is 0; with
 * o->bias it is one row, C[b][i][j] = c[j]; act is o->activation), and bound[] the same sum over absolute values (what
 * rounding errors scale with), times act's largest slope. ref and bound hold m*n*batch doubles.
 * An i8 gemm's ref is exact, in 32-bit wrapping arithmetic (c holds i32), its bound 0. An fp8
 * gemm's ref is scaled by alpha * scale_a * scale_b and its bound is the error allowed (see
 * refgemm.c).
 */
void gctl_ref_gemm(const gc_gemm_opts *o, const void *a, const void *b, const void *c,
                   double *ref, double *bound);

/* gctl_ref_gemm, calling progress(arg, rows done, rows in all) as rows are done (progress
 * may be NULL). With OpenBLAS at hand (gctl_ref_dgemm) the sums are two dgemms on its
 * threads; without it, a loop on every core. */
typedef void (*gctl_ref_progress_fn)(void *arg, uint64_t done, uint64_t total);
void gctl_ref_gemm_progress(const gc_gemm_opts *o, const void *a, const void *b, const void *c,
                            double *ref, double *bound, gctl_ref_progress_fn progress, void *arg);

/* refblas.c: OpenBLAS's cblas_dgemm (its CBLAS_ORDER and CBLAS_TRANSPOSE as int), loaded at
 * the first call, or NULL where the library is not installed or GEMMCTL_REF_BLAS=0. */
typedef void (*gctl_dgemm_fn)(int order, int trans_a, int trans_b, int m, int n, int k,
                              double alpha, const double *a, int lda, const double *b, int ldb,
                              double beta, double *c, int ldc);
gctl_dgemm_fn gctl_ref_dgemm(void);

/* The largest (|out - ref| less one subnormal spacing of the dtype) / bound over all elements
 * (bound 0: any difference is infinite); NaN when an element is NaN. out holds the out dtype;
 * a cast result is compared with ref rounded to it. An i8 gemm's: the largest |out - ref|. */
double gctl_ref_error(const gc_gemm_opts *o, const void *out, const double *ref,
                      const double *bound);

/* Error a correct gemm of this shape and dtype stays within (see refgemm.c); 0 for i8, 1 for
 * fp8 (its bound is the allowance). */
double gctl_ref_tolerance(const gc_gemm_opts *o);

/* Fills n elements (all their parts) with uniform values in [-1, 1) rounded to dtype (fp8 included; i8, i32:
 * uniform over the whole type); *seed advances. */
void gctl_fill_random(gc_dtype dtype, void *buf, size_t n, uint64_t *seed);

/* Sets n elements to NaN (integers: INT32_MIN + 7), so that any element the daemon fails to
 * write shows up. */
void gctl_poison(gc_dtype dtype, void *buf, size_t n);

#endif /* GCTL_REF_H */
