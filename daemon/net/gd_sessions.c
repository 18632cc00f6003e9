/*
 * gd_sessions.c - connections as the daemon sees them (see gd_sessions.h): accepting (or
 * refusing) one, the daemon's list of them, closing, and the functions over all of them. Each
 * connection (gd_session.h) is a transport (gd_conn.h) driven by the protocol layer (gd_rpc.h).
 */
#include "gd_sessions.h"

#include <assert.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gd_clock.h"
#include "gd_list.h"
#include "gd_log.h"
#include "gd_netloop.h"
#include "gd_admission.h"
#include "gd_rpc.h"
#include "gd_session.h"

/* The scheduler's lock, over what loops share but the counts under the peers lock (gd_server.h). */
static void lock_shared(gd_server *d) { gd_netsched_lock(d->sched); }
static void unlock_shared(gd_server *d) { gd_netsched_unlock(d->sched); }

static void on_closing(gd_conn *c, const char *why) {
  gd_session *s = gd_session_of(c);
  gd_session_msg *m = gd_session_msg_of(s);
  gd_server *d = gd_session_server(s);
  lock_shared(d);
  gd_peers_lock(&d->peers);
  assert(d->connections > 0);
  d->connections--;
  gd_session_unlink_all(s);
  gd_peers_unlock(&d->peers);
  m->cur = NULL;
  gd_admission_closing(s);
  if (gd_session_peer_counted(s)) {
    gd_peers_lock(&d->peers);
    gd_peers_remove(&d->peers, gd_conn_peer_key(c));
    gd_peers_unlock(&d->peers);
  }
  unlock_shared(d);
  gd_session_set_peer_counted(s, false);
  if (m->quiet)
    return;
  gd_info("conn %llu: %s: %s (%u jobs in flight)", (unsigned long long)gd_conn_id(c),
          gd_conn_peer(c), why, (unsigned)gd_conn_calls(c)->in_flight);
}

static void on_closed(gd_conn *c) {
  gd_session *s = gd_session_of(c);
  gd_session_unlink_loop(s);
  gd_session_free(s);
}

static const gd_conn_events conn_events = {gd_rpc_window, gd_rpc_data,  gd_rpc_eof,
                                           gd_rpc_kick,   gd_rpc_queued, on_closing,
                                           on_closed};

void gd_sessions_close(gd_session *s, const char *why) { gd_conn_close(gd_session_conn(s), why); }

static void on_refused_close(uv_handle_t *handle) { free(handle); }

/* Accept and close at once: the client sees EOF instead of hanging in the backlog. */
static int refuse(gd_server *d, uv_stream_t *server, const char *why, gp_error *err) {
  uv_stream_t *tmp = malloc(server->type == UV_TCP ? sizeof(uv_tcp_t) : sizeof(uv_pipe_t));
  if (!tmp)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "%s", uv_strerror(UV_ENOMEM));
  int rc = server->type == UV_TCP ? uv_tcp_init(d->loop, (uv_tcp_t *)tmp)
                                  : uv_pipe_init(d->loop, (uv_pipe_t *)tmp, 0);
  if (rc != 0) {
    free(tmp);
    return gp_error_set(err, GP_E_UNAVAILABLE, "%s", uv_strerror(rc));
  }
  rc = uv_accept(server, tmp);
  uv_close((uv_handle_t *)tmp, on_refused_close);
  d->stats->connections_refused++;
  gd_warn("connection refused: %s", why);
  return rc == 0 ? 0 : gp_error_set(err, GP_E_UNAVAILABLE, "%s", uv_strerror(rc));
}

/* Out of file descriptors, the next accept (or a backend's, the log's, a reload's open) fails
 * with no trace: a connection whose descriptor leaves fewer than limits.reserved_fds free is
 * closed at once, counted, and logged at most once a second. */
/* RLIMIT_NOFILE as it is now (it may be lowered while gemmd runs: prlimit), else the one read
 * at start. */
