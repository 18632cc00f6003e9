/*
 * gd_rpc.h - the request dispatch of a connection: the streaming decoder, msgid and envelopes,
 * methods (ping/info/stats answered through gd_methods.h, shm and CUDA IPC through
 * gd_shm_calls.h and gd_cuda_ipc.h, put/free through gd_resident.h, auth through
 * gd_auth_calls.h), a gemm's header handed to admission (gd_admission.h), its payload to the
 * scheduler and its message end submitted. Above it: gd_sessions.c (accept, the list of
 * connections), which hands its transport events to the functions here. Below it: the rest of
 * the connection's layers (gd_session.h lists them).
 *
 * Backpressure: reading stops when the backend asked to pause, and, between messages, while
 * the connection has limits.max_requests_in_flight gemm calls unanswered or
 * limits.max_buffered_bytes of replies queued (gd_admission.h). Bytes already read but not yet
 * decoded are kept and decoded first when reading resumes.
 *
 * The thread of the connection's loop only (gd_netloop.h).
 */
#ifndef GD_RPC_H
#define GD_RPC_H

#include <stdbool.h>
#include <stddef.h>

#include "gd_conn.h"
#include "gd_session.h"

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
