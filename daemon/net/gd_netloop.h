/*
 * gd_netloop.h - the loop threads that serve connections (config key `loops`).
 *
 * One loop thread parses, admits and answers at most ~60k small requests a second, whatever
 * the GPU could do; with several, each serves its own connections. Loop 0 is the main loop: it
 * also runs the listeners, signals, the lifecycle and the metrics hand-off. Loops 1.. each run on
 * a thread of their own. A connection lives on one loop from accept to close: the listener on
 * loop 0 accepts it and hands its descriptor to the next loop in turn, which opens its own
 * handles on it. Everything a connection owns (its handles, decoder, calls, reply queue, its
 * place in its loop's admission line) is that loop thread's alone; what loops share is behind
 * the scheduler's lock (the scheduler and backend, the shared-memory and resident totals,
 * the limits and token: gd_netsched_lock) or, for the connection and peer counts, the peers
 * lock (gd_peers.h); the counters in gd_stats are atomics.
 *
 * Each loop has a port into the scheduler (gd_sched_port): its jobs' events come back to it,
 * and room in the scheduler reaches its waiting connections through it.
 *
 * Work one loop asks of the others (a new limit set on SIGHUP, the drain's deadline, closing
 * every connection, a summary for the drain, a peer's room, a connection to close to make room
 * for a newcomer) travels as a command bit in the
 * target's inbox, with the connections handed over, and is run there by the callbacks the
 * connections layer registered (gd_netloop_hooks). No thread ever touches another loop's
 * handles.
 */
#ifndef GD_NETLOOP_H
#define GD_NETLOOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gd_netsched.h"
#include "gd_server.h"
#include "gp_error.h"

#define GD_NETLOOP_MAX 64

/* Commands, as bits: several coalesce; a loop runs them in this order. */
enum {
  GD_NETLOOP_LIMITS = 1u << 0,       /* copy the server's limits, apply them to every conn */
  GD_NETLOOP_PEER_ROOM = 1u << 1,    /* a peer's budget went down: share waiters try again */
  GD_NETLOOP_FAIL_PENDING = 1u << 2, /* answer what has not started with UNAVAILABLE (why) */
  GD_NETLOOP_CLOSE_ALL = 1u << 3,    /* close every connection (why) */
  GD_NETLOOP_DROP_LOG = 1u << 4,     /* loop 0: log the descriptor drops of a burst when over */
  GD_NETLOOP_SUMMARY = 1u << 5,      /* publish backlog and waiters for the drain */
  GD_NETLOOP_STOP = 1u << 6,         /* close the inbox: the loop ends once its conns closed */
};

typedef struct gd_netloop gd_netloop;

/* What the connections layer does on a loop, on that loop's thread. */
typedef struct {
  /* a connection handed over: open a session on fd (a stream socket, non-blocking not yet set)
   * or close fd */
  void (*adopt)(gd_netloop *nl, int fd, bool tcp, bool shm);
  /* another loop chose connection id of this loop to close to make room */
  void (*evict)(gd_netloop *nl, uint64_t id);
  void (*command)(gd_netloop *nl, unsigned cmd, const char *why);
  void (*room)(void *nl); /* the scheduler's room callback for this loop's port */
} gd_netloop_hooks;

struct gd_netloop {
  gd_server *d;
  size_t index;                    /* 0: the main loop */
  uv_loop_t *loop;
  gd_sched_port *port;
  gd_stats *stats;                 /* its counters (loop 0: the server's); gd_stats.h */
  gd_net_limits limits;            /* this loop's copy of d->limits; loop thread only */
  struct gd_session *sessions;     /* its connections; loop thread only */
  struct gd_session *wait_head, *wait_tail; /* FIFO of its connections waiting for room */
  size_t share_waiters;            /* its connections waiting over their share */
  atomic_size_t share_waiting;     /* share_waiters, for other loops to read */
  uint64_t hold_warned_us;         /* rate limit of its queue.peer_hold_share warnings */
  _Atomic uint64_t backlog;        /* reply bytes queued, as of the last SUMMARY */
  atomic_bool waiters;             /* connections waiting for room, as of the last SUMMARY */
  _Atomic uint64_t summary_asked;  /* SUMMARYs posted (by loop 0), counted under mu */
  _Atomic uint64_t summary_done;   /* of those, answered by the last SUMMARY run */
  uint64_t summary_taken;          /* loop thread: summary_asked when this run took its cmds */

  /* private: the thread, its loop and its inbox */
  gd_stats own_stats;
  uv_loop_t own_loop;
  uv_thread_t thread;
  bool running;                    /* the thread runs (until gd_netloops_stop joined it) */
  uv_sem_t started;
  int start_rc;                    /* the thread's start-up: 0, or a gp code */
  gp_error start_err;
  const gd_netloop_hooks *hooks;
  uv_async_t inbox_async;
  bool inbox_open;
  pthread_mutex_t mu;              /* over the inbox below */
  struct gd_handoff *handoffs;
  size_t handoff_count, handoff_cap;
  unsigned cmds;
  char why[160];
};

/* Loop 0 on main_loop (the scheduler's first port) and n - 1 more loops, each on a thread of its
 * own, serving from the moment this returns. n is 1..GD_NETLOOP_MAX. 0, or a gp code with err
 * (the loops already started are stopped again). */
int gd_netloops_start(gd_server *d, uv_loop_t *main_loop, size_t n, const gd_netloop_hooks *hooks,
                      gp_error *err);

/* The loop the next connection goes to (round robin). */
gd_netloop *gd_netloops_next(gd_server *d);

/* Hands fd (an accepted connection) to nl. 0, or a gp code: then fd is still the caller's. */
int gd_netloop_hand_over(gd_netloop *nl, int fd, bool tcp, bool shm);

/* Posts cmd (with why, when not NULL) to nl's inbox; nl is not loop 0. 0, or a gp code
 * (UNAVAILABLE: the loop is stopping; INTERNAL: libuv could not wake it). */
int gd_netloop_post(gd_netloop *nl, unsigned cmd, const char *why);

/* Asks nl to close its connection id to make room (hooks.evict). 0, or a gp code. */
int gd_netloop_evict(gd_netloop *nl, uint64_t id);

/* Every loop's counters added up into out (started_us: loop 0's). Any thread. */
void gd_netloops_stats(const gd_server *d, gd_stats *out);

/* Runs cmd on every loop: now on loop 0 (the caller's thread), through the inbox on others. */
void gd_netloops_broadcast(gd_server *d, unsigned cmd, const char *why);

/* Main thread, after loop 0's uv_run returned: the other loops close their inboxes and end once
 * their connections are closed; their threads are joined. */
void gd_netloops_stop(gd_server *d);

/* After the backend is destroyed (nothing posts any more): closes the other loops' ports and
 * loops and frees every netloop. */
void gd_netloops_free(gd_server *d);

#endif /* GD_NETLOOP_H */
