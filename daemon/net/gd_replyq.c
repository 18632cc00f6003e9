/*
 * gd_replyq.c - a connection's reply queue (see gd_replyq.h): writes, replies held while a
 * result is half-way out, and chunks in shared staging written while the socket takes them.
 *
 * Copying every shared chunk (64 MiB of fresh pages) took a 4096^3 f32 round trip from 43.9 to
 * 75.5 ms on an H200, hence the staging hold: while the socket takes a chunk, it goes out from
 * staging through uv_try_write; when the socket is full, a small copied probe piece is queued
 * with uv_write, and its callback (the socket drained) resumes writing from staging. Only a
 * chunk still not out staging_hold_ms after a 1 GB/s reader would have taken it is copied and
 * given back (hold_from).
 */
#include "gd_replyq.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_array.h"
#include "gd_clock.h"
#include "gd_log.h"

/* The piece copied and queued when the socket refuses a shared chunk: its write callback says
 * the socket drained. Small enough for malloc to reuse heap memory (no fresh pages to fault). */
#define PROBE_BYTES (64 * 1024)

/* A reply (or a chunk of one) that is ready while another result is half-way out: the
 * arguments of write_out, kept until that result's last chunk has been queued. */
struct gd_replyq_held {
  struct gd_replyq_held *next;
  char *head;              /* owned, may be NULL */
  size_t head_len;
  gd_call *rec;            /* a chunk of a gemm result; NULL for other replies */
  const void *chunk;       /* the job's own memory (ops.output_in_job_memory), or NULL */
  size_t chunk_len;
  bool last;
};

struct gd_replyq_shared {
  struct gd_replyq_shared *next;
  gd_call *rec;
  char *head;              /* the reply's head (owned) for its first chunk, else NULL */
  size_t head_len;
  const char *data;        /* the backend's memory, len bytes: given back once, when out */
  size_t len;
  size_t sent;             /* of head_len + len: written, or copied into a queued write */
  bool last;
  uint64_t started_us;     /* when it arrived: the hold limit counts from here */
};

/* One reply, or one chunk of one, on its way to the socket: queued in the batch, then in a
 * write request. */
struct gd_replyq_part {
  gd_call *rec;              /* a chunk of a gemm result; NULL for other replies */
  char *head;                /* our encoded bytes (owned), may be NULL */
  size_t head_len;
  const void *chunk;         /* the backend's memory: handed back when written, or NULL */
  size_t chunk_len;
  bool last;
};

/* One uv_write: every part the batch held when it was flushed, in order. */
typedef struct {
  uv_write_t req;
  gd_replyq *q;
  bool probe;                /* a piece of the open shared chunk: its callback resumes pump */
  size_t bytes;
  unsigned nparts;
  gd_replyq_part parts[];
} wreq;

/* Parts one write takes at most (two buffers each); a longer batch goes as several writes. */
#define FLUSH_MAX_PARTS 256u

static void release_held(gd_replyq *q);
static void pump(gd_replyq *q);

/* libuv's write queue size as of now: the stalled-reader timer counts only a change after this
 * as the client's progress (a write queued or finished is accounted for here, not there). */
static void note_queue_size(gd_replyq *q) {
  q->write_queue_seen = uv_stream_get_write_queue_size(q->stream);
}

/* The one place a chunk leaves the queue: given back to its job, exactly once. */
static void give_back(gd_replyq *q, gd_call *c, const void *data, size_t len) {
  (void)q;
  gd_call_chunk_done(c, data, len);
}

/* The socket cannot take this connection's replies: the connection closes (and drops q). */
static void fail(gd_replyq *q, const char *why) {
  if (!q->dropped)
    q->events->failed(q, why);
  assert(q->dropped);
}

static void progress(gd_replyq *q) {
  if (!q->dropped)
    q->events->progress(q);
}

/* The last byte of rec's reply is out (or failed): the job is answered. */
static void reply_done(gd_replyq *q, gd_call *rec, bool ok) {
  if (ok) {
    q->stats->gemm_ok++;
    gd_stats_reply(q->stats, GP_METHOD_GEMM, 0);
    if (gd_log_enabled(GD_LOG_DEBUG)) {
      const gd_job *job = rec->job;
      uint64_t took = gd_now_us() - job->admitted_us;
      gd_log_ctx ctx = {.conn = q->conn_id, .msgid = rec->msgid, .has_msgid = true,
                        .peer = q->peer, .device = job->result.device, .duration_us = took,
                        .has_duration = true};
      gd_logx(GD_LOG_DEBUG, &ctx, "conn %llu: msgid %u: gemm answered in %llu us (%s, %s)",
              (unsigned long long)q->conn_id, (unsigned)rec->msgid, (unsigned long long)took,
              job->result.device, job->result.kernel);
    }
  }
  gd_call_finish(rec, ok);
}

