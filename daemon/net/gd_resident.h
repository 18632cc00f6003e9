/*
 * gd_resident.h - a connection's resident operands (protocol: put, free, and a gemm operand
 * given as {"handle": N}).
 *
 * put uploads a matrix (or a batch of them) once; the daemon keeps its bytes in host memory
 * (a gd_resident_buf), counted against queue.memory_budget (gd_sched_reserve) and the
 * resident.* quotas, until free or the connection's end. A gemm that names the handle offers
 * the buffer to the backend (gd_sched_input_resident: the GPU keeps a copy per device); a
 * backend that does not take it gets the bytes copied into the job through the same seam as a
 * shared-memory operand (gd_shm_calls_feed), finished before the next message is decoded. A
 * backend that took it holds its own reference, so free drops the connection's at once.
 *
 * Handles are unique over the whole daemon (a counter in the totals), so a handle another
 * connection holds is simply not in this table: NOT_FOUND, like a freed one. The connection's loop
 * thread only; the totals under the shared lock (gd_server.h).
 */
#ifndef GD_RESIDENT_H
#define GD_RESIDENT_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "gd_resident_buf.h"
#include "gd_netsched.h"
#include "gp_error.h"
#include "gp_types.h"

/* The config keys (resident.*). */
typedef struct {
  uint32_t max_handles_per_connection;
  uint64_t max_bytes_per_connection;
  uint64_t max_bytes_total;            /* over every connection */
} gd_resident_limits;

/* Daemon-wide figures (stats). */
typedef struct {
  uint64_t handles, bytes;             /* held now (a put being received counts its bytes) */
  uint64_t put_total;                  /* handles given out since start */
  uint64_t last_handle;                /* the last handle given out */
} gd_resident_totals;

typedef struct {
  uint64_t handle;
  gp_put_hdr hdr;
  uint64_t bytes;
  gd_resident_buf *buf;                /* the bytes; a backend may hold them a while longer */
} gd_resident_op;

typedef struct {
  gd_resident_totals *totals;
  gd_sched *sched;
  gd_resident_op *ops;                 /* count of them, in a block of cap */
  uint32_t count;
  size_t cap;
  uint64_t bytes;                      /* held, the put being received included */
  bool receiving;                      /* a put's data is arriving into pending */
  uint64_t devices;                    /* where the last job that named a handle ran and where
                                          that handle has copies (bit d: device d; 0: none):
                                          its later jobs prefer them (gd_sched_share) */
  gd_resident_op pending;
} gd_resident;

void gd_resident_attach(gd_resident *t, gd_resident_totals *totals, gd_sched *sched);
/* Frees every operand and the put being received (the connection's end). */
void gd_resident_free(gd_resident *t);

/* A put's header: checks the quotas and the budget, reserves and allocates its bytes.
 * 0, or RESOURCE_EXHAUSTED with err. */
int gd_resident_begin(gd_resident *t, const gd_resident_limits *lim, const gp_put_hdr *hdr,
                      gp_error *err);
/* Bytes of the put being received, at offset within its data (checked by the decoder). */
void gd_resident_data(gd_resident *t, uint64_t offset, const void *data, size_t len);
/* The put's data came whole: it becomes an operand; *handle. */
int gd_resident_commit(gd_resident *t, uint64_t *handle, gp_error *err);
/* Drops the put being received, if any (rejected, cut short). */
void gd_resident_abort(gd_resident *t);
/* free [handle]: 0, or NOT_FOUND. */
int gd_resident_release(gd_resident *t, uint64_t handle, gp_error *err);

/* The bytes of handle as operand op of a gemm with hdr: 0 with *buf (not referenced for the
 * caller), NOT_FOUND for a handle not held by this connection, INVALID_ARGUMENT when its dtype
 * or shape (batch, rows, cols as stored) is not what the header makes of op. */
int gd_resident_operand(const gd_resident *t, uint64_t handle, const gp_gemm_hdr *hdr,
                        gp_operand op, gd_resident_buf **buf, gp_error *err);

/* The reply of put ({"handle": N}) or free (nil) into out: 0, or -1 when out of memory. */
int gd_resident_pack_put(msgpack_sbuffer *out, uint32_t msgid, uint64_t handle);
int gd_resident_pack_free(msgpack_sbuffer *out, uint32_t msgid);

#endif /* GD_RESIDENT_H */
