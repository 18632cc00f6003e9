/*
 * gd_session_write.c - a session's write path (see gd_session_internal.h).
 *
 * Every reply is a uv_write of our encoded head plus, for a gemm result, the
 * backend's chunk of C straight from its memory (never copied).
 *
 * A result that comes in several chunks (GPU: one per staging buffer) is one
 * msgpack object on the wire: once its first chunk is queued, nothing else may
 * be queued until its last one is. Replies that become ready meanwhile (other
 * results, ping/info/stats, errors) are held in arrival order and released
 * when that result's last chunk is queued.
 *
 * A chunk in memory the backend shares between jobs (GPU staging) is the
 * exception: a client that does not read must not hold a staging slot other
 * jobs on the device need, but copying every chunk (64 MiB of fresh pages)
 * took a 4096^3 f32 round trip from 43.9 to 75.5 ms on an H200. Such a chunk is only ever read
 * synchronously, by uv_try_write (which keeps no pointer) and memcpy. While
 * the socket takes it, it goes out from staging; when the socket is full, a
 * small copied probe piece is queued with uv_write, and its callback (the
 * socket drained) resumes writing from staging. Only a chunk still not out
 * gpu.staging_hold_ms after it arrived is copied and given back.
 */
#include "gd_session_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_log.h"
#include "gp_encode.h"

/* The piece copied and queued when the socket refuses a shared chunk: its write callback says
 * the socket drained. Small enough for malloc to reuse heap memory (no fresh pages to fault). */
#define PROBE_BYTES (64 * 1024)

/* A reply (or a chunk of one) that is ready while another result is half-way out: the
 * arguments of write_out, kept until that result's last chunk has been queued. */
struct gd__held {
  struct gd__held *next;
  char *head;              /* owned, may be NULL */
  size_t head_len;
  gd__sjob *rec;           /* a chunk of a gemm result; NULL for other replies */
  const void *chunk;       /* the job's own memory (ops.output_in_job_memory), or NULL */
  size_t chunk_len;
  bool last;
};

struct gd__shared {
  struct gd__shared *next;
  gd__sjob *rec;
  char *head;              /* the reply's head (owned) for its first chunk, else NULL */
  size_t head_len;
  const char *data;        /* the backend's memory, len bytes: given back once, when out */
  size_t len;
  size_t sent;             /* of head_len + len: written, or copied into a queued write */
  bool last;
  uint64_t started_us;     /* when it arrived: the hold limit counts from here */
};

typedef struct {
  uv_write_t req;
  gd_session *s;
  gd__sjob *rec;             /* a chunk of a gemm result; NULL for other replies */
  char *head;                /* our encoded bytes (owned), may be NULL */
  const void *chunk;
  size_t chunk_len;
  bool last;
  bool give_back;            /* chunk is the backend's memory: hand it back when written */
  bool probe;                /* a piece of the open shared chunk: its callback resumes pump */
  size_t bytes;
} wreq;

static void release_held(gd_session *s);
static void pump(gd_session *s);

static void free_wreq(wreq *w) {
  free(w->head);
  free(w);
}

/* The last byte of rec's reply is out (or failed): the job is answered. */
static void reply_done(gd_session *s, gd__sjob *rec, bool ok) {
  gd_job *job = rec->job;
  gd__session_unlink_job(s, rec);
  free(rec);
  if (ok) {
    s->d->stats.gemm_ok++;
    gd_stats_reply(&s->d->stats, GP_METHOD_GEMM, 0);
    uint64_t took = gd_now_us() - job->admitted_us;
    gd_log_ctx ctx = {.conn = s->id, .msgid = job->msgid, .has_msgid = true, .peer = s->peer,
                      .device = job->result.device, .duration_us = took, .has_duration = true};
    gd_logx(GD_LOG_DEBUG, &ctx, "conn %llu: msgid %u: gemm answered in %llu us (%s, %s)",
            (unsigned long long)s->id, (unsigned)job->msgid, (unsigned long long)took,
            job->result.device, job->result.kernel);
  }
  gd_sched_finish(s->d->sched, job, ok);
}