/* A part left the queue: written (status 0), failed or cancelled. Frees its head, gives its
 * chunk back and answers its call when this was the reply's last byte. */
static void part_done(gd_replyq *q, gd_replyq_part *p, int status) {
  free(p->head);
  p->head = NULL;
  gd_call *rec = p->rec;
  if (!rec)
    return;
  assert(rec->writes_pending > 0);
  rec->writes_pending--;
  if (p->chunk)
    give_back(q, rec, p->chunk, p->chunk_len);
  if (!rec->orphan && (p->last || (rec->reply_out && rec->writes_pending == 0)))
    reply_done(q, rec, status == 0);
}

/* Takes n parts (already counted in writes and write_bytes) off the counts. */
static void uncount(gd_replyq *q, unsigned n, size_t bytes) {
  assert(q->writes >= n && q->write_bytes >= bytes);
  q->writes -= n;
  q->write_bytes -= bytes;
}

static void on_write(uv_write_t *req, int status) {
  wreq *w = req->data;
  gd_replyq *q = w->q;
  bool resume = w->probe && q->shared_probe == w; /* not after a close dropped the chunk */
  if (resume)
    q->shared_probe = NULL;
  uncount(q, w->nparts, w->bytes);
  q->write_progress_us = gd_now_us();
  note_queue_size(q);
  if (status == 0)
    q->stats->bytes_out += w->bytes;
  for (unsigned i = 0; i < w->nparts; i++)
    part_done(q, &w->parts[i], status);
  free(w);
  if (status < 0 && status != UV_ECANCELED && !q->dropped) {
    char why[128];
    snprintf(why, sizeof why, "write failed: %s", uv_strerror(status));
    fail(q, why);
    return;
  }
  if (resume)
    pump(q); /* the socket drained: go on writing the open shared chunk from staging */
  progress(q); /* the write backlog shrank: maybe decode and read again */
}

static size_t part_bytes(const gd_replyq_part *p) { return p->head_len + p->chunk_len; }

/* Counts a part that is about to be queued: writes, write_bytes, its call's pending writes. */
static void count(gd_replyq *q, const gd_replyq_part *p) {
  if (p->rec)
    p->rec->writes_pending++;
  if (q->writes == 0)
    q->write_progress_us = gd_now_us();
  q->writes++;
  q->write_bytes += part_bytes(p);
}

/* One uv_write of n counted parts, in order. Returns the request (libuv's until on_write), or
 * NULL when it could not be queued: the connection is then closing and the parts were given
 * back. */
static wreq *submit(gd_replyq *q, const gd_replyq_part *parts, unsigned n) {
  assert(n > 0 && n <= FLUSH_MAX_PARTS);
  uv_buf_t bufs[2 * FLUSH_MAX_PARTS];
  unsigned nbufs = 0;
  size_t bytes = 0;
  wreq *w = malloc(sizeof *w + n * sizeof w->parts[0]);
  int rc = (!w || q->dropped) ? UV_ENOMEM : 0;
  if (rc == 0) {
    *w = (wreq){.q = q, .nparts = n};
    w->req.data = w;
    memcpy(w->parts, parts, n * sizeof parts[0]);
    for (unsigned i = 0; i < n; i++) {
      const gd_replyq_part *p = &parts[i];
      /* set by hand: uv_buf_init takes an unsigned int, a chunk of C may be larger */
      if (p->head_len)
        bufs[nbufs++] = (uv_buf_t){.base = p->head, .len = p->head_len};
      if (p->chunk_len)
        bufs[nbufs++] = (uv_buf_t){.base = (char *)p->chunk, .len = p->chunk_len};
      bytes += part_bytes(p);
    }
    w->bytes = bytes;
    rc = uv_write(&w->req, q->stream, bufs, nbufs, on_write);
  }
  if (rc == 0) {
    note_queue_size(q);
    q->events->queued(q); /* arms the stalled-reader timeout */
    return w;
  }
  if (!q->dropped) {
    char why[128];
    snprintf(why, sizeof why, "cannot queue a reply: %s", uv_strerror(rc));
    fail(q, why); /* orphans the calls first: the parts below answer nobody */
  }
  for (unsigned i = 0; i < n; i++) {
    gd_replyq_part p = parts[i];
    uncount(q, 1, part_bytes(&p));
    part_done(q, &p, rc);
  }
  free(w);
  return NULL;
}

