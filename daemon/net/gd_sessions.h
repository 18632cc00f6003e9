/*
 * gd_sessions.h - client connections as the rest of the daemon sees them: accept, close, and
 * the operations over every connection (SIGHUP limits, the drain deadline, the write backlog).
 * A connection's layers, each calling only downwards, are listed in gd_session.h; its timeouts
 * in gd_rpc_timer.h.
 *
 * A client that shuts down its writing side still gets the replies to its complete
 * requests; then the connection closes. When it closes with jobs in flight, those jobs are
 * abandoned to the scheduler (running ones finish and are dropped there). Loop 0's thread
 * only, but for what a loop's own hooks run (gd_netloop.h).
 */
#ifndef GD_SESSIONS_H
#define GD_SESSIONS_H

#include <stdbool.h>
#include <uv.h>

#include "gd_server.h"
#include "gp_error.h"

typedef struct gd_session gd_session;

/* Starts serving on `loops` loop threads (gd_netloop.h), loop 0 being loop (the caller's).
 * 0, or a gp code with err. */
int gd_sessions_start(gd_server *d, uv_loop_t *loop, size_t loops, gp_error *err);
/* The end of what gd_sessions_start began, on every path (start-up failed or shutdown): loop 0's
 * drop timer closed if gd_sessions_close_all did not, and the other loops stopped once their
 * connections are closed (gd_netloops_stop). Then uv_run loop 0 to let the handles go. */
void gd_sessions_stop(gd_server *d);

/* Connections open now (every loop). */
size_t gd_sessions_count(gd_server *d);

/* Accepts one pending connection from server (a listening pipe or TCP handle) and starts
 * serving it. Over limits.max_connections (or while draining) the connection is accepted and
 * closed at once: the client sees EOF. Returns 0, or a gp code with err filled (libuv's reason,
 * logged by the caller). */
int gd_sessions_accept(gd_server *d, uv_stream_t *server, gp_error *err);

/* Closes a session: stops reading, abandons its jobs, cancels its writes. why is logged. */
void gd_sessions_close(gd_session *s, const char *why);

/* Every session of every loop: the server's limits (SIGHUP) become each loop's, then reading
 * and timers are re-evaluated. */
void gd_sessions_apply_limits(gd_server *d);

/* Drain deadline reached: answer every job whose reply has not started with UNAVAILABLE and
 * abandon it. Returns how many were answered so on loop 0 (other loops log their own). */
size_t gd_sessions_fail_pending(gd_server *d, const char *why);

/* Loop 0, while draining: true while replies are still queued for writing or requests wait
 * for admission on any loop (*backlog: the bytes). Other loops answer through their inbox, so
 * what they say is one look old: false only once every loop answered the previous look. */
bool gd_sessions_busy(gd_server *d, uint64_t *backlog);

/* A connection was dropped for want of file descriptors (where: the listener or peer, for the
 * log): counted in stats (connections_dropped) and logged at most once a second. */
void gd_sessions_note_dropped(gd_server *d, const char *where);

/* Closes every session. */
void gd_sessions_close_all(gd_server *d, const char *why);

#endif /* GD_SESSIONS_H */
