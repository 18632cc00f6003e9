/*
 * gd_job.h - one GEMM request inside the daemon, and how its owner hears about it.
 *
 * A job is created by the scheduler at admission and freed by it at release (gd_sched.h). The
 * connection that admitted it waits for it through a gd_job_waiter it embeds in its own record
 * of the call; backends keep their per-job state behind backend_data. Neither frees the job.
 *
 * Events travel one way: backend thread -> completion queue (gd_completion.h) -> scheduler
 * (loop thread) -> the job's waiter. Once the waiter is gone (client closed), the scheduler
 * consumes what still arrives for the job itself.
 */
#ifndef GD_JOB_H
#define GD_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gd_region.h"
#include "gp_error.h"
#include "gp_types.h"

typedef struct gd_backend gd_backend;
typedef struct gd_job gd_job;
typedef struct gd_job_waiter gd_job_waiter;

/* What a backend posts about a job. */
typedef enum {
  GD_EV_INPUT_RESUME,  /* staging freed: the connection may read again */
  GD_EV_OUTPUT_CHUNK,  /* data/len of C at offset are ready to send; last marks the final one.
                          A job's chunks are posted in order: the first at offset 0, each next
                          one where the previous ended, the last ending at result_bytes
                          (else the connection closes: INTERNAL). For a job whose backend took
                          locate: MAPPED, out (gd_backend.h), data is already C's place in the
                          client's region (the result's pointer + offset): the bytes are in
                          place when the event is posted, and nothing is copied */
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

/* The owner of a job's reply (loop thread). on_event gets every event of the job while the
 * waiter is attached. An OUTPUT_CHUNK hands the chunk over: the waiter gives it back with
 * gd_sched_chunk_done exactly once (written, copied or dropped). After FAILED or the last
 * chunk the waiter ends the job with gd_sched_finish, or lets it go with gd_sched_abandon. */
struct gd_job_waiter {
  void (*on_event)(gd_job_waiter *w, gd_job *job, const gd_backend_event *ev);
};

struct gd_job {
  uint64_t id;                 /* daemon-wide, for logs */
  uint32_t msgid;              /* the client's */
  gp_gemm_hdr hdr;
  bool has_c;
  uint64_t operand_bytes[3];   /* a, b, c: exact payload sizes (c: the size of C, sent or not;
                                  with hdr.bias, the one bias row c carries) */
  uint64_t result_bytes;       /* the result C: batch * m * n * dtype size */
  uint64_t reserved_bytes;     /* counted against the memory budget */
  uint64_t admitted_us;        /* monotonic clock, microseconds */
  uint64_t submitted_us;       /* when submit() was called (all payloads landed); queue_us in the
                                  reply counts from here */
  uint64_t deadline_us;        /* 0 = none */
  gp_gemm_result_hdr result;   /* device, kernel and timings, filled by the backend */
  gd_backend *backend;
  void *backend_data;          /* the backend's own */
  gd_job_waiter *waiter;       /* NULL once the client is gone */
  struct gd_completion *queue; /* where its events go: the queue of the loop that admitted it */
  int device;                  /* index into devices() (0 for the CPU): the scheduler's pick before
                                  prepare, which may move the job by changing it */
  bool device_fixed;           /* device is where its CUDA IPC regions live: prepare must not
                                  move the job (nor batch it in a small-job slot) */
  /* Shared-memory regions the backend reads a, b, c from, or writes the result into, in place
   * (indexed by gp_operand, GD_JOB_OUT for the result): each holds a reference, dropped by the
   * scheduler at release, so the mapping outlives every backend access. NULL: not in place. */
  gd_region *mapped[4];
  uint8_t *mapped_out;         /* where C goes when mapped[GD_JOB_OUT] (HOST regions) */
  uint64_t mapped_offset[4];   /* the operand's or result's offset in its DEVICE region */
};

#define GD_JOB_OUT 3

#endif /* GD_JOB_H */
