/*
 * gd_session.c - one connection's state and what every layer of its protocol does with it (see
 * gd_session.h): error replies, the lock over what loops share, pausing reading, dropping or
 * refusing the request being read, whether it is idle.
 */
#include "gd_session.h"

#include <assert.h>

#include "gd_clock.h"
#include "gd_log.h"
#include "gd_netloop.h"
#include "gp_encode.h"

gd_session *gd_session_of(gd_conn *c) { return (gd_session *)c; /* conn is first */ }

void gd_session_send(gd_session *s, msgpack_sbuffer *sbuf) {
  size_t len = sbuf->size;
  gd_replyq_send(&s->conn.out, msgpack_sbuffer_release(sbuf), len);
}

/* Counts (under method) and logs an error reply to msgid and sends it (unless the connection
 * is closing). */
/* An error reply, counted, without a log line of its own. */
void gd_session_error_quiet(gd_session *s, gp_method method, uint32_t msgid, int code,
                            const char *message) {
  gd_stats_error(s->nl->stats, code);
  gd_stats_reply(s->nl->stats, method, code);
  if (s->conn.closing)
    return;
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  if (gp_encode_error_response(&sbuf, msgid, code, message) != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    gd_conn_close(&s->conn, "out of memory encoding an error reply");
    return;
  }
  gd_session_send(s, &sbuf);
}

void gd_session_error_for(gd_session *s, gp_method method, uint32_t msgid, int code,
                          const char *message) {
  gd_log_ctx ctx = {.conn = s->conn.id, .msgid = msgid, .has_msgid = true, .peer = s->conn.peer,
                    .code = gp_code_name(code)};
  gd_logx(GD_LOG_INFO, &ctx, "conn %llu: msgid %u: %s: %s", (unsigned long long)s->conn.id,
          (unsigned)msgid, gp_code_name(code), message);
  gd_session_error_quiet(s, method, msgid, code, message);
}

/* An error reply to a gemm request. */
void gd_session_error(gd_session *s, uint32_t msgid, int code, const char *message) {
  gd_session_error_for(s, GP_METHOD_GEMM, msgid, code, message);
}

void gd_session_lock_shared(const gd_session *s) { gd_netsched_lock(s->d->sched); }

void gd_session_unlock_shared(const gd_session *s) { gd_netsched_unlock(s->d->sched); }

bool gd_session_at_boundary(const gd_session *s) {
  return gp_decoder_message_bytes(s->dec) == 0 && !s->in_request;
}

/* The backend accepted the bytes but wants no more for now (GPU: waiting for device memory or
 * a staging buffer). That wait is the daemon's, not a stalled client's: timeouts.request_ms
 * stops counting until resume_reading. */
void gd_session_pause(gd_session *s) {
  if (s->paused)
    return;
  s->paused = true;
  s->paused_since_us = gd_now_us();
}

void gd_session_resume(gd_session *s) {
  if (!s->paused)
    return;
  s->paused = false;
  s->msg_started_us += gd_now_us() - s->paused_since_us;
}

/* Bytes read into the current job's window and not decoded yet are all payload of the current
 * message: let the decoder count them off now, before the job and its memory go. */
static void consume_window_bytes(gd_session *s) {
  gd_conn *c = &s->conn;
  while (c->pending_in_window && c->pending_len > 0) {
    gp_event ev;
    size_t used = gp_decoder_feed(s->dec, c->pending, c->pending_len, &ev);
    gd_conn_consumed(c, used);
    if (ev.type == GP_EV_NEED_MORE || ev.type == GP_EV_FATAL || ev.type == GP_EV_MESSAGE_END)
      break;
  }
  gd_conn_leave_window(c);
}

/* Drops the request being read before it was submitted, with any pause it asked for. The caller
 * makes the decoder skip the rest of the message (or it already does). No-op without one. */
void gd_session_drop_current(gd_session *s) {
  gd_call *call = s->cur;
  if (s->conn.resident.receiving) {
    gd_session_lock_shared(s);
    gd_resident_abort(&s->conn.resident); /* a put cut short (no call of its own) */
    gd_session_unlock_shared(s);
  }
  if (!call)
    return;
  consume_window_bytes(s);
  s->cur = NULL;
  s->paused = false;
  s->feed.left = 0;
  gd_call_abandon(call);
}

/* The current gemm is answered with an error now: skip the rest of it, drop its call. */
void gd_session_refuse_current(gd_session *s, uint32_t msgid, int code, const char *message) {
  gp_decoder_skip_message(s->dec); /* first: window bytes are then skipped too */
  gd_session_drop_current(s);
  s->in_request = false;
  gd_session_error(s, msgid, code, message);
}

bool gd_session_idle(const gd_session *s) {
  const gd_conn *c = &s->conn;
  return !c->closing && gd_session_at_boundary(s) && !s->waiting && c->pending_len == 0 &&
         c->calls.in_flight == 0 && c->out.writes == 0 && gd_replyq_backlog(&c->out) == 0;
}
