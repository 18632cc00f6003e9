/*
 * gk_problem.h - one batched GEMM problem as the kernels see it.
 *
 * C = alpha * op(A) * op(B) + beta * C for `batch` problems stored back to
 * back, row-major, densely packed: op(A) is m x k (A stored k x m when
 * trans_a), op(B) is k x n (B stored n x k when trans_b), C is m x n. f16 and
 * bf16 accumulate in f32; int8 in int32 (GK_I8, below); fp8 in f32 (GK_E4M3, GK_E5M2). When
 * beta == 0, C is not read (NaN in C does not propagate), as in BLAS.
 *
 * Shared by the CPU path (host pointers) and the GPU kernels (device
 * pointers). Pure C; no CUDA types.
 */
#ifndef GK_PROBLEM_H
#define GK_PROBLEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* GK_I8: the integer gemm. A and B are int8, C (and the bias) int32; alpha and beta are
 * integers within int32, and C = act(alpha * op(A) * op(B) + beta * C0) is formed in 32-bit two's
 * complement arithmetic, wrapping (as cuBLAS's CUBLAS_COMPUTE_32I): exact while the values fit.
 * act is ReLU or none. GK_I32 is C's dtype only.
 * GK_E4M3, GK_E5M2: the fp8 gemm (gp_fp8.h's formats). A and B are fp8 of the one format, C (and
 * the bias) f32 as for an F32 gemm; the products are exact and accumulate in f32. The per-tensor
 * scales are folded into alpha by the caller.
 * Numbered as proto's gp_dtype: the daemon's one translation (daemon/core/gd_problem.c) asserts
 * it. */
typedef enum {
  GK_F32 = 0,
  GK_F64 = 1,
  GK_F16 = 2,
  GK_BF16 = 3,
  GK_I8 = 4,
  GK_I32 = 5,
  GK_E4M3 = 6,
  GK_E5M2 = 7,
  GK_C64 = 8,  /* complex: two f32, re then im */
  GK_C128 = 9, /* complex: two f64 */
} gk_dtype;

/* The activation of the epilogue (numbered as gp_act in proto/gp_types.h; gd_problem.c asserts
 * it). GELU is the erf form; GELU_TANH the tanh approximation. */
typedef enum { GK_ACT_NONE = 0, GK_ACT_RELU = 1, GK_ACT_GELU = 2, GK_ACT_GELU_TANH = 3 } gk_act;

typedef struct {
  gk_dtype dtype;
  bool fast;            /* precision "fast": f32 may use TF32 tensor cores */
  bool trans_a, trans_b;
  int64_t m, n, k, batch;
  bool b_shared;        /* one B (k x n) for every batch entry: a 2-D B broadcast */
  double alpha, beta;
  const void *a, *b;    /* inputs */
  void *c;              /* in/out */
  /* The epilogue: C = act(alpha * op(A) * op(B) + beta * C0), where C0 is C as given, or with
   * bias set, every row of C0 is the bias row: n elements of the dtype, the same for every row
   * of a batch entry; bias_stride elements from one entry's row to the next (0: one row for
   * the whole batch). The bias may be C's own first row of each entry (the daemon copies it
   * there); it is read only when beta != 0. f16/bf16: the product is rounded to the dtype
   * before the activation, which rounds once more. */
  const void *bias;
  int64_t bias_stride;
  gk_act act;
  /* The output cast: with cast set, C and the bias hold out_dtype elements (F16 or BF16, from
   * an F32, F64 or fp8 dtype). The product and the epilogue are formed in the result dtype
   * (gk_dtype_result) in `work` (batch * m * n such elements, apart from C: C0 is widened into
   * it first), and each element is
   * rounded once, last, into C. Kernels never see such a problem: gk_gpu_gemm and gk_cpu_gemm
   * run it as the plain problem gk_problem_uncast gives. */
  bool cast;
  gk_dtype out_dtype;
  void *work;
  /* Complex (GK_C64, GK_C128): alpha + i alpha_im and beta + i beta_im; conj_a / conj_b
   * conjugate op(A) / op(B). C is not read when both parts of beta are 0. No epilogue, no
   * cast. */
  double alpha_im, beta_im;
  bool conj_a, conj_b;
  /* Leading dimensions (elements between consecutive stored rows; 0: packed, the row length).
   * The batch entries' rows are then batch * rows rows, ld apart: entry i starts at
   * i * rows * ld (gk_problem_a_stride etc). Only for plain problems (no epilogue, no cast). */
  int64_t lda, ldb, ldc;
} gk_problem;

size_t gk_dtype_size(gk_dtype dtype);
/* What a gemm of dtype returns uncast: GK_I32 for GK_I8, GK_F32 for fp8, else dtype. */
gk_dtype gk_dtype_result(gk_dtype dtype);
/* GK_E4M3 or GK_E5M2. */
bool gk_dtype_is_fp8(gk_dtype dtype);
/* GK_C64 or GK_C128. */
bool gk_dtype_is_complex(gk_dtype dtype);
/* The dtype C is stored in: out_dtype with the cast, else gk_dtype_result(dtype). */
gk_dtype gk_problem_c_dtype(const gk_problem *p);
/* Whether p's cast, if any, is one the kernels make (F16/BF16 from an F32 or F64 result, with
 * work set). */
bool gk_problem_cast_ok(const gk_problem *p);
/* Bytes of the work area p needs: batch * m * n result elements with the cast, else 0. */
size_t gk_problem_work_bytes(const gk_problem *p);
/* The plain problem a cast problem runs as: C is the work area, in the result dtype; the bias (read when
 * beta != 0) is the work area's first row of each entry, or of the whole batch with one row,
 * where the caller widens it; no cast. */
gk_problem gk_problem_uncast(const gk_problem *p);
const char *gk_act_name(gk_act act);
const char *gk_dtype_name(gk_dtype dtype);

/* Elements of one matrix of each operand (rows * cols). */
int64_t gk_problem_a_elems(const gk_problem *p);
int64_t gk_problem_b_elems(const gk_problem *p);
int64_t gk_problem_c_elems(const gk_problem *p);
/* Elements from one batch entry's B to the next: b_elems, or 0 when b_shared. */
int64_t gk_problem_b_stride(const gk_problem *p);
/* The leading dimensions in effect (lda etc, or the stored row length when 0), and the
 * elements from one batch entry of A / C to the next (rows * ld). */
int64_t gk_problem_lda(const gk_problem *p);
int64_t gk_problem_ldb(const gk_problem *p);
int64_t gk_problem_ldc(const gk_problem *p);
int64_t gk_problem_a_stride(const gk_problem *p);
int64_t gk_problem_c_stride(const gk_problem *p);
/* True when any leading dimension differs from the packed one. */
bool gk_problem_strided(const gk_problem *p);

/* A problem with b_shared as problems whose kernels know nothing of it: with op(A) not
 * transposed the batch folds into m (one problem of batch * m rows: A and C are stored back
 * to back, B is the same for every row), else one problem per batch entry. gk_problem_pieces
 * says how many; gk_problem_piece(p, i) is piece i (b_shared false). A problem without
 * b_shared is one piece: itself. */
int64_t gk_problem_pieces(const gk_problem *p);
gk_problem gk_problem_piece(const gk_problem *p, int64_t i);

#ifdef __cplusplus
}
#endif
#endif /* GK_PROBLEM_H */
