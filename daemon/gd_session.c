/*
 * gd_session.c - one connection (see gd_session.h).
 *
 * Reading: alloc_cb hands out the job's own buffer when the decoder is inside
 * a payload (gp_decoder_payload_window -> backend input_window), so payload
 * bytes land where the backend wants them and the decoder's PAYLOAD events
 * point at them in place; otherwise it hands out the session's read buffer.
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
#include "gd_session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_log.h"
#include "gd_methods.h"
#include "gp_decode.h"
#include "gp_encode.h"

#define READ_BUFFER_BYTES (64 * 1024)

/* The session's record of one gemm job it admitted and has not answered yet. */
typedef struct sjob {
  gd_job *job;
  struct sjob *prev, *next;
  uint32_t msgid;
  uint32_t writes_pending; /* chunks of this job in uv_write */
  uint64_t next_offset;    /* where the next chunk of C must start */
  bool head_sent;          /* the reply's head went out with the first chunk */
  bool orphan;             /* the session closed: job abandoned, only chunks come back */
} sjob;

/* A reply (or a chunk of one) that is ready while another result is half-way out: the
 * arguments of write_out, kept until that result's last chunk has been queued. */
typedef struct held {
  struct held *next;
  char *head;              /* owned, may be NULL */
  size_t head_len;
  sjob *rec;               /* a chunk of a gemm result; NULL for other replies */
  const void *chunk;       /* the job's own memory (ops.output_in_job_memory), or NULL */
  size_t chunk_len;
  bool last;
} held;

struct gd_session {
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_pipe_t pipe;
    uv_tcp_t tcp;
  } h;
  uv_timer_t timer;
  int open_handles; /* handle + timer: freed when both close callbacks ran */
  gd_daemon *d;
  struct gd_session *prev, *next;
  uint64_t id;
  char peer[80];
  gp_decoder *dec;

  uint8_t *rbuf;             /* READ_BUFFER_BYTES */
  const uint8_t *pending;    /* bytes read and not yet decoded (in rbuf or a job's window) */
  size_t pending_len;
  bool pending_in_window;    /* pending points into the current job's buffer */
  bool reading, paused, closing;
  bool eof;                  /* the client shut its side: answer what is in flight, then close */

  /* the message being decoded */
  bool in_request;           /* a REQUEST was seen and MESSAGE_END has not come */
  gp_method method;
  uint32_t msgid;
  sjob *cur;                 /* its job, for a gemm */
  uint64_t msg_started_us;   /* moved on by the time spent paused: see pause_reading */
  uint64_t paused_since_us;

  sjob *jobs;                /* admitted gemm jobs not yet answered */
  uint32_t in_flight;
  uint64_t write_bytes;      /* queued in uv_write */
  sjob *streaming;           /* its result's first chunk is queued and its last is not */
  held *held_head, **held_tail; /* replies waiting for `streaming` to end, in arrival order */
  uint64_t held_bytes;
  uint32_t writes;
  uint64_t last_activity_us;
  uint64_t write_progress_us; /* last write completed, or the first one queued */
  size_t write_queue_seen;    /* libuv's write queue size when the timer last looked */
};

typedef struct {
  uv_write_t req;
  gd_session *s;
  sjob *rec;                 /* a chunk of a gemm result; NULL for other replies */
  char *head;                /* our encoded bytes (owned), may be NULL */
  const void *chunk;
  size_t chunk_len;
  bool last;
  bool give_back;            /* chunk is the backend's memory: hand it back when written */
  size_t bytes;
} wreq;

static void process(gd_session *s);
static void update_reading(gd_session *s);
static void update_timer(gd_session *s);
static void resume_reading(gd_session *s);

/* Something that held this session back went away (a reply was written, a job answered, limits
 * changed): decode what is already read, then read more if allowed. */
static void kick(gd_session *s) {
  if (s->closing)
    return;
  if (s->eof) {
    if (s->in_flight == 0 && s->writes == 0)
      gd_session_close(s, "closed by client");
    return;
  }
  if (s->pending_len > 0) {
    process(s); /* ends with update_reading and update_timer */
    return;
  }
  update_reading(s);
  if (!s->closing)
    update_timer(s);
}

/* ---- writing ------------------------------------------------------------- */

static void free_wreq(wreq *w) {
  free(w->head);
  free(w);
}

