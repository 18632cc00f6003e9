/*
 * gd_session.c - one connection (see gd_session.h): open, close and free, what wakes a session
 * up again (kick), and the functions over every session. Reading, event dispatch, writing,
 * the scheduler's hooks and the timer each have their own file (gd_session_internal.h).
 */
#include "gd_session_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "gd_clock.h"
#include "gd_list.h"
#include "gd_log.h"

void gd__session_kick(gd_session *s) {
  if (s->closing)
    return;
  if (s->eof) {
    if (s->in_flight == 0 && s->writes == 0)
      gd_session_close(s, "closed by client");
    return;
  }
  if (s->pending_len > 0) {
    gd__session_process(s); /* ends with update_reading and update_timer */
    return;
  }
  gd__session_update_reading(s);
  if (!s->closing)
    gd__session_update_timer(s);
}

void gd__session_unlink_job(gd_session *s, gd__sjob *rec) {
  GD_LIST_UNLINK(s->jobs, rec);
  rec->prev = rec->next = NULL;
  s->in_flight--;
}

/* ---- open and close ------------------------------------------------------ */

static void free_session(gd_session *s) {
  while (s->jobs) {
    gd__sjob *rec = s->jobs;
    s->jobs = rec->next;
    free(rec);
  }
  gp_decoder_free(s->dec);
  free(s->rbuf);
  free(s);
}

static void on_close(uv_handle_t *handle) {
  gd_session *s = handle->data;
  if (--s->open_handles > 0)
    return;
  gd_daemon *d = s->d;
  if (s->prev)
    s->prev->next = s->next;
  else if (d->sessions == s)
    d->sessions = s->next;
  if (s->next)
    s->next->prev = s->prev;
  free_session(s);
}

void gd_session_close(gd_session *s, const char *why) {
  if (s->closing)
    return;
  s->closing = true;
  s->d->connections--;
  gd_info("conn %llu: %s: %s (%u jobs in flight)", (unsigned long long)s->id, s->peer, why,
          (unsigned)s->in_flight);
  s->cur = NULL;
  /* Jobs go back to the scheduler now; records stay until the close callback because
   * cancelled writes still report their chunks. */
  for (gd__sjob *rec = s->jobs; rec; rec = rec->next) {
    if (!rec->orphan) {
      rec->orphan = true;
      gd_sched_abandon(s->d->sched, rec->job);
    }
  }
  gd__session_drop_held(s);
  if (s->reading)
    uv_read_stop(&s->h.stream);
  s->reading = false;
  uv_timer_stop(&s->timer);
  uv_close((uv_handle_t *)&s->timer, on_close);
  uv_close(&s->h.handle, on_close);
}

static void on_refused_close(uv_handle_t *handle) { free(handle); }

/* Accept and close at once: the client sees EOF instead of hanging in the backlog. */
static int refuse(gd_daemon *d, uv_stream_t *server, const char *why) {
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
  d->stats.connections_refused++;
  gd_warn("connection refused: %s", why);
  return rc;
}

static void describe_peer(gd_session *s) {
  if (s->h.handle.type != UV_TCP) {
    snprintf(s->peer, sizeof s->peer, "unix");
    return;
  }
  struct sockaddr_storage ss;
  int len = sizeof ss;
  char host[64] = "?";
  int port = 0;
  if (uv_tcp_getpeername(&s->h.tcp, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET6) {
      uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof host);
      port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    } else {
      uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof host);
      port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
  }
  snprintf(s->peer, sizeof s->peer, ss.ss_family == AF_INET6 ? "tcp [%s]:%d" : "tcp %s:%d", host,
           port);
}

static gd_session *new_session(gd_daemon *d) {
  gd_session *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->rbuf = malloc(GD__READ_BUFFER_BYTES);
  s->dec = gp_decoder_new(GP_ROLE_SERVER, &d->cfg.proto);
  if (!s->rbuf || !s->dec) {
    gp_decoder_free(s->dec);
    free(s->rbuf);
    free(s);
    return NULL;
  }
  s->d = d;
  s->pending = s->rbuf; /* never NULL, even when empty */
  s->held_tail = &s->held_head;
  return s;
}

