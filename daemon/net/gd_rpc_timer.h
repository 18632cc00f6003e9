/*
 * gd_rpc_timer.h - a connection's one timer. timeouts.idle_ms with nothing in flight;
 * timeouts.request_ms for a request that started arriving (not counting time the backend keeps
 * reading paused or the request waits for admission), and for replies that have not moved by a
 * byte (a client that stopped reading); the staging hold (gpu.staging_hold_ms); and for a
 * request waiting for admission, its retry when room appeared and a look every 200 ms whether
 * its client hung up. The policy is gd_timeouts.c.
 *
 * The thread of the connection's loop only (gd_netloop.h).
 */
#ifndef GD_RPC_TIMER_H
#define GD_RPC_TIMER_H

#include <uv.h>

#include "gd_session.h"

/* (Re)arms the timer for the earliest timeout that applies now, or stops it; it also publishes
 * whether the connection is idle (idle_since_us). Call after every change of its state. */
void gd_rpc_timer_update(gd_session *s);

/* The timer's callback (gd_session_hooks.tick: admission starts it at once to retry). */
void gd_rpc_timer_tick(uv_timer_t *timer);

#endif /* GD_RPC_TIMER_H */
