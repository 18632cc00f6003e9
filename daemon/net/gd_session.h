/*
 * gd_session.h - one connection: its state (the transport, the message being decoded, its
 * authentication, a gemm header waiting for room) and what every layer of its protocol does
 * with it. The lowest of the connection's protocol files, which sit on it in this order, each
 * calling only downwards:
 *   gd_sessions.c    accept/refuse, the daemon's list of connections, the operations over all
 *   gd_rpc.c         the request dispatch: decoder events, envelopes, methods
 *   gd_rpc_timer.c   the connection's timer (policy: gd_timeouts.c)
 *   gd_auth_calls.c  the auth method (policy: gd_auth.c, gd_auth_limit.c)
 *   gd_admission.c   gemm admission, waiting for room or share, backpressure
 *   gd_results.c     the job events of its calls: replies for results, failures
 *   gd_session.c     this state, error replies, the shared lock, the request being read
 * and below them the transport (gd_conn.c, gd_replyq.c) and the call records (gd_call.c). What a
 * lower file needs of a higher one (decode again, resume a paused payload, the timer's tick) it
 * reaches through the hooks gd_rpc.c sets (gd_session_hooks), the way libuv calls back.
 *
 * The thread of the connection's loop only (gd_netloop.h), but for what is marked shared.
 */
#ifndef GD_SESSION_H
#define GD_SESSION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "gd_call.h"
#include "gd_conn.h"
#include "gd_server.h"
#include "gd_shm_calls.h"
#include "gp_decode.h"

typedef struct gd_session gd_session;

/* What the layers of a connection below the dispatch ask of it (set by gd_rpc_start). */
typedef struct {
  void (*kick)(gd_conn *c);          /* something that held it back went away: decode, read */
  void (*resume)(gd_session *s);     /* the backend takes payload again (INPUT_RESUME) */
  void (*tick)(uv_timer_t *timer);   /* the connection timer's callback */
} gd_session_hooks;

struct gd_session {
  gd_conn conn;              /* first: the transport's callbacks get &conn */
  gd_server *d;
  const gd_session_hooks *hooks; /* the protocol layer's (gd_rpc_start) */
  struct gd_netloop *nl;     /* the loop thread it lives on */
  struct gd_session *prev, *next;           /* its loop's connections */
  struct gd_session *all_prev, *all_next;   /* every loop's, under the peers lock */
  _Atomic uint64_t idle_since_us; /* its last activity while idle (gd_session_idle), else 0: for
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

  /* a gemm header waiting for room in the scheduler (gd_admission.h) */
  bool waiting;
  bool in_line;              /* waiting in the server's FIFO for shared room; else over its
                              * connection's or peer's share, out of line */
  bool wake;                 /* room appeared: try again on the next timer tick */
  gp_gemm_hdr wait_hdr;
  bool wait_has_c;
  uint64_t wait_since_us;
  struct gd_session *wait_prev, *wait_next;
};

/* The session of a transport (its first member). */
gd_session *gd_session_of(gd_conn *c);

/* Sends an encoded reply (sbuf is emptied). */
void gd_session_send(gd_session *s, msgpack_sbuffer *sbuf);
/* Error replies to msgid, counted under method: logged (error_for), not logged (quiet), or to a
 * gemm (error). None is sent once the connection is closing. */
void gd_session_error_quiet(gd_session *s, gp_method method, uint32_t msgid, int code,
                            const char *message);
void gd_session_error_for(gd_session *s, gp_method method, uint32_t msgid, int code,
                          const char *message);
void gd_session_error(gd_session *s, uint32_t msgid, int code, const char *message);

/* The scheduler's lock, over what loops share but the counts under the peers lock (gd_server.h
 * says which). */
void gd_session_lock_shared(const gd_session *s);
void gd_session_unlock_shared(const gd_session *s);

/* Between messages: no message is being decoded. */
bool gd_session_at_boundary(const gd_session *s);

/* The backend accepted the bytes but wants no more for now; timeouts.request_ms stops counting
 * until gd_session_resume. */
void gd_session_pause(gd_session *s);
void gd_session_resume(gd_session *s);

/* Drops the request being read before it was submitted, with any pause it asked for. The caller
 * makes the decoder skip the rest of the message (or it already does). No-op without one. */
void gd_session_drop_current(gd_session *s);
/* The current gemm is answered with an error now: skip the rest of it, drop its call. */
void gd_session_refuse_current(gd_session *s, uint32_t msgid, int code, const char *message);

/* Nothing in flight, nothing being read or written, no request waiting: closing it loses no
 * work (the per-peer caps may close it to make room). */
bool gd_session_idle(const gd_session *s);

#endif /* GD_SESSION_H */
