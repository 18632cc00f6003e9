/*
 * gd_netloop.c - the loop threads (see gd_netloop.h): start, the inbox, stop.
 */
#include "gd_netloop.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gd_array.h"
#include "gd_log.h"

/* A connection handed over (fd >= 0), or one of this loop's to close to make room (fd -1). */
typedef struct gd_handoff {
  int fd;
  bool tcp, shm;
  uint64_t evict_id;
} gd_handoff;

/* ---- the inbox ------------------------------------------------------------ */

static void close_inbox(gd_netloop *nl);

static void run_inbox(gd_netloop *nl) {
  pthread_mutex_lock(&nl->mu);
  gd_handoff *handoffs = nl->handoffs;
  size_t count = nl->handoff_count;
  unsigned cmds = nl->cmds;
  nl->summary_taken = atomic_load(&nl->summary_asked); /* what this run's SUMMARY answers */
  char why[sizeof nl->why];
  memcpy(why, nl->why, sizeof why);
  nl->handoffs = NULL;
  nl->handoff_count = nl->handoff_cap = 0;
  nl->cmds = 0;
  pthread_mutex_unlock(&nl->mu);
  bool closing = cmds & (GD_NETLOOP_CLOSE_ALL | GD_NETLOOP_STOP);
  for (size_t i = 0; i < count; i++) {
    gd_handoff *h = &handoffs[i];
    if (h->fd < 0)
      nl->hooks->evict(nl, h->evict_id);
    else if (closing)
      close(h->fd); /* the client sees EOF */
    else
      nl->hooks->adopt(nl, h->fd, h->tcp, h->shm);
  }
  free(handoffs);
  for (unsigned bit = GD_NETLOOP_LIMITS; bit < GD_NETLOOP_STOP; bit <<= 1)
    if (cmds & bit)
      nl->hooks->command(nl, bit, why);
  if (cmds & GD_NETLOOP_STOP)
    close_inbox(nl);
}

static void on_inbox(uv_async_t *handle) { run_inbox(handle->data); }

int gd_netloop_post(gd_netloop *nl, unsigned cmd, const char *why) {
  pthread_mutex_lock(&nl->mu);
  int rc = GP_E_UNAVAILABLE; /* the loop is stopping: nothing it would do matters now */
  if (nl->inbox_open) {
    nl->cmds |= cmd;
    if (cmd & GD_NETLOOP_SUMMARY) /* under mu: a run takes the count with the commands */
      atomic_fetch_add(&nl->summary_asked, 1);
    if (why)
      snprintf(nl->why, sizeof nl->why, "%s", why);
    /* under mu: the handle is not closed meanwhile */
    rc = uv_async_send(&nl->inbox_async) == 0 ? 0 : GP_E_INTERNAL;
  }
  pthread_mutex_unlock(&nl->mu);
  return rc;
}

/* Closes the inbox (on nl's thread, or once that ended); posts after it are refused. */
static void close_inbox(gd_netloop *nl) {
  pthread_mutex_lock(&nl->mu);
  if (nl->inbox_open)
    uv_close((uv_handle_t *)&nl->inbox_async, NULL);
  nl->inbox_open = false;
  pthread_mutex_unlock(&nl->mu);
}

static int push(gd_netloop *nl, gd_handoff h) {
  pthread_mutex_lock(&nl->mu);
  int rc = nl->inbox_open ? 0 : GP_E_UNAVAILABLE;
  if (rc == 0 && nl->handoff_count == nl->handoff_cap) {
    gd_handoff *grown = gd_array_grow(nl->handoffs, &nl->handoff_cap, sizeof *grown, 16);
    if (grown)
      nl->handoffs = grown;
    else
      rc = GP_E_RESOURCE_EXHAUSTED;
  }
  if (rc == 0) {
    nl->handoffs[nl->handoff_count++] = h;
    uv_async_send(&nl->inbox_async); /* cannot fail on a live handle */
  }
  pthread_mutex_unlock(&nl->mu);
  return rc;
}

int gd_netloop_hand_over(gd_netloop *nl, int fd, bool tcp, bool shm) {
  assert(fd >= 0);
  return push(nl, (gd_handoff){fd, tcp, shm, 0});
}

