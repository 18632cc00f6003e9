/*
 * gd_sched.h - the scheduler: admission, the daemon-wide job count, the
 * memory budget, load spreading over devices, and the completion queue from
 * the backend threads to the loop.
 *
 * Everything here runs on the loop thread except gd_backend_post() (any
 * thread). Admission happens when a gemm header has been parsed, before any
 * payload byte is read:
 *   - draining                              -> UNAVAILABLE
 *   - queue.max_jobs jobs already admitted  -> RESOURCE_EXHAUSTED
 *   - host bytes (a + b + c + scratch) over what is left of
 *     queue.memory_budget                   -> RESOURCE_EXHAUSTED
 *   - backend prepare() refuses             -> its error
 * A job counts against max_jobs and the budget from admission until
 * gd_sched_finish() or gd_sched_abandon() lets it go.
 *
 * Events from the backend are handed to the session through hooks; once a
 * job's session is gone (job->session == NULL) the scheduler consumes its
 * output itself and releases it after the backend's final event. Events still
 * queued for a job when it is released (e.g. an INPUT_RESUME posted just before
 * its client vanished mid-payload) are dropped, never delivered.
 */
#ifndef GD_SCHED_H
#define GD_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gd_backend.h"
#include "gd_stats.h"
#include "gp_error.h"
#include "gp_types.h"

typedef struct gd_sched gd_sched;

/* How the scheduler hands a live job's events to its session (loop thread). */
typedef struct {
  /* an OUTPUT_CHUNK of job; the session writes it and later calls gd_sched_chunk_sent */
  void (*output)(void *session, gd_job *job, const gd_backend_event *ev);
  /* FAILED: the session replies with err and calls gd_sched_finish */
  void (*failed)(void *session, gd_job *job, const gp_error *err);
  /* INPUT_RESUME */
  void (*resume)(void *session, gd_job *job);
} gd_sched_hooks;

typedef struct {
  uint32_t max_jobs;
  uint64_t memory_budget;
} gd_sched_limits;

/* Creates the scheduler on loop and attaches it to backend (sets backend->sink). backend may be
 * NULL in tests of the admission arithmetic (then prepare/submit are skipped). stats may be
 * NULL. Returns 0 or a negative uv error. */
int gd_sched_new(uv_loop_t *loop, gd_backend *backend, const gd_sched_limits *limits,
                 const gd_sched_hooks *hooks, gd_stats *stats, gd_sched **out);

/* New limits (SIGHUP): apply to later admissions; jobs already admitted stay. */
void gd_sched_set_limits(gd_sched *s, const gd_sched_limits *limits);

/* From now on every admission is refused with UNAVAILABLE. */
void gd_sched_set_draining(gd_sched *s);

/* Admits a gemm whose header has been parsed and validated. On success *out is a new job (owned
 * by the scheduler) bound to session. On failure returns the code, fills err naming the cause. */
int gd_sched_admit(gd_sched *s, const gp_gemm_hdr *hdr, bool has_c, uint32_t msgid,
                   void *session, gd_job **out, gp_error *err);

/* All payloads of job have landed: hand it to the backend. On failure the job is released and
 * freed: the caller replies with err and forgets the job. */
int gd_sched_submit(gd_sched *s, gd_job *job, gp_error *err);

/* The session is done with job before its reply went out (request rejected, client gone, shutdown
 * answered it with UNAVAILABLE). Not submitted: released and freed now. Submitted: job->session is
 * cleared and the job is released when the backend is done with it. Do not touch job afterwards. */
void gd_sched_abandon(gd_sched *s, gd_job *job);

/* A chunk handed to the session's output hook was written (or dropped). */
void gd_sched_chunk_sent(gd_sched *s, gd_job *job, const void *chunk, size_t len);

/* The reply of job went out completely (result or error): records latencies, releases and frees
 * the job. ok says whether it was a result. */
void gd_sched_finish(gd_sched *s, gd_job *job, bool ok);

/* Jobs admitted and not yet finished or abandoned-and-done (queue depth). */
size_t gd_sched_jobs(const gd_sched *s);
/* Jobs submitted to the backend whose final event has not arrived yet. */
size_t gd_sched_running(const gd_sched *s);
uint64_t gd_sched_reserved_bytes(const gd_sched *s);

/* Closes the async handle (the loop must run once more to finish closing it). Call when the
 * backend has been destroyed or will post nothing more. */
void gd_sched_close(gd_sched *s);
/* Frees the scheduler, every job still held (without release()) and undelivered events. Only
 * after gd_sched_close() and the loop has run its close callbacks, and after backend destroy. */
void gd_sched_free(gd_sched *s);

/* Host bytes a request will hold by default: a + b + c (exposed for tests). false on overflow. */
bool gd_sched_operand_total(const gp_gemm_hdr *hdr, uint64_t operand_bytes[3], uint64_t *total);

#endif /* GD_SCHED_H */
