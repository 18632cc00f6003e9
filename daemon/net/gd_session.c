/*
 * gd_session.c - one connection's state and what every layer of its protocol does with it (see
 * gd_session.h): error replies, the lock over what loops share, pausing reading, dropping or
 * refusing the request being read, whether it is idle.
 */
#include "gd_session.h"

#include <assert.h>
#include <stddef.h>
#include <stdlib.h>

#include "gd_clock.h"
#include "gd_list.h"
#include "gd_log.h"
#include "gd_netloop.h"
#include "gp_encode.h"

struct gd_session {
  gd_conn conn;              /* first: the transport's callbacks get &conn */
  gd_server *d;
  struct gd_netloop *nl;     /* the loop thread it lives on */
  const gd_session_hooks *hooks; /* the protocol layer's (gd_rpc_start) */
  struct gd_session *prev, *next;           /* its loop's connections */
  struct gd_session *all_prev, *all_next;   /* every loop's, under the peers lock */
  _Atomic uint64_t idle_since_us; /* see gd_session_idle_since */
  bool peer_counted;         /* counted in the server's gd_peers */
  gp_decoder *dec;
  gd_session_msg msg;
  gd_session_auth auth;
  gd_session_wait wait;
};

gd_session *gd_session_new(gd_server *d, gd_netloop *nl, const gd_conn_events *events) {
  gd_session *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  gd_peers_lock(&d->peers);
  uint64_t id = ++d->next_session_id;
  gd_peers_unlock(&d->peers);
  s->dec = gp_decoder_new(GP_ROLE_SERVER, &nl->limits.proto);
  if (!s->dec || gd_conn_init(&s->conn, id, d->sched, nl->stats, &nl->limits.staging_hold_ms,
                              events) != 0) {
    gp_decoder_free(s->dec);
    free(s);
    return NULL;
  }
  s->d = d;
  s->nl = nl;
  gd_resident_attach(gd_conn_resident(&s->conn), &d->resident, d->sched);
  return s;
}

void gd_session_free(gd_session *s) {
  gp_decoder_free(s->dec);
  free(s);
}

gd_conn *gd_session_conn(const gd_session *s) { return (gd_conn *)&s->conn; }
gd_server *gd_session_server(const gd_session *s) { return s->d; }
gd_netloop *gd_session_loop(const gd_session *s) { return s->nl; }
gp_decoder *gd_session_decoder(const gd_session *s) { return s->dec; }
gd_session_msg *gd_session_msg_of(const gd_session *s) { return (gd_session_msg *)&s->msg; }
gd_session_auth *gd_session_auth_of(const gd_session *s) { return (gd_session_auth *)&s->auth; }
gd_session_wait *gd_session_wait_of(const gd_session *s) { return (gd_session_wait *)&s->wait; }
const gd_session_hooks *gd_session_hooks_of(const gd_session *s) { return s->hooks; }
void gd_session_set_hooks(gd_session *s, const gd_session_hooks *hooks) { s->hooks = hooks; }

bool gd_session_peer_counted(const gd_session *s) { return s->peer_counted; }
void gd_session_set_peer_counted(gd_session *s, bool counted) { s->peer_counted = counted; }

uint64_t gd_session_idle_since(const gd_session *s) {
  return atomic_load_explicit(&((gd_session *)s)->idle_since_us, memory_order_relaxed);
}

void gd_session_set_idle_since(gd_session *s, uint64_t us) {
  atomic_store_explicit(&s->idle_since_us, us, memory_order_relaxed);
}

/* Puts s on its loop's list of sessions and counts it open. */
void gd_session_link(gd_session *s) {
  gd_netloop *nl = s->nl;
  s->next = nl->sessions;
  if (nl->sessions)
    nl->sessions->prev = s;
  nl->sessions = s;
  gd_peers_lock(&nl->d->peers);
  nl->d->connections++;
  s->all_next = nl->d->all_sessions;
  if (s->all_next)
    s->all_next->all_prev = s;
  nl->d->all_sessions = s;
  gd_peers_unlock(&nl->d->peers);
  nl->stats->connections_total++;
}

/* Off the list of every loop's connections (under the peers lock); every session that closes
 * was linked first (start_session in gd_sessions.c). */
void gd_session_unlink_all(gd_session *s) {
  gd_server *d = s->d;
  assert(s->all_prev || d->all_sessions == s);
  GD_LIST_UNLINK_AT(d->all_sessions, s, all_prev, all_next);
  s->all_prev = s->all_next = NULL;
}

