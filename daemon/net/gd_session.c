/*
 * gd_session.c - connections as the daemon sees them (see gd_session.h): accepting (or
 * refusing) one, the daemon's list of them, closing, and the functions over all of them. Each
 * connection is a transport (gd_conn.h) driven by the protocol layer (gd_rpc.h).
 */
#include "gd_session.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_log.h"
#include "gd_rpc.h"

static void on_closing(gd_conn *c, const char *why) {
  gd_session *s = (gd_session *)c;
  assert(s->d->connections > 0);
  s->d->connections--;
  s->cur = NULL;
  gd_rpc_closing(s);
  if (s->peer_counted)
    gd_peers_remove(&s->d->peers, c->peer_key);
  s->peer_counted = false;
  if (s->quiet)
    return;
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

/* Out of file descriptors, the next accept (or a backend's, the log's, a reload's open) fails
 * with no trace: a connection whose descriptor leaves fewer than limits.reserved_fds free is
 * closed at once, counted, and logged at most once a second. */
static bool fds_short(const gd_server *d, const gd_session *s) {
  uv_os_fd_t fd;
  if (d->fd_limit == 0 || uv_fileno(&s->conn.h.handle, &fd) != 0)
    return false;
  return (uint64_t)fd + d->limits.reserved_fds >= d->fd_limit;
}

void gd_sessions_note_dropped(gd_server *d, const char *where) {
  d->stats->connections_dropped++;
  d->fd_drops_unlogged++;
  uint64_t now = gd_now_us();
  if (d->fd_drop_logged_us && now - d->fd_drop_logged_us < 1000000u)
    return;
  gd_warn("%s: %llu connection(s) dropped: out of file descriptors (RLIMIT_NOFILE %llu, "
          "limits.reserved_fds %u, %zu connections open)", where,
          (unsigned long long)d->fd_drops_unlogged, (unsigned long long)d->fd_limit,
          (unsigned)d->limits.reserved_fds, d->connections);
  d->fd_drop_logged_us = now;
  d->fd_drops_unlogged = 0;
}

/* The peer's oldest idle connection (the least recent activity), or NULL. */
static gd_session *oldest_idle_of(gd_server *d, const char *key) {
  gd_session *oldest = NULL;
  for (gd_session *s = d->sessions; s; s = s->next)
    if (s->peer_counted && strcmp(s->conn.peer_key, key) == 0 && gd_rpc_idle(s) &&
        (!oldest || s->conn.last_activity_us < oldest->conn.last_activity_us))
      oldest = s;
  return oldest;
}

/* The daemon is full and a peer with fewer connections than the greediest one knocks: the
 * greediest peer's oldest idle connection makes room. true when one was closed. */
static bool make_room(gd_server *d, uint32_t mine) {
  const gd_peer_count *top = gd_peers_greediest(&d->peers);
  if (!top || top->count <= mine)
    return false;
  char key[GD_PEER_KEY_MAX];
  snprintf(key, sizeof key, "%s", top->key); /* closing it changes the table */
  gd_session *victim = oldest_idle_of(d, key);
  if (!victim)
    return false;
  gd_conn_close(&victim->conn, "closed to make room: limits.max_connections reached and this "
                               "peer holds the most connections");
  return true;
}

/* The connection caps, once the peer of s is known (s is linked and counted already). NULL when
 * s may stay (and is counted for its peer), else why not. */
static const char *admit_peer(gd_server *d, gd_session *s) {
  const gd_net_limits *lim = &d->limits;
  uint32_t mine = gd_peers_count(&d->peers, s->conn.peer_key);
  if (mine >= lim->max_connections_per_peer)
    return "limits.max_connections_per_peer reached";
  if (d->connections - 1 >= lim->max_connections && !make_room(d, mine))
    return "limits.max_connections reached";
  if (gd_peers_add(&d->peers, s->conn.peer_key) != 0)
    return "out of memory";
  s->peer_counted = true;
  return NULL;
}

int gd_session_accept(gd_server *d, uv_stream_t *server) {
  if (d->draining)
    return refuse(d, server, "shutting down");
  gd_session *s = new_session(d);
  if (!s)
    return refuse(d, server, "out of memory");
  gd_resident_attach(&s->conn.resident, &d->resident, d->sched);
  if (server->type == UV_NAMED_PIPE && d->limits.shm.enabled)
    gd_shm_attach(&s->conn.shm, &d->shm, d->sched, d->limits.shm.max_regions_per_connection);
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
  if (fds_short(d, s)) {
    s->quiet = true;
    gd_conn_close(&s->conn, "out of file descriptors");
    gd_sessions_note_dropped(d, s->conn.peer);
    return 0;
  }
  const char *why = admit_peer(d, s);
  if (why) {
    d->stats->connections_refused++;
    s->quiet = true;
    gd_conn_close(&s->conn, why);
    gd_warn("connection refused: %s (%s, %zu connections)", why, s->conn.peer_key,
            d->connections);
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

void gd_sessions_room(void *server) { gd_rpc_room(server); }

void gd_sessions_close_all(gd_server *d, const char *why) {
  for (gd_session *s = d->sessions; s; s = s->next)
    gd_session_close(s, why);
}
