/*
 * gd_call.h - a connection's records of its gemm calls: one per job it admitted and has not
 * answered yet, in a per-connection list. The lowest layer of a connection: it talks to the
 * scheduler (through gd_netsched.h) for the job and knows nothing of sockets or the protocol.
 *
 * Every result chunk the connection was handed goes back through gd_call_chunk_done, and every
 * job leaves through gd_call_finish (answered) or gd_call_abandon / gd_calls_orphan_all (not):
 * nothing else in net/ calls the scheduler's release paths. The connection's loop thread only.
 */
#ifndef GD_CALL_H
#define GD_CALL_H

#include <stdbool.h>
#include <stdint.h>

#include "gd_job.h"
#include "gd_netsched.h"

typedef struct gd_calls gd_calls;

typedef struct gd_call {
  gd_job_waiter waiter;    /* first: the scheduler hands the job's events here */
  struct gd_call *prev, *next;
  gd_calls *list;
  gd_job *job;
  uint32_t msgid;
  uint32_t writes_pending; /* chunks of this reply in uv_write */
  uint64_t next_offset;    /* where the next chunk of C must start */
  bool head_sent;          /* the reply's head went out with the first chunk */
  bool reply_out;          /* its last byte left through uv_try_write while writes of it were
                            * still pending: the last of those answers the job */
  bool orphan;             /* the connection closed: job abandoned, only chunks come back */
  uint64_t counted;        /* its job's bytes counted in the list's reserved (0: not any more) */
  bool shm_out;            /* the result goes into a shared-memory region (gd_shm_calls.h) */
  uint64_t owed;           /* result bytes its reply still owes the socket (gd_call_owe) */
  uint64_t out_region, out_offset;
} gd_call;

struct gd_calls {
  gd_sched *sched;
  gd_call *head;           /* admitted and not answered, newest first */
  uint32_t in_flight;      /* of them, not orphaned */
  uint64_t reserved;       /* budget bytes its jobs hold until they are computed */
  uint64_t owed;           /* result bytes owed to the socket by the records not yet answered:
                            * computed or not, on a device, in staging or in host memory */
  /* bytes stopped counting (a job computed, or gone); may be NULL */
  void (*uncounted)(gd_calls *l, uint64_t bytes);
};

void gd_calls_init(gd_calls *l, gd_sched *sched);

/* Admits a gemm for msgid; its events go to on_event (the waiter of the new record).
 * GD_ADMITTED: *out is linked first on l and its job's reserved bytes are counted in
 * l->reserved until it is computed or let go. share and the other outcomes as in
 * gd_sched_admit (out of memory here is GD_ADMIT_REFUSED too). */
gd_admit gd_call_admit(gd_calls *l, const gp_gemm_hdr *hdr, bool has_c, uint32_t msgid,
                       const gd_sched_share *share,
                       void (*on_event)(gd_job_waiter *, gd_job *, const gd_backend_event *),
                       gd_call **out, gp_error *err);

/* c's reply will carry its result (C's bytes) on the socket: they count in l->owed until c is
 * answered or let go. A result into a shared-memory region owes nothing. Once per call. */
void gd_call_owe(gd_call *c);

/* c's job no longer holds shared budget (its final event came): it stops counting in
 * l->reserved (l->uncounted is told). Idempotent; unlinking c does it too. */
void gd_call_uncount(gd_call *c);

/* A chunk of c's result handed over by the scheduler was written, copied or dropped. */
void gd_call_chunk_done(gd_call *c, const void *data, size_t len);

/* c's reply went out completely (ok: a result): the job is finished and c freed. */
void gd_call_finish(gd_call *c, bool ok);

/* c is let go unanswered (rejected, dropped, failed submit already released: see below) and
 * freed. */
void gd_call_abandon(gd_call *c);

/* The scheduler already released c's job (a failed submit): unlink and free c only. */
void gd_call_forget(gd_call *c);

/* The connection closes: every job is abandoned; records stay until gd_calls_free_all because
 * cancelled writes still give their chunks back through them. */
void gd_calls_orphan_all(gd_calls *l);
void gd_calls_free_all(gd_calls *l);

#endif /* GD_CALL_H */
