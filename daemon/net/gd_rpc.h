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
 * Loop thread only.
 */
#ifndef GD_RPC_H
#define GD_RPC_H

#include <stdbool.h>
#include <stdint.h>

#include "gd_call.h"
#include "gd_conn.h"
#include "gd_server.h"
#include "gp_decode.h"

typedef struct gd_session gd_session;

struct gd_session {
  gd_conn conn;              /* first: the transport's callbacks get &conn */
  gd_server *d;
  struct gd_session *prev, *next;
  gp_decoder *dec;
  bool paused;               /* the backend wants no more payload for now */
  bool eof;                  /* the client shut its side: answer what is in flight, then close */
  bool tcp;                  /* accepted on a TCP listener */
  bool authenticated;        /* may use every method (gd_auth.h) */
  bool hangup;               /* stop reading, close once replies are out (a wrong token) */

  /* the message being decoded */
  bool in_request;           /* a REQUEST was seen and MESSAGE_END has not come */
  gp_method method;
  uint32_t msgid;
  gd_call *cur;              /* its call, for a gemm */
  bool token_ok;             /* auth: the token it carried matched */
  uint64_t msg_started_us;   /* moved on by the time spent paused */
  uint64_t paused_since_us;
};

/* The transport's events (gd_conn_events) that the protocol layer handles. */
bool gd_rpc_window(gd_conn *c, void **ptr, size_t *len);
void gd_rpc_data(gd_conn *c);
void gd_rpc_eof(gd_conn *c);
void gd_rpc_kick(gd_conn *c);
void gd_rpc_queued(gd_conn *c);

/* A new connection (tcp: accepted on a TCP listener): its authentication state, then starts
 * reading and the timer. */
void gd_rpc_start(gd_session *s, bool tcp);

/* New decoder limits (SIGHUP), then re-evaluates reading and the timer. */
void gd_rpc_apply_limits(gd_session *s);

/* Answers every call whose reply has not started with UNAVAILABLE and lets its job go.
 * Returns how many. */
size_t gd_rpc_fail_pending(gd_session *s, const char *why);

#endif /* GD_RPC_H */