void gd_replyq_flush(gd_replyq *q) {
  /* Taken out first: a failed write closes the connection, whose drop must not see these. */
  gd_replyq_part *parts = q->batch;
  size_t n = q->batch_n, cap = q->batch_cap, done = 0;
  q->batch = NULL;
  q->batch_n = q->batch_cap = 0;
  while (done < n && !q->dropped) {
    size_t take = n - done < FLUSH_MAX_PARTS ? n - done : FLUSH_MAX_PARTS;
    done += take;
    submit(q, parts + (done - take), (unsigned)take); /* NULL: closing, those given back */
  }
  for (; done < n; done++) { /* the connection closed half-way: never written */
    uncount(q, 1, part_bytes(&parts[done]));
    part_done(q, &parts[done], UV_ECANCELED);
  }
  if (!q->batch) { /* keep the array for the next iteration */
    q->batch = parts;
    q->batch_cap = cap;
  } else {
    free(parts);
  }
}

/* A part that will never be queued: its head freed, its chunk given back; the connection fails
 * with why (NULL: it is closing already). Returns -1. */
static int refuse(gd_replyq *q, gd_replyq_part *p, const char *why) {
  free(p->head);
  if (p->rec && p->chunk)
    give_back(q, p->rec, p->chunk, p->chunk_len);
  if (why)
    fail(q, why);
  return -1;
}

/* Queues head (owned, may be NULL) and an optional chunk; rec ties the chunk to its job. The part
 * waits in the batch until the connection flushes it (once per loop iteration, so the replies
 * of an iteration leave in one write), or is written now where the connection batches nothing.
 * -1 when it could not be queued (the connection is then closing; the chunk, if any, is given
 * back to the scheduler). Callers go through write_out, which keeps results whole. */
static int queue_write(gd_replyq *q, char *head, size_t head_len, gd_call *rec,
                       const void *chunk, size_t chunk_len, bool last) {
  gd_replyq_part p = {rec, head, head_len, chunk, chunk_len, last};
  if (q->dropped)
    return refuse(q, &p, NULL);
  if (!q->events->want_flush) {
    count(q, &p);
    return submit(q, &p, 1) ? 0 : -1;
  }
  if (q->batch_n == q->batch_cap) {
    gd_replyq_part *grown = gd_array_grow(q->batch, &q->batch_cap, sizeof *grown, 16);
    if (!grown)
      return refuse(q, &p, "out of memory queueing a reply");
    q->batch = grown;
  }
  count(q, &p);
  q->batch[q->batch_n++] = p;
  if (q->batch_n == 1)
    q->events->want_flush(q);
  return 0;
}

static bool must_hold(const gd_replyq *q, const gd_call *rec) {
  return q->streaming && q->streaming != rec;
}

static int hold(gd_replyq *q, char *head, size_t head_len, gd_call *rec, const void *chunk,
                size_t chunk_len, bool last) {
  gd_replyq_held *item = calloc(1, sizeof *item);
  if (!item) {
    gd_replyq_part p = {rec, head, head_len, chunk, chunk_len, last};
    return refuse(q, &p, "out of memory holding a reply");
  }
  *item = (gd_replyq_held){NULL, head, head_len, rec, chunk, chunk_len, last};
  if (!q->held_head)
    q->held_tail = &q->held_head;
  *q->held_tail = item;
  q->held_tail = &item->next;
  q->held_bytes += head_len + chunk_len;
  return 0;
}

/* Bytes of rec's result were queued: it is now the open result until its last chunk. */
static void note_queued(gd_replyq *q, gd_call *rec, bool last) {
  if (!rec)
    return;
  if (!last) {
    q->streaming = rec;
  } else if (q->streaming == rec) {
    q->streaming = NULL;
    release_held(q);
  }
}

/* Queues a reply, or holds it while another result is half-way out (see the top). */
static int write_out(gd_replyq *q, char *head, size_t head_len, gd_call *rec,
                     const void *chunk, size_t chunk_len, bool last) {
  if (must_hold(q, rec))
    return hold(q, head, head_len, rec, chunk, chunk_len, last);
  if (queue_write(q, head, head_len, rec, chunk, chunk_len, last) != 0)
    return -1;
  note_queued(q, rec, last);
  return 0;
}

