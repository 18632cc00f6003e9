/*
 * The reply queue's stalled-reader clock (gd_replyq.h): write_progress_us moves on only when
 * the client took bytes, never because a write was queued. A reply bigger than the socket
 * buffers is queued to a peer that reads nothing; the look the timer takes must not count it as
 * progress (the first firing used to, so the stalled-reader timeout fired at twice
 * timeouts.request_ms). Once the peer reads, it must.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "gd_replyq.h"

#define REPLY_BYTES (8u << 20) /* far more than a socketpair buffers */

static void on_queued(gd_replyq *q) { (void)q; }
static void on_progress(gd_replyq *q) { (void)q; }
static void on_failed(gd_replyq *q, const char *why) {
  (void)q;
  ck_abort_msg("reply queue failed: %s", why);
}
static const gd_replyq_events events = {on_queued, on_progress, on_failed, NULL};

static uv_loop_t loop;
static uv_pipe_t pipe_h;
static int peer_fd;
static gd_stats stats;
static gd_replyq q;
static const uint64_t hold_ms = 0;

static void setup(void) {
  int fds[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  peer_fd = fds[1];
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  ck_assert_int_eq(uv_pipe_init(&loop, &pipe_h, 0), 0);
  ck_assert_int_eq(uv_pipe_open(&pipe_h, fds[0]), 0);
  gd_stats_init(&stats);
  gd_replyq_init(&q, (uv_stream_t *)&pipe_h, &stats, &hold_ms, &events, 1);
}

static void teardown(void) {
  gd_replyq_drop(&q);
  uv_close((uv_handle_t *)&pipe_h, NULL);
  ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0); /* the cancelled write's callback */
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  close(peer_fd);
}

/* Reads what the peer can without blocking. */
static size_t peer_read_some(void) {
  static char buf[1 << 16];
  size_t total = 0;
  ssize_t n;
  while ((n = recv(peer_fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
    total += (size_t)n;
  return total;
}

START_TEST(queued_write_is_not_progress) {
  char *reply = malloc(REPLY_BYTES);
  ck_assert_ptr_nonnull(reply);
  memset(reply, 0x5a, REPLY_BYTES);
  ck_assert_int_eq(gd_replyq_send(&q, reply, REPLY_BYTES), 0);
  ck_assert_uint_eq(q.writes, 1);
  ck_assert_uint_gt(uv_stream_get_write_queue_size((uv_stream_t *)&pipe_h), 0);
  q.write_progress_us = 1; /* as if queued long ago */
  gd_replyq_look_for_progress(&q);
  ck_assert_uint_eq(q.write_progress_us, 1); /* the peer read nothing */
  gd_replyq_look_for_progress(&q);
  ck_assert_uint_eq(q.write_progress_us, 1);
  /* the peer reads: libuv writes more on the next loop turn, and that is progress */
  ck_assert_uint_gt(peer_read_some(), 0);
  ck_assert_int_ge(uv_run(&loop, UV_RUN_NOWAIT), 0);
  gd_replyq_look_for_progress(&q);
  ck_assert_uint_gt(q.write_progress_us, 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("replyq");
  TCase *tc = tcase_create("stalled reader");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, queued_write_is_not_progress);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
