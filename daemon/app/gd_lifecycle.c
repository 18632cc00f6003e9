/*
 * gd_lifecycle.c - see gd_lifecycle.h.
 */
#include "gd_lifecycle.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_auth_setup.h"
#include "gd_clock.h"
#include "gd_listener.h"
#include "gd_log.h"
#include "gd_sessions.h"

#define DRAIN_POLL_MS 20
/* After drain_ms, replies already queued get this long to reach their clients. */
#define FLUSH_GRACE_MS 2000

enum { SIG_TERM, SIG_INT, SIG_HUP, SIG_COUNT };

struct gd_lifecycle {
  gd_daemon *d;
  const gd_cli *cli;
  char config_path[4096];
  bool have_path;
  gd_notify *notify;
  uv_signal_t signals[SIG_COUNT];
  uv_timer_t drain_timer; /* drain_ms */
  uv_timer_t poll_timer;  /* checks whether the drain is done */
  int open_handles;
  bool closing;
  bool draining, expired, finished;
  uint64_t expired_at_us;
};

/* ---- SIGHUP -------------------------------------------------------------- */

static int restart_key(const char *key) {
  gd_warn("reload: %s changed in the config file; it takes effect only after a restart", key);
  return 1;
}

static bool same_listen(const gd_config *a, const gd_config *b) {
  if (a->listen_count != b->listen_count)
    return false;
  for (size_t i = 0; i < a->listen_count; i++)
    if (strcmp(a->listen[i], b->listen[i]) != 0)
      return false;
  return true;
}

static bool same_gpu(const gd_gpu_config *a, const gd_gpu_config *b) {
  if (a->devices_auto != b->devices_auto || a->device_count != b->device_count ||
      a->staging_bytes != b->staging_bytes || a->staging_buffers != b->staging_buffers ||
      a->memory_fraction != b->memory_fraction || a->memory_bytes != b->memory_bytes ||
      a->memory_idle_ms != b->memory_idle_ms || a->memory_keep_bytes != b->memory_keep_bytes ||
      a->kernel_pool_bytes != b->kernel_pool_bytes ||
      a->small_job_bytes != b->small_job_bytes || a->small_slots != b->small_slots ||
      a->small_poll_us != b->small_poll_us || a->max_batch_jobs != b->max_batch_jobs ||
      a->max_queue_delay_us != b->max_queue_delay_us || a->small_passes != b->small_passes ||
      a->resident_bytes != b->resident_bytes || a->shm_pieces != b->shm_pieces ||
      a->split_min_rows != b->split_min_rows || a->split_max_parts != b->split_max_parts ||
      strcmp(a->kernel, b->kernel) != 0)
    return false;
  for (size_t i = 0; i < a->device_count; i++)
    if (a->devices[i] != b->devices[i])
      return false;
  return true;
}

void gd_daemon_net_limits(const gd_config *cfg, gd_net_limits *out) {
  *out = (gd_net_limits){.max_connections = cfg->max_connections,
                         .reserved_fds = cfg->reserved_fds,
                         .max_connections_per_peer = cfg->max_connections_per_peer,
                         .connection_memory_share = cfg->connection_memory_share,
                         .peer_memory_share = cfg->peer_memory_share,
                         .peer_hold_share = cfg->peer_hold_share,
                         .max_requests_in_flight = cfg->max_requests_in_flight,
                         .max_buffered_bytes = cfg->max_buffered_bytes,
                         .proto = cfg->proto,
                         .idle_ms = cfg->idle_ms,
                         .min_receive_rate = cfg->min_receive_rate,
                         .min_rate_bytes = cfg->min_rate_bytes,
                         .min_rate_grace_ms = cfg->min_rate_grace_ms,
                         .hold_stall_ms = cfg->hold_stall_ms,
                         .auth_max_failures = cfg->auth_max_failures,
                         .request_ms = cfg->request_ms,
                         .staging_hold_ms = cfg->gpu.staging_hold_ms,
                         .unix_socket_mode = cfg->unix_socket_mode,
                         .shm = cfg->shm,
                         .resident = cfg->resident};
}

