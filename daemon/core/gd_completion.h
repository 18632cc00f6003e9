/*
 * gd_completion.h - the completion queue: the one way back from backend threads to the loop.
 *
 * Backends answer every job through gd_completion_post() (any thread): the event is queued under a
 * lock on the queue of the job's loop (one per loop thread) and that loop is woken with
 * uv_async_send (wake-ups coalesce; the loop drains the whole queue each time). On the loop thread
 * the queue hands each event, in posting order, to its deliver callback (the scheduler's). Events
 * of a job that is released meanwhile are dropped (gd_completion_forget), never delivered.
 */
#ifndef GD_COMPLETION_H
#define GD_COMPLETION_H

#include <uv.h>

#include "gd_job.h"
#include "gp_error.h"

typedef struct gd_completion gd_completion;
typedef struct gd_sched gd_sched;
typedef void (*gd_completion_deliver_cb)(gd_sched *to, const gd_backend_event *ev);

/* Creates the queue on loop; deliver(to, ev) gets every event on the loop thread. The async
 * handle does not keep the loop alive. Returns 0, or a gp code with err filled. */
int gd_completion_new(uv_loop_t *loop, gd_completion_deliver_cb deliver, gd_sched *to,
                      gd_completion **out, gp_error *err);

/* Thread-safe: queue ev for the loop and wake it. A backend posts to its gd_backend.sink; the
 * event goes to ev->job->queue instead where the job has one (the queue of the loop thread
 * that admitted it: gd_sched_port).
 * Returns 0, or GP_E_RESOURCE_EXHAUSTED when out of memory (the event is then lost: callers
 * preallocate or retry where losing it matters), or GP_E_INTERNAL without a queue. */
int gd_completion_post(gd_completion *q, const gd_backend_event *ev);

/* Loop thread: job is about to be freed; drop its events still queued or still ahead in the
 * batch being delivered. */
void gd_completion_forget(gd_completion *q, const gd_job *job);

/* Closes the async handle (the loop must run once more to finish closing it). */
void gd_completion_close(gd_completion *q);
/* Frees the queue and undelivered events; after gd_completion_close and the close callback. */
void gd_completion_free(gd_completion *q);

#endif /* GD_COMPLETION_H */