static uint64_t fd_limit_now(const gd_server *d) {
  struct rlimit rl;
  if (d->fd_limit == 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    return d->fd_limit;
  return (uint64_t)rl.rlim_cur;
}

static bool fds_short(const gd_netloop *nl, const gd_session *s) {
  uv_os_fd_t fd;
  uint64_t limit = fd_limit_now(nl->d);
  if (limit == 0 || !gd_conn_fileno(gd_session_conn(s), &fd))
    return false;
  return (uint64_t)fd + nl->limits.reserved_fds >= limit;
}

/* The drops not yet logged, in one line. Under the shared lock. */
static void log_drops(gd_server *d, const char *where, uint64_t now) {
  gd_warn("%s: %llu connection(s) dropped: out of file descriptors (RLIMIT_NOFILE %llu, "
          "limits.reserved_fds %u, %zu connections open)", where,
          (unsigned long long)d->fd_drops_unlogged, (unsigned long long)fd_limit_now(d),
          (unsigned)d->limits.reserved_fds, d->connections);
  d->fd_drop_logged_us = now;
  d->fd_drops_unlogged = 0;
}

static void on_drop_timer(uv_timer_t *timer) {
  gd_server *d = timer->data;
  lock_shared(d);
  if (d->fd_drops_unlogged > 0)
    log_drops(d, "since the last warning", gd_now_us());
  unlock_shared(d);
}

/* Loop 0: the drops of a burst (logged at most once a second) are logged when it is over. */
static void arm_drop_log(gd_server *d) {
  if (d->fd_drop_timer && !uv_is_active((uv_handle_t *)d->fd_drop_timer))
    uv_timer_start(d->fd_drop_timer, on_drop_timer, 1100, 0); /* cannot fail: initialised */
}

void gd_sessions_note_dropped(gd_server *d, const char *where) {
  d->stats->connections_dropped++;
  lock_shared(d);
  d->fd_drops_unlogged++;
  uint64_t now = gd_now_us();
  bool later = d->fd_drop_logged_us && now - d->fd_drop_logged_us < 1000000u;
  if (!later)
    log_drops(d, where, now);
  unlock_shared(d);
  if (later && d->loops) /* loop 0's timer, from whichever loop: through its inbox */
    gd_netloop_post(d->loops[0], GD_NETLOOP_DROP_LOG, NULL);
}

/* The peer's oldest idle connection on any loop (the least recent activity), or NULL. Each
 * connection publishes whether it is idle (idle_since_us); its own loop checks again before it
 * closes it. Under the peers lock. */
static gd_session *oldest_idle_of(gd_server *d, const char *key) {
  gd_session *oldest = NULL;
  uint64_t oldest_us = 0;
  for (gd_session *s = d->all_sessions; s; s = gd_session_all_next(s)) {
    uint64_t idle_us = gd_session_idle_since(s);
    if (idle_us && gd_session_peer_counted(s) &&
        strcmp(gd_conn_peer_key(gd_session_conn(s)), key) == 0 &&
        (!oldest || idle_us < oldest_us)) {
      oldest = s;
      oldest_us = idle_us;
    }
  }
  return oldest;
}

static const char *const EVICTED = "closed to make room: limits.max_connections reached and this "
                                   "peer holds the most connections";

/* Another loop asks this one to close connection id to make room (gd_netloop_hooks.evict): if it
 * is still here and still idle. */
static void evict(gd_netloop *nl, uint64_t id) {
  for (gd_session *s = nl->sessions; s; s = gd_session_next(s)) {
    if (gd_conn_id(gd_session_conn(s)) != id)
      continue;
    if (gd_session_idle(s))
      gd_conn_close(gd_session_conn(s), EVICTED);
    else
      gd_info("conn %llu: busy again: not closed to make room; %zu connections for a while",
              (unsigned long long)id, gd_sessions_count(nl->d));
    return;
  }
}

/* The daemon is full and a peer with fewer connections than the greediest one knocks: the
 * greediest peer's oldest idle connection makes room. true when one was closed, or its loop
 * was asked to (another loop's handles are its own; it closes it unless it turned busy
 * meanwhile, when the daemon holds one connection over the cap until one closes). Under the
 * shared lock and the peers lock; the peers lock is let go meanwhile around the close or the
 * request to close (it is the innermost lock: gd_peers.h). The victim cannot go meanwhile: a
 * connection leaves the list only under the shared lock (on_closing), which is held. */
static bool make_room(gd_netloop *nl, uint32_t mine) {
  const gd_peer_count *top = gd_peers_greediest(&nl->d->peers);
  if (!top || top->count <= mine)
    return false;
  char key[GD_PEER_KEY_MAX];
  snprintf(key, sizeof key, "%s", top->key); /* closing it changes the table */
  gd_session *victim = oldest_idle_of(nl->d, key);
  if (!victim)
    return false;
  bool closed;
  gd_peers_unlock(&nl->d->peers);
  if (gd_session_loop(victim) == nl) {
    gd_conn_close(gd_session_conn(victim), EVICTED);
    closed = true;
  } else {
    gd_session_set_idle_since(victim, 0); /* not twice */
    closed = gd_netloop_evict(gd_session_loop(victim), gd_conn_id(gd_session_conn(victim))) == 0;
  }
  gd_peers_lock(&nl->d->peers);
  return closed;
}

/* The connection caps, once the peer of s is known (s is linked and counted already). NULL when
 * s may stay (and is counted for its peer), else why not. */
static const char *admit_peer(gd_netloop *nl, gd_session *s) {
  gd_conn *c = gd_session_conn(s);
  gd_server *d = nl->d;
  const gd_net_limits *lim = &nl->limits;
  const char *why = NULL;
  lock_shared(d); /* a connection closed to make room leaves under it (on_closing) */
  gd_peers_lock(&d->peers);
  uint32_t mine = gd_peers_count(&d->peers, gd_conn_peer_key(c));
  if (mine >= lim->max_connections_per_peer)
    why = "limits.max_connections_per_peer reached";
  else if (d->connections - 1 >= lim->max_connections && !make_room(nl, mine))
    why = "limits.max_connections reached";
  else if (gd_peers_add(&d->peers, gd_conn_peer_key(c)) != 0)
    why = "out of memory";
  else
    gd_session_set_peer_counted(s, true);
  gd_peers_unlock(&d->peers);
  unlock_shared(d);
  return why;
}

/* s has its handles (rc: how opening them went, err: why not): link it, apply the caps, start
 * serving. */
static void start_session(gd_netloop *nl, gd_session *s, int rc, const gp_error *err, bool tcp) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_conn *c = gd_session_conn(s);
  gd_server *d = nl->d;
  /* from here the session is closed like any other, through its close callbacks */
  gd_session_link(s);
  if (rc != 0) {
    char why[sizeof "accept failed: " + GP_ERROR_MESSAGE_MAX];
    snprintf(why, sizeof why, "accept failed: %s", err->message);
    gd_conn_close(c, why);
    return;
  }
  if (fds_short(nl, s)) {
    m->quiet = true;
    gd_conn_close(c, "out of file descriptors");
    gd_sessions_note_dropped(d, gd_conn_peer(c));
    return;
  }
  const char *why = admit_peer(nl, s);
  size_t open = gd_sessions_count(d);
  if (why) {
    nl->stats->connections_refused++;
    m->quiet = true;
    gd_conn_close(c, why);
    gd_warn("connection refused: %s (%s, %zu connections)", why, gd_conn_peer_key(c), open);
    return;
  }
  gd_info("conn %llu: %s: open (%zu connections)", (unsigned long long)gd_conn_id(c),
          gd_conn_peer(c), open);
  if (gd_conn_shm(c)->totals) { /* descriptors it is sent count against its peer's share */
    gd_conn_shm(c)->peers = &d->peers;
    gd_conn_shm(c)->peer_key = gd_conn_peer_key(c);
    gd_conn_shm(c)->peer_fd_cap = nl->limits.shm.max_fds_per_peer;
  }
  gd_rpc_start(s, tcp);
}

