/*
 * gd_session_timers.c - a session's one timer (see gd_session.h for the timeouts).
 */
#include "gd_session_internal.h"

#include "gd_clock.h"

/* The earliest timeout that applies now, and when it falls due (monotonic us):
 *   request: a message started arriving and has not finished within request_ms (not counting
 *            time paused for the backend);
 *   idle:    nothing in flight and nothing read for idle_ms;
 *   stalled: replies queued and not one byte of them written for request_ms (a client that
 *            stopped reading would otherwise hold its jobs' memory for ever);
 *   hold:    a result chunk in shared staging not all out gpu.staging_hold_ms after it arrived
 *            (not a close: its rest is copied and the staging given back). */
typedef enum {
  TIMEOUT_NONE, TIMEOUT_REQUEST, TIMEOUT_IDLE, TIMEOUT_STALLED, TIMEOUT_HOLD
} timeout_kind;

static void consider(timeout_kind *kind, uint64_t *due, timeout_kind k, uint64_t since,
                     uint64_t ms) {
  uint64_t at = since + ms * 1000u;
  if (*kind == TIMEOUT_NONE || at < *due) {
    *kind = k;
    *due = at;
  }
}

static timeout_kind next_timeout(const gd_session *s, uint64_t *due) {
  const gd_config *cfg = &s->d->cfg;
  timeout_kind kind = TIMEOUT_NONE;
  bool at_boundary = gd__session_at_boundary(s);
  uint64_t hold_since = 0;
  if (gd__session_shared_since(s, &hold_since))
    consider(&kind, due, TIMEOUT_HOLD, hold_since, cfg->gpu.staging_hold_ms);
  if (s->writes > 0 && cfg->request_ms)
    consider(&kind, due, TIMEOUT_STALLED, s->write_progress_us, cfg->request_ms);
  if (s->eof)
    return kind; /* nothing more can arrive; jobs in flight end by themselves */
  if (!at_boundary && !s->paused && cfg->request_ms)
    consider(&kind, due, TIMEOUT_REQUEST, s->msg_started_us, cfg->request_ms);
  if (at_boundary && s->in_flight == 0 && s->writes == 0 && cfg->idle_ms)
    consider(&kind, due, TIMEOUT_IDLE, s->last_activity_us, cfg->idle_ms);
  return kind;
}

static void on_timer(uv_timer_t *timer) {
  static const char *const why[] = {
      [TIMEOUT_REQUEST] = "request did not finish arriving within timeouts.request_ms",
      [TIMEOUT_IDLE] = "idle for timeouts.idle_ms",
      [TIMEOUT_STALLED] = "client read nothing of its replies for timeouts.request_ms"};
  gd_session *s = timer->data;
  uint64_t due = 0;
  /* libuv reports a write only when it is complete; a shrinking queue is progress too */
  size_t queued = uv_stream_get_write_queue_size(&s->h.stream);
  if (s->writes > 0 && queued != s->write_queue_seen) {
    s->write_queue_seen = queued;
    s->write_progress_us = gd_now_us();
  }
  timeout_kind kind = next_timeout(s, &due);
  if (kind == TIMEOUT_HOLD && gd_now_us() >= due) {
    gd__session_shared_expire(s); /* copies, gives staging back, kicks (may close) */
    if (s->closing)
      return;
  } else if (kind != TIMEOUT_NONE && gd_now_us() >= due) {
    gd_session_close(s, why[kind]);
    return;
  }
  gd__session_update_timer(s);
}

void gd__session_update_timer(gd_session *s) {
  uint64_t due = 0;
  if (next_timeout(s, &due) == TIMEOUT_NONE) {
    uv_timer_stop(&s->timer);
    return;
  }
  uint64_t now = gd_now_us();
  uint64_t left_ms = due <= now ? 0 : (due - now + 999u) / 1000u;
  uv_timer_start(&s->timer, on_timer, left_ms, 0); /* cannot fail on an initialised timer */
}