void gd_session_unlink_loop(gd_session *s) {
  gd_netloop *nl = s->nl;
  if (s->prev)
    s->prev->next = s->next;
  else if (nl->sessions == s)
    nl->sessions = s->next;
  if (s->next)
    s->next->prev = s->prev;
}

gd_session *gd_session_next(const gd_session *s) { return s->next; }
gd_session *gd_session_all_next(const gd_session *s) { return s->all_next; }

gd_session *gd_session_of_calls(gd_calls *l) {
  return (gd_session *)((char *)l - offsetof(gd_session, conn.calls));
}

gd_session *gd_session_of(gd_conn *c) { return (gd_session *)c; /* conn is first */ }

void gd_session_send(gd_session *s, msgpack_sbuffer *sbuf) {
  size_t len = sbuf->size;
  gd_replyq_send(gd_conn_out(&s->conn), msgpack_sbuffer_release(sbuf), len);
}

/* Counts (under method) and logs an error reply to msgid and sends it (unless the connection
 * is closing). */
/* An error reply, counted, without a log line of its own. */
void gd_session_error_quiet(gd_session *s, gp_method method, uint32_t msgid, int code,
                            const char *message) {
  gd_stats_error(s->nl->stats, code);
  gd_stats_reply(s->nl->stats, method, code);
  if (gd_conn_closing(&s->conn))
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
  const gd_conn *c = &s->conn;
  gd_log_ctx ctx = {.conn = gd_conn_id(c), .msgid = msgid, .has_msgid = true,
                    .peer = gd_conn_peer(c), .code = gp_code_name(code)};
  gd_logx(GD_LOG_INFO, &ctx, "conn %llu: msgid %u: %s: %s", (unsigned long long)gd_conn_id(c),
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
  return gp_decoder_message_bytes(s->dec) == 0 && !s->msg.in_request;
}

/* The backend accepted the bytes but wants no more for now (GPU: waiting for device memory or
 * a staging buffer). That wait is the daemon's, not a stalled client's: timeouts.request_ms
 * stops counting until resume_reading. */
void gd_session_pause(gd_session *s) {
  if (s->msg.paused)
    return;
  s->msg.paused = true;
  s->msg.paused_since_us = gd_now_us();
}

void gd_session_resume(gd_session *s) {
  if (!s->msg.paused)
    return;
  s->msg.paused = false;
  s->msg.msg_started_us += gd_now_us() - s->msg.paused_since_us;
}

/* Bytes read into the current job's window and not decoded yet are all payload of the current
 * message: let the decoder count them off now, before the job and its memory go. */
static void consume_window_bytes(gd_session *s) {
  gd_conn *c = &s->conn;
  while (gd_conn_pending_in_window(c) && gd_conn_pending_len(c) > 0) {
    gp_event ev;
    size_t used = gp_decoder_feed(s->dec, gd_conn_pending(c), gd_conn_pending_len(c), &ev);
    gd_conn_consumed(c, used);
    if (ev.type == GP_EV_NEED_MORE || ev.type == GP_EV_FATAL || ev.type == GP_EV_MESSAGE_END)
      break;
  }
  gd_conn_leave_window(c);
}

/* Drops the request being read before it was submitted, with any pause it asked for. The caller
 * makes the decoder skip the rest of the message (or it already does). No-op without one. */
void gd_session_drop_current(gd_session *s) {
  gd_call *call = s->msg.cur;
  if (gd_conn_resident(&s->conn)->receiving) {
    gd_session_lock_shared(s);
    gd_resident_abort(gd_conn_resident(&s->conn)); /* a put cut short (no call of its own) */
    gd_session_unlock_shared(s);
  }
  if (!call)
    return;
  consume_window_bytes(s);
  s->msg.cur = NULL;
  s->msg.paused = false;
  s->msg.feed.left = 0;
  gd_call_abandon(call);
}

/* The current gemm is answered with an error now: skip the rest of it, drop its call. */
void gd_session_refuse_current(gd_session *s, uint32_t msgid, int code, const char *message) {
  gp_decoder_skip_message(s->dec); /* first: window bytes are then skipped too */
  gd_session_drop_current(s);
  s->msg.in_request = false;
  gd_session_error(s, msgid, code, message);
}

bool gd_session_idle(const gd_session *s) {
  const gd_conn *c = &s->conn;
  return !gd_conn_closing(c) && gd_session_at_boundary(s) && !s->wait.waiting &&
         gd_conn_pending_len(c) == 0 && gd_conn_calls(c)->in_flight == 0 &&
         gd_conn_out(c)->writes == 0 && gd_replyq_backlog(gd_conn_out(c)) == 0;
}
