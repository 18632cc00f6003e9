/*
 * gd_daemon.h - the daemon's shared state: one per process, owned by main.c,
 * touched on loop 0's thread; what the other loop threads share of it is
 * in srv (gd_server.h says which fields, under which lock).
 */
#ifndef GD_DAEMON_H
#define GD_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "gd_backend.h"
#include "gd_config.h"
#include "gd_sched.h"
#include "gd_server.h"
#include "gd_stats.h"

struct gd_listeners;

typedef struct gd_daemon {
  uv_loop_t *loop;
  gd_config cfg;                  /* live: SIGHUP replaces limits, log level and timeouts */
  gd_stats stats;
  gd_backend *backend;
  gd_sched *sched;
  struct gd_listeners *listeners;
  gd_server srv;                  /* the connections' share (srv.draining: SIGTERM/SIGINT seen) */
} gd_daemon;

#endif /* GD_DAEMON_H */
