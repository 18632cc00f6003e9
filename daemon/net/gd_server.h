/*
 * gd_server.h - what the connections of one daemon share: the loop, their limits, the daemon's
 * counters, the scheduler and backend they hand jobs to, and the list of open connections. The
 * application (app/) fills it from the config and keeps the limits current on SIGHUP. Loop
 * thread only.
 */
#ifndef GD_SERVER_H
#define GD_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gd_backend.h"
#include "gd_peers.h"
#include "gd_resident.h"
#include "gd_sched.h"
#include "gd_shm.h"
#include "gd_stats.h"
#include "gp_types.h"

/* The config keys connections obey (gd_config.h names them). */
typedef struct {
  uint32_t max_connections;
  uint32_t reserved_fds;           /* a connection whose fd leaves fewer free is dropped */
  uint32_t max_connections_per_peer; /* per uid (Unix) or address (TCP) */
  double connection_memory_share;  /* of queue.memory_budget, for one connection */
  double peer_memory_share;        /* ... for one peer, while other peers are connected */
  uint32_t max_requests_in_flight; /* per connection */
  uint64_t max_buffered_bytes;     /* per connection: reply bytes queued for writing */
  gp_limits proto;                 /* the decoder's */
  uint64_t idle_ms, request_ms;    /* 0 disables */
  uint64_t min_receive_rate;       /* bytes a second for large requests; 0 disables */
  uint64_t min_rate_bytes;         /* payloads from this size on are held to it */
  uint64_t min_rate_grace_ms;      /* the rate counts after this start */
  uint64_t staging_hold_ms;        /* gpu.staging_hold_ms */
  unsigned unix_socket_mode;       /* listeners' socket files */
  gd_shm_limits shm;               /* shm.* */
  gd_resident_limits resident;     /* resident.* */
} gd_net_limits;

/* The shared secret of TCP connections (auth.token_file); len 0: none configured. */
typedef struct {
  size_t len;
  uint8_t bytes[GP_AUTH_TOKEN_MAX];
} gd_auth_token;

typedef struct gd_server {
  uv_loop_t *loop;
  gd_net_limits limits;            /* live: SIGHUP replaces them */
  gd_auth_token token;             /* live: SIGHUP re-reads it */
  bool exposed_tcp_ok;             /* a token, or auth.allow_unauthenticated_tcp: listeners
                                      systemd hands over may be reachable from elsewhere */
  gd_stats *stats;
  gd_backend *backend;
  gd_sched *sched;
  struct gd_session *sessions;     /* every open connection */
  struct gd_session *wait_head, *wait_tail; /* FIFO of connections waiting for admission */
  size_t share_waiters;            /* connections waiting over their share, out of line */
  size_t connections;              /* sessions not yet closing */
  gd_peers peers;                  /* those sessions counted per peer */
  uint64_t next_session_id;
  bool draining;                   /* refuse new connections */
  long unix_socket_gid;            /* group of the Unix socket files; -1: the process's */
  uint64_t fd_limit;               /* RLIMIT_NOFILE (soft); 0: unknown, no fd check */
  uint64_t fd_drop_logged_us;      /* rate limit of the out-of-descriptors warning */
  uint64_t fd_drops_unlogged;      /* dropped since that warning */
  gd_shm_totals shm;               /* shared-memory regions of every connection */
  gd_resident_totals resident;     /* resident operands of every connection */
} gd_server;

#endif /* GD_SERVER_H */
