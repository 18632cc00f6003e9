/*
 * gd_problem.c - a wire gemm as a kernel problem (gd_problem.h). gp_dtype and gk_dtype (and
 * gp_act and gk_act) are numbered alike; the assertions below keep them so, which makes the
 * conversions plain casts.
 */
#include "gd_problem.h"

#include <string.h>

_Static_assert((int)GP_DTYPE_F32 == (int)GK_F32, "gp_dtype and gk_dtype: f32");
_Static_assert((int)GP_DTYPE_F64 == (int)GK_F64, "gp_dtype and gk_dtype: f64");
_Static_assert((int)GP_DTYPE_F16 == (int)GK_F16, "gp_dtype and gk_dtype: f16");
_Static_assert((int)GP_DTYPE_BF16 == (int)GK_BF16, "gp_dtype and gk_dtype: bf16");
_Static_assert((int)GP_DTYPE_I8 == (int)GK_I8, "gp_dtype and gk_dtype: i8");
_Static_assert((int)GP_DTYPE_I32 == (int)GK_I32, "gp_dtype and gk_dtype: i32");
_Static_assert((int)GP_DTYPE_E4M3 == (int)GK_E4M3, "gp_dtype and gk_dtype: e4m3");
_Static_assert((int)GP_DTYPE_E5M2 == (int)GK_E5M2, "gp_dtype and gk_dtype: e5m2");
_Static_assert((int)GP_DTYPE_C64 == (int)GK_C64, "gp_dtype and gk_dtype: c64");
_Static_assert((int)GP_DTYPE_C128 == (int)GK_C128, "gp_dtype and gk_dtype: c128");
_Static_assert(GP_DTYPE_COUNT == GK_C128 + 1, "gp_dtype has a value gk_dtype lacks");
_Static_assert((int)GP_ACT_NONE == (int)GK_ACT_NONE, "gp_act and gk_act: none");
_Static_assert((int)GP_ACT_RELU == (int)GK_ACT_RELU, "gp_act and gk_act: relu");
_Static_assert((int)GP_ACT_GELU == (int)GK_ACT_GELU, "gp_act and gk_act: gelu");
_Static_assert((int)GP_ACT_GELU_TANH == (int)GK_ACT_GELU_TANH, "gp_act and gk_act: gelu_tanh");

gk_dtype gd_problem_dtype(gp_dtype dtype) { return (gk_dtype)dtype; }

void gd_problem_from_hdr(const gp_gemm_hdr *hdr, gk_problem *p) {
  memset(p, 0, sizeof(*p));
  p->dtype = gd_problem_dtype(hdr->dtype);
  p->fast = hdr->precision == GP_PRECISION_FAST;
  p->trans_a = hdr->trans_a;
  p->trans_b = hdr->trans_b;
  p->m = (int64_t)hdr->m;
  p->n = (int64_t)hdr->n;
  p->k = (int64_t)hdr->k;
  p->batch = (int64_t)hdr->batch;
  p->b_shared = hdr->broadcast_b;
  p->alpha = gp_gemm_alpha(hdr); /* the fp8 scales folded in */
  p->beta = hdr->beta;
  p->alpha_im = hdr->alpha_im; /* complex only (validated) */
  p->beta_im = hdr->beta_im;
  p->conj_a = hdr->conj_a;
  p->conj_b = hdr->conj_b;
  p->lda = (int64_t)hdr->ld[GP_OPERAND_A]; /* 0: packed */
  p->ldb = (int64_t)hdr->ld[GP_OPERAND_B];
  p->ldc = (int64_t)hdr->ld[GP_OPERAND_C];
  p->act = (gk_act)hdr->activation;
}
