/*
 * gd_sched.h - the scheduler: owns every job from admission to release. Admission, the
 * daemon-wide job count, the memory budget, load spreading over devices, and the only caller of
 * the backend's ops (gd_backend.h).
 *
 * Threads: every loop thread (config key `loops`) calls in. Each opens a port (gd_sched_port_open)
 * on its own loop: the events of the jobs it admits come back through that port's completion queue,
 * on that loop, and its room callback runs there. One recursive lock (gd_sched_lock) covers the
 * scheduler and the backend's ops; the functions here take it, and the connections take it too
 * around the few counters all loops share. A job is touched only by the loop thread that admitted
 * it (its calls and its port's deliveries), so the payload's way in (gd_sched_input_window,
 * gd_sched_input) and a chunk given back while the waiter holds the job take no lock: there the
 * backend's ops guard what jobs share (gd_backend.h).
 *
 * Admission happens when a gemm header has been parsed, before any payload byte is read:
 *   - draining                              -> UNAVAILABLE
 *   - host bytes (a + b + c + scratch) over queue.memory_budget itself
 *                                           -> RESOURCE_EXHAUSTED (can never fit)
 *   - host bytes over what other peers' resident operands and regions leave of it
 *                                           -> RESOURCE_EXHAUSTED, naming them, and a warning
 *                                              (at most one a second): no job gives it back
 *   - the host bytes over the connection's or the peer's share (gd_sched_share)
 *                                           -> GD_ADMIT_OVER_SHARE: the caller waits for its own
 *   - queue.max_jobs jobs already admitted, or the host bytes over what is left of the
 *     budget                                -> GD_ADMIT_FULL: the caller waits for room
 *   - backend prepare() refuses             -> its error
 * Every refusal is GD_ADMIT_REFUSED with the code and message in the gp_error.
 * A job counts against max_jobs and the budget from admission until its final event, or its
 * release if earlier. A job whose final event arrived while its waiter is attached is
 * "delivering": its reply waits only on the client reading it, so it no longer takes shared
 * room (the connection counts its write backlog instead). Whenever room appears, the room
 * callback runs (gd_sched_on_room).
 *
 * The job's life, as the connection sees it:
 *   admit -> input_window / input ... -> submit -> events to the job's waiter (gd_job.h):
 *   chunks given back with chunk_done -> finish (reply out) or abandon (client gone).
 * A job is released (backend release(), budget returned, struct freed) in one place, when the
 * waiter let it go and the backend is done with it: at once before submit; after submit once
 * the backend's final event arrived and every chunk handed out came back.
 */
#ifndef GD_SCHED_H
#define GD_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gd_backend.h"
#include "gd_job.h"
#include "gd_stats.h"
#include "gp_error.h"
#include "gp_types.h"

typedef struct gd_sched gd_sched;

/* gd_sched_admit's answer. Only a refusal is an error (a gp code and message in its gp_error);
 * the two waits are outcomes of their own, never mistaken for a code. */
typedef enum {
  GD_ADMITTED,         /* the job exists */
  /* the request fits an idle daemon but not now: it waits for room (the gp_error still names
   * what is full, for the log) */
  GD_ADMIT_FULL,
  /* the request is over its connection's or its peer's share of the budget (see
   * gd_sched_share): it waits for that connection's or peer's own jobs, not in the shared line
   * (the gp_error names the share, for the log) */
  GD_ADMIT_OVER_SHARE,
  GD_ADMIT_REFUSED     /* the gp_error's code and message say why */
} gd_admit;

/* What the requester already holds of queue.memory_budget, and its shares (0: no share). A
 * requester holding nothing may always go up to the whole budget: a share bounds how much
 * more one holder adds, it never refuses a request outright. */
typedef struct {
  uint64_t conn_used, conn_limit;
  uint64_t peer_used, peer_limit;
  /* Of the budget's bytes held outside jobs (resident operands, regions), the requester's
   * peer's: what it holds itself it may free, so a request held up by them waits; one held up
   * by other peers' holdings, which no job gives back, is refused (RESOURCE_EXHAUSTED).
   * Worked out only where the answer depends on it (the request would not fit beside every
   * byte held outside jobs), under the scheduler's lock: peer_holds(peer_holds_arg). NULL: 0. */
  uint64_t (*peer_holds)(const void *arg);
  const void *peer_holds_arg;
  /* The devices where the requester's resident operands were last used or have copies (bit d:
   * device d; a backend keeps its copies there), 0 for none: the least loaded of them is
   * preferred while it is at most one such job busier than the least-loaded device (else the
   * job goes there, and a copy is made there). */
  uint64_t prefer_devices;
  int fixed_device;  /* >= 1: the job must run on device fixed_device - 1 (its operands are
                        CUDA memory there), whatever prefer_devices says; 0: the scheduler picks */
  struct gd_sched_port *port; /* the admitting loop's port; NULL: the first (gd_sched_new's) */
} gd_sched_share;

