/*
 * The CPU backend's operand buffer cache (gd_cpu_bufcache.h): what is kept, what a take gets
 * back (the smallest kept buffer that fits and is at most twice the size asked), the byte and
 * block limits, and that small buffers and a zero limit keep nothing.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "gd_cpu_bufcache.h"

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)

/* A buffer taken from c, written end to end (as a payload would be). */
static void *take(gd_cpu_bufcache *c, size_t len, size_t *cap) {
  void *p = gd_cpu_bufcache_take(c, len, cap);
  ck_assert_ptr_nonnull(p);
  ck_assert_uint_ge(*cap, len);
  memset(p, 0x5a, len);
  return p;
}

START_TEST(reuses_what_fits) {
  gd_cpu_bufcache c;
  gd_cpu_bufcache_init(&c, 64 * MIB);
  size_t cap4, cap1, cap;
  void *four = take(&c, 4 * MIB, &cap4);
  void *one = take(&c, 1 * MIB, &cap1);
  ck_assert_uint_eq(c.misses, 2);
  gd_cpu_bufcache_give(&c, four, cap4);
  gd_cpu_bufcache_give(&c, one, cap1);
  ck_assert_uint_eq(c.n, 2);
  ck_assert_uint_eq(c.bytes, 5 * MIB);
  /* 3 MiB: the 4 MiB one (the 1 MiB one is too small) */
  void *p = take(&c, 3 * MIB, &cap);
  ck_assert_ptr_eq(p, four);
  ck_assert_uint_eq(cap, 4 * MIB);
  ck_assert_uint_eq(c.hits, 1);
  gd_cpu_bufcache_give(&c, p, cap);
  /* 1.5 MiB: 4 MiB is more than twice that, 1 MiB too small: fresh memory */
  void *fresh = take(&c, 3 * MIB / 2, &cap);
  ck_assert_ptr_ne(fresh, four);
  ck_assert_ptr_ne(fresh, one);
  ck_assert_uint_eq(cap, 3 * MIB / 2);
  gd_cpu_bufcache_give(&c, fresh, cap);
  /* 900 KiB: the 1 MiB one, the smallest that fits, not the 1.5 MiB one */
  p = take(&c, 900 * KIB, &cap);
  ck_assert_ptr_eq(p, one);
  gd_cpu_bufcache_give(&c, p, cap);
  gd_cpu_bufcache_free(&c);
  ck_assert_uint_eq(c.n, 0);
  ck_assert_uint_eq(c.bytes, 0);
}
END_TEST

START_TEST(limits_hold) {
  gd_cpu_bufcache c;
  gd_cpu_bufcache_init(&c, 3 * MIB);
  size_t caps[4];
  void *bufs[4];
  for (int i = 0; i < 4; i++)
    bufs[i] = take(&c, MIB, &caps[i]);
  for (int i = 0; i < 4; i++) {
    gd_cpu_bufcache_give(&c, bufs[i], caps[i]);
    ck_assert_uint_le(c.bytes, 3 * MIB);
  }
  ck_assert_uint_eq(c.n, 3); /* the oldest went */
  ck_assert_ptr_eq(c.blocks[0].ptr, bufs[1]);
  /* larger than the whole limit: freed, the others stay */
  size_t cap;
  void *big = take(&c, 4 * MIB, &cap);
  gd_cpu_bufcache_give(&c, big, cap);
  ck_assert_uint_eq(c.n, 3);
  gd_cpu_bufcache_free(&c);

  /* the block count: never more than GD_CPU_BUFCACHE_BLOCKS */
  gd_cpu_bufcache_init(&c, 1024 * MIB);
  for (int i = 0; i < GD_CPU_BUFCACHE_BLOCKS + 5; i++) {
    void *p = malloc(GD_CPU_BUFCACHE_MIN);
    ck_assert_ptr_nonnull(p);
    gd_cpu_bufcache_give(&c, p, GD_CPU_BUFCACHE_MIN);
  }
  ck_assert_uint_eq(c.n, GD_CPU_BUFCACHE_BLOCKS);
  ck_assert_uint_eq(c.bytes, GD_CPU_BUFCACHE_BLOCKS * GD_CPU_BUFCACHE_MIN);
  gd_cpu_bufcache_free(&c);
}
END_TEST

START_TEST(keeps_nothing_small_or_at_zero) {
  gd_cpu_bufcache c;
  gd_cpu_bufcache_init(&c, 64 * MIB);
  size_t cap;
  void *small = take(&c, GD_CPU_BUFCACHE_MIN - 1, &cap);
  gd_cpu_bufcache_give(&c, small, cap);
  ck_assert_uint_eq(c.n, 0);
  ck_assert_uint_eq(c.misses, 0); /* small takes are malloc's business, not counted */
  gd_cpu_bufcache_give(&c, NULL, 0);
  gd_cpu_bufcache_free(&c);

  gd_cpu_bufcache_init(&c, 0);
  void *p = take(&c, MIB, &cap);
  gd_cpu_bufcache_give(&c, p, cap);
  ck_assert_uint_eq(c.n, 0);
  ck_assert_uint_eq(c.bytes, 0);
  gd_cpu_bufcache_free(&c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("bufcache");
  TCase *tc = tcase_create("bufcache");
  tcase_add_test(tc, reuses_what_fits);
  tcase_add_test(tc, limits_hold);
  tcase_add_test(tc, keeps_nothing_small_or_at_zero);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