static void on_write(uv_write_t *req, int status) {
  wreq *w = req->data;
  gd_session *s = w->s;
  gd_daemon *d = s->d;
  bool resume = w->probe && s->shared_probe == w; /* not after a close dropped the chunk */
  if (resume)
    s->shared_probe = NULL;
  s->write_bytes -= w->bytes;
  s->writes--;
  s->write_progress_us = gd_now_us();
  if (status == 0)
    d->stats.bytes_out += w->bytes;
  gd__sjob *rec = w->rec;
  if (rec) {
    rec->writes_pending--;
    if (w->give_back)
      gd_sched_chunk_sent(d->sched, rec->job, w->chunk, w->chunk_len);
    if (!rec->orphan && (w->last || (rec->reply_out && rec->writes_pending == 0)))
      reply_done(s, rec, status == 0);
  }
  free_wreq(w);
  if (status < 0 && status != UV_ECANCELED && !s->closing) {
    char why[128];
    snprintf(why, sizeof why, "write failed: %s", uv_strerror(status));
    gd_session_close(s, why);
    return;
  }
  if (resume)
    pump(s); /* the socket drained: go on writing the open shared chunk from staging */
  gd__session_kick(s); /* the write backlog shrank: maybe decode and read again */
}

/* A write request for head and chunk, or NULL (out of memory). bufs gets nbufs entries. */
static wreq *new_wreq(gd_session *s, char *head, size_t head_len, gd__sjob *rec,
                      const void *chunk, size_t chunk_len, bool last, uv_buf_t bufs[2],
                      unsigned *nbufs) {
  wreq *w = calloc(1, sizeof *w);
  if (!w)
    return NULL;
  w->s = s;
  w->rec = rec;
  w->head = head;
  w->chunk = chunk;
  w->chunk_len = chunk_len;
  w->last = last;
  w->give_back = chunk != NULL;
  w->req.data = w;
  /* set by hand: uv_buf_init takes an unsigned int, a chunk of C may be larger */
  if (head_len) {
    bufs[*nbufs].base = head;
    bufs[(*nbufs)++].len = head_len;
  }
  if (chunk_len) {
    bufs[*nbufs].base = (char *)chunk;
    bufs[(*nbufs)++].len = chunk_len;
  }
  w->bytes = head_len + chunk_len;
  return w;
}

/* Writes head (owned, may be NULL) and an optional chunk; rec ties the chunk to its job. Returns
 * the queued request (libuv's until on_write), or NULL when the write could not be queued (the
 * session is then closing; the chunk, if any, is given back to the scheduler). Callers go
 * through write_out, which keeps results whole. */
static wreq *queue_write(gd_session *s, char *head, size_t head_len, gd__sjob *rec,
                         const void *chunk, size_t chunk_len, bool last) {
  uv_buf_t bufs[2];
  unsigned nbufs = 0;
  wreq *w = new_wreq(s, head, head_len, rec, chunk, chunk_len, last, bufs, &nbufs);
  int rc = (!w || s->closing) ? UV_ENOMEM : 0;
  if (rc == 0)
    rc = uv_write(&w->req, &s->h.stream, bufs, nbufs, on_write);
  if (rc != 0) {
    if (w)
      free_wreq(w);
    else
      free(head);
    if (rec && chunk)
      gd_sched_chunk_sent(s->d->sched, rec->job, chunk, chunk_len);
    if (!s->closing) {
      char why[128];
      snprintf(why, sizeof why, "cannot queue a reply: %s", uv_strerror(rc));
      gd_session_close(s, why);
    }
    return NULL;
  }
  if (rec)
    rec->writes_pending++;
  if (s->writes == 0)
    s->write_progress_us = gd_now_us();
  s->writes++;
  s->write_bytes += w->bytes;
  gd__session_update_timer(s); /* arms the stalled-reader timeout */
  return w;
}

/* queue_write: 0, or -1 when the session is closing. */
static int write_now(gd_session *s, char *head, size_t head_len, gd__sjob *rec,
                     const void *chunk, size_t chunk_len, bool last) {
  return queue_write(s, head, head_len, rec, chunk, chunk_len, last) ? 0 : -1;
}