typedef struct {
  uint32_t max_jobs;
  uint64_t memory_budget;
} gd_sched_limits;

/* Creates the scheduler on loop and attaches it to backend (its completion queue becomes the
 * backend's sink). backend may be NULL in tests of the admission arithmetic (then prepare and
 * submit are skipped). stats may be NULL. Returns 0, or a gp code with err filled. */
int gd_sched_new(uv_loop_t *loop, gd_backend *backend, const gd_sched_limits *limits,
                 gd_stats *stats, gd_sched **out, gp_error *err);

/* One loop thread's way in (see the top). Open it on the thread that runs loop; the port lives
 * until gd_sched_free. gd_sched_new opens the first one on its own loop, with its stats. The
 * latencies of the port's jobs are counted in stats (the loop's own; may be NULL). */
typedef struct gd_sched_port gd_sched_port;
int gd_sched_port_open(gd_sched *s, uv_loop_t *loop, gd_stats *stats, gd_sched_port **out,
                       gp_error *err);
gd_sched_port *gd_sched_default_port(gd_sched *s);
/* room(arg) runs on the port's loop thread, under the lock (see gd_sched_on_room). Another
 * thread's room reaches this loop only while want_room is set: set it (then look for room once
 * more yourself) before a request waits, clear it when none does. */
void gd_sched_port_on_room(gd_sched_port *p, void (*room)(void *arg), void *arg);
void gd_sched_port_want_room(gd_sched_port *p, bool want);
/* Closes the port's handles, on its loop's thread (or once that thread ended); the loop must run
 * once more to finish closing them. */
void gd_sched_port_close(gd_sched_port *p);

/* The lock (recursive) over the scheduler, the backend's ops and what connections share. */
void gd_sched_lock(gd_sched *s);
void gd_sched_unlock(gd_sched *s);

/* New limits (SIGHUP): apply to later admissions; jobs already admitted stay. */
void gd_sched_set_limits(gd_sched *s, const gd_sched_limits *limits);

gd_sched_limits gd_sched_get_limits(const gd_sched *s);

/* room(arg) runs when a job stops counting against max_jobs and the budget, and when the limits
 * change: a request that got GD_ADMIT_FULL may fit now. It runs inside scheduler calls (finish,
 * abandon, chunk_done, event delivery): it must not call back into the scheduler there. */
void gd_sched_on_room(gd_sched *s, void (*room)(void *arg), void *arg);

/* From now on every admission is refused with UNAVAILABLE. */
void gd_sched_set_draining(gd_sched *s);

/* Admits a gemm whose header has been parsed and validated. GD_ADMITTED: *out is a new job
 * whose events go to waiter; share may be NULL. Otherwise no job, and err (required) names the
 * cause: a wait (see gd_admit) or a refusal with its code. */
gd_admit gd_sched_admit(gd_sched *s, const gp_gemm_hdr *hdr, bool has_c, uint32_t msgid,
                        const gd_sched_share *share, gd_job_waiter *waiter,
                        gd_job **out, gp_error *err);

/* Payload input, before submit: where the next bytes of operand at offset may land (false:
 * nowhere in particular, hand them to gd_sched_input), and the bytes themselves (*pause: stop
 * reading until the waiter gets INPUT_RESUME). */
bool gd_sched_input_window(gd_sched *s, gd_job *job, gp_operand operand, uint64_t offset,
                           void **ptr, size_t *len);
int gd_sched_input(gd_sched *s, gd_job *job, gp_operand operand, uint64_t offset,
                   const void *data, size_t len, bool *pause, gp_error *err);

/* Operand `operand` of job is the resident buffer res (its whole length): true when the backend
 * takes it from its own copy (it references res itself; no input follows for that operand),
 * false when it wants the bytes through gd_sched_input as usual. */
bool gd_sched_input_resident(gd_sched *s, gd_job *job, gp_operand operand,
                             gd_resident_buf *res);

/* A resident buffer was freed: the backend drops its copies of freed ones. */
void gd_sched_resident_freed(gd_sched *s);

/* All payloads of job have landed: hand it to the backend. On failure the job is released: the
 * caller replies with err and forgets the job. */
int gd_sched_submit(gd_sched *s, gd_job *job, gp_error *err);

/* true: the job's result chunks are its own memory, kept until release (write them in place);
 * false: memory shared between jobs (GPU staging): give each back as soon as possible. */
