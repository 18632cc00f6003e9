/*
 * gd_session.c - connections as the daemon sees them (see gd_session.h): accepting (or
 * refusing) one, the daemon's list of them, closing, and the functions over all of them. Each
 * connection is a transport (gd_conn.h) driven by the protocol layer (gd_rpc.h).
 */
#include "gd_session.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "gd_log.h"
#include "gd_rpc.h"

static void on_closing(gd_conn *c, const char *why) {
  gd_session *s = (gd_session *)c;
  assert(s->d->connections > 0);
  s->d->connections--;
  s->cur = NULL;
  gd_info("conn %llu: %s: %s (%u jobs in flight)", (unsigned long long)c->id, c->peer, why,
          (unsigned)c->calls.in_flight);
}

static void unlink_session(gd_server *d, gd_session *s) {
  if (s->prev)
    s->prev->next = s->next;
  else if (d->sessions == s)
    d->sessions = s->next;
  if (s->next)
    s->next->prev = s->prev;
}

static void free_session(gd_session *s) {
  gp_decoder_free(s->dec);
  free(s);
}

static void on_closed(gd_conn *c) {
  gd_session *s = (gd_session *)c;
  unlink_session(s->d, s);
  free_session(s);
}

static const gd_conn_events conn_events = {gd_rpc_window, gd_rpc_data,  gd_rpc_eof,
                                           gd_rpc_kick,   gd_rpc_queued, on_closing,
                                           on_closed};

void gd_session_close(gd_session *s, const char *why) { gd_conn_close(&s->conn, why); }

static void on_refused_close(uv_handle_t *handle) { free(handle); }

/* Accept and close at once: the client sees EOF instead of hanging in the backlog. */
static int refuse(gd_server *d, uv_stream_t *server, const char *why) {
  uv_stream_t *tmp = malloc(server->type == UV_TCP ? sizeof(uv_tcp_t) : sizeof(uv_pipe_t));
  if (!tmp)
    return UV_ENOMEM;
  int rc = server->type == UV_TCP ? uv_tcp_init(d->loop, (uv_tcp_t *)tmp)
                                  : uv_pipe_init(d->loop, (uv_pipe_t *)tmp, 0);
  if (rc != 0) {
    free(tmp);
    return rc;
  }
  rc = uv_accept(server, tmp);
  uv_close((uv_handle_t *)tmp, on_refused_close);
  d->stats->connections_refused++;
  gd_warn("connection refused: %s", why);
  return rc;
}

static gd_session *new_session(gd_server *d) {
  gd_session *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->dec = gp_decoder_new(GP_ROLE_SERVER, &d->limits.proto);
  if (!s->dec || gd_conn_init(&s->conn, d->next_session_id + 1, d->sched, d->stats,
                              &d->limits.staging_hold_ms, &conn_events) != 0) {
    gp_decoder_free(s->dec);
    free(s);
    return NULL;
  }
  s->d = d;
  return s;
}

/* Puts s on the daemon's list of sessions and counts it open. */
static void link_session(gd_server *d, gd_session *s) {
  d->next_session_id++;
  s->next = d->sessions;
  if (d->sessions)
    d->sessions->prev = s;
  d->sessions = s;
  d->connections++;
  d->stats->connections_total++;
}

int gd_session_accept(gd_server *d, uv_stream_t *server) {
  if (d->draining)
    return refuse(d, server, "shutting down");
  if (d->connections >= d->limits.max_connections)
    return refuse(d, server, "limits.max_connections reached");
  gd_session *s = new_session(d);
  if (!s)
    return refuse(d, server, "out of memory");
  int rc = gd_conn_accept(&s->conn, d->loop, server);
  if (rc != 0 && s->conn.open_handles == 0) {
    gd_conn_free(&s->conn);
    free_session(s);
    return rc;
  }
  /* from here the session is closed like any other, through its close callbacks */
  link_session(d, s);
  if (rc != 0) {
    char why[128];
    snprintf(why, sizeof why, "accept failed: %s", uv_strerror(rc));
    gd_conn_close(&s->conn, why);
    return 0;
  }
  gd_info("conn %llu: %s: open (%zu connections)", (unsigned long long)s->conn.id, s->conn.peer,
          d->connections);
  gd_rpc_start(s, server->type == UV_TCP);
  return 0;
}

/* ---- all sessions -------------------------------------------------------- */

void gd_sessions_apply_limits(gd_server *d) {
  for (gd_session *s = d->sessions; s; s = s->next)
    if (!s->conn.closing)
      gd_rpc_apply_limits(s);
}

size_t gd_sessions_fail_pending(gd_server *d, const char *why) {
  size_t answered = 0;
  for (gd_session *s = d->sessions; s; s = s->next)
    if (!s->conn.closing)
      answered += gd_rpc_fail_pending(s, why);
  return answered;
}

uint64_t gd_sessions_write_backlog(const gd_server *d) {
  uint64_t total = 0;
  for (const gd_session *s = d->sessions; s; s = s->next)
    if (!s->conn.closing)
      total += gd_replyq_backlog(&s->conn.out);
  return total;
}

void gd_sessions_close_all(gd_server *d, const char *why) {
  for (gd_session *s = d->sessions; s; s = s->next)
    gd_session_close(s, why);
}