int gd_netloop_evict(gd_netloop *nl, uint64_t id) {
  return push(nl, (gd_handoff){-1, false, false, id});
}

/* ---- the threads ---------------------------------------------------------- */

static void thread_main(void *arg) {
  gd_netloop *nl = arg;
  char name[16];
  snprintf(name, sizeof name, "gd-loop%zu", nl->index);
  pthread_setname_np(pthread_self(), name); /* top and perf tell the loops apart; may fail */
  gp_error_clear(&nl->start_err);
  /* libuv opens a reserve descriptor for each loop with its first stream: open it now, so that a
   * loop's first connection does not leave one descriptor more behind when it closes. */
  uv_pipe_t scratch;
  if (uv_pipe_init(nl->loop, &scratch, 0) == 0) {
    uv_close((uv_handle_t *)&scratch, NULL);
    uv_run(nl->loop, UV_RUN_NOWAIT);
  }
  nl->start_rc =
      gd_netsched_port_open(nl->d->sched, nl->loop, nl->stats, &nl->port, &nl->start_err);
  if (nl->start_rc == 0)
    gd_netsched_port_on_room(nl->port, nl->hooks->room, nl);
  uv_sem_post(&nl->started);
  if (nl->start_rc != 0)
    return;
  /* Returns once STOP closed the inbox and every connection is closed (the port's handles do
   * not keep it alive). */
  int rc = uv_run(nl->loop, UV_RUN_DEFAULT);
  (void)rc;
}

static gd_netloop *netloop_new(gd_server *d, size_t index, const gd_netloop_hooks *hooks) {
  gd_netloop *nl = calloc(1, sizeof *nl);
  if (!nl)
    return NULL;
  nl->d = d;
  nl->index = index;
  nl->hooks = hooks;
  nl->limits = d->limits;
  nl->stats = d->stats;
  if (index > 0) {
    gd_stats_init(&nl->own_stats);
    nl->own_stats.started_us = d->stats->started_us;
    nl->stats = &nl->own_stats;
  }
  atomic_init(&nl->share_waiting, 0);
  atomic_init(&nl->backlog, 0);
  atomic_init(&nl->waiters, false);
  atomic_init(&nl->summary_asked, 0);
  atomic_init(&nl->summary_done, 0);
  if (pthread_mutex_init(&nl->mu, NULL) != 0) {
    free(nl);
    return NULL;
  }
  return nl;
}

static void netloop_free(gd_netloop *nl) {
  for (size_t i = 0; i < nl->handoff_count; i++)
    close(nl->handoffs[i].fd);
  free(nl->handoffs);
  pthread_mutex_destroy(&nl->mu);
  free(nl);
}

/* The inbox on nl's loop, before its thread starts (loop 0: on the main thread). Loop 0 opens
 * its own connections, and its own commands run at once (gd_netloops_broadcast): its inbox
 * carries what other loops ask of it. */
static int open_inbox(gd_netloop *nl, gp_error *err) {
  int rc = uv_async_init(nl->loop, &nl->inbox_async, on_inbox);
  if (rc != 0)
    return gp_error_set(err, GP_E_INTERNAL, "loop %zu: %s", nl->index, uv_strerror(rc));
  nl->inbox_async.data = nl;
  nl->inbox_open = true;
  if (nl->index == 0) /* the main loop ends when the lifecycle closed its own handles */
    uv_unref((uv_handle_t *)&nl->inbox_async);
  return 0;
}

static int start_thread(gd_netloop *nl, gp_error *err) {
  int rc = uv_loop_init(&nl->own_loop);
  if (rc != 0)
    return gp_error_set(err, GP_E_INTERNAL, "loop %zu: %s", nl->index, uv_strerror(rc));
  nl->loop = &nl->own_loop;
  if ((rc = open_inbox(nl, err)) != 0 || (rc = uv_sem_init(&nl->started, 0)) != 0) {
    if (rc < 0) /* uv_sem_init's */
      rc = gp_error_set(err, GP_E_INTERNAL, "loop %zu: %s", nl->index, uv_strerror(rc));
    return rc;
  }
  int urc = uv_thread_create(&nl->thread, thread_main, nl);
  if (urc != 0) {
    uv_sem_destroy(&nl->started);
    return gp_error_set(err, GP_E_INTERNAL, "loop %zu: thread: %s", nl->index, uv_strerror(urc));
  }
  uv_sem_wait(&nl->started);
  uv_sem_destroy(&nl->started);
  if (nl->start_rc != 0) {
    uv_thread_join(&nl->thread);
    return gp_error_set(err, nl->start_rc, "loop %zu: %s", nl->index, nl->start_err.message);
  }
  nl->running = true;
  return 0;
}