bool gd_sched_chunks_in_job_memory(const gd_sched *s, const gd_job *job);

/* A chunk handed to the waiter was written, copied or dropped: exactly once per chunk. */
void gd_sched_chunk_done(gd_sched *s, gd_job *job, const void *chunk, size_t len);

/* The waiter lets job go before its reply went out (request rejected, client gone, shutdown
 * answered it with UNAVAILABLE): it gets no more events. Released now, or when the backend is
 * done with it. Do not touch job afterwards. */
void gd_sched_abandon(gd_sched *s, gd_job *job);

/* The reply of job went out completely (result or error; ok: a result): records latencies and
 * releases the job. Every chunk must have come back. Do not touch job afterwards. */
void gd_sched_finish(gd_sched *s, gd_job *job, bool ok);

/* Jobs counted against queue.max_jobs (queue depth): admitted, not yet delivering. */
size_t gd_sched_jobs(const gd_sched *s);
/* Jobs submitted to the backend whose final event has not arrived yet. */
size_t gd_sched_running(const gd_sched *s);
/* Jobs (and their reserved bytes) whose reply waits only on its client (see the top). */
size_t gd_sched_delivering(const gd_sched *s);
uint64_t gd_sched_delivering_bytes(const gd_sched *s);
/* Jobs admitted since start. */
uint64_t gd_sched_admitted(const gd_sched *s);
/* Bytes counted against queue.memory_budget. */
uint64_t gd_sched_reserved_bytes(const gd_sched *s);

/* Host memory the daemon holds outside jobs (shared-memory regions it maps, whose pages it may
 * fault in) counts against queue.memory_budget too: reserves bytes, or RESOURCE_EXHAUSTED with
 * err. Given back with gd_sched_unreserve. */
int gd_sched_reserve(gd_sched *s, uint64_t bytes, gp_error *err);
void gd_sched_unreserve(gd_sched *s, uint64_t bytes);

/* Shared-memory regions (gd_region.h). A new region (one reference, the caller's) is shown to
 * the backend; gd_sched_region_put drops a reference, and the last one gives the region to the
 * backend to let go of and unmap (or unmaps it now). The mapping's bytes, which whoever mapped
 * it reserved (gd_sched_reserve), are unreserved with that last reference: they stay counted
 * against queue.memory_budget while a job still uses the region in place. */
void gd_sched_region_added(gd_sched *s, gd_region *r);
void gd_sched_region_put(gd_sched *s, gd_region *r);

/* Right after admission: job's result is to be written at ptr in r. true when the backend
 * writes it there itself (its chunks then point into r: nothing to copy); false: copy chunks.
 * The job holds a reference to r until release. */
bool gd_sched_output_mapped(gd_sched *s, gd_job *job, gd_region *r, uint8_t *ptr);
/* Before submit: operand lies whole at ptr in r. true when the backend reads it from there
 * (give it no payload for that operand); false: feed it through gd_sched_input. */
bool gd_sched_input_mapped(gd_sched *s, gd_job *job, gp_operand operand, gd_region *r,
                           const uint8_t *ptr);

/* CUDA IPC regions (DEVICE, gd_region.h): the backend finds r's device by its PCI bus id and
 * opens it (UNIMPLEMENTED when it cannot: the CPU). 0, or an error; r stays the caller's. */
int gd_sched_device_region_open(gd_sched *s, gd_region *r, const char *pci_bus_id,
                                gp_error *err);
/* The operand (or C) at offset in DEVICE region r, for a job admitted on r->device. true when
 * the backend reads (writes) it there; false: it cannot, and the request must be refused. The
 * job holds a reference to r until release. */
bool gd_sched_input_device(gd_sched *s, gd_job *job, gp_operand operand, gd_region *r,
                           uint64_t offset);
bool gd_sched_output_device(gd_sched *s, gd_job *job, gd_region *r, uint64_t offset);

/* Closes the first port's handles (the loop must run once more to finish closing them). Call
 * when the backend has been destroyed or will post nothing more; other ports are closed by
 * their loops (gd_sched_port_close). */
void gd_sched_close(gd_sched *s);
/* Frees the scheduler, every job still held (without release()) and undelivered events. Only
 * after gd_sched_close() and the loop has run its close callbacks, and after backend destroy. */
void gd_sched_free(gd_sched *s);

/* Host bytes a request will hold by default: a + b + c (exposed for tests). false on overflow. */
bool gd_sched_operand_total(const gp_gemm_hdr *hdr, uint64_t operand_bytes[3], uint64_t *total);

#endif /* GD_SCHED_H */