int gd_lifecycle_apply_config(gd_daemon *d, const gd_config *next) {
  gd_config *cur = &d->cfg;
  int restart = 0;
  if (!same_listen(cur, next))
    restart += restart_key("listen");
  if (cur->unix_socket_mode != next->unix_socket_mode)
    restart += restart_key("unix_socket_mode");
  if (strcmp(cur->unix_socket_group, next->unix_socket_group) != 0)
    restart += restart_key("unix_socket_group");
  if (cur->backend != next->backend)
    restart += restart_key("backend");
  if (cur->loops != next->loops)
    restart += restart_key("loops");
  if (cur->cpu_threads != next->cpu_threads)
    restart += restart_key("cpu.threads");
  if (cur->cpu_min_part_mflop != next->cpu_min_part_mflop)
    restart += restart_key("cpu.min_part_mflop");
  if (cur->cpu_buffer_cache_bytes != next->cpu_buffer_cache_bytes)
    restart += restart_key("cpu.buffer_cache_bytes");
  if (cur->blas_threads != next->blas_threads)
    restart += restart_key("cpu.blas_threads");
  if (!same_gpu(&cur->gpu, &next->gpu))
    restart += restart_key("gpu");
  if (cur->gpu.shm_register_bytes != next->gpu.shm_register_bytes)
    restart += restart_key("shm.gpu_register_max_bytes");
  if (strcmp(cur->metrics_listen, next->metrics_listen) != 0)
    restart += restart_key("metrics.listen");
  if (cur->metrics_max_connections != next->metrics_max_connections ||
      cur->metrics_max_per_client != next->metrics_max_per_client ||
      cur->metrics_request_timeout_ms != next->metrics_request_timeout_ms)
    restart += restart_key("metrics");
  if (cur->trim_idle_ms != next->trim_idle_ms)
    restart += restart_key("queue.trim_idle_ms");
  if (cur->log_target != next->log_target)
    restart += restart_key("log_target");
  /* Live: log level, limits, queue, timeouts, shm. */
  cur->log_level = next->log_level;
  cur->max_connections = next->max_connections;
  cur->reserved_fds = next->reserved_fds;
  cur->max_connections_per_peer = next->max_connections_per_peer;
  cur->max_requests_in_flight = next->max_requests_in_flight;
  cur->max_buffered_bytes = next->max_buffered_bytes;
  cur->proto = next->proto;
  cur->max_jobs = next->max_jobs;
  cur->memory_budget = next->memory_budget;
  cur->connection_memory_share = next->connection_memory_share;
  cur->peer_memory_share = next->peer_memory_share;
  cur->peer_hold_share = next->peer_hold_share;
  cur->idle_ms = next->idle_ms;
  cur->min_receive_rate = next->min_receive_rate;
  cur->min_rate_bytes = next->min_rate_bytes;
  cur->min_rate_grace_ms = next->min_rate_grace_ms;
  cur->hold_stall_ms = next->hold_stall_ms;
  cur->auth_max_failures = next->auth_max_failures;
  cur->request_ms = next->request_ms;
  cur->drain_ms = next->drain_ms;
  cur->gpu.staging_hold_ms = next->gpu.staging_hold_ms; /* read per chunk by connections */
  cur->shm = next->shm; /* enabled: for connections accepted from now; quotas: per register */
  cur->resident = next->resident; /* quotas: per put */
  /* The token itself is re-read by reload(); connections already in keep their state. */
  memcpy(cur->auth_token_file, next->auth_token_file, sizeof cur->auth_token_file);
  cur->allow_unauthenticated_tcp = next->allow_unauthenticated_tcp;
  gd_log_set_level(cur->log_level);
  if (d->sched) {
    gd_sched_limits limits = {cur->max_jobs, cur->memory_budget};
    gd_sched_set_limits(d->sched, &limits);
  }
  if (d->sched)
    gd_sched_lock(d->sched); /* every loop reads them (gd_server.h) */
  gd_daemon_net_limits(cur, &d->srv.limits);
  if (d->sched)
    gd_sched_unlock(d->sched);
  gd_sessions_apply_limits(&d->srv);
  return restart;
}