/* Takes the pending connection of server out of libuv as a descriptor of our own (a scratch
 * handle accepts it, the descriptor is duplicated, the handle closed), or -1. */
static int take_fd(gd_server *d, uv_stream_t *server) {
  uv_stream_t *tmp = malloc(server->type == UV_TCP ? sizeof(uv_tcp_t) : sizeof(uv_pipe_t));
  if (!tmp)
    return -1;
  int rc = server->type == UV_TCP ? uv_tcp_init(d->loop, (uv_tcp_t *)tmp)
                                  : uv_pipe_init(d->loop, (uv_pipe_t *)tmp, 0);
  if (rc != 0) {
    free(tmp);
    return -1;
  }
  int fd = -1;
  uv_os_fd_t raw;
  if (uv_accept(server, tmp) == 0 && uv_fileno((uv_handle_t *)tmp, &raw) == 0)
    fd = fcntl(raw, F_DUPFD_CLOEXEC, 3);
  uv_close((uv_handle_t *)tmp, on_refused_close); /* closes raw */
  return fd;
}

/* Another loop serves the connection: hand its descriptor over. */
static int hand_over(gd_server *d, gd_netloop *nl, uv_stream_t *server, bool shm) {
  int fd = take_fd(d, server);
  if (fd < 0) {
    gd_sessions_note_dropped(d, "accept"); /* out of descriptors or memory */
    return 0;
  }
  if (gd_netloop_hand_over(nl, fd, server->type == UV_TCP, shm) != 0) {
    close(fd);
    d->stats->connections_refused++;
    gd_warn("connection refused: out of memory handing it to loop %zu", nl->index);
  }
  return 0;
}

