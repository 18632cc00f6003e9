/*
 * gd_admission.h - a connection's gemm headers admitted or made to wait, and backpressure.
 *
 * Admission: a gemm that fits an idle daemon but not now (queue.max_jobs or what is left of
 * queue.memory_budget: GD_ADMIT_FULL) is not refused; its connection stops reading and waits in
 * its loop's FIFO of waiting connections. When the scheduler reports room, the first waiter's
 * timer fires at once and admission is tried again; a waiter that gets in wakes the next one.
 * A gemm over its connection's or peer's share of the budget (GD_ADMIT_OVER_SHARE) waits out
 * of line, so it never blocks other connections; it tries again when a job of its peer is
 * computed or let go. Waiting does not count against timeouts.request_ms. What a peer holds
 * outside jobs (resident operands, regions) is held to queue.peer_hold_share here too.
 *
 * Backpressure: between messages a connection reads on only while it has fewer than
 * limits.max_requests_in_flight gemm calls unanswered and less than limits.max_buffered_bytes
 * of replies queued or owed.
 *
 * The thread of the connection's loop only (gd_netloop.h).
 */
#ifndef GD_ADMISSION_H
#define GD_ADMISSION_H

#include <stdbool.h>
#include <stdint.h>

#include "gd_session.h"
#include "gp_decode.h"

struct gd_netloop;

/* A gemm's header (ev): admitted (s->cur is its call), refused (answered), or waiting. */
void gd_admission_request(gd_session *s, const gp_event *ev);

/* A waiter's timer fired after room appeared: it tries again, then reads on (hooks.kick). */
void gd_admission_retry(gd_session *s);

/* The payload bytes a waiting request still needs (its client gone with fewer sent, it can
 * never be admitted usefully). */
uint64_t gd_admission_needs(const gd_session *s);

/* Stops waiting (no-op when not); the time spent waiting does not count against
 * timeouts.request_ms, and the next in line is woken. */
void gd_admission_stop_waiting(gd_session *s);

/* The scheduler's room callback for a loop's port, arg the gd_netloop: wakes the first of its
 * connections waiting for admission (all of them while draining). */
void gd_admission_room(void *netloop);

/* A peer's jobs were let go on another loop: this loop's connections waiting over their share
 * try again. */
void gd_admission_peer_room(struct gd_netloop *nl);

/* The call list's uncounted callback (gd_call.h): the peer's count goes down, and whoever of
 * that peer waits over its share tries again. */
void gd_admission_uncounted(gd_calls *l, uint64_t bytes);

/* The connection closes: it stops waiting, and what its jobs hold is no longer its peer's. */
void gd_admission_closing(gd_session *s);

/* 0 when s's peer may hold `more` bytes besides what it holds (queue.peer_hold_share), else
 * RESOURCE_EXHAUSTED with err (what: the method). Under the shared lock (the connections'
 * tables); it takes the peers lock for the list of connections. */
int gd_admission_check_peer_hold(gd_session *s, const char *what, uint64_t more, gp_error *err);

/* Whether the connection may decode now, and reading started or stopped to match. */
bool gd_admission_may_decode(const gd_session *s);
void gd_admission_update_reading(gd_session *s);

#endif /* GD_ADMISSION_H */
