/*
 * gd_session_hooks.c - the scheduler's hooks into sessions (gd_session_hooks): a chunk of a
 * result to send, a job that failed, a backend that takes input again.
 */
#include "gd_session_internal.h"

#include <stdlib.h>

#include "gd_log.h"
#include "gp_encode.h"

/* The reply's bytes go out in the order posted: a gap, an overlap or a short C would corrupt
 * the stream for every later reply on this connection. */
static bool continues_c(const gd__sjob *rec, const gd_backend_event *ev, uint64_t c_bytes) {
  return !(ev->offset != rec->next_offset || ev->len > c_bytes - rec->next_offset ||
           (ev->last && rec->next_offset + ev->len != c_bytes));
}

/* The gemm response head (owned) into *head, or -1 when out of memory. */
static int encode_head(const gd__sjob *rec, const gd_job *job, char **head, size_t *head_len) {
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  if (gp_encode_gemm_response_head(&sbuf, rec->msgid, &job->result,
                                   job->operand_bytes[GP_OPERAND_C]) != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    return -1;
  }
  *head_len = sbuf.size;
  *head = msgpack_sbuffer_release(&sbuf);
  return 0;
}

static void job_output(gd__sjob *rec, gd_job *job, const gd_backend_event *ev) {
  gd_session *s = rec->s;
  char *head = NULL;
  size_t head_len = 0;
  uint64_t c_bytes = job->operand_bytes[GP_OPERAND_C];
  if (!continues_c(rec, ev, c_bytes)) {
    gd_error("conn %llu: msgid %u: backend chunk at %llu+%zu does not continue C (%llu of %llu "
             "bytes sent)", (unsigned long long)s->id, (unsigned)rec->msgid,
             (unsigned long long)ev->offset, ev->len, (unsigned long long)rec->next_offset,
             (unsigned long long)c_bytes);
    gd_sched_chunk_done(s->d->sched, job, ev->data, ev->len);
    gd_session_close(s, "internal error: bad result chunk");
    return;
  }
  rec->next_offset += ev->len;
  if (!rec->head_sent) {
    if (encode_head(rec, job, &head, &head_len) != 0) {
      gd_sched_chunk_done(s->d->sched, job, ev->data, ev->len);
      gd_session_close(s, "out of memory encoding a reply");
      return;
    }
    rec->head_sent = true;
  }
  gd_debug("conn %llu: msgid %u: result chunk of %zu bytes%s", (unsigned long long)s->id,
           (unsigned)rec->msgid, ev->len, ev->last ? " (last)" : "");
  gd__session_write_chunk(s, rec, head, head_len, ev);
}

static void job_failed(gd__sjob *rec, gd_job *job, const gp_error *err) {
  gd_session *s = rec->s;
  if (rec->head_sent) {
    /* Half a reply is out: the stream cannot carry an error for it any more. */
    gd_error("conn %llu: msgid %u failed after its reply started: %s", (unsigned long long)s->id,
             (unsigned)rec->msgid, err->message);
    gd_session_close(s, "a result failed half-way");
    return;
  }
  uint32_t msgid = rec->msgid;
  gd__session_unlink_job(s, rec);
  free(rec);
  gd_sched_finish(s->d->sched, job, false);
  gd__session_send_error(s, msgid, err->code ? err->code : GP_E_INTERNAL, err->message);
  gd__session_kick(s);
}

static void job_resume(gd__sjob *rec) {
  gd_session *s = rec->s;
  if (s->paused) {
    gd__session_resume_reading(s);
    gd__session_process(s);
  }
}

void gd__session_job_event(gd_job_waiter *w, gd_job *job, const gd_backend_event *ev) {
  gd__sjob *rec = (gd__sjob *)w; /* the waiter is the record's first member */
  switch (ev->type) {
  case GD_EV_OUTPUT_CHUNK: job_output(rec, job, ev); return;
  case GD_EV_FAILED: job_failed(rec, job, &ev->err); return;
  case GD_EV_INPUT_RESUME: job_resume(rec); return;
  }
}
