/*
 * A connection's timeout policy (gd_timeouts.h): which timeout applies in each state and when
 * it falls due.
 */
#include <check.h>
#include <stdlib.h>

#include "gd_timeouts.h"

static gd_timeout_state base(void) {
  gd_timeout_state st = {.at_boundary = true, .idle_ms = 1000, .request_ms = 500,
                         .hold_ms = 20, .last_activity_us = 1000000, .msg_started_us = 2000000,
                         .write_progress_us = 3000000, .hold_since_us = 4000000};
  return st;
}

START_TEST(idle_only_with_nothing_in_flight) {
  gd_timeout_state st = base();
  uint64_t due = 0;
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_IDLE);
  ck_assert_uint_eq(due, 1000000 + 1000 * 1000);
  st.in_flight = 1;
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_NONE);
  st.idle_ms = 0;
  st.in_flight = 0;
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_NONE); /* 0 disables */
}
END_TEST

/* A large request must keep up min_rate after the grace; a small one only has request_ms. */
START_TEST(slow_large_request) {
  gd_timeout_state st = base();
  st.at_boundary = false;
  st.request_ms = 0; /* only the rate applies */
  st.min_rate = 1000000;      /* 1 MB/s */
  st.min_rate_bytes = 10000000;
  st.rate_grace_ms = 2000;
  st.payload_bytes = 30000000;
  st.msg_bytes = 500000;      /* half a second's worth */
  uint64_t due = 0;
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_SLOW);
  ck_assert_uint_eq(due, 2000000 + 2000 * 1000 + 500 * 1000);
  st.msg_bytes = 3000000; /* more arrived: due later */
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_SLOW);
  ck_assert_uint_eq(due, 2000000 + 2000 * 1000 + 3000 * 1000);
  st.paused = true; /* waiting for admission or the backend is not the client's */
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_NONE);
  st.paused = false;
  st.payload_bytes = 9999999; /* under min_rate_bytes: not held to the rate */
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_NONE);
  st.payload_bytes = 30000000;
  st.min_rate = 0; /* 0 disables */
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_NONE);
  ck_assert_str_ne(gd_timeout_why(GD_TIMEOUT_SLOW), gd_timeout_why(GD_TIMEOUT_REQUEST));
}
END_TEST

/* A request holding room whose bytes stopped: due stall_ms after its last byte while others
 * wait; nobody waiting, it is only looked at again stall_ms from now. */
START_TEST(blocking_holder_only_while_others_wait) {
  gd_timeout_state st = base();
  st.at_boundary = false;
  st.request_ms = 0; /* only blocking applies */
  st.holds_room = true;
  st.stall_ms = 300;
  st.now_us = 5000000;
  st.others_waiting = true;
  uint64_t due = 0;
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_BLOCKING);
  ck_assert_uint_eq(due, 1000000 + 300 * 1000); /* last_activity + stall: due already */
  st.others_waiting = false;
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_BLOCKING);
  ck_assert_uint_eq(due, 5000000 + 300 * 1000); /* a look later, not a close now */
  st.paused = true; /* the backend's pause is not the client's stall */
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_NONE);
  st.paused = false;
  st.holds_room = false; /* a refused request being skipped holds nothing */
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_NONE);
  st.holds_room = true;
  st.stall_ms = 0; /* 0 disables */
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_NONE);
  ck_assert_str_ne(gd_timeout_why(GD_TIMEOUT_BLOCKING), gd_timeout_why(GD_TIMEOUT_REQUEST));
}
END_TEST

START_TEST(request_stops_counting_while_paused) {
  gd_timeout_state st = base();
  st.at_boundary = false;
  uint64_t due = 0;
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_REQUEST);
  ck_assert_uint_eq(due, 2000000 + 500 * 1000);
  st.paused = true; /* waiting for the backend is not a stalled client */
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_NONE);
}
END_TEST

START_TEST(stalled_reader_and_hold_apply_after_eof) {
  gd_timeout_state st = base();
  st.eof = true;
  st.writes = 2;
  uint64_t due = 0;
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_STALLED);
  ck_assert_uint_eq(due, 3000000 + 500 * 1000);
  st.holding = true; /* 4 s + 20 ms is later than 3 s + 500 ms */
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_STALLED);
  st.hold_since_us = 3000000;
  ck_assert_int_eq(gd_timeout_next(&st, &due), GD_TIMEOUT_HOLD);
  ck_assert_uint_eq(due, 3000000 + 20 * 1000);
}
END_TEST

START_TEST(every_close_has_a_reason) {
  ck_assert_ptr_nonnull(gd_timeout_why(GD_TIMEOUT_REQUEST));
  ck_assert_str_ne(gd_timeout_why(GD_TIMEOUT_IDLE), gd_timeout_why(GD_TIMEOUT_STALLED));
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_timeouts");
  TCase *tc = tcase_create("timeouts");
  tcase_add_test(tc, idle_only_with_nothing_in_flight);
  tcase_add_test(tc, request_stops_counting_while_paused);
  tcase_add_test(tc, slow_large_request);
  tcase_add_test(tc, blocking_holder_only_while_others_wait);
  tcase_add_test(tc, stalled_reader_and_hold_apply_after_eof);
  tcase_add_test(tc, every_close_has_a_reason);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
