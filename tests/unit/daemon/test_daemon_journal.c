/* The journal entry of a log line (gd_log_journal_build) and when the journal is used
 * (gd_log_journal_wanted). The daemon_journal integration test sends entries to a fake journal
 * socket. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gd_log_journal.h"

static gd_log_journal_entry entry;

/* The field KEY= of the entry's n fields, or NULL. */
static const char *field(size_t n, const char *key) {
  size_t klen = strlen(key);
  static char value[GD_LOG_JOURNAL_FIELD_MAX];
  for (size_t i = 0; i < n; i++) {
    const char *text = entry.iov[i].iov_base;
    size_t len = entry.iov[i].iov_len;
    if (len > klen && memcmp(text, key, klen) == 0 && text[klen] == '=') {
      snprintf(value, sizeof value, "%.*s", (int)(len - klen - 1), text + klen + 1);
      return value;
    }
  }
  return NULL;
}

START_TEST(plain_entry) {
  size_t n = gd_log_journal_build(GD_LOG_WARN, NULL, "disk on fire", &entry);
  ck_assert_uint_eq(n, 3);
  ck_assert_str_eq(field(n, "MESSAGE"), "disk on fire");
  ck_assert_str_eq(field(n, "PRIORITY"), "4");
  ck_assert_str_eq(field(n, "SYSLOG_IDENTIFIER"), "gemmd");
  ck_assert_ptr_null(field(n, "GEMMD_CODE"));
  n = gd_log_journal_build(GD_LOG_ERROR, NULL, "x", &entry);
  ck_assert_str_eq(field(n, "PRIORITY"), "3");
  n = gd_log_journal_build(GD_LOG_INFO, NULL, "x", &entry);
  ck_assert_str_eq(field(n, "PRIORITY"), "6");
  n = gd_log_journal_build(GD_LOG_DEBUG, NULL, "x", &entry);
  ck_assert_str_eq(field(n, "PRIORITY"), "7");
}
END_TEST

START_TEST(structured_fields) {
  gd_log_ctx ctx = {.conn = 12, .msgid = 4294967295u, .has_msgid = true, .peer = "tcp 1.2.3.4:5",
                    .device = "cuda:3", .code = "DEADLINE_EXCEEDED", .duration_us = 1234567,
                    .has_duration = true};
  size_t n = gd_log_journal_build(GD_LOG_INFO, &ctx, "late", &entry);
  ck_assert_uint_eq(n, 9);
  ck_assert_str_eq(field(n, "GEMMD_CONN"), "12");
  ck_assert_str_eq(field(n, "GEMMD_REQUEST_ID"), "12/4294967295");
  ck_assert_str_eq(field(n, "GEMMD_PEER"), "tcp 1.2.3.4:5");
  ck_assert_str_eq(field(n, "GEMMD_DEVICE"), "cuda:3");
  ck_assert_str_eq(field(n, "GEMMD_CODE"), "DEADLINE_EXCEEDED");
  ck_assert_str_eq(field(n, "GEMMD_DURATION_US"), "1234567");
  /* absent parts stay absent: a zero duration is a duration only when has_duration says so */
  gd_log_ctx some = {.device = "cuda:0"};
  n = gd_log_journal_build(GD_LOG_ERROR, &some, "gone", &entry);
  ck_assert_uint_eq(n, 4);
  ck_assert_str_eq(field(n, "GEMMD_DEVICE"), "cuda:0");
  ck_assert_ptr_null(field(n, "GEMMD_REQUEST_ID"));
  ck_assert_ptr_null(field(n, "GEMMD_DURATION_US"));
}
END_TEST

START_TEST(values_cut_and_one_line) {
  char long_msg[4000];
  memset(long_msg, 'm', sizeof long_msg - 1);
  long_msg[sizeof long_msg - 1] = '\0';
  gd_log_ctx ctx = {.peer = "evil\npeer\nPRIORITY=0"};
  size_t n = gd_log_journal_build(GD_LOG_INFO, &ctx, long_msg, &entry);
  ck_assert_uint_eq(entry.iov[0].iov_len, GD_LOG_JOURNAL_FIELD_MAX - 1);
  ck_assert_str_eq(field(n, "GEMMD_PEER"), "evil peer PRIORITY=0");
  ck_assert_str_eq(field(n, "PRIORITY"), "6");
}
END_TEST

START_TEST(when_the_journal_is_used) {
  ck_assert(gd_log_journal_wanted(GD_LOG_TARGET_JOURNAL));
  ck_assert(!gd_log_journal_wanted(GD_LOG_TARGET_STDERR));
  struct stat st;
  ck_assert_int_eq(fstat(STDERR_FILENO, &st), 0);
  char js[64];
  snprintf(js, sizeof js, "%llu:%llu", (unsigned long long)st.st_dev,
           (unsigned long long)st.st_ino);
  setenv("JOURNAL_STREAM", js, 1);
  ck_assert(gd_log_journal_wanted(GD_LOG_TARGET_AUTO));
  ck_assert(!gd_log_journal_wanted(GD_LOG_TARGET_STDERR));
  /* stderr redirected away from the stream systemd gave: lines, not the journal */
  snprintf(js, sizeof js, "%llu:%llu", (unsigned long long)st.st_dev,
           (unsigned long long)st.st_ino + 1);
  setenv("JOURNAL_STREAM", js, 1);
  ck_assert(!gd_log_journal_wanted(GD_LOG_TARGET_AUTO));
  setenv("JOURNAL_STREAM", "garbage", 1);
  ck_assert(!gd_log_journal_wanted(GD_LOG_TARGET_AUTO));
  unsetenv("JOURNAL_STREAM");
  ck_assert(!gd_log_journal_wanted(GD_LOG_TARGET_AUTO));
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_journal");
  TCase *tc = tcase_create("journal");
  tcase_add_test(tc, plain_entry);
  tcase_add_test(tc, structured_fields);
  tcase_add_test(tc, values_cut_and_one_line);
  tcase_add_test(tc, when_the_journal_is_used);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