static bool must_hold(const gd_session *s, const gd__sjob *rec) {
  return s->streaming && s->streaming != rec;
}

static int hold(gd_session *s, char *head, size_t head_len, gd__sjob *rec, const void *chunk,
                size_t chunk_len, bool last) {
  gd__held *item = calloc(1, sizeof *item);
  if (!item) {
    free(head);
    if (rec && chunk)
      gd_sched_chunk_sent(s->d->sched, rec->job, chunk, chunk_len);
    gd_session_close(s, "out of memory holding a reply");
    return -1;
  }
  *item = (gd__held){NULL, head, head_len, rec, chunk, chunk_len, last};
  if (!s->held_head)
    s->held_tail = &s->held_head;
  *s->held_tail = item;
  s->held_tail = &item->next;
  s->held_bytes += head_len + chunk_len;
  return 0;
}

/* Bytes of rec's result were queued: it is now the open result until its last chunk. */
static void note_queued(gd_session *s, gd__sjob *rec, bool last) {
  if (!rec)
    return;
  if (!last) {
    s->streaming = rec;
  } else if (s->streaming == rec) {
    s->streaming = NULL;
    release_held(s);
  }
}

/* Queues a reply, or holds it while another result is half-way out (see the top). */
static int write_out(gd_session *s, char *head, size_t head_len, gd__sjob *rec,
                     const void *chunk, size_t chunk_len, bool last) {
  if (must_hold(s, rec))
    return hold(s, head, head_len, rec, chunk, chunk_len, last);
  if (write_now(s, head, head_len, rec, chunk, chunk_len, last) != 0)
    return -1;
  note_queued(s, rec, last);
  return 0;
}

/* The open result ended: queue what was held, in order. A held chunk of another result makes
 * that one the open result; what follows it stays held, except its own later chunks. */
static void release_held(gd_session *s) {
  gd__held **link = &s->held_head;
  while (*link && !s->closing) {
    gd__held *item = *link;
    if (must_hold(s, item->rec)) {
      link = &item->next;
      continue;
    }
    *link = item->next;
    if (s->held_tail == &item->next)
      s->held_tail = link;
    s->held_bytes -= item->head_len + item->chunk_len;
    gd__held copy = *item;
    free(item);
    if (write_now(s, copy.head, copy.head_len, copy.rec, copy.chunk, copy.chunk_len,
                  copy.last) != 0)
      return;
    if (copy.rec && !copy.last) {
      s->streaming = copy.rec;
    } else if (copy.rec && s->streaming == copy.rec) {
      s->streaming = NULL;
      link = &s->held_head; /* everything held may go now: start over */
    }
  }
}

void gd__session_drop_held(gd_session *s) {
  while (s->held_head) {
    gd__held *item = s->held_head;
    s->held_head = item->next;
    free(item->head);
    if (item->rec && item->chunk)
      gd_sched_chunk_sent(s->d->sched, item->rec->job, item->chunk, item->chunk_len);
    free(item);
  }
  s->held_tail = &s->held_head;
  s->held_bytes = 0;
  while (s->shared_head) {
    gd__shared *c = s->shared_head;
    s->shared_head = c->next;
    free(c->head);
    gd_sched_chunk_sent(s->d->sched, c->rec->job, c->data, c->len);
    free(c);
  }
  s->shared_tail = &s->shared_head;
  s->shared_probe = NULL; /* its callback (cancelled) must not resume anything */
  s->streaming = NULL;
}

int gd__session_write_sbuffer(gd_session *s, msgpack_sbuffer *sbuf) {
  size_t len = sbuf->size;
  char *data = msgpack_sbuffer_release(sbuf);
  return write_out(s, data, len, NULL, NULL, 0, false);
}

void gd__session_send_error(gd_session *s, uint32_t msgid, int code, const char *message) {
  gd__session_send_error_for(s, GP_METHOD_GEMM, msgid, code, message);
}

