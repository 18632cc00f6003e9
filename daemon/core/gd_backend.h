/*
 * gd_backend.h - the seam between the scheduler and whatever multiplies.
 *
 * A backend (CPU: OpenBLAS worker pool; GPU: one worker per device with its
 * own streams and pinned staging) implements gd_backend_ops. Every op is
 * called on the loop thread and must not block: no CUDA synchronisation, no
 * BLAS, no file I/O. Work happens on the backend's own threads (or in CUDA
 * streams); results come back to the loop through gd_backend_post(), which
 * queues them and wakes the loop with uv_async_send (coalescing is fine: the
 * loop drains the whole queue per wake-up).
 *
 * Life of a job, as the scheduler drives it (all on the loop thread):
 *
 *   prepare(job)         header admitted: reserve memory for a, b, c (and
 *                        scratch) and pick a device. May fail with
 *                        GP_E_RESOURCE_EXHAUSTED: the request is refused
 *                        before any payload byte is read.
 *   input_window(job,..) where the next payload bytes should land; the
 *                        session reads the socket straight into it.
 *   input(job, ...)      payload bytes arrived (at the window, or elsewhere:
 *                        then the backend copies them). May set *pause: the
 *                        session stops reading that connection until the
 *                        backend posts GD_EV_INPUT_RESUME (staging full).
 *   submit(job)          all payloads landed: run it when a worker is free.
 *                        The backend checks job->deadline_us when the job
 *                        starts, and completes it with DEADLINE_EXCEEDED if late.
 *   ... backend posts GD_EV_OUTPUT_CHUNK (one or more, the last flagged) or
 *       GD_EV_FAILED (an error code and message) ...
 *   output_consumed(job, chunk) a chunk has been written to the socket (or
 *                        dropped: client gone); its memory may be reused (GPU:
 *                        refill that staging slot).
 *   release(job)         always called once, last, and only when the backend
 *                        holds no more reference to the job: before submit
 *                        (refused, rejected or the client vanished mid-payload),
 *                        or after the backend's final event (the OUTPUT_CHUNK
 *                        flagged last, or FAILED) reached the loop and every
 *                        chunk was consumed. When the client vanishes while the
 *                        job is submitted, the scheduler sets job->session to
 *                        NULL, lets the job run to its final event, consumes
 *                        its chunks without sending them, then releases it:
 *                        the backend needs no special path and never touches
 *                        the session.
 *
 * Changes to this contract (daemon engineer, all additive):
 *   - release() is never called while the job is still the backend's (above).
 *   - gd_job.device: the scheduler's pick before prepare (index into devices():
 *     the in-service device with the least outstanding work); prepare may move
 *     the job elsewhere by changing it. gd_job.session_data: the session's own.
 *   - ops.host_bytes (optional): host memory the job will hold, checked against
 *     queue.memory_budget before prepare; NULL means a + b + c bytes.
 *   - ops.kernels (optional): names for `info`.
 *   - destroy() may be called with jobs not yet released (shutdown after
 *     drain_ms): it stops the workers (a running job may finish first), drops
 *     queued jobs without posting, and frees every backend_data it still holds.
 *     The scheduler then frees the gd_job structs without calling release(),
 *     and drops events posted but not delivered.
 *   - gd_job.submitted_us: set by the scheduler just before submit().
 *   - ops.output_in_job_memory (see gd_backend_ops).
 *   - pack_info, pack_stats, devices, busy, input_window and output_consumed
 *     may be NULL.
 *   - when prepare fails it undoes its own reservations: release is not called.
 *     When submit fails, release is called (the job never ran).
 */
#ifndef GD_BACKEND_H
#define GD_BACKEND_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_error.h"
#include "gp_types.h"

typedef struct gd_backend gd_backend;
typedef struct gd_job gd_job;

/* One GEMM request inside the daemon. Owned by the scheduler; backends keep their per-job
 * state behind backend_data. */
struct gd_job {
  uint64_t id;                 /* daemon-wide, for logs */
  uint32_t msgid;              /* the client's */
  gp_gemm_hdr hdr;
  bool has_c;
  uint64_t operand_bytes[3];   /* a, b, c: exact payload sizes (c: the size of C, sent or not) */
  uint64_t reserved_bytes;     /* counted against the memory budget */
  uint64_t admitted_us;        /* monotonic clock, microseconds */
  uint64_t submitted_us;       /* when submit() was called (all payloads landed); queue_us
                                  in the reply counts from here */
  uint64_t deadline_us;        /* 0 = none */
  gp_gemm_result_hdr result;   /* device, kernel and timings, filled by the backend */
  gd_backend *backend;
  void *backend_data;
  void *session;               /* NULL once the client is gone */
  void *sched_data;
  int device;                  /* index into devices() (0 for the CPU): see the contract above */
  void *session_data;          /* the session's per-job record; backends leave it alone */
};

