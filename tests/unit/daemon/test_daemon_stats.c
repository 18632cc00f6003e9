/* Latency histogram buckets and error counters (gd_stats.h). */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "gd_stats.h"

START_TEST(bucket_edges) {
  ck_assert_uint_eq(gd_hist_bucket(0), 0);
  ck_assert_uint_eq(gd_hist_bucket(1), 1);
  ck_assert_uint_eq(gd_hist_bucket(2), 2);
  ck_assert_uint_eq(gd_hist_bucket(3), 2);
  ck_assert_uint_eq(gd_hist_bucket(4), 3);
  ck_assert_uint_eq(gd_hist_bucket(1023), 10);
  ck_assert_uint_eq(gd_hist_bucket(1024), 11);
  ck_assert_uint_eq(gd_hist_bucket(UINT64_MAX), GD_HIST_BUCKETS - 1);
  /* every value lies below its bucket's limit and at or above the previous one's */
  for (uint64_t v = 0; v < 5000000; v = v * 3 + 1) {
    unsigned b = gd_hist_bucket(v);
    ck_assert_uint_lt(v, gd_hist_bucket_limit(b));
    if (b > 0)
      ck_assert_uint_ge(v, gd_hist_bucket_limit(b - 1));
  }
  ck_assert_uint_eq(gd_hist_bucket_limit(GD_HIST_BUCKETS - 1), UINT64_MAX);
}
END_TEST

START_TEST(hist_add_counts) {
  gd_hist h = {0};
  uint64_t values[] = {0, 5, 5, 700, 1u << 20, 123456789};
  uint64_t sum = 0;
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    gd_hist_add(&h, values[i]);
    sum += values[i];
  }
  ck_assert_uint_eq(h.count, 6);
  ck_assert_uint_eq(h.sum_us, sum);
  ck_assert_uint_eq(h.max_us, 123456789);
  ck_assert_uint_eq(h.counts[gd_hist_bucket(5)], 2);
  uint64_t total = 0;
  for (int i = 0; i < GD_HIST_BUCKETS; i++)
    total += h.counts[i];
  ck_assert_uint_eq(total, h.count);
}
END_TEST

START_TEST(errors_by_code) {
  gd_stats s;
  gd_stats_init(&s);
  gd_stats_error(&s, GP_E_INVALID_ARGUMENT);
  gd_stats_error(&s, GP_E_INVALID_ARGUMENT);
  gd_stats_error(&s, GP_E_INTERNAL);
  gd_stats_error(&s, -77); /* unknown codes count as INTERNAL */
  ck_assert_uint_eq(s.errors_by_code[-GP_E_INVALID_ARGUMENT], 2);
  ck_assert_uint_eq(s.errors_by_code[-GP_E_INTERNAL], 2);
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_stats");
  TCase *tc = tcase_create("hist");
  tcase_add_test(tc, bucket_edges);
  tcase_add_test(tc, hist_add_counts);
  tcase_add_test(tc, errors_by_code);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
