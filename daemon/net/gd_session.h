/*
 * gd_session.h - one client connection: reading with the streaming decoder,
 * admission of gemm requests, payloads read straight into the job's buffers,
 * replies written by msgid in any order, per-connection caps and
 * backpressure, idle and request-arrival timeouts.
 *
 * Loop thread only. A session is freed in its close callback, never inside a
 * read or write callback. When it closes with jobs in flight, those jobs are
 * abandoned to the scheduler (running ones finish and are dropped there).
 *
 * Backpressure: the session stops reading (uv_read_stop) when the backend
 * asked it to pause, and, between messages, while it has
 * limits.max_requests_in_flight gemm jobs unanswered or
 * limits.max_buffered_bytes of replies queued for writing. Bytes already read
 * but not yet decoded are kept and decoded first when reading resumes.
 *
 * Replies: C is written from the backend's memory. Where that memory is shared
 * between jobs (GPU staging, ops.output_in_job_memory false) it is written
 * from there only while the socket takes it (small probe pieces are copied to
 * learn when it drains); what a slow client has not taken
 * gpu.staging_hold_ms after the chunk arrived is copied and the staging given
 * back, so a client that does not read holds no staging for longer. Such
 * copies are bounded by the connection's jobs in flight.
 *
 * Timeouts (one timer per session): timeouts.idle_ms with nothing in flight;
 * timeouts.request_ms for a request that started arriving (not counting time
 * the backend keeps reading paused: waiting for memory is not a stalled
 * client), and for replies
 * that have not moved by a byte (a client that stopped reading). A client
 * that shuts down its writing side still gets the replies to its complete
 * requests; then the session closes.
 */
#ifndef GD_SESSION_H
#define GD_SESSION_H

#include <stdbool.h>
#include <uv.h>

#include "gd_daemon.h"
#include "gd_sched.h"

typedef struct gd_session gd_session;

/* Accepts one pending connection from server (a listening pipe or TCP handle) and starts
 * serving it. Over limits.max_connections (or while draining) the connection is accepted and
 * closed at once: the client sees EOF. Returns 0 or a uv error (logged by the caller). */
int gd_session_accept(gd_daemon *d, uv_stream_t *server);

/* Closes a session: stops reading, abandons its jobs, cancels its writes. why is logged. */
void gd_session_close(gd_session *s, const char *why);

/* Every session: new decoder limits (SIGHUP), then re-evaluates reading and timers. */
void gd_sessions_apply_limits(gd_daemon *d);

/* Drain deadline reached: answer every job whose reply has not started with UNAVAILABLE and
 * abandon it. Returns how many were answered so. */
size_t gd_sessions_fail_pending(gd_daemon *d, const char *why);

/* Bytes of replies still queued for writing across all sessions. */
uint64_t gd_sessions_write_backlog(const gd_daemon *d);

/* Closes every session. */
void gd_sessions_close_all(gd_daemon *d, const char *why);

#endif /* GD_SESSION_H */