static void unlink_rec(gd_session *s, sjob *rec) {
  if (rec->prev)
    rec->prev->next = rec->next;
  else
    s->jobs = rec->next;
  if (rec->next)
    rec->next->prev = rec->prev;
  rec->prev = rec->next = NULL;
  s->in_flight--;
}

/* The last byte of rec's reply is out (or failed): the job is answered. */
static void reply_done(gd_session *s, sjob *rec, bool ok) {
  gd_job *job = rec->job;
  unlink_rec(s, rec);
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
  sjob *rec = w->rec;
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
  kick(s); /* the write backlog shrank: maybe decode and read again */
}

/* Writes head (owned, may be NULL) and an optional chunk; rec ties the chunk to its job. Returns
 * 0, or -1 when the write could not be queued (the session is then closing; the chunk, if any,
 * is given back to the scheduler). Callers go through write_out, which keeps results whole. */
static int write_now(gd_session *s, char *head, size_t head_len, sjob *rec, const void *chunk,
                     size_t chunk_len, bool last) {
  wreq *w = calloc(1, sizeof *w);
  uv_buf_t bufs[2];
  unsigned nbufs = 0;
  if (w) {
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
      bufs[nbufs].base = head;
      bufs[nbufs++].len = head_len;
    }
    if (chunk_len) {
      bufs[nbufs].base = (char *)chunk;
      bufs[nbufs++].len = chunk_len;
    }
    w->bytes = head_len + chunk_len;
  }
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
  update_timer(s); /* arms the stalled-reader timeout */
  return 0;
}

static bool must_hold(const gd_session *s, const sjob *rec) {
  return s->streaming && s->streaming != rec;
}

static int hold(gd_session *s, char *head, size_t head_len, sjob *rec, const void *chunk,
                size_t chunk_len, bool last) {
  held *item = calloc(1, sizeof *item);
  if (!item) {
    free(head);
    if (rec && chunk)
      gd_sched_chunk_sent(s->d->sched, rec->job, chunk, chunk_len);
    gd_session_close(s, "out of memory holding a reply");
    return -1;
  }
  *item = (held){NULL, head, head_len, rec, chunk, chunk_len, last};
  if (!s->held_head)
    s->held_tail = &s->held_head;
  *s->held_tail = item;
  s->held_tail = &item->next;
  s->held_bytes += head_len + chunk_len;
  return 0;
}

static void release_held(gd_session *s);

