/*
 * gd_rpc_timer.c - a connection's one timer (see gd_rpc_timer.h): the timeout that applies now
 * (the policy: gd_timeouts.c), a waiting request's retry of admission, and its look whether its
 * client hung up.
 */
#include "gd_rpc_timer.h"

#include "gd_admission.h"
#include "gd_clock.h"
#include "gd_netloop.h"
#include "gd_timeouts.h"

/* How often a connection waiting for admission (not read meanwhile) looks whether its client
 * hung up: one that did must not stay in line, nor stay counted. */
#define WAIT_LOOK_MS 200

/* The payload bytes of the gemm being read (0 for anything else): what makes it large. */
static uint64_t payload_bytes(const gd_session *s) {
  gd_session_msg *m = gd_session_msg_of(s);
  if (!m->cur)
    return 0;
  const uint64_t *b = m->cur->job->operand_bytes;
  return b[GP_OPERAND_A] + b[GP_OPERAND_B] + b[GP_OPERAND_C];
}

static gd_timeout_kind next_timeout(gd_session *s, uint64_t *due) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_conn *c = gd_session_conn(s);
  const gd_net_limits *cfg = &gd_session_loop(s)->limits;
  gd_timeout_state st = {
      .at_boundary = gd_session_at_boundary(s),
      .paused = m->paused || gd_session_wait_of(s)->waiting, .eof = m->eof,
      .in_flight = gd_conn_calls(c)->in_flight, .writes = gd_conn_out(c)->writes,
      .msg_started_us = m->msg_started_us, .last_activity_us = gd_conn_last_activity(c),
      .write_progress_us = gd_conn_out(c)->write_progress_us,
      .idle_ms = cfg->idle_ms, .request_ms = cfg->request_ms,
      .hold_ms = cfg->staging_hold_ms, .msg_bytes = gp_decoder_message_bytes(gd_session_decoder(s)),
      .payload_bytes = payload_bytes(s), .min_rate = cfg->min_receive_rate,
      .min_rate_bytes = cfg->min_rate_bytes, .rate_grace_ms = cfg->min_rate_grace_ms,
      .holds_room = m->cur != NULL || gd_conn_resident(c)->receiving,
      .others_waiting = atomic_load(&gd_session_server(s)->line_waiters) > 0,
      .stall_ms = cfg->hold_stall_ms, .now_us = gd_now_us()};
  st.holding = gd_replyq_hold_since(gd_conn_out(c), &st.hold_since_us);
  return gd_timeout_next(&st, due);
}

void gd_rpc_timer_tick(uv_timer_t *timer) {
  gd_session *s = gd_session_of(timer->data);
  gd_conn *c = gd_session_conn(s);
  gd_session_wait *w = gd_session_wait_of(s);
  if (w->wake) {
    gd_admission_retry(s);
    return;
  }
  if (w->waiting && gd_conn_peer_gone(c, gd_admission_needs(s))) {
    gd_conn_close(c, "client hung up while its request waited for admission");
    return;
  }
  uint64_t due = 0;
  gd_replyq_look_for_progress(gd_conn_out(c));
  gd_timeout_kind kind = next_timeout(s, &due);
  if (kind == GD_TIMEOUT_HOLD && gd_now_us() >= due) {
    gd_replyq_expire(gd_conn_out(c)); /* copies, gives staging back, kicks (may close) */
    if (gd_conn_closing(c))
      return;
  } else if (kind != GD_TIMEOUT_NONE && gd_now_us() >= due) {
    gd_conn_close(c, gd_timeout_why(kind));
    return;
  }
  gd_rpc_timer_update(s);
}

/* (Re)arms the timer for the earliest timeout that applies now, or stops it. It runs after every
 * change of the connection's state, so it also tells other loops whether the connection is idle
 * (the connection caps' choice of one to close: gd_sessions.c). */
void gd_rpc_timer_update(gd_session *s) {
  gd_conn *c = gd_session_conn(s);
  gd_session_wait *w = gd_session_wait_of(s);
  uint64_t due = 0;
  gd_session_set_idle_since(s, gd_session_idle(s) ? gd_conn_last_activity(c) | 1 : 0);
  if (w->wake)
    return; /* a retry of admission is due now: its tick re-arms the timer */
  gd_timeout_kind kind = next_timeout(s, &due);
  uint64_t now = gd_now_us();
  if (w->waiting && (kind == GD_TIMEOUT_NONE || due > now + WAIT_LOOK_MS * 1000u)) {
    kind = GD_TIMEOUT_BLOCKING; /* any: gd_rpc_timer_tick looks at the client, then re-arms */
    due = now + WAIT_LOOK_MS * 1000u;
  }
  if (kind == GD_TIMEOUT_NONE) {
    uv_timer_stop(gd_conn_timer(c));
    return;
  }
  uint64_t left_ms = due <= now ? 0 : (due - now + 999u) / 1000u;
  /* cannot fail on an initialised timer */
  uv_timer_start(gd_conn_timer(c), gd_rpc_timer_tick, left_ms, 0);
}