int gd_sessions_accept(gd_server *d, uv_stream_t *server, gp_error *err) {
  if (atomic_load(&d->draining))
    return refuse(d, server, "shutting down", err);
  gd_netloop *nl = gd_netloops_next(d);
  /* this thread's copy of the limits: loop 0's (shm.enabled is for connections accepted from
   * now on) */
  bool shm = server->type == UV_NAMED_PIPE && d->loops[0]->limits.shm.enabled;
  if (nl->index != 0)
    return hand_over(d, nl, server, shm);
  gd_session *s = gd_session_new(d, nl, &conn_events);
  if (!s)
    return refuse(d, server, "out of memory", err);
  if (shm)
    gd_shm_attach(gd_conn_shm(gd_session_conn(s)), &d->shm, d->sched,
                  nl->limits.shm.max_regions_per_connection);
  gp_error why;
  int rc = gd_conn_accept(gd_session_conn(s), nl->loop, server, &why);
  if (rc != 0 && gd_conn_open_handles(gd_session_conn(s)) == 0) {
    gd_conn_free(gd_session_conn(s));
    gd_session_free(s);
    return gp_error_set(err, rc, "%s", why.message);
  }
  start_session(nl, s, rc, &why, server->type == UV_TCP);
  return 0;
}

/* A connection loop 0 handed over (gd_netloop_hooks.adopt), on nl's thread. */
static void adopt(gd_netloop *nl, int fd, bool tcp, bool shm) {
  gd_server *d = nl->d;
  gd_session *s = atomic_load(&d->draining) ? NULL : gd_session_new(d, nl, &conn_events);
  if (!s) {
    close(fd); /* the client sees EOF */
    nl->stats->connections_refused++;
    return;
  }
  if (shm)
    gd_shm_attach(gd_conn_shm(gd_session_conn(s)), &d->shm, d->sched,
                  nl->limits.shm.max_regions_per_connection);
  gp_error why;
  int rc = gd_conn_open(gd_session_conn(s), nl->loop, fd, tcp, &why);
  if (rc != 0 && gd_conn_open_handles(gd_session_conn(s)) == 0) {
    gd_conn_free(gd_session_conn(s));
    gd_session_free(s);
    gd_warn("connection dropped: %s", why.message);
    return;
  }
  start_session(nl, s, rc, &why, tcp);
}

/* ---- all sessions -------------------------------------------------------- */

size_t gd_sessions_count(gd_server *d) { return atomic_load(&d->connections); }

static size_t fail_pending_here(gd_netloop *nl, const char *why) {
  size_t answered = 0;
  for (gd_session *s = nl->sessions; s; s = gd_session_next(s))
    if (!gd_conn_closing(gd_session_conn(s)))
      answered += gd_rpc_fail_pending(s, why);
  return answered;
}

static uint64_t backlog_here(const gd_netloop *nl) {
  uint64_t total = 0;
  for (const gd_session *s = nl->sessions; s; s = gd_session_next(s))
    if (!gd_conn_closing(gd_session_conn(s)))
      total += gd_replyq_backlog(gd_conn_out(gd_session_conn(s)));
  return total;
}