void gd__session_send_error_for(gd_session *s, gp_method method, uint32_t msgid, int code,
                                const char *message) {
  gd_daemon *d = s->d;
  gd_stats_error(&d->stats, code);
  gd_stats_reply(&d->stats, method, code);
  gd_log_ctx ctx = {.conn = s->id, .msgid = msgid, .has_msgid = true, .peer = s->peer,
                    .code = gp_code_name(code)};
  gd_logx(GD_LOG_INFO, &ctx, "conn %llu: msgid %u: %s: %s", (unsigned long long)s->id,
          (unsigned)msgid, gp_code_name(code), message);
  if (s->closing)
    return;
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  int rc = gp_encode_error_response(&sbuf, msgid, code, message);
  if (rc != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    gd_session_close(s, "out of memory encoding an error reply");
    return;
  }
  gd__session_write_sbuffer(s, &sbuf);
}

/* ---- chunks in shared memory (see the top) ------------------------------- */

/* The last byte of rec's reply left through uv_try_write: answered now, or by the callback of
 * its last write still pending (rec must outlive those callbacks). */
static void answer_when_written(gd_session *s, gd__sjob *rec) {
  if (rec->writes_pending == 0)
    reply_done(s, rec, true);
  else
    rec->reply_out = true;
}

/* Takes the open chunk off the list and gives its memory back to the backend (exactly once). */
static void close_shared(gd_session *s, gd__shared *c) {
  s->shared_head = c->next;
  if (!s->shared_head)
    s->shared_tail = &s->shared_head;
  free(c->head);
  gd_sched_chunk_sent(s->d->sched, c->rec->job, c->data, c->len);
  free(c);
}

/* Copies n bytes of c's head + data, starting at byte from of them, into dst. */
static void copy_range(const gd__shared *c, size_t from, size_t n, char *dst) {
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
static int try_write_shared(gd_session *s, gd__shared *c) {
  size_t total = c->head_len + c->len;
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
    int n = uv_try_write(&s->h.stream, bufs, nbufs);
    if (n == UV_EAGAIN || n == 0)
      return 0;
    if (n < 0)
      return n;
    c->sent += (size_t)n;
    s->d->stats.bytes_out += (uint64_t)n;
    s->write_progress_us = gd_now_us();
    if (c->sent < total)
      return 0; /* a partial write: the socket buffer is full */
  }
  return 1;
}

/* All of the open chunk is out: give it back; rec's result stays open, or is answered. */
static void shared_done(gd_session *s, gd__shared *c) {
  gd__sjob *rec = c->rec;
  bool last = c->last;
  close_shared(s, c);
  if (!last)
    return; /* s->streaming stays rec until its last chunk */
  if (s->streaming == rec)
    s->streaming = NULL;
  answer_when_written(s, rec);
  release_held(s);
}

/* The hold limit passed (slow) or at most a probe piece is left: copy what is left of the open
 * chunk into one write and give the staging back now. May close the session. */
static void shared_copy_rest(gd_session *s, gd__shared *c, bool slow) {
  size_t rest_len = c->head_len + c->len - c->sent;
  char *rest = malloc(rest_len);
  if (rest)
    copy_range(c, c->sent, rest_len, rest);
  gd__sjob *rec = c->rec;
  bool last = c->last;
  if (slow)
    gd_debug("conn %llu: msgid %u: %zu bytes of a result chunk copied off staging after %llu ms",
             (unsigned long long)s->id, (unsigned)rec->msgid, rest_len,
             (unsigned long long)((gd_now_us() - c->started_us) / 1000u));
  close_shared(s, c);
  if (!rest) {
    gd_session_close(s, "out of memory copying a reply");
    return;
  }
  write_out(s, rest, rest_len, rec, NULL, 0, last); /* rec is streaming: queued, not held */
}

/* The socket refused c: queue a copied probe piece behind whatever libuv holds; its callback
 * (the socket drained) resumes pump. */
