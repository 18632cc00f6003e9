/*
 * gd_server.h - what the connections of one daemon share: the loop, their limits, the daemon's
 * counters, the scheduler and backend they hand jobs to, and the list of open connections. The
 * application (app/) fills it from the config and keeps the limits current on SIGHUP.
 *
 * Threads: connections live on several loop threads (gd_netloop.h). What is marked "peers lock"
 * here is read and written under the peer table's own lock (gd_peers_lock(&peers), the innermost
 * lock: gd_peers.h); what is marked "shared" under the scheduler's lock (gd_netsched_lock(sched):
 * app/ writes the limits and the token under it, and the regions' and resident operands' totals
 * move with the budget it guards); what is marked "loop 0" only on the main loop's thread; the
 * rest is set before the loops start, or is atomic.
 */
#ifndef GD_SERVER_H
#define GD_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gd_auth_limit.h"
#include "gd_backend.h"
#include "gd_peers.h"
#include "gd_resident.h"
#include "gd_netsched.h"
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
  double peer_hold_share;          /* ... for one peer's resident operands and regions, always */
  uint32_t max_requests_in_flight; /* per connection */
  uint64_t max_buffered_bytes;     /* per connection: reply bytes queued for writing */
  gp_limits proto;                 /* the decoder's */
  uint64_t idle_ms, request_ms;    /* 0 disables */
  uint64_t min_receive_rate;       /* bytes a second for large requests; 0 disables */
  uint64_t min_rate_bytes;         /* payloads from this size on are held to it */
  uint64_t min_rate_grace_ms;      /* the rate counts after this start */
  uint64_t hold_stall_ms;          /* a request holding room others wait for may stall this long */
  uint32_t auth_max_failures;      /* failed auths a second per peer; 0: no limit */
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

struct gd_netloop;

typedef struct gd_server {
  uv_loop_t *loop;                 /* loop 0's: the listeners' */
  gd_net_limits limits;            /* shared; live: SIGHUP replaces them (each loop keeps a copy) */
  gd_auth_token token;             /* shared; live: SIGHUP re-reads it */
  bool exposed_tcp_ok;             /* a token, or auth.allow_unauthenticated_tcp: listeners
                                      systemd hands over may be reachable from elsewhere */
  bool exposed_tcp_held;           /* loop 0: a TCP listener other machines can reach is open,
                                      however it came (its bound address, not the config's) */
  gd_stats *stats;
  gd_backend *backend;
  gd_sched *sched;
  struct gd_netloop **loops;       /* the loop threads and their connections (gd_netloop.h) */
  size_t nloops;
  size_t next_loop;                /* loop 0: where the next connection goes */
  struct gd_session *all_sessions; /* peers lock: every loop's open connections (not closing) */
  atomic_size_t connections;       /* sessions not yet closing; changed under the peers lock */
  gd_peers peers;                  /* peers lock: those sessions counted per peer */
  uint64_t next_session_id;        /* peers lock */
  atomic_bool draining;            /* refuse new connections */
  long unix_socket_gid;            /* group of the Unix socket files; -1: the process's */
  uint64_t fd_limit;               /* RLIMIT_NOFILE (soft) at start; 0: unknown, no fd check
                                      (the check reads the limit now: it may be lowered) */
  uv_timer_t *fd_drop_timer;       /* loop 0: logs what a burst of drops left unlogged */
  uint64_t fd_drop_logged_us;      /* shared: rate limit of the out-of-descriptors warning */
  uint64_t fd_drops_unlogged;      /* shared: dropped since that warning */
  gd_shm_totals shm;               /* shared: shared-memory regions of every connection */
  gd_resident_totals resident;     /* shared: resident operands of every connection */
  gd_auth_limit auth_limit;        /* peers lock: failed auths per peer */
  atomic_size_t line_waiters;      /* requests of every loop waiting in line for shared room */
} gd_server;

#endif /* GD_SERVER_H */
