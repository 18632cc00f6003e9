/*
 * gd_rpc.h - the protocol layer of a connection: the streaming decoder, msgid and envelopes,
 * dispatch of methods (ping/info/stats/auth answered here, gemm admitted through gd_call.h), the
 * job events of its calls, backpressure, and the timeouts. Below it: the transport (gd_conn.h,
 * gd_replyq.h) and the call records (gd_call.h). Above it: gd_session.c (accept, the list of
 * connections), which hands its transport events to the functions here.
 *
 * Backpressure: reading stops when the backend asked to pause, and, between messages, while
 * the connection has limits.max_requests_in_flight gemm calls unanswered or
 * limits.max_buffered_bytes of replies queued. Bytes already read but not yet decoded are kept
 * and decoded first when reading resumes.
 *
 * Admission: a gemm that fits an idle daemon but not now (queue.max_jobs or what is left of
 * queue.memory_budget: GD_ADMIT_FULL) is not refused; its connection stops reading and waits in
 * its loop's FIFO of waiting connections. When the scheduler reports room, the first waiter's
 * timer fires at once and admission is tried again; a waiter that gets in wakes the next one.
 * A gemm over its connection's or peer's share of the budget (GD_ADMIT_OVER_SHARE) waits out
 * of line, so it never blocks other connections; it tries again when a job of its peer is
 * computed or let go. Waiting does not count against timeouts.request_ms.
 *
 * The thread of the connection's loop only (gd_netloop.h).
 */
#ifndef GD_RPC_H
#define GD_RPC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "gd_call.h"
#include "gd_conn.h"
#include "gd_server.h"
#include "gd_shm_calls.h"
#include "gp_decode.h"

typedef struct gd_session gd_session;

struct gd_session {
  gd_conn conn;              /* first: the transport's callbacks get &conn */
  gd_server *d;
  struct gd_netloop *nl;     /* the loop thread it lives on */
  struct gd_session *prev, *next;           /* its loop's connections */
  struct gd_session *all_prev, *all_next;   /* every loop's, under the shared lock */
  _Atomic uint64_t idle_since_us; /* its last activity while idle (gd_rpc_idle), else 0: for
                                     other loops (the caps' choice of one to close) */
  gp_decoder *dec;
  bool paused;               /* the backend wants no more payload for now */
  bool eof;                  /* the client shut its side: answer what is in flight, then close */
  bool auth_throttled;       /* its last auth came while its peer had failed too often */
  bool quiet;                /* closed without a log line of its own (a rate-limited drop) */
  bool peer_counted;         /* counted in the server's gd_peers */
  bool tcp;                  /* accepted on a TCP listener */
  bool authenticated;        /* may use every method (gd_auth.h) */
  bool hangup;               /* stop reading, close once replies are out (a wrong token) */

  /* the message being decoded */
  bool in_request;           /* a REQUEST was seen and MESSAGE_END has not come */
  gp_method method;
  uint32_t msgid;
  gd_call *cur;              /* its call, for a gemm */
  uint64_t arg;              /* shm_register's size, shm_unregister's region */
  gp_cuda_reg cuda;          /* cuda_register's params */
  gd_shm_feed feed;          /* an operand being copied from a region (feed.left > 0) */
  bool token_ok;             /* auth: the token it carried matched */
  uint64_t msg_started_us;   /* moved on by the time spent paused or waiting */
  uint64_t paused_since_us;

  /* a gemm header waiting for room in the scheduler (see the top) */
  bool waiting;
  bool in_line;              /* waiting in the server's FIFO for shared room; else over its
                              * connection's or peer's share, out of line */
  bool wake;                 /* room appeared: try again on the next timer tick */
  gp_gemm_hdr wait_hdr;
  bool wait_has_c;
  uint64_t wait_since_us;
  struct gd_session *wait_prev, *wait_next;
};

/* The transport's events (gd_conn_events) that the protocol layer handles. */
bool gd_rpc_window(gd_conn *c, void **ptr, size_t *len);
void gd_rpc_data(gd_conn *c);
void gd_rpc_eof(gd_conn *c);
void gd_rpc_kick(gd_conn *c);
void gd_rpc_queued(gd_conn *c);

struct gd_netloop;

/* The scheduler's room callback for a loop's port, arg the gd_netloop: wakes the first of its
 * connections waiting for admission (all of them while draining). */
void gd_rpc_room(void *netloop);

/* A peer's jobs were let go on another loop: this loop's connections waiting over their share
 * try again. */
void gd_rpc_peer_room(struct gd_netloop *nl);

/* Nothing in flight, nothing being read or written, no request waiting: closing it loses no
 * work (the per-peer caps may close it to make room). */
bool gd_rpc_idle(const gd_session *s);

/* The connection closes: it stops waiting, and what its jobs hold is no longer its peer's. */
void gd_rpc_closing(gd_session *s);

/* A new connection (tcp: accepted on a TCP listener): its authentication state, then starts
 * reading and the timer. */
void gd_rpc_start(gd_session *s, bool tcp);

/* New decoder limits (SIGHUP), then re-evaluates reading and the timer. */
void gd_rpc_apply_limits(gd_session *s);

/* Answers every call whose reply has not started with UNAVAILABLE and lets its job go.
 * Returns how many. */
size_t gd_rpc_fail_pending(gd_session *s, const char *why);

#endif /* GD_RPC_H */
