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
  if (!s->cur)
    return 0;
  const uint64_t *b = s->cur->job->operand_bytes;
  return b[GP_OPERAND_A] + b[GP_OPERAND_B] + b[GP_OPERAND_C];
}

static gd_timeout_kind next_timeout(gd_session *s, uint64_t *due) {
  const gd_net_limits *cfg = &s->nl->limits;
  gd_timeout_state st = {
      .at_boundary = gd_session_at_boundary(s), .paused = s->paused || s->waiting, .eof = s->eof,
      .in_flight = s->conn.calls.in_flight, .writes = s->conn.out.writes,
      .msg_started_us = s->msg_started_us, .last_activity_us = s->conn.last_activity_us,
      .write_progress_us = s->conn.out.write_progress_us,
      .idle_ms = cfg->idle_ms, .request_ms = cfg->request_ms,
      .hold_ms = cfg->staging_hold_ms, .msg_bytes = gp_decoder_message_bytes(s->dec),
      .payload_bytes = payload_bytes(s), .min_rate = cfg->min_receive_rate,
      .min_rate_bytes = cfg->min_rate_bytes, .rate_grace_ms = cfg->min_rate_grace_ms,
      .holds_room = s->cur != NULL || s->conn.resident.receiving,
      .others_waiting = atomic_load(&s->d->line_waiters) > 0,
      .stall_ms = cfg->hold_stall_ms, .now_us = gd_now_us()};
  st.holding = gd_replyq_hold_since(&s->conn.out, &st.hold_since_us);
  return gd_timeout_next(&st, due);
}

void gd_rpc_timer_tick(uv_timer_t *timer) {
  gd_session *s = gd_session_of(timer->data);
  if (s->wake) {
    gd_admission_retry(s);
    return;
  }
  if (s->waiting && gd_conn_peer_gone(&s->conn, gd_admission_needs(s))) {
    gd_conn_close(&s->conn, "client hung up while its request waited for admission");
    return;
  }
  uint64_t due = 0;
  gd_replyq_look_for_progress(&s->conn.out);
  gd_timeout_kind kind = next_timeout(s, &due);
  if (kind == GD_TIMEOUT_HOLD && gd_now_us() >= due) {
    gd_replyq_expire(&s->conn.out); /* copies, gives staging back, kicks (may close) */
    if (s->conn.closing)
      return;
  } else if (kind != GD_TIMEOUT_NONE && gd_now_us() >= due) {
    gd_conn_close(&s->conn, gd_timeout_why(kind));
    return;
  }
  gd_rpc_timer_update(s);
}

/* (Re)arms the timer for the earliest timeout that applies now, or stops it. It runs after every
 * change of the connection's state, so it also tells other loops whether the connection is idle
 * (the connection caps' choice of one to close: gd_session.c). */
void gd_rpc_timer_update(gd_session *s) {
  uint64_t due = 0;
  atomic_store_explicit(&s->idle_since_us, gd_session_idle(s) ? s->conn.last_activity_us | 1 : 0,
                        memory_order_relaxed);
  if (s->wake)
    return; /* a retry of admission is due now: its tick re-arms the timer */
  gd_timeout_kind kind = next_timeout(s, &due);
  uint64_t now = gd_now_us();
  if (s->waiting && (kind == GD_TIMEOUT_NONE || due > now + WAIT_LOOK_MS * 1000u)) {
    kind = GD_TIMEOUT_BLOCKING; /* any: gd_rpc_timer_tick looks at the client, then re-arms */
    due = now + WAIT_LOOK_MS * 1000u;
  }
  if (kind == GD_TIMEOUT_NONE) {
    uv_timer_stop(&s->conn.timer);
    return;
  }
  uint64_t left_ms = due <= now ? 0 : (due - now + 999u) / 1000u;
  /* cannot fail on an initialised timer */
  uv_timer_start(&s->conn.timer, gd_rpc_timer_tick, left_ms, 0);
}