static void reload(gd_lifecycle *lc) {
  gd_daemon *d = lc->d;
  gd_config next;
  gp_error err;
  gd_notify_reloading();
  gd_config_default(&next);
  /* A synchronous read on the loop thread: the file is small (capped at 1 MiB) and SIGHUP is
   * rare, so the short pause is accepted rather than a thread for it. */
  if (lc->have_path && gd_config_load_file(lc->config_path, &next, &err) != 0) {
    gd_error("reload failed, configuration unchanged: %s", err.message);
    gd_notify_ready("running; last reload failed");
    return;
  }
  if (gd_cli_apply(lc->cli, &next, &err) != 0) {
    gd_error("reload failed, configuration unchanged: %s", err.message);
    gd_notify_ready("running; last reload failed");
    return;
  }
  /* The token is re-read too; the listeners stay those of the start (listen needs a restart). */
  static gd_config probe; /* loop thread only; too big for the stack beside next */
  probe = next;
  memcpy(probe.listen, d->cfg.listen, sizeof probe.listen);
  probe.listen_count = d->cfg.listen_count;
  gd_auth_token token;
  if (gd_auth_check(&probe, &token, &err) != 0 ||
      gd_auth_check_held(&next, &token, d->srv.exposed_tcp_held, &err) != 0) {
    gd_error("reload failed, configuration unchanged: %s", err.message);
    gd_notify_ready("running; last reload failed");
    return;
  }
  gd_sched_lock(d->sched);
  d->srv.token = token;
  gd_sched_unlock(d->sched);
  int restart = gd_lifecycle_apply_config(d, &next);
  gd_info("reloaded %s: log level %s, limits, queue, timeouts and auth applied%s",
          lc->have_path ? lc->config_path : "built-in defaults",
          gd_log_level_name(d->cfg.log_level),
          restart ? "; some keys need a restart" : "");
  gd_notify_ready("running; configuration reloaded");
}

/* ---- shutdown ------------------------------------------------------------ */

static void close_handles(gd_lifecycle *lc);

static void finish(gd_lifecycle *lc, const char *why) {
  if (lc->finished)
    return;
  lc->finished = true;
  gd_info("shutdown: %s; closing %zu connections", why, gd_sessions_count(&lc->d->srv));
  gd_sessions_close_all(&lc->d->srv, "daemon stopping");
  close_handles(lc);
}

static void on_poll(uv_timer_t *timer) {
  gd_lifecycle *lc = timer->data;
  gd_daemon *d = lc->d;
  uint64_t backlog;
  bool busy = gd_sessions_busy(&d->srv, &backlog);
  if (!lc->expired && gd_sched_jobs(d->sched) + gd_sched_delivering(d->sched) == 0 && !busy) {
    finish(lc, "every request answered");
    return;
  }
  if (lc->expired && !busy) {
    finish(lc, "drain time over, every reply written");
    return;
  }
  if (lc->expired && gd_now_us() - lc->expired_at_us > FLUSH_GRACE_MS * 1000u)
    finish(lc, "drain time over, replies still queued dropped");
}

static void expire(gd_lifecycle *lc) {
  if (lc->expired)
    return;
  lc->expired = true;
  lc->expired_at_us = gd_now_us();
  size_t answered =
      gd_sessions_fail_pending(&lc->d->srv, "gemmd stopped before this request could finish");
  gd_warn("shutdown: timeouts.drain_ms is over: %zu unfinished requests answered UNAVAILABLE; "
          "waiting for replies already being written", answered);
}

static void on_drain_timer(uv_timer_t *timer) { expire(timer->data); }