/* Puts s on the daemon's list of sessions and counts it open. */
static void link_session(gd_daemon *d, gd_session *s) {
  s->id = ++d->next_session_id;
  s->next = d->sessions;
  if (d->sessions)
    d->sessions->prev = s;
  d->sessions = s;
  d->connections++;
  d->stats.connections_total++;
  s->last_activity_us = gd_now_us();
}

/* The timer or uv_accept failed (rc) on a linked session: close it like any other. */
static void close_failed_accept(gd_session *s, int rc) {
  snprintf(s->peer, sizeof s->peer, "?");
  char why[128];
  snprintf(why, sizeof why, "accept failed: %s", uv_strerror(rc));
  if (s->open_handles == 1) {
    /* the timer never started: close only the stream */
    s->closing = true;
    s->d->connections--;
    gd_warn("%s", why);
    uv_close(&s->h.handle, on_close);
  } else {
    gd_session_close(s, why);
  }
}

int gd_session_accept(gd_daemon *d, uv_stream_t *server) {
  if (d->draining)
    return refuse(d, server, "shutting down");
  if (d->connections >= d->cfg.max_connections)
    return refuse(d, server, "limits.max_connections reached");
  gd_session *s = new_session(d);
  if (!s)
    return refuse(d, server, "out of memory");
  int rc = server->type == UV_TCP ? uv_tcp_init(d->loop, &s->h.tcp)
                                  : uv_pipe_init(d->loop, &s->h.pipe, 0);
  if (rc != 0) {
    free_session(s);
    return rc;
  }
  s->h.handle.data = s;
  s->open_handles = 1;
  rc = uv_timer_init(d->loop, &s->timer);
  if (rc == 0) {
    s->timer.data = s;
    s->open_handles = 2;
    rc = uv_accept(server, &s->h.stream);
  }
  /* from here the session is closed like any other, through on_close */
  link_session(d, s);
  if (rc != 0) {
    close_failed_accept(s, rc);
    return 0;
  }
  describe_peer(s);
  gd_info("conn %llu: %s: open (%zu connections)", (unsigned long long)s->id, s->peer,
          d->connections);
  gd__session_update_reading(s);
  if (!s->closing)
    gd__session_update_timer(s);
  return 0;
}

/* ---- all sessions -------------------------------------------------------- */

void gd_sessions_apply_limits(gd_daemon *d) {
  for (gd_session *s = d->sessions; s; s = s->next) {
    if (s->closing)
      continue;
    gp_decoder_set_limits(s->dec, &d->cfg.proto);
    gd__session_kick(s);
  }
}

/* Answers rec (not started, not orphaned) with UNAVAILABLE and abandons its job. */
static void fail_job(gd_session *s, gd__sjob *rec, const char *why) {
  uint32_t msgid = rec->msgid;
  if (s->cur == rec) {
    gp_decoder_skip_message(s->dec); /* first: window bytes are then skipped too */
    gd__session_drop_current(s);
    s->in_request = false;
  } else {
    gd_job *job = rec->job;
    gd__session_unlink_job(s, rec);
    free(rec);
    gd_sched_abandon(s->d->sched, job);
  }
  gd__session_send_error(s, msgid, GP_E_UNAVAILABLE, why);
}

size_t gd_sessions_fail_pending(gd_daemon *d, const char *why) {
  size_t answered = 0;
  for (gd_session *s = d->sessions; s; s = s->next) {
    if (s->closing)
      continue;
    gd__sjob *rec = s->jobs;
    while (rec) {
      gd__sjob *next = rec->next;
      if (!rec->head_sent && !rec->orphan) {
        fail_job(s, rec, why);
        answered++;
      }
      rec = next;
    }
    gd__session_kick(s);
  }
  return answered;
}

uint64_t gd_sessions_write_backlog(const gd_daemon *d) {
  uint64_t total = 0;
  for (const gd_session *s = d->sessions; s; s = s->next)
    if (!s->closing)
      total += s->write_bytes + s->held_bytes;
  return total;
}

void gd_sessions_close_all(gd_daemon *d, const char *why) {
  for (gd_session *s = d->sessions; s; s = s->next)
    gd_session_close(s, why);
}
