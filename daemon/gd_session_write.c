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
 */
#include "gd_session_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_log.h"
#include "gp_encode.h"

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

typedef struct {
  uv_write_t req;
  gd_session *s;
  gd__sjob *rec;             /* a chunk of a gemm result; NULL for other replies */
  char *head;                /* our encoded bytes (owned), may be NULL */
  const void *chunk;
  size_t chunk_len;
  bool last;
  bool give_back;            /* chunk is the backend's memory: hand it back when written */
  size_t bytes;
} wreq;

static void release_held(gd_session *s);

static void free_wreq(wreq *w) {
  free(w->head);
  free(w);
}

/* The last byte of rec's reply is out (or failed): the job is answered. */
static void reply_done(gd_session *s, gd__sjob *rec, bool ok) {
  gd_job *job = rec->job;
  gd__session_unlink_job(s, rec);
  free(rec);
  if (ok)
    s->d->stats.gemm_ok++;
  gd_sched_finish(s->d->sched, job, ok);
}

static void on_write(uv_write_t *req, int status) {
  wreq *w = req->data;
  gd_session *s = w->s;
  gd_daemon *d = s->d;
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
    if (!rec->orphan && w->last)
      reply_done(s, rec, status == 0);
  }
  free_wreq(w);
  if (status < 0 && status != UV_ECANCELED && !s->closing) {
    char why[128];
    snprintf(why, sizeof why, "write failed: %s", uv_strerror(status));
    gd_session_close(s, why);
    return;
  }
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
 * 0, or -1 when the write could not be queued (the session is then closing; the chunk, if any,
 * is given back to the scheduler). Callers go through write_out, which keeps results whole. */
static int write_now(gd_session *s, char *head, size_t head_len, gd__sjob *rec,
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
    return -1;
  }
  if (rec)
    rec->writes_pending++;
  if (s->writes == 0)
    s->write_progress_us = gd_now_us();
  s->writes++;
  s->write_bytes += w->bytes;
  gd__session_update_timer(s); /* arms the stalled-reader timeout */
  return 0;
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
  s->streaming = NULL;
}

int gd__session_write_sbuffer(gd_session *s, msgpack_sbuffer *sbuf) {
  size_t len = sbuf->size;
  char *data = msgpack_sbuffer_release(sbuf);
  return write_out(s, data, len, NULL, NULL, 0, false);
}

void gd__session_send_error(gd_session *s, uint32_t msgid, int code, const char *message) {
  gd_daemon *d = s->d;
  gd_stats_error(&d->stats, code);
  gd_info("conn %llu: msgid %u: %s: %s", (unsigned long long)s->id, (unsigned)msgid,
          gp_code_name(code), message);
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

/* A copy of what uv_try_write left of head and the chunk (done of the head_len + ev->len bytes
 * went out), or NULL when out of memory. */
static char *copy_unsent(const char *head, size_t head_len, const gd_backend_event *ev,
                         size_t done) {
  size_t total = head_len + ev->len;
  char *rest = malloc(total - done);
  if (!rest)
    return NULL;
  size_t head_done = done < head_len ? done : head_len;
  size_t chunk_done = done - head_done;
  if (head_len > head_done) /* head is NULL for every chunk but the first */
    memcpy(rest, head + head_done, head_len - head_done);
  if (ev->len > chunk_done)
    memcpy(rest + (head_len - head_done), (const char *)ev->data + chunk_done,
           ev->len - chunk_done);
  return rest;
}

/* The socket took the whole chunk at once: rec's result stays open, or is answered. */
static void chunk_sent_whole(gd_session *s, gd__sjob *rec, bool last) {
  if (!last) {
    s->streaming = rec;
  } else {
    if (s->streaming == rec)
      s->streaming = NULL;
    reply_done(s, rec, true);
    release_held(s);
  }
  gd__session_kick(s);
}

/* A chunk in memory the backend shares between jobs (GPU staging) must not wait for a slow
 * client: that would stall every other job on the device. Write what the socket takes now; copy
 * the rest (only then) and give the chunk back at once. */
static void write_shared_chunk(gd_session *s, gd__sjob *rec, char *head, size_t head_len,
                               const gd_backend_event *ev) {
  gd_job *job = rec->job;
  uv_buf_t bufs[2] = {{.base = head, .len = head_len}, {.base = (char *)ev->data, .len = ev->len}};
  size_t total = head_len + ev->len, done = 0;
  /* uv_try_write refuses (EAGAIN) while earlier writes are queued, so bytes stay in order */
  int n = uv_try_write(&s->h.stream, head ? bufs : bufs + 1, head ? 2 : 1);
  if (n < 0 && n != UV_EAGAIN) {
    free(head);
    gd_sched_chunk_sent(s->d->sched, job, ev->data, ev->len);
    char why[128];
    snprintf(why, sizeof why, "write failed: %s", uv_strerror(n));
    gd_session_close(s, why);
    return;
  }
  if (n > 0) {
    done = (size_t)n;
    s->d->stats.bytes_out += done;
    s->write_progress_us = gd_now_us();
  }
  char *rest = done < total ? copy_unsent(head, head_len, ev, done) : NULL;
  free(head);
  gd_sched_chunk_sent(s->d->sched, job, ev->data, ev->len); /* the staging slot is free again */
  if (done == total) {
    chunk_sent_whole(s, rec, ev->last);
    return;
  }
  if (!rest) {
    gd_session_close(s, "out of memory copying a reply");
    return;
  }
  write_out(s, rest, total - done, rec, NULL, 0, ev->last);
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
    write_shared_chunk(s, rec, head, head_len, ev);
}