int gd_netloops_start(gd_server *d, uv_loop_t *main_loop, size_t n, const gd_netloop_hooks *hooks,
                      gp_error *err) {
  assert(n >= 1 && n <= GD_NETLOOP_MAX && !d->loops);
  d->loops = calloc(n, sizeof *d->loops);
  if (!d->loops)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "loops: out of memory");
  for (size_t i = 0; i < n; i++) {
    gd_netloop *nl = netloop_new(d, i, hooks);
    if (!nl) {
      gd_netloops_stop(d);
      return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "loops: out of memory");
    }
    d->loops[i] = nl;
    d->nloops = i + 1;
    int rc;
    if (i == 0) {
      nl->loop = main_loop;
      nl->port = gd_netsched_default_port(d->sched);
      gd_netsched_port_on_room(nl->port, hooks->room, nl);
      rc = open_inbox(nl, err);
    } else {
      rc = start_thread(nl, err);
    }
    if (rc != 0) {
      d->nloops = i; /* this one never ran */
      if (i > 0) {
        close_inbox(nl);
        uv_run(nl->loop, UV_RUN_NOWAIT);
        uv_loop_close(&nl->own_loop);
      }
      netloop_free(nl);
      d->loops[i] = NULL;
      gd_netloops_stop(d);
      return rc;
    }
  }
  gd_info("serving connections on %zu loop thread%s", n, n == 1 ? "" : "s");
  return 0;
}

void gd_netloops_stats(const gd_server *d, gd_stats *out) {
  gd_stats_copy(out, d->stats);
  for (size_t i = 1; i < d->nloops; i++)
    gd_stats_add(out, d->loops[i]->stats);
}

gd_netloop *gd_netloops_next(gd_server *d) {
  gd_netloop *nl = d->loops[d->next_loop];
  d->next_loop = (d->next_loop + 1) % d->nloops;
  return nl;
}

void gd_netloops_broadcast(gd_server *d, unsigned cmd, const char *why) {
  for (size_t i = 1; i < d->nloops; i++)
    if (d->loops[i]->running && gd_netloop_post(d->loops[i], cmd, why) != 0)
      gd_warn("loop %zu: cannot wake it", i);
  if (d->nloops > 0)
    for (unsigned bit = GD_NETLOOP_LIMITS; bit < GD_NETLOOP_STOP; bit <<= 1)
      if (cmd & bit)
        d->loops[0]->hooks->command(d->loops[0], bit, why);
}

void gd_netloops_stop(gd_server *d) {
  for (size_t i = 1; i < d->nloops; i++)
    if (d->loops[i]->running)
      gd_netloop_post(d->loops[i], GD_NETLOOP_STOP, NULL);
  for (size_t i = 1; i < d->nloops; i++) {
    if (d->loops[i]->running)
      uv_thread_join(&d->loops[i]->thread);
    d->loops[i]->running = false;
  }
  if (d->nloops > 0) /* what others asked of loop 0 no longer matters */
    close_inbox(d->loops[0]);
}

void gd_netloops_free(gd_server *d) {
  for (size_t i = 1; i < d->nloops; i++) {
    gd_netloop *nl = d->loops[i];
    gd_netsched_port_close(nl->port); /* its thread is over: this thread may close its handles */
    uv_run(nl->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(nl->loop) != 0)
      gd_warn("loop %zu closed with handles still open", i);
  }
  for (size_t i = 0; i < d->nloops; i++)
    netloop_free(d->loops[i]);
  free(d->loops);
  d->loops = NULL;
  d->nloops = 0;
}