static void shared_probe(gd_session *s, gd__shared *c) {
  char *piece = malloc(PROBE_BYTES);
  if (!piece) {
    gd_session_close(s, "out of memory copying a reply");
    return;
  }
  copy_range(c, c->sent, PROBE_BYTES, piece);
  wreq *w = queue_write(s, piece, PROBE_BYTES, c->rec, NULL, 0, false);
  if (!w)
    return; /* closing: the chunk was dropped */
  w->probe = true;
  s->shared_probe = w;
  c->sent += PROBE_BYTES;
}

static bool hold_passed(const gd_session *s, const gd__shared *c, uint64_t now) {
  return now - c->started_us >= s->d->cfg.gpu.staging_hold_ms * 1000u;
}

/* Writes the shared chunks from staging while the socket takes them (see the top). Waits while
 * a probe is in flight: its callback calls pump again; the session's timer calls
 * gd__session_shared_expire when the hold limit passes first. */
static void pump(gd_session *s) {
  while (s->shared_head && !s->shared_probe && !s->closing) {
    gd__shared *c = s->shared_head;
    int rc = try_write_shared(s, c);
    if (rc < 0) {
      char why[128];
      snprintf(why, sizeof why, "write failed: %s", uv_strerror(rc));
      gd_session_close(s, why); /* gives the chunk back */
      return;
    }
    if (rc == 1)
      shared_done(s, c);
    else if (hold_passed(s, c, gd_now_us()))
      shared_copy_rest(s, c, true);
    else if (c->head_len + c->len - c->sent <= PROBE_BYTES)
      shared_copy_rest(s, c, false);
    else
      shared_probe(s, c);
  }
}

/* A chunk in memory the backend shares between jobs: written from there while the socket takes
 * it (pump), after the shared chunks of rec before it. */
static void open_shared_chunk(gd_session *s, gd__sjob *rec, char *head, size_t head_len,
                              const gd_backend_event *ev) {
  gd__shared *c = calloc(1, sizeof *c);
  if (!c) {
    free(head);
    gd_sched_chunk_sent(s->d->sched, rec->job, ev->data, ev->len);
    gd_session_close(s, "out of memory writing a reply");
    return;
  }
  *c = (gd__shared){NULL, rec, head, head_len, ev->data, ev->len, 0, ev->last, gd_now_us()};
  if (!s->shared_head)
    s->shared_tail = &s->shared_head;
  *s->shared_tail = c;
  s->shared_tail = &c->next;
  s->streaming = rec; /* other replies are held until its last chunk is out */
  pump(s);
  gd__session_kick(s);
}

bool gd__session_shared_since(const gd_session *s, uint64_t *since_us) {
  if (!s->shared_head)
    return false;
  *since_us = s->shared_head->started_us;
  return true;
}

void gd__session_shared_expire(gd_session *s) {
  uint64_t now = gd_now_us();
  while (s->shared_head && !s->closing && hold_passed(s, s->shared_head, now))
    shared_copy_rest(s, s->shared_head, true);
  pump(s);
  gd__session_kick(s);
}

/* Another result is half-way out: copy this chunk (and its head) and free the staging slot at
 * once, as for a slow client. */
static void hold_shared_chunk(gd_session *s, gd__sjob *rec, char *head, size_t head_len,
                              const gd_backend_event *ev) {
  size_t total = head_len + ev->len;
  char *copy = malloc(total ? total : 1);
  if (copy) {
    if (head_len)
      memcpy(copy, head, head_len);
    if (ev->len)
      memcpy(copy + head_len, ev->data, ev->len);
  }
  free(head);
  gd_sched_chunk_sent(s->d->sched, rec->job, ev->data, ev->len);
  if (!copy) {
    gd_session_close(s, "out of memory holding a reply");
    return;
  }
  hold(s, copy, total, rec, NULL, 0, ev->last);
}

void gd__session_write_chunk(gd_session *s, gd__sjob *rec, char *head, size_t head_len,
                             const gd_backend_event *ev) {
  if (rec->job->backend->ops->output_in_job_memory)
    write_out(s, head, head_len, rec, ev->data, ev->len, ev->last);
  else if (must_hold(s, rec))
    hold_shared_chunk(s, rec, head, head_len, ev);
  else
    open_shared_chunk(s, rec, head, head_len, ev);
}
