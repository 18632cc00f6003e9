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
 * The session's struct is private to gd_session.c: the other files reach its parts through the
 * functions below, each part owned by one file (the message being decoded: gd_rpc.c; its
 * authentication: gd_auth_calls.c; a header waiting for room: gd_admission.c; the lists:
 * gd_sessions.c).
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

typedef struct gd_session gd_session; /* private to gd_session.c */

/* What the layers of a connection below the dispatch ask of it (set by gd_rpc_start). */
typedef struct {
  void (*kick)(gd_conn *c);          /* something that held it back went away: decode, read */
  void (*resume)(gd_session *s);     /* the backend takes payload again (INPUT_RESUME) */
  void (*tick)(uv_timer_t *timer);   /* the connection timer's callback */
} gd_session_hooks;

/* The message being decoded: gd_rpc.c's; the layers below it read it and drop it. */
typedef struct {
  bool in_request;           /* a REQUEST was seen and MESSAGE_END has not come */
  gp_method method;
  uint32_t msgid;
  gd_call *cur;              /* its call, for a gemm */
  uint64_t arg;              /* shm_register's size, shm_unregister's region */
  gp_cuda_reg cuda;          /* cuda_register's params */
  gd_shm_feed feed;          /* an operand being copied from a region (feed.left > 0) */
  uint64_t msg_started_us;   /* moved on by the time spent paused or waiting */
  bool paused;               /* the backend wants no more payload for now */
  uint64_t paused_since_us;
  bool eof;                  /* the client shut its side: answer what is in flight, then close */
  bool hangup;               /* stop reading, close once replies are out (a wrong token) */
  bool quiet;                /* closed without a log line of its own (a rate-limited drop) */
} gd_session_msg;

/* Its authentication: gd_auth_calls.c's. */
typedef struct {
  bool tcp;                  /* accepted on a TCP listener */
  bool authenticated;        /* may use every method (gd_auth.h) */
  bool throttled;            /* its last auth came while its peer had failed too often */
  bool token_ok;             /* auth: the token it carried matched */
} gd_session_auth;

/* A gemm header waiting for room in the scheduler: gd_admission.c's. */
typedef struct {
  bool waiting;
  bool in_line;              /* waiting in its loop's FIFO for shared room; else over its
                              * connection's or peer's share, out of line */
  bool wake;                 /* room appeared: try again on the next timer tick */
  gp_gemm_hdr hdr;
  bool has_c;
  uint64_t since_us;
  gd_session *prev, *next;   /* the FIFO (gd_netloop.wait_head) */
} gd_session_wait;

/* A new session of loop nl (its transport's events: events), counted nowhere yet; NULL when out
 * of memory. */
gd_session *gd_session_new(gd_server *d, struct gd_netloop *nl, const gd_conn_events *events);
/* Frees what gd_session_new allocated (the transport already freed or never opened). */
void gd_session_free(gd_session *s);

/* Its parts. The session itself is private to gd_session.c; each part says whose it is. */
gd_conn *gd_session_conn(const gd_session *s);
gd_server *gd_session_server(const gd_session *s);
struct gd_netloop *gd_session_loop(const gd_session *s);
gp_decoder *gd_session_decoder(const gd_session *s);
gd_session_msg *gd_session_msg_of(const gd_session *s);
gd_session_auth *gd_session_auth_of(const gd_session *s);
gd_session_wait *gd_session_wait_of(const gd_session *s);
const gd_session_hooks *gd_session_hooks_of(const gd_session *s);
void gd_session_set_hooks(gd_session *s, const gd_session_hooks *hooks);

/* Counted in the server's gd_peers (gd_sessions.c's). */
bool gd_session_peer_counted(const gd_session *s);
void gd_session_set_peer_counted(gd_session *s, bool counted);
/* Its last activity while idle, else 0 (gd_rpc_timer.c publishes it): for other loops, the
 * caps' choice of one to close. Any thread. */
uint64_t gd_session_idle_since(const gd_session *s);
void gd_session_set_idle_since(gd_session *s, uint64_t us);

/* The lists: its loop's connections (nl->sessions, the loop's thread), and every loop's
 * (d->all_sessions, under the peers lock). link puts s on both and counts it open; unlink_all
 * takes it off every loop's (under the peers lock), unlink_loop off its loop's. */
void gd_session_link(gd_session *s);
void gd_session_unlink_all(gd_session *s);
void gd_session_unlink_loop(gd_session *s);
gd_session *gd_session_next(const gd_session *s);
gd_session *gd_session_all_next(const gd_session *s);

/* The session whose call list is l. */
gd_session *gd_session_of_calls(gd_calls *l);

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
