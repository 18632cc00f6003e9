/*
 * gd_trim.h - freed heap memory given back to the system when the daemon is idle
 * (queue.trim_idle_ms). Clients that die mid-upload, or many large jobs, leave the C heap with
 * free chunks that glibc keeps (a large buffer freed in the middle of the heap, or below a
 * chunk still in use, is never returned by free()): memory outside queue.memory_budget that
 * the daemon would hold at idle for ever. Every trim_idle_ms a timer on loop 0 looks: no job
 * in flight at this look and the last one, and something happened since the last trim (jobs
 * admitted, connections accepted, resident operands put) -> malloc_trim(0), which returns
 * the free pages of every arena. It costs a few milliseconds on the loop, only when idle.
 *
 * Loop 0's thread only.
 */
#ifndef GD_TRIM_H
#define GD_TRIM_H

#include <stdint.h>
#include <uv.h>

#include "gp_error.h"

struct gd_daemon;
typedef struct gd_trim gd_trim;

/* Starts the timer on loop (every_ms 0: *out is NULL, nothing runs). 0, or a gp code with err
 * filled ("queue.trim_idle_ms: no idle trim: <libuv's reason>"). */
int gd_trim_start(uv_loop_t *loop, struct gd_daemon *d, uint64_t every_ms, gd_trim **out,
                  gp_error *err);

/* Closes the timer; the loop must run once more to free it. NULL is fine. */
void gd_trim_close(gd_trim *t);

#endif /* GD_TRIM_H */