/* A command from another loop (or loop 0's own, run at once), on nl's thread. */
static void command(gd_netloop *nl, unsigned cmd, const char *why) {
  switch (cmd) {
  case GD_NETLOOP_LIMITS:
    lock_shared(nl->d);
    nl->limits = nl->d->limits;
    unlock_shared(nl->d);
    for (gd_session *s = nl->sessions; s; s = gd_session_next(s))
      if (!gd_conn_closing(gd_session_conn(s)))
        gd_rpc_apply_limits(s);
    break;
  case GD_NETLOOP_PEER_ROOM:
    gd_admission_peer_room(nl);
    break;
  case GD_NETLOOP_FAIL_PENDING: {
    size_t answered = fail_pending_here(nl, why);
    if (nl->index > 0 && answered > 0) /* loop 0's count is the caller's to log */
      gd_warn("loop %zu: %zu unfinished requests answered UNAVAILABLE", nl->index, answered);
    break;
  }
  case GD_NETLOOP_CLOSE_ALL:
    for (gd_session *s = nl->sessions; s; s = gd_session_next(s))
      gd_sessions_close(s, why);
    break;
  case GD_NETLOOP_DROP_LOG:
    arm_drop_log(nl->d);
    break;
  case GD_NETLOOP_SUMMARY:
    atomic_store(&nl->backlog, backlog_here(nl));
    atomic_store(&nl->waiters, nl->wait_head != NULL);
    atomic_store(&nl->summary_done, nl->summary_taken);
    break;
  default:
    assert(!"unknown loop command");
  }
}

static void room(void *nl) { gd_admission_room(nl); }

static const gd_netloop_hooks hooks = {adopt, evict, command, room};

static void on_drop_timer_closed(uv_handle_t *h) { free(h); }

int gd_sessions_start(gd_server *d, uv_loop_t *loop, size_t loops, gp_error *err) {
  if (gd_peers_init(&d->peers) != 0)
    return gp_error_set(err, GP_E_INTERNAL, "cannot make the peers lock");
  d->fd_drop_timer = malloc(sizeof *d->fd_drop_timer);
  if (!d->fd_drop_timer || uv_timer_init(loop, d->fd_drop_timer) != 0) {
    free(d->fd_drop_timer);
    d->fd_drop_timer = NULL;
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  d->fd_drop_timer->data = d;
  uv_unref((uv_handle_t *)d->fd_drop_timer); /* it alone does not keep gemmd running */
  return gd_netloops_start(d, loop, loops, &hooks, err);
}

/* The drop timer closed, logging what a burst left unlogged (once: close_all may have). */
static void close_drop_timer(gd_server *d) {
  if (d->fd_drop_timer && !uv_is_closing((uv_handle_t *)d->fd_drop_timer)) {
    on_drop_timer(d->fd_drop_timer);
    uv_close((uv_handle_t *)d->fd_drop_timer, on_drop_timer_closed);
  }
  d->fd_drop_timer = NULL;
}

void gd_sessions_stop(gd_server *d) {
  close_drop_timer(d);
  gd_netloops_stop(d);
}

void gd_sessions_apply_limits(gd_server *d) { gd_netloops_broadcast(d, GD_NETLOOP_LIMITS, NULL); }

/* Asks every other loop for a summary after whatever cmd does there (commands run in the order
 * of their bits, SUMMARY last): until it comes, gd_sessions_busy says busy. */
static void post_with_summary(gd_server *d, unsigned cmd, const char *why) {
  for (size_t i = 1; i < d->nloops; i++)
    gd_netloop_post(d->loops[i], cmd | GD_NETLOOP_SUMMARY, why);
}

size_t gd_sessions_fail_pending(gd_server *d, const char *why) {
  post_with_summary(d, GD_NETLOOP_FAIL_PENDING, why); /* their answers count as backlog */
  return fail_pending_here(d->loops[0], why);
}

bool gd_sessions_busy(gd_server *d, uint64_t *backlog) {
  gd_netloop *first = d->loops[0];
  uint64_t total = backlog_here(first);
  bool waiters = first->wait_head != NULL;
  bool unknown = false;
  for (size_t i = 1; i < d->nloops; i++) {
    gd_netloop *nl = d->loops[i];
    unknown = unknown || atomic_load(&nl->summary_done) != atomic_load(&nl->summary_asked);
    total += atomic_load(&nl->backlog);
    waiters = waiters || atomic_load(&nl->waiters);
  }
  post_with_summary(d, 0, NULL); /* for the next look */
  *backlog = total;
  return total > 0 || waiters || unknown;
}

void gd_sessions_close_all(gd_server *d, const char *why) {
  close_drop_timer(d); /* what is left unlogged, now */
  gd_netloops_broadcast(d, GD_NETLOOP_CLOSE_ALL, why);
}