void gd_lifecycle_shutdown(gd_lifecycle *lc, const char *why) {
  gd_daemon *d = lc->d;
  if (lc->draining) {
    gd_warn("shutdown: %s again; cutting the drain short", why);
    expire(lc);
    return;
  }
  lc->draining = true;
  atomic_store(&d->srv.draining, true);
  gd_sched_set_draining(d->sched); /* wakes requests waiting for admission: UNAVAILABLE */
  gd_listeners_close(d->listeners);
  d->listeners = NULL;
  char status[128];
  snprintf(status, sizeof status, "stopping: %zu jobs in flight", gd_sched_jobs(d->sched));
  gd_notify_stopping(status);
  gd_info("shutdown: %s; draining %zu jobs (timeouts.drain_ms = %llu)", why,
          gd_sched_jobs(d->sched), (unsigned long long)d->cfg.drain_ms);
  int rc = uv_timer_start(&lc->poll_timer, on_poll, 0, DRAIN_POLL_MS);
  if (rc == 0)
    rc = uv_timer_start(&lc->drain_timer, on_drain_timer, d->cfg.drain_ms, 0);
  if (rc != 0) {
    gd_error("shutdown: cannot start timers (%s); stopping now", uv_strerror(rc));
    expire(lc);
    finish(lc, "timers unavailable");
  }
}

/* ---- signals ------------------------------------------------------------- */

static void on_signal(uv_signal_t *handle, int signum) {
  gd_lifecycle *lc = handle->data;
  if (signum == SIGHUP) {
    if (!lc->draining)
      reload(lc);
    return;
  }
  gd_lifecycle_shutdown(lc, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static void on_handle_closed(uv_handle_t *handle) {
  gd_lifecycle *lc = handle->data;
  if (--lc->open_handles == 0 && lc->closing)
    free(lc);
}

static void close_handles(gd_lifecycle *lc) {
  if (lc->closing)
    return;
  lc->closing = true;
  gd_listeners_close(lc->d->listeners);
  lc->d->listeners = NULL;
  gd_notify_close(lc->notify);
  lc->notify = NULL;
  for (int i = 0; i < SIG_COUNT; i++)
    if (lc->signals[i].type == UV_SIGNAL && !uv_is_closing((uv_handle_t *)&lc->signals[i]))
      uv_close((uv_handle_t *)&lc->signals[i], on_handle_closed);
  if (lc->drain_timer.type == UV_TIMER)
    uv_close((uv_handle_t *)&lc->drain_timer, on_handle_closed);
  if (lc->poll_timer.type == UV_TIMER)
    uv_close((uv_handle_t *)&lc->poll_timer, on_handle_closed);
  if (lc->open_handles == 0)
    free(lc);
}

void gd_lifecycle_close(gd_lifecycle *lc) {
  if (lc)
    close_handles(lc);
}

/* 0 or libuv's code (gd_lifecycle_start makes it a gp_error). */
static int init_handles(gd_lifecycle *lc, uv_loop_t *loop) {
  static const int signums[SIG_COUNT] = {SIGTERM, SIGINT, SIGHUP};
  int rc = uv_timer_init(loop, &lc->drain_timer);
  if (rc != 0)
    return rc;
  lc->drain_timer.data = lc;
  lc->open_handles++;
  rc = uv_timer_init(loop, &lc->poll_timer);
  if (rc != 0)
    return rc;
  lc->poll_timer.data = lc;
  lc->open_handles++;
  for (int i = 0; i < SIG_COUNT; i++) {
    rc = uv_signal_init(loop, &lc->signals[i]);
    if (rc != 0)
      return rc;
    lc->signals[i].data = lc;
    lc->open_handles++;
    rc = uv_signal_start(&lc->signals[i], on_signal, signums[i]);
    if (rc != 0)
      return rc;
  }
  return 0;
}

int gd_lifecycle_start(gd_daemon *d, const gd_cli *cli, const char *config_path,
                       gd_notify *notify, gd_lifecycle **out, gp_error *err) {
  gd_lifecycle *lc = calloc(1, sizeof *lc);
  if (!lc)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "signal handlers: not enough memory");
  lc->d = d;
  lc->cli = cli;
  lc->notify = notify;
  if (config_path) {
    snprintf(lc->config_path, sizeof lc->config_path, "%s", config_path);
    lc->have_path = true;
  }
  int rc = init_handles(lc, d->loop);
  if (rc != 0) {
    lc->notify = NULL; /* the caller still owns it on failure */
    close_handles(lc);
    return gp_error_set(err, GP_E_INTERNAL, "signal handlers: %s", uv_strerror(rc));
  }
  *out = lc;
  return 0;
}
