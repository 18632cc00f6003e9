/* The one translation of a wire gemm into a kernel problem (gd_problem.h), which both backends
 * use: every field the header determines, and the dtypes' sizes agreeing on both sides. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gd_problem.h"

START_TEST(dtypes_agree) {
  for (int d = 0; d < GP_DTYPE_COUNT; d++) {
    gk_dtype k = gd_problem_dtype((gp_dtype)d);
    ck_assert_int_eq((int)k, d);
    ck_assert_uint_eq(gk_dtype_size(k), gp_dtype_size((gp_dtype)d));
  }
}
END_TEST

START_TEST(every_field) {
  gp_gemm_hdr hdr;
  gp_gemm_hdr_init(&hdr);
  hdr.dtype = GP_DTYPE_E5M2;
  hdr.precision = GP_PRECISION_FAST;
  hdr.trans_a = true;
  hdr.m = 3, hdr.n = 5, hdr.k = 7, hdr.batch = 11;
  hdr.broadcast_b = true;
  hdr.alpha = 2.0, hdr.beta = -0.5;
  hdr.scale_a = 4.0, hdr.scale_b = 0.25; /* folded into alpha: 2 * 4 * 0.25 */
  hdr.alpha_im = 1.5, hdr.beta_im = -2.5;
  hdr.conj_b = true;
  hdr.ld[GP_OPERAND_A] = 13, hdr.ld[GP_OPERAND_B] = 17, hdr.ld[GP_OPERAND_C] = 19;
  hdr.activation = GP_ACT_GELU_TANH;
  gk_problem p;
  memset(&p, 0x5a, sizeof p); /* poisoned: every field must be written */
  gd_problem_from_hdr(&hdr, &p);
  ck_assert_int_eq(p.dtype, GK_E5M2);
  ck_assert(p.fast);
  ck_assert(p.trans_a && !p.trans_b);
  ck_assert_int_eq(p.m, 3);
  ck_assert_int_eq(p.n, 5);
  ck_assert_int_eq(p.k, 7);
  ck_assert_int_eq(p.batch, 11);
  ck_assert(p.b_shared);
  ck_assert_double_eq(p.alpha, 2.0);
  ck_assert_double_eq(p.beta, -0.5);
  ck_assert_double_eq(p.alpha_im, 1.5);
  ck_assert_double_eq(p.beta_im, -2.5);
  ck_assert(!p.conj_a && p.conj_b);
  ck_assert_int_eq(p.lda, 13);
  ck_assert_int_eq(p.ldb, 17);
  ck_assert_int_eq(p.ldc, 19);
  ck_assert_int_eq(p.act, GK_ACT_GELU_TANH);
  /* what the backend fills in itself starts out empty */
  ck_assert_ptr_null(p.a);
  ck_assert_ptr_null(p.b);
  ck_assert_ptr_null(p.c);
  ck_assert_ptr_null(p.bias);
  ck_assert_ptr_null(p.work);
  ck_assert(!p.cast);
  ck_assert_int_eq(p.bias_stride, 0);
}
END_TEST

START_TEST(exact_precision) {
  gp_gemm_hdr hdr;
  gp_gemm_hdr_init(&hdr);
  hdr.m = hdr.n = hdr.k = 1;
  gk_problem p;
  gd_problem_from_hdr(&hdr, &p);
  ck_assert_int_eq(p.dtype, GK_F32);
  ck_assert(!p.fast);
  ck_assert_int_eq(p.batch, 1);
  ck_assert_int_eq(p.act, GK_ACT_NONE);
  ck_assert_int_eq(p.lda, 0); /* packed */
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_problem");
  TCase *tc = tcase_create("problem");
  tcase_add_test(tc, dtypes_agree);
  tcase_add_test(tc, every_field);
  tcase_add_test(tc, exact_precision);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