/* The open result ended: queue what was held, in order. A held chunk of another result makes
 * that one the open result; what follows it stays held, except its own later chunks. */
static void release_held(gd_replyq *q) {
  gd_replyq_held **link = &q->held_head;
  while (*link && !q->dropped) {
    gd_replyq_held *item = *link;
    if (must_hold(q, item->rec)) {
      link = &item->next;
      continue;
    }
    *link = item->next;
    if (q->held_tail == &item->next)
      q->held_tail = link;
    assert(q->held_bytes >= item->head_len + item->chunk_len);
    q->held_bytes -= item->head_len + item->chunk_len;
    gd_replyq_held copy = *item;
    free(item);
    if (queue_write(q, copy.head, copy.head_len, copy.rec, copy.chunk, copy.chunk_len,
                    copy.last) != 0)
      return;
    if (copy.rec && !copy.last) {
      q->streaming = copy.rec;
    } else if (copy.rec && q->streaming == copy.rec) {
      q->streaming = NULL;
      link = &q->held_head; /* everything held may go now: start over */
    }
  }
}

void gd_replyq_drop(gd_replyq *q) {
  q->dropped = true;
  for (size_t i = 0; i < q->batch_n; i++) { /* never written: cancelled */
    uncount(q, 1, part_bytes(&q->batch[i]));
    part_done(q, &q->batch[i], UV_ECANCELED);
  }
  q->batch_n = 0;
  while (q->held_head) {
    gd_replyq_held *item = q->held_head;
    q->held_head = item->next;
    free(item->head);
    if (item->rec && item->chunk)
      give_back(q, item->rec, item->chunk, item->chunk_len);
    free(item);
  }
  q->held_tail = &q->held_head;
  q->held_bytes = 0;
  while (q->shared_head) {
    gd_replyq_shared *c = q->shared_head;
    q->shared_head = c->next;
    free(c->head);
    give_back(q, c->rec, c->data, c->len);
    free(c);
  }
  q->shared_tail = &q->shared_head;
  q->shared_probe = NULL; /* its callback (cancelled) must not resume anything */
  q->streaming = NULL;
}

int gd_replyq_send(gd_replyq *q, char *data, size_t len) {
  return write_out(q, data, len, NULL, NULL, 0, false);
}

/* ---- chunks in shared memory (see the top) ------------------------------- */

/* The last byte of rec's reply left through uv_try_write: answered now, or by the callback of
 * its last write still pending (rec must outlive those callbacks). */
static void answer_when_written(gd_replyq *q, gd_call *rec) {
  if (rec->writes_pending == 0)
    reply_done(q, rec, true);
  else
    rec->reply_out = true;
}

/* Takes the open chunk off the list and gives its memory back to the backend (exactly once). */
static void close_shared(gd_replyq *q, gd_replyq_shared *c) {
  q->shared_head = c->next;
  if (!q->shared_head)
    q->shared_tail = &q->shared_head;
  free(c->head);
  give_back(q, c->rec, c->data, c->len);
  free(c);
}

/* Copies n bytes of c's head + data, starting at byte from of them, into dst. */
static void copy_range(const gd_replyq_shared *c, size_t from, size_t n, char *dst) {
  if (from < c->head_len) {
    size_t h = c->head_len - from < n ? c->head_len - from : n;
    memcpy(dst, c->head + from, h);
    dst += h;
    from += h;
    n -= h;
  }
  if (n)
    memcpy(dst, c->data + (from - c->head_len), n);
}

/* Writes what the socket takes of c now. Returns 1 when all of c is out, 0 when the socket
 * refused (some or all), or a uv error. */
static int try_write_shared(gd_replyq *q, gd_replyq_shared *c) {
  size_t total = c->head_len + c->len;
  if (q->batch_n > 0)
    gd_replyq_flush(q); /* what was queued before goes first (uv_try_write then waits) */
  if (q->dropped)
    return 0;
  while (c->sent < total) {
    uv_buf_t bufs[2];
    unsigned nbufs = 0;
    /* set by hand: uv_buf_init takes an unsigned int */
    if (c->sent < c->head_len) {
      bufs[nbufs].base = c->head + c->sent;
      bufs[nbufs++].len = c->head_len - c->sent;
    }
    size_t data_from = c->sent > c->head_len ? c->sent - c->head_len : 0;
    if (data_from < c->len) {
      bufs[nbufs].base = (char *)c->data + data_from;
      bufs[nbufs++].len = c->len - data_from;
    }
    /* EAGAIN while earlier writes are queued in libuv, so bytes stay in order */
    int n = uv_try_write(q->stream, bufs, nbufs);
    if (n == UV_EAGAIN || n == 0)
      return 0;
    if (n < 0)
      return n;
    c->sent += (size_t)n;
    q->stats->bytes_out += (uint64_t)n;
    q->write_progress_us = gd_now_us();
    if (c->sent < total)
      return 0; /* a partial write: the socket buffer is full */
  }
  return 1;
}