/* Bytes of rec's result were queued: it is now the open result until its last chunk. */
static void note_queued(gd_session *s, sjob *rec, bool last) {
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
static int write_out(gd_session *s, char *head, size_t head_len, sjob *rec, const void *chunk,
                     size_t chunk_len, bool last) {
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
  held **link = &s->held_head;
  while (*link && !s->closing) {
    held *item = *link;
    if (must_hold(s, item->rec)) {
      link = &item->next;
      continue;
    }
    *link = item->next;
    if (s->held_tail == &item->next)
      s->held_tail = link;
    s->held_bytes -= item->head_len + item->chunk_len;
    held copy = *item;
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

/* Session closing: drop what is held, handing job memory back to the scheduler. */
static void drop_held(gd_session *s) {
  while (s->held_head) {
    held *item = s->held_head;
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

/* Sends what sbuf holds (taking its memory). */
static int write_sbuffer(gd_session *s, msgpack_sbuffer *sbuf) {
  size_t len = sbuf->size;
  char *data = msgpack_sbuffer_release(sbuf);
  return write_out(s, data, len, NULL, NULL, 0, false);
}

static void send_error(gd_session *s, uint32_t msgid, int code, const char *message) {
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
  write_sbuffer(s, &sbuf);
}

/* A chunk in memory the backend shares between jobs (GPU staging) must not wait for a slow
 * client: that would stall every other job on the device. Write what the socket takes now; copy
 * the rest (only then) and give the chunk back at once. */
static void write_shared_chunk(gd_session *s, sjob *rec, char *head, size_t head_len,
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
  char *rest = NULL;
  if (done < total) {
    rest = malloc(total - done);
    if (rest) {
      size_t head_done = done < head_len ? done : head_len;
      size_t chunk_done = done - head_done;
      if (head_len > head_done) /* head is NULL for every chunk but the first */
        memcpy(rest, head + head_done, head_len - head_done);
      if (ev->len > chunk_done)
        memcpy(rest + (head_len - head_done), (const char *)ev->data + chunk_done,
               ev->len - chunk_done);
    }
  }
  free(head);
  gd_sched_chunk_sent(s->d->sched, job, ev->data, ev->len); /* the staging slot is free again */
  if (done == total) {
    if (!ev->last) {
      s->streaming = rec;
    } else {
      if (s->streaming == rec)
        s->streaming = NULL;
      reply_done(s, rec, true);
      release_held(s);
    }
    kick(s);
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
static void hold_shared_chunk(gd_session *s, sjob *rec, char *head, size_t head_len,
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

/* ---- scheduler hooks ----------------------------------------------------- */

static void hook_output(void *session, gd_job *job, const gd_backend_event *ev) {
  gd_session *s = session;
  sjob *rec = job->session_data;
  char *head = NULL;
  size_t head_len = 0;
  uint64_t c_bytes = job->operand_bytes[GP_OPERAND_C];
  /* The reply's bytes go out in the order posted: a gap, an overlap or a short C would corrupt
   * the stream for every later reply on this connection. */
  if (ev->offset != rec->next_offset || ev->len > c_bytes - rec->next_offset ||
      (ev->last && rec->next_offset + ev->len != c_bytes)) {
    gd_error("conn %llu: msgid %u: backend chunk at %llu+%zu does not continue C (%llu of %llu "
             "bytes sent)", (unsigned long long)s->id, (unsigned)rec->msgid,
             (unsigned long long)ev->offset, ev->len, (unsigned long long)rec->next_offset,
             (unsigned long long)c_bytes);
    gd_sched_chunk_sent(s->d->sched, job, ev->data, ev->len);
    gd_session_close(s, "internal error: bad result chunk");
    return;
  }
  rec->next_offset += ev->len;
  if (!rec->head_sent) {
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init(&sbuf);
    if (gp_encode_gemm_response_head(&sbuf, rec->msgid, &job->result,
                                     job->operand_bytes[GP_OPERAND_C]) != 0) {
      msgpack_sbuffer_destroy(&sbuf);
      gd_sched_chunk_sent(s->d->sched, job, ev->data, ev->len);
      gd_session_close(s, "out of memory encoding a reply");
      return;
    }
    head_len = sbuf.size;
    head = msgpack_sbuffer_release(&sbuf);
    rec->head_sent = true;
  }
  gd_debug("conn %llu: msgid %u: result chunk of %zu bytes%s", (unsigned long long)s->id,
           (unsigned)rec->msgid, ev->len, ev->last ? " (last)" : "");
  if (job->backend->ops->output_in_job_memory)
    write_out(s, head, head_len, rec, ev->data, ev->len, ev->last);
  else if (must_hold(s, rec))
    hold_shared_chunk(s, rec, head, head_len, ev);
  else
    write_shared_chunk(s, rec, head, head_len, ev);
}

static void hook_failed(void *session, gd_job *job, const gp_error *err) {
  gd_session *s = session;
  sjob *rec = job->session_data;
  if (rec->head_sent) {
    /* Half a reply is out: the stream cannot carry an error for it any more. */
    gd_error("conn %llu: msgid %u failed after its reply started: %s", (unsigned long long)s->id,
             (unsigned)rec->msgid, err->message);
    gd_session_close(s, "a result failed half-way");
    return;
  }
  uint32_t msgid = rec->msgid;
  unlink_rec(s, rec);
  free(rec);
  gd_sched_finish(s->d->sched, job, false);
  send_error(s, msgid, err->code ? err->code : GP_E_INTERNAL, err->message);
  kick(s);
}

static void hook_resume(void *session, gd_job *job) {
  gd_session *s = session;
  (void)job;
  if (s->paused) {
    resume_reading(s);
    process(s);
  }
}

const gd_sched_hooks gd_session_hooks = {hook_output, hook_failed, hook_resume};

/* ---- requests ------------------------------------------------------------ */

static void reply_simple(gd_session *s) {
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  gp_error err;
  gp_error_clear(&err);
  if (gd_methods_reply(s->d, s->msgid, s->method, &sbuf, &err) != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    send_error(s, s->msgid, err.code ? err.code : GP_E_INTERNAL, err.message);
    return;
  }
  write_sbuffer(s, &sbuf);
}

static void on_gemm_request(gd_session *s, const gp_event *ev) {
  gd_daemon *d = s->d;
  gp_error err;
  gp_error_clear(&err);
  gd_job *job = NULL;
  sjob *rec = calloc(1, sizeof *rec);
  int rc = rec ? gd_sched_admit(d->sched, &ev->gemm, ev->has_c, ev->msgid, s, &job, &err)
               : gp_error_set(&err, GP_E_RESOURCE_EXHAUSTED, "out of memory");
  if (rc != 0) {
    free(rec);
    gp_decoder_skip_message(s->dec);
    s->in_request = false;
    send_error(s, ev->msgid, rc, err.message);
    return;
  }
  rec->job = job;
  rec->msgid = ev->msgid;
  job->session_data = rec;
  rec->next = s->jobs;
  if (s->jobs)
    s->jobs->prev = rec;
  s->jobs = rec;
  s->in_flight++;
  s->cur = rec;
  gd_debug("conn %llu: msgid %u: gemm %s m=%llu n=%llu k=%llu batch=%llu admitted as job %llu",
           (unsigned long long)s->id, (unsigned)ev->msgid, gp_dtype_name(ev->gemm.dtype),
           (unsigned long long)ev->gemm.m, (unsigned long long)ev->gemm.n,
           (unsigned long long)ev->gemm.k, (unsigned long long)ev->gemm.batch,
           (unsigned long long)job->id);
}

/* Bytes read into the current job's window and not decoded yet are all payload of the current
 * message: let the decoder count them off now, before the job and its memory go. */
static void consume_window_bytes(gd_session *s) {
  while (s->pending_in_window && s->pending_len > 0) {
    gp_event ev;
    size_t used = gp_decoder_feed(s->dec, s->pending, s->pending_len, &ev);
    s->pending += used;
    s->pending_len -= used;
    if (ev.type == GP_EV_NEED_MORE || ev.type == GP_EV_FATAL || ev.type == GP_EV_MESSAGE_END)
      break;
  }
  if (s->pending_in_window) {
    s->pending_in_window = false;
    s->pending = s->rbuf;
    s->pending_len = 0;
  }
}

/* The request being read is dropped before it was submitted (the caller makes the decoder skip
 * the rest of the message, or it already does). A pause the job asked for goes with it. */
static void drop_current(gd_session *s) {
  sjob *rec = s->cur;
  if (!rec)
    return;
  consume_window_bytes(s);
  s->cur = NULL;
  s->paused = false;
  gd_job *job = rec->job;
  unlink_rec(s, rec);
  free(rec);
  gd_sched_abandon(s->d->sched, job);
}

/* The backend accepted the bytes but wants no more for now (GPU: waiting for device memory or
 * a staging buffer). That wait is the daemon's, not a stalled client's: timeouts.request_ms
 * stops counting until resume_reading. */
static void pause_reading(gd_session *s) {
  if (s->paused)
    return;
  s->paused = true;
  s->paused_since_us = gd_now_us();
}

static void resume_reading(gd_session *s) {
  if (!s->paused)
    return;
  s->paused = false;
  s->msg_started_us += gd_now_us() - s->paused_since_us;
}

static void on_request(gd_session *s, const gp_event *ev) {
  gd_daemon *d = s->d;
  d->stats.requests++;
  if ((unsigned)ev->method < sizeof d->stats.requests_by_method / sizeof(uint64_t))
    d->stats.requests_by_method[ev->method]++;
  s->in_request = true;
  s->method = ev->method;
  s->msgid = ev->msgid;
  s->cur = NULL;
  if (ev->method == GP_METHOD_GEMM)
    on_gemm_request(s, ev);
  else
    gd_debug("conn %llu: msgid %u: %s", (unsigned long long)s->id, (unsigned)ev->msgid,
             gp_method_name(ev->method) ? gp_method_name(ev->method) : "?");
}

static void on_payload(gd_session *s, const gp_event *ev) {
  sjob *rec = s->cur;
  if (!rec)
    return; /* a payload of a request we refused: the decoder skips those itself */
  gd_job *job = rec->job;
  gp_error err;
  gp_error_clear(&err);
  bool pause = false;
  int rc = job->backend->ops->input(job->backend, job, ev->operand, ev->offset, ev->data, ev->len,
                                    &pause, &err);
  if (rc != 0) {
    uint32_t msgid = rec->msgid;
    gp_decoder_skip_message(s->dec);
    drop_current(s);
    s->in_request = false;
    send_error(s, msgid, rc, err.message);
    return;
  }
  if (pause)
    pause_reading(s);
}

static void on_message_end(gd_session *s) {
  if (!s->in_request)
    return; /* the end of a notification */
  s->in_request = false;
  if (s->method != GP_METHOD_GEMM) {
    reply_simple(s);
    return;
  }
  sjob *rec = s->cur;
  s->cur = NULL;
  if (!rec)
    return;
  gp_error err;
  gp_error_clear(&err);
  gd_job *job = rec->job;
  uint32_t msgid = rec->msgid;
  int rc = gd_sched_submit(s->d->sched, job, &err);
  if (rc != 0) { /* the scheduler released and freed the job */
    unlink_rec(s, rec);
    free(rec);
    send_error(s, msgid, rc, err.message);
  }
}

static void on_reject(gd_session *s, const gp_event *ev) {
  gd_daemon *d = s->d;
  bool counted = s->in_request; /* its REQUEST event was counted already */
  drop_current(s);
  s->in_request = false;
  if (ev->has_msgid) {
    if (!counted) {
      d->stats.requests++;
      if ((unsigned)ev->method < sizeof d->stats.requests_by_method / sizeof(uint64_t))
        d->stats.requests_by_method[ev->method]++;
    }
    send_error(s, ev->msgid, ev->err.code ? ev->err.code : GP_E_INVALID_ARGUMENT,
               ev->err.message);
  } else {
    gd_stats_error(&d->stats, ev->err.code ? ev->err.code : GP_E_INVALID_ARGUMENT);
    gd_info("conn %llu: message without a readable msgid dropped: %s", (unsigned long long)s->id,
            ev->err.message);
  }
}

static void on_fatal(gd_session *s, const gp_event *ev, const uint8_t *at, size_t len) {
  char prefix[160];
  gd_log_clean(prefix, sizeof prefix, at, len < 32 ? len : 32);
  gd_warn("conn %llu: protocol error: %s (bytes at the error: \"%s\")", (unsigned long long)s->id,
          ev->err.message, prefix);
  gd_session_close(s, "protocol error");
}

/* Handles one decoder event. */
static void handle_event(gd_session *s, const gp_event *ev, const uint8_t *at, size_t left) {
  switch (ev->type) {
  case GP_EV_NEED_MORE: return;
  case GP_EV_REQUEST: on_request(s, ev); return;
  case GP_EV_NOTIFICATION:
    s->d->stats.notifications++;
    s->in_request = false;
    gd_debug("conn %llu: notification %s ignored", (unsigned long long)s->id,
             gp_method_name(ev->method) ? gp_method_name(ev->method) : "(unknown)");
    return;
  case GP_EV_PAYLOAD: on_payload(s, ev); return;
  case GP_EV_MESSAGE_END: on_message_end(s); return;
  case GP_EV_REJECT: on_reject(s, ev); return;
  case GP_EV_FATAL: on_fatal(s, ev, at, left); return;
  case GP_EV_RESPONSE:
    gd_session_close(s, "a client sent a response");
    return;
  }
}

/* ---- reading ------------------------------------------------------------- */

static bool at_boundary(const gd_session *s) {
  return gp_decoder_message_bytes(s->dec) == 0 && !s->in_request;
}

/* Between messages: has this connection used its share for now? */
static bool over_caps(const gd_session *s) {
  const gd_config *cfg = &s->d->cfg;
  return s->in_flight >= cfg->max_requests_in_flight ||
         s->write_bytes + s->held_bytes >= cfg->max_buffered_bytes;
}

static bool may_decode(const gd_session *s) {
  if (s->closing || s->paused || s->eof)
    return false;
  return !(at_boundary(s) && over_caps(s));
}

/* Decodes pending bytes until they are used up or the session must stop. */
static void process(gd_session *s) {
  for (;;) {
    if (!may_decode(s))
      break;
    if (at_boundary(s) && s->pending_len > 0)
      s->msg_started_us = gd_now_us();
    gp_event ev;
    size_t used = gp_decoder_feed(s->dec, s->pending, s->pending_len, &ev);
    const uint8_t *at = s->pending + used;
    s->pending += used;
    s->pending_len -= used;
    handle_event(s, &ev, at, s->pending_len);
    if (ev.type == GP_EV_NEED_MORE || ev.type == GP_EV_FATAL)
      break;
  }
  if (s->closing)
    return;
  update_reading(s);
  update_timer(s);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  gd_session *s = handle->data;
  (void)suggested;
  sjob *rec = s->cur;
  gp_operand operand;
  uint64_t offset, remaining;
  void *ptr;
  size_t len;
  if (rec && rec->job->backend->ops->input_window &&
      gp_decoder_payload_window(s->dec, &operand, &offset, &remaining) &&
      rec->job->backend->ops->input_window(rec->job->backend, rec->job, operand, offset, &ptr,
                                           &len) &&
      len > 0) {
    if (len > remaining)
      len = (size_t)remaining; /* never read past this payload into the job's memory */
    if (len > 0x40000000u)
      len = 0x40000000u; /* uv_buf_t's length is an unsigned int */
    *buf = uv_buf_init(ptr, (unsigned)len);
    return;
  }
  *buf = uv_buf_init((char *)s->rbuf, READ_BUFFER_BYTES);
}

/* The client closed its side. A request cut short is dropped at once (it can never complete);
 * replies to the complete ones still go out, for a client that only shut down writing. */
static void on_eof(gd_session *s) {
  s->eof = true;
  if (!at_boundary(s)) {
    gd_info("conn %llu: %s: went away in the middle of a request", (unsigned long long)s->id,
            s->peer);
    drop_current(s);
    s->in_request = false;
  }
  update_reading(s);
  if (!s->closing)
    update_timer(s);
  kick(s);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  gd_session *s = stream->data;
  if (nread == 0)
    return;
  if (nread < 0) {
    if (nread == UV_EOF)
      on_eof(s);
    else {
      char why[128];
      snprintf(why, sizeof why, "read error: %s", uv_strerror((int)nread));
      gd_session_close(s, why);
    }
    return;
  }
  s->d->stats.bytes_in += (uint64_t)nread;
  s->last_activity_us = gd_now_us();
  s->pending = (const uint8_t *)buf->base;
  s->pending_len = (size_t)nread;
  s->pending_in_window = buf->base != (char *)s->rbuf;
  process(s);
}

/* Reads only when every byte read so far has been decoded and nothing says stop. */
static void update_reading(gd_session *s) {
  bool want = !s->closing && s->pending_len == 0 && may_decode(s);
  if (want && !s->reading) {
    int rc = uv_read_start(&s->h.stream, on_alloc, on_read);
    if (rc != 0) {
      char why[128];
      snprintf(why, sizeof why, "cannot read: %s", uv_strerror(rc));
      gd_session_close(s, why);
      return;
    }
    s->reading = true;
  } else if (!want && s->reading) {
    uv_read_stop(&s->h.stream);
    s->reading = false;
  }
}

/* ---- timeouts ------------------------------------------------------------ */

/* The earliest timeout that applies now, and when it falls due (monotonic us):
 *   request: a message started arriving and has not finished within request_ms (not counting
 *            time paused for the backend);
 *   idle:    nothing in flight and nothing read for idle_ms;
 *   stalled: replies queued and not one byte of them written for request_ms (a client that
 *            stopped reading would otherwise hold its jobs' memory for ever). */
typedef enum { TIMEOUT_NONE, TIMEOUT_REQUEST, TIMEOUT_IDLE, TIMEOUT_STALLED } timeout_kind;

static void consider(timeout_kind *kind, uint64_t *due, timeout_kind k, uint64_t since,
                     uint64_t ms) {
  uint64_t at = since + ms * 1000u;
  if (*kind == TIMEOUT_NONE || at < *due) {
    *kind = k;
    *due = at;
  }
}

static timeout_kind next_timeout(const gd_session *s, uint64_t *due) {
  const gd_config *cfg = &s->d->cfg;
  timeout_kind kind = TIMEOUT_NONE;
  if (s->writes > 0 && cfg->request_ms)
    consider(&kind, due, TIMEOUT_STALLED, s->write_progress_us, cfg->request_ms);
  if (s->eof)
    return kind; /* nothing more can arrive; jobs in flight end by themselves */
  if (!at_boundary(s) && !s->paused && cfg->request_ms)
    consider(&kind, due, TIMEOUT_REQUEST, s->msg_started_us, cfg->request_ms);
  if (at_boundary(s) && s->in_flight == 0 && s->writes == 0 && cfg->idle_ms)
    consider(&kind, due, TIMEOUT_IDLE, s->last_activity_us, cfg->idle_ms);
  return kind;
}

static void on_timer(uv_timer_t *timer) {
  static const char *const why[] = {
      [TIMEOUT_REQUEST] = "request did not finish arriving within timeouts.request_ms",
      [TIMEOUT_IDLE] = "idle for timeouts.idle_ms",
      [TIMEOUT_STALLED] = "client read nothing of its replies for timeouts.request_ms"};
  gd_session *s = timer->data;
  uint64_t due = 0;
  /* libuv reports a write only when it is complete; a shrinking queue is progress too */
  size_t queued = uv_stream_get_write_queue_size(&s->h.stream);
  if (s->writes > 0 && queued != s->write_queue_seen) {
    s->write_queue_seen = queued;
    s->write_progress_us = gd_now_us();
  }
  timeout_kind kind = next_timeout(s, &due);
  if (kind != TIMEOUT_NONE && gd_now_us() >= due) {
    gd_session_close(s, why[kind]);
    return;
  }
  update_timer(s);
}

static void update_timer(gd_session *s) {
  uint64_t due = 0;
  if (next_timeout(s, &due) == TIMEOUT_NONE) {
    uv_timer_stop(&s->timer);
    return;
  }
  uint64_t now = gd_now_us();
  uint64_t left_ms = due <= now ? 0 : (due - now + 999u) / 1000u;
  uv_timer_start(&s->timer, on_timer, left_ms, 0); /* cannot fail on an initialised timer */
}

/* ---- open and close ------------------------------------------------------ */

static void free_session(gd_session *s) {
  while (s->jobs) {
    sjob *rec = s->jobs;
    s->jobs = rec->next;
    free(rec);
  }
  gp_decoder_free(s->dec);
  free(s->rbuf);
  free(s);
}

static void on_close(uv_handle_t *handle) {
  gd_session *s = handle->data;
  if (--s->open_handles > 0)
    return;
  gd_daemon *d = s->d;
  if (s->prev)
    s->prev->next = s->next;
  else if (d->sessions == s)
    d->sessions = s->next;
  if (s->next)
    s->next->prev = s->prev;
  free_session(s);
}

void gd_session_close(gd_session *s, const char *why) {
  if (s->closing)
    return;
  s->closing = true;
  s->d->connections--;
  gd_info("conn %llu: %s: %s (%u jobs in flight)", (unsigned long long)s->id, s->peer, why,
          (unsigned)s->in_flight);
  s->cur = NULL;
  /* Jobs go back to the scheduler now; records stay until the close callback because
   * cancelled writes still report their chunks. */
  for (sjob *rec = s->jobs; rec; rec = rec->next) {
    if (!rec->orphan) {
      rec->orphan = true;
      gd_sched_abandon(s->d->sched, rec->job);
    }
  }
  drop_held(s);
  if (s->reading)
    uv_read_stop(&s->h.stream);
  s->reading = false;
  uv_timer_stop(&s->timer);
  uv_close((uv_handle_t *)&s->timer, on_close);
  uv_close(&s->h.handle, on_close);
}

static void on_refused_close(uv_handle_t *handle) { free(handle); }

/* Accept and close at once: the client sees EOF instead of hanging in the backlog. */
static int refuse(gd_daemon *d, uv_stream_t *server, const char *why) {
  uv_stream_t *tmp = malloc(server->type == UV_TCP ? sizeof(uv_tcp_t) : sizeof(uv_pipe_t));
  if (!tmp)
    return UV_ENOMEM;
  int rc = server->type == UV_TCP ? uv_tcp_init(d->loop, (uv_tcp_t *)tmp)
                                  : uv_pipe_init(d->loop, (uv_pipe_t *)tmp, 0);
  if (rc != 0) {
    free(tmp);
    return rc;
  }
  rc = uv_accept(server, tmp);
  uv_close((uv_handle_t *)tmp, on_refused_close);
  d->stats.connections_refused++;
  gd_warn("connection refused: %s", why);
  return rc;
}

static void describe_peer(gd_session *s) {
  if (s->h.handle.type != UV_TCP) {
    snprintf(s->peer, sizeof s->peer, "unix");
    return;
  }
  struct sockaddr_storage ss;
  int len = sizeof ss;
  char host[64] = "?";
  int port = 0;
  if (uv_tcp_getpeername(&s->h.tcp, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET6) {
      uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof host);
      port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    } else {
      uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof host);
      port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
  }
  snprintf(s->peer, sizeof s->peer, ss.ss_family == AF_INET6 ? "tcp [%s]:%d" : "tcp %s:%d", host,
           port);
}

static gd_session *new_session(gd_daemon *d) {
  gd_session *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->rbuf = malloc(READ_BUFFER_BYTES);
  s->dec = gp_decoder_new(GP_ROLE_SERVER, &d->cfg.proto);
  if (!s->rbuf || !s->dec) {
    gp_decoder_free(s->dec);
    free(s->rbuf);
    free(s);
    return NULL;
  }
  s->d = d;
  s->pending = s->rbuf; /* never NULL, even when empty */
  s->held_tail = &s->held_head;
  return s;
}

int gd_session_accept(gd_daemon *d, uv_stream_t *server) {
  if (d->draining)
    return refuse(d, server, "shutting down");
  if (d->connections >= d->cfg.max_connections)
    return refuse(d, server, "limits.max_connections reached");
  gd_session *s = new_session(d);
  if (!s)
    return refuse(d, server, "out of memory");
  int rc = server->type == UV_TCP ? uv_tcp_init(d->loop, &s->h.tcp)
                                  : uv_pipe_init(d->loop, &s->h.pipe, 0);
  if (rc != 0) {
    free_session(s);
    return rc;
  }
  s->h.handle.data = s;
  s->open_handles = 1;
  rc = uv_timer_init(d->loop, &s->timer);
  if (rc == 0) {
    s->timer.data = s;
    s->open_handles = 2;
    rc = uv_accept(server, &s->h.stream);
  }
  /* from here the session is closed like any other, through on_close */
  s->id = ++d->next_session_id;
  s->next = d->sessions;
  if (d->sessions)
    d->sessions->prev = s;
  d->sessions = s;
  d->connections++;
  d->stats.connections_total++;
  s->last_activity_us = gd_now_us();
  if (rc != 0) {
    snprintf(s->peer, sizeof s->peer, "?");
    char why[128];
    snprintf(why, sizeof why, "accept failed: %s", uv_strerror(rc));
    if (s->open_handles == 1) {
      /* the timer never started: close only the stream */
      s->closing = true;
      d->connections--;
      gd_warn("%s", why);
      uv_close(&s->h.handle, on_close);
    } else {
      gd_session_close(s, why);
    }
    return 0;
  }
  describe_peer(s);
  gd_info("conn %llu: %s: open (%zu connections)", (unsigned long long)s->id, s->peer,
          d->connections);
  update_reading(s);
  if (!s->closing)
    update_timer(s);
  return 0;
}

/* ---- all sessions -------------------------------------------------------- */

void gd_sessions_apply_limits(gd_daemon *d) {
  for (gd_session *s = d->sessions; s; s = s->next) {
    if (s->closing)
      continue;
    gp_decoder_set_limits(s->dec, &d->cfg.proto);
    kick(s);
  }
}

size_t gd_sessions_fail_pending(gd_daemon *d, const char *why) {
  size_t answered = 0;
  for (gd_session *s = d->sessions; s; s = s->next) {
    if (s->closing)
      continue;
    sjob *rec = s->jobs;
    while (rec) {
      sjob *next = rec->next;
      if (!rec->head_sent && !rec->orphan) {
        uint32_t msgid = rec->msgid;
        if (s->cur == rec) {
          gp_decoder_skip_message(s->dec); /* first: window bytes are then skipped too */
          drop_current(s);
          s->in_request = false;
        } else {
          gd_job *job = rec->job;
          unlink_rec(s, rec);
          free(rec);
          gd_sched_abandon(d->sched, job);
        }
        send_error(s, msgid, GP_E_UNAVAILABLE, why);
        answered++;
      }
      rec = next;
    }
    kick(s);
  }
  return answered;
}

uint64_t gd_sessions_write_backlog(const gd_daemon *d) {
  uint64_t total = 0;
  for (const gd_session *s = d->sessions; s; s = s->next)
    if (!s->closing)
      total += s->write_bytes + s->held_bytes;
  return total;
}

void gd_sessions_close_all(gd_daemon *d, const char *why) {
  for (gd_session *s = d->sessions; s; s = s->next)
    gd_session_close(s, why);
}
