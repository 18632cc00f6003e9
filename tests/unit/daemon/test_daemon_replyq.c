/*
 * The reply queue's stalled-reader clock (gd_replyq.h): write_progress_us moves on only when
 * the client took bytes, never because a write was queued. A reply bigger than the socket
 * buffers is queued to a peer that reads nothing; the look the timer takes must not count it as
 * progress (the first firing used to, so the stalled-reader timeout fired at twice
 * timeouts.request_ms). Once the peer reads, it must. And the batch (want_flush): replies queued
 * in one loop iteration wait for gd_replyq_flush and then leave together, in order, or are
 * dropped unwritten when the connection closes first.
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

/* ---- the batch: replies of one loop iteration leave in one write, in order ---------------- */

static int flush_asked;
static void on_want_flush(gd_replyq *bq) {
  (void)bq;
  flush_asked++;
}
static const gd_replyq_events batch_events = {on_queued, on_progress, on_failed, on_want_flush};

static void batch_setup(void) {
  setup();
  flush_asked = 0;
  gd_replyq_init(&q, (uv_stream_t *)&pipe_h, &stats, &hold_ms, &batch_events, 1);
}

static void batch_teardown(void) {
  teardown();
  gd_replyq_free(&q);
}

/* Queues reply i: 100 + i bytes of the value i. */
static void send_numbered(int i) {
  size_t len = 100 + (size_t)i;
  char *data = malloc(len);
  ck_assert_ptr_nonnull(data);
  memset(data, i, len);
  ck_assert_int_eq(gd_replyq_send(&q, data, len), 0);
}

START_TEST(batch_leaves_in_order_on_flush) {
  enum { N = 300 }; /* more than one write takes (256) */
  size_t total = 0;
  for (int i = 0; i < N; i++) {
    send_numbered(i);
    total += 100 + (size_t)i;
  }
  ck_assert_int_eq(flush_asked, 1); /* asked once, by the first reply */
  ck_assert_uint_eq(q.writes, N);
  ck_assert_uint_eq(gd_replyq_backlog(&q), total);
  ck_assert_uint_eq(peer_read_some(), 0); /* nothing written before the flush */
  gd_replyq_flush(&q);
  ck_assert_uint_eq(q.batch_n, 0);
  ck_assert_int_ge(uv_run(&loop, UV_RUN_NOWAIT), 0); /* the write callbacks */
  ck_assert_uint_eq(q.writes, 0);
  ck_assert_uint_eq(gd_replyq_backlog(&q), 0);
  ck_assert_uint_eq(stats.bytes_out, total);
  static unsigned char got[N * (100 + N)];
  size_t have = 0;
  ssize_t n;
  while (have < total && (n = recv(peer_fd, got + have, sizeof got - have, MSG_DONTWAIT)) > 0)
    have += (size_t)n;
  ck_assert_uint_eq(have, total);
  size_t at = 0;
  for (int i = 0; i < N; i++)
    for (size_t j = 0; j < 100 + (size_t)i; j++, at++)
      ck_assert_uint_eq(got[at], (unsigned char)i);
  send_numbered(7); /* a later iteration asks again */
  ck_assert_int_eq(flush_asked, 2);
}
END_TEST

START_TEST(batch_dropped_unwritten) {
  send_numbered(1);
  send_numbered(2);
  ck_assert_uint_eq(q.writes, 2);
  gd_replyq_drop(&q); /* the connection closes before the flush */
  ck_assert_uint_eq(q.writes, 0);
  ck_assert_uint_eq(q.batch_n, 0);
  ck_assert_uint_eq(gd_replyq_backlog(&q), 0);
  gd_replyq_flush(&q); /* nothing left: writes nothing */
  ck_assert_int_ge(uv_run(&loop, UV_RUN_NOWAIT), 0);
  ck_assert_uint_eq(peer_read_some(), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("replyq");
  TCase *tc = tcase_create("stalled reader");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, queued_write_is_not_progress);
  suite_add_tcase(s, tc);
  TCase *batch = tcase_create("batch");
  tcase_add_checked_fixture(batch, batch_setup, batch_teardown);
  tcase_add_test(batch, batch_leaves_in_order_on_flush);
  tcase_add_test(batch, batch_dropped_unwritten);
  suite_add_tcase(s, batch);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