/* All of the open chunk is out: give it back; rec's result stays open, or is answered. */
static void shared_done(gd_replyq *q, gd_replyq_shared *c) {
  gd_call *rec = c->rec;
  bool last = c->last;
  close_shared(q, c);
  if (!last)
    return; /* q->streaming stays rec until its last chunk */
  if (q->streaming == rec)
    q->streaming = NULL;
  answer_when_written(q, rec);
  release_held(q);
}

/* The hold limit passed (slow) or at most a probe piece is left: copy what is left of the open
 * chunk into one write and give the staging back now. May close the session. */
static void shared_copy_rest(gd_replyq *q, gd_replyq_shared *c, bool slow) {
  size_t rest_len = c->head_len + c->len - c->sent;
  char *rest = malloc(rest_len);
  if (rest)
    copy_range(c, c->sent, rest_len, rest);
  gd_call *rec = c->rec;
  bool last = c->last;
  if (slow)
    gd_debug("conn %llu: msgid %u: %zu bytes of a result chunk copied off staging after %llu ms",
             (unsigned long long)q->conn_id, (unsigned)rec->msgid, rest_len,
             (unsigned long long)((gd_now_us() - c->started_us) / 1000u));
  close_shared(q, c);
  if (!rest) {
    fail(q, "out of memory copying a reply");
    return;
  }
  write_out(q, rest, rest_len, rec, NULL, 0, last); /* rec is streaming: queued, not held */
}

/* The socket refused c: queue a copied probe piece behind whatever libuv holds; its callback
 * (the socket drained) resumes pump. */
static void shared_probe(gd_replyq *q, gd_replyq_shared *c) {
  char *piece = malloc(PROBE_BYTES);
  if (!piece) {
    fail(q, "out of memory copying a reply");
    return;
  }
  copy_range(c, c->sent, PROBE_BYTES, piece);
  gd_replyq_part part = {c->rec, piece, PROBE_BYTES, NULL, 0, false};
  gd_replyq_flush(q); /* what was queued before goes first */
  if (q->dropped) {
    free(piece);
    return;
  }
  count(q, &part);
  wreq *w = submit(q, &part, 1);
  if (!w)
    return; /* closing: the chunk was dropped */
  w->probe = true;
  q->shared_probe = w;
  c->sent += PROBE_BYTES;
}

/* The hold counts from when a reader taking HOLD_MIN_BYTES_PER_US would have had the whole
 * chunk: a 20 ms hold from arrival copied 64 MiB chunks off staging for clients that were
 * reading them at 3-5 GB/s (8192^3 f32 round trip 301 ms against 215 ms without the copies, on
 * an H100 host), while a client that reads slower than 1 GB/s still gives the slot back soon. */
#define HOLD_MIN_BYTES_PER_US 1000u

static uint64_t hold_from(const gd_replyq_shared *c) {
  return c->started_us + (c->head_len + c->len) / HOLD_MIN_BYTES_PER_US;
}

static bool hold_passed(const gd_replyq *q, const gd_replyq_shared *c, uint64_t now) {
  uint64_t from = hold_from(c);
  return now >= from && now - from >= *q->hold_ms * 1000u;
}

/* Writes the shared chunks from staging while the socket takes them (see the top). Waits while
 * a probe is in flight: its callback calls pump again; the session's timer calls
 * gd_replyq_expire when the hold limit passes first. */
static void pump(gd_replyq *q) {
  while (q->shared_head && !q->shared_probe && !q->dropped) {
    gd_replyq_shared *c = q->shared_head;
    int rc = try_write_shared(q, c);
    if (rc < 0) {
      char why[128];
      snprintf(why, sizeof why, "write failed: %s", uv_strerror(rc));
      fail(q, why); /* gives the chunk back */
      return;
    }
    if (rc == 1)
      shared_done(q, c);
    else if (hold_passed(q, c, gd_now_us()))
      shared_copy_rest(q, c, true);
    else if (c->head_len + c->len - c->sent <= PROBE_BYTES)
      shared_copy_rest(q, c, false);
    else
      shared_probe(q, c);
  }
}

