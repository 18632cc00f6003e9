/*
 * gd_replyq.h - a connection's reply queue: the one owner of everything written to its socket.
 *
 * Every reply is an encoded head (bytes the queue owns) plus, for a gemm result, a chunk of C
 * straight from the backend's memory (never copied while the socket takes it). Replies wait in
 * a batch until the loop has run its callbacks, then leave in one uv_write (gd_replyq_flush). The
 * queue owns each chunk from gd_replyq_chunk until it gives it back (gd_call_chunk_done), exactly
 * once: written, copied, or dropped when the connection closes.
 *
 * Ordering: a result that comes in several chunks is one msgpack object on the wire; once its
 * first chunk is queued, other replies are held, in arrival order, until its last one is.
 *
 * Staging hold: a chunk in memory the backend shares between jobs (GPU staging) is only read by
 * uv_try_write and memcpy, never left to uv_write; what a slow client has not taken
 * staging_hold_ms after the chunk arrived is copied and the staging given back, so a client
 * that does not read holds no staging other jobs need. A shared chunk of 32 KiB or less is
 * copied and given back at once and goes out with the batch (cheaper than a write of its own).
 *
 * The connection's loop thread only. The queue reports to its connection through callbacks
 * (gd_replyq_events); on failed the connection closes and calls gd_replyq_drop.
 */
#ifndef GD_REPLYQ_H
#define GD_REPLYQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gd_call.h"
#include "gd_stats.h"

typedef struct gd_replyq gd_replyq;
typedef struct gd_replyq_held gd_replyq_held;
typedef struct gd_replyq_shared gd_replyq_shared;
typedef struct gd_replyq_part gd_replyq_part;

typedef struct {
  void (*queued)(gd_replyq *q);   /* a write was queued: the stalled-reader clock runs */
  void (*progress)(gd_replyq *q); /* bytes left or a result ended: the backlog shrank */
  void (*failed)(gd_replyq *q, const char *why);
  /* The batch got its first reply: call gd_replyq_flush once the loop has run this iteration's
   * callbacks (NULL: every reply is written at once). */
  void (*want_flush)(gd_replyq *q);
} gd_replyq_events;

struct gd_replyq {
  uv_stream_t *stream;
  gd_stats *stats;            /* bytes_out, gemm_ok, replies */
  const uint64_t *hold_ms;    /* gpu.staging_hold_ms, live (SIGHUP) */
  const gd_replyq_events *events;
  uint64_t conn_id;           /* for logs */
  const char *peer;           /* for logs: the connection's peer text, or NULL */
  bool dropped;               /* the connection is closing: nothing more is written */

  uint64_t write_bytes;       /* of the parts below */
  uint32_t writes;            /* replies (or chunks) in the batch or in uv_write, not yet out */
  gd_replyq_part *batch;      /* queued, not yet handed to libuv (want_flush) */
  size_t batch_n, batch_cap;
  gd_call *streaming;         /* its result's first chunk is queued and its last is not */
  gd_replyq_held *held_head, **held_tail; /* replies waiting for `streaming` to end */
  uint64_t held_bytes;
  gd_replyq_shared *shared_head, **shared_tail; /* the first is the open one, being written */
  void *shared_probe;         /* the probe write of the open chunk in flight, or NULL */
  uint64_t write_progress_us; /* last write completed, or the first one queued */
  size_t write_queue_seen;    /* libuv's write queue size when last looked */
};

void gd_replyq_init(gd_replyq *q, uv_stream_t *stream, gd_stats *stats, const uint64_t *hold_ms,
                    const gd_replyq_events *events, uint64_t conn_id);

/* Queues a reply that is all ours (data, len: owned, freed when written). 0, or -1 when the
 * queue failed (the connection is closing). */
int gd_replyq_send(gd_replyq *q, char *data, size_t len);

/* Queues one chunk of c's result after head (owned, may be NULL): in place when in_job_memory,
 * else through the staging hold (see the top). The chunk is the queue's from here. */
void gd_replyq_chunk(gd_replyq *q, gd_call *c, char *head, size_t head_len, const void *data,
                     size_t len, bool last, bool in_job_memory);

/* Hands the batch to libuv: one write for the replies this loop iteration queued (up to 256 a
 * write), so a connection's replies cost one system call and one wake-up of its client. */
void gd_replyq_flush(gd_replyq *q);

/* Frees the batch's array (after gd_replyq_drop). */
void gd_replyq_free(gd_replyq *q);

/* Bytes the connection holds for its client: queued plus held. */
uint64_t gd_replyq_backlog(const gd_replyq *q);

/* When the open shared chunk started waiting for the socket: true and *since_us while there is
 * one; staging_hold_ms later, gd_replyq_expire copies what is left of it and gives it back. */
bool gd_replyq_hold_since(const gd_replyq *q, uint64_t *since_us);
void gd_replyq_expire(gd_replyq *q);

/* write_progress_us moves on when libuv's write queue changed size since the last look (it
 * reports a write only when all of it is out); the stalled-reader timer looks before deciding. */
void gd_replyq_look_for_progress(gd_replyq *q);

/* The connection closes: drops what is held and the shared chunks not yet out, giving their
 * memory back; writes in flight give theirs back when libuv cancels them. */
void gd_replyq_drop(gd_replyq *q);

#endif /* GD_REPLYQ_H */