/* What a backend posts back to the loop. */
typedef enum {
  GD_EV_INPUT_RESUME,  /* staging freed: the session may read again */
  GD_EV_OUTPUT_CHUNK,  /* data/len of C at offset are ready to send; last marks the final one.
                          A job's chunks are posted in order: the first at offset 0, each next
                          one where the previous ended, the last ending at operand_bytes[C]
                          (else the session closes the connection: INTERNAL) */
  GD_EV_FAILED,        /* the job failed: err says why (INTERNAL, DEADLINE_EXCEEDED, ...) */
} gd_backend_event_type;

typedef struct {
  gd_backend_event_type type;
  gd_job *job;
  const void *data;    /* OUTPUT_CHUNK */
  size_t len;
  uint64_t offset;
  bool last;
  gp_error err;        /* FAILED */
} gd_backend_event;

/* Described in `info`. */
typedef struct {
  int id;                     /* CUDA ordinal, -1 for the CPU */
  char name[128];
  uint64_t memory_bytes;
  int sm_count;
  int cc_major, cc_minor;
  bool in_service;            /* false after a sticky device error */
  /* Live figures, filled by devices() (0 where a backend has none): */
  uint64_t busy_us;           /* time spent computing */
  uint64_t memory_limit;      /* device bytes the backend may reserve for jobs (its cap) */
  uint64_t memory_reserved;   /* device bytes reserved now */
  uint64_t memory_in_use;     /* of those, held by jobs now */
} gd_device_info;

typedef struct {
  const char *name; /* "cpu", "gpu" */
  /* true: OUTPUT_CHUNK data is the job's own memory, kept until release, so the session writes
   * it in place however slowly the client reads (CPU). false (default): it is memory shared
   * between jobs (GPU staging): the session writes what the socket takes at once, copies the
   * rest, and calls output_consumed right away, so that a client that does not read cannot
   * hold a staging slot that other jobs need. */
  bool output_in_job_memory;

  int (*prepare)(gd_backend *b, gd_job *job, gp_error *err);
  /* Where up to *len bytes of `operand` starting at `offset` may land; false when the backend
   * wants them handed to input() from elsewhere (then it copies). */
  bool (*input_window)(gd_backend *b, gd_job *job, gp_operand operand, uint64_t offset,
                       void **ptr, size_t *len);
  int (*input)(gd_backend *b, gd_job *job, gp_operand operand, uint64_t offset,
               const void *data, size_t len, bool *pause, gp_error *err);
  int (*submit)(gd_backend *b, gd_job *job, gp_error *err);
  void (*output_consumed)(gd_backend *b, gd_job *job, const void *chunk, size_t len);
  void (*release)(gd_backend *b, gd_job *job);

  /* optional: host bytes this job will hold (a, b, c, scratch); NULL = a + b + c */
  uint64_t (*host_bytes)(gd_backend *b, const gd_job *job);
  /* optional: kernel names for `info`; returns how many there are (may exceed max) */
  size_t (*kernels)(gd_backend *b, const char **names, size_t max);

  /* info and stats: packs one msgpack map of the backend's own fields (info: "backend_info",
   * stats: "backend_stats" in the reply). pack_stats' map holds "devices": an array of maps
   * with at least "id" and "busy_us" (time spent computing on that device). */
  void (*pack_info)(gd_backend *b, msgpack_packer *pk);
  void (*pack_stats)(gd_backend *b, msgpack_packer *pk);
  /* devices, for the scheduler's load spreading and `info` */
  size_t (*devices)(gd_backend *b, gd_device_info *out, size_t max);
  /* jobs submitted and not yet completed */
  size_t (*busy)(gd_backend *b);

  /* stop taking work, finish or fail what is running, join threads, free everything */
  void (*destroy)(gd_backend *b);
} gd_backend_ops;

/* Backend-independent part; backends embed it first. */
struct gd_backend {
  const gd_backend_ops *ops;
  struct gd_backend_sink *sink; /* where gd_backend_post() delivers (set by the scheduler) */
};

/* Thread-safe: queue ev for the loop and wake it. Returns 0, or -ENOMEM (the event is then
 * lost: callers preallocate where losing it matters). */
int gd_backend_post(gd_backend *b, const gd_backend_event *ev);

#endif /* GD_BACKEND_H */