/* A chunk in memory the backend shares between jobs: written from there while the socket takes
 * it (pump), after the shared chunks of rec before it. */
static void open_shared_chunk(gd_replyq *q, gd_call *rec, char *head, size_t head_len,
                              const void *data, size_t len, bool last) {
  gd_replyq_shared *c = calloc(1, sizeof *c);
  if (!c) {
    free(head);
    give_back(q, rec, data, len);
    fail(q, "out of memory writing a reply");
    return;
  }
  *c = (gd_replyq_shared){NULL, rec, head, head_len, data, len, 0, last, gd_now_us()};
  if (!q->shared_head)
    q->shared_tail = &q->shared_head;
  *q->shared_tail = c;
  q->shared_tail = &c->next;
  q->streaming = rec; /* other replies are held until its last chunk is out */
  pump(q);
  progress(q);
}

bool gd_replyq_hold_since(const gd_replyq *q, uint64_t *since_us) {
  if (!q->shared_head)
    return false;
  *since_us = hold_from(q->shared_head);
  return true;
}

void gd_replyq_expire(gd_replyq *q) {
  uint64_t now = gd_now_us();
  while (q->shared_head && !q->dropped && hold_passed(q, q->shared_head, now))
    shared_copy_rest(q, q->shared_head, true);
  pump(q);
  progress(q);
}

/* A shared chunk up to this size (with its head) is copied and given back at once, then queued
 * like a reply of our own: the copy costs less than the system call and the client's wake-up
 * a zero-copy write of its own takes (the GPU small-job lane's results: one uv_try_write each
 * otherwise, outside the iteration's batch), and the slot is free for the next job at once. */
#define COPY_SHARED_BYTES (32 * 1024)

/* Copies this chunk (and its head) and frees the backend's memory at once; the copy is queued
 * (write_out) or, when hold_it, held. */
static void copy_shared_chunk(gd_replyq *q, gd_call *rec, char *head, size_t head_len,
                              const void *data, size_t len, bool last, bool hold_it) {
  size_t total = head_len + len;
  char *copy = malloc(total ? total : 1);
  if (copy) {
    if (head_len)
      memcpy(copy, head, head_len);
    if (len)
      memcpy(copy + head_len, data, len);
  }
  free(head);
  give_back(q, rec, data, len);
  if (!copy) {
    fail(q, "out of memory copying a reply");
    return;
  }
  if (hold_it)
    hold(q, copy, total, rec, NULL, 0, last);
  else
    write_out(q, copy, total, rec, NULL, 0, last);
}

void gd_replyq_chunk(gd_replyq *q, gd_call *c, char *head, size_t head_len, const void *data,
                     size_t len, bool last, bool in_job_memory) {
  assert(!q->dropped);
  if (in_job_memory)
    write_out(q, head, head_len, c, data, len, last);
  else if (must_hold(q, c)) /* another result is half-way out: as for a slow client */
    copy_shared_chunk(q, c, head, head_len, data, len, last, true);
  else if (head_len + len <= COPY_SHARED_BYTES && !q->shared_head)
    copy_shared_chunk(q, c, head, head_len, data, len, last, false);
  else
    open_shared_chunk(q, c, head, head_len, data, len, last);
}

uint64_t gd_replyq_backlog(const gd_replyq *q) { return q->write_bytes + q->held_bytes; }

void gd_replyq_look_for_progress(gd_replyq *q) {
  /* libuv reports a write only when it is complete; a shrinking queue is progress too */
  size_t queued = uv_stream_get_write_queue_size(q->stream);
  if (q->writes > 0 && queued != q->write_queue_seen) {
    q->write_queue_seen = queued;
    q->write_progress_us = gd_now_us();
  }
}

void gd_replyq_init(gd_replyq *q, uv_stream_t *stream, gd_stats *stats, const uint64_t *hold_ms,
                    const gd_replyq_events *events, uint64_t conn_id) {
  memset(q, 0, sizeof *q);
  q->stream = stream;
  q->stats = stats;
  q->hold_ms = hold_ms;
  q->events = events;
  q->conn_id = conn_id;
  q->held_tail = &q->held_head;
  q->shared_tail = &q->shared_head;
}

void gd_replyq_free(gd_replyq *q) {
  assert(q->batch_n == 0);
  free(q->batch);
  q->batch = NULL;
  q->batch_cap = 0;
}
