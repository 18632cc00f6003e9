/*
 * gd_session_dispatch.c - what a session does with each decoder event: requests counted and
 * gemm jobs admitted, payloads handed to the backend, a finished message answered or
 * submitted, rejected messages answered with an error, a protocol error closing the session.
 */
#include "gd_session_internal.h"

#include <stdlib.h>

#include "gd_log.h"
#include "gd_methods.h"

static void count_request(gd_daemon *d, gp_method method) {
  d->stats.requests++;
  if ((unsigned)method < sizeof d->stats.requests_by_method / sizeof(uint64_t))
    d->stats.requests_by_method[method]++;
}

static void reply_simple(gd_session *s) {
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  gp_error err;
  gp_error_clear(&err);
  if (gd_methods_reply(s->d, s->msgid, s->method, &sbuf, &err) != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    gd__session_send_error_for(s, s->method, s->msgid, err.code ? err.code : GP_E_INTERNAL,
                               err.message);
    return;
  }
  gd_stats_reply(&s->d->stats, s->method, 0);
  gd__session_write_sbuffer(s, &sbuf);
}

/* rec (admitted as job for msgid) becomes the session's current job, first on its list. */
static void link_job(gd_session *s, gd__sjob *rec, gd_job *job, uint32_t msgid) {
  rec->job = job;
  rec->msgid = msgid;
  job->session_data = rec;
  rec->next = s->jobs;
  if (s->jobs)
    s->jobs->prev = rec;
  s->jobs = rec;
  s->in_flight++;
  s->cur = rec;
}

static void on_gemm_request(gd_session *s, const gp_event *ev) {
  gd_daemon *d = s->d;
  gp_error err;
  gp_error_clear(&err);
  gd_job *job = NULL;
  gd__sjob *rec = calloc(1, sizeof *rec);
  int rc = rec ? gd_sched_admit(d->sched, &ev->gemm, ev->has_c, ev->msgid, s, &job, &err)
               : gp_error_set(&err, GP_E_RESOURCE_EXHAUSTED, "out of memory");
  if (rc != 0) {
    free(rec);
    gp_decoder_skip_message(s->dec);
    s->in_request = false;
    gd__session_send_error(s, ev->msgid, rc, err.message);
    return;
  }
  link_job(s, rec, job, ev->msgid);
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

void gd__session_drop_current(gd_session *s) {
  gd__sjob *rec = s->cur;
  if (!rec)
    return;
  consume_window_bytes(s);
  s->cur = NULL;
  s->paused = false;
  gd_job *job = rec->job;
  gd__session_unlink_job(s, rec);
  free(rec);
  gd_sched_abandon(s->d->sched, job);
}

static void on_request(gd_session *s, const gp_event *ev) {
  count_request(s->d, ev->method);
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
  gd__sjob *rec = s->cur;
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
    gd__session_drop_current(s);
    s->in_request = false;
    gd__session_send_error(s, msgid, rc, err.message);
    return;
  }
  if (pause)
    gd__session_pause_reading(s);
}

static void on_message_end(gd_session *s) {
  if (!s->in_request)
    return; /* the end of a notification */
  s->in_request = false;
  if (s->method != GP_METHOD_GEMM) {
    reply_simple(s);
    return;
  }
  gd__sjob *rec = s->cur;
  s->cur = NULL;
  if (!rec)
    return;
  gp_error err;
  gp_error_clear(&err);
  gd_job *job = rec->job;
  uint32_t msgid = rec->msgid;
  int rc = gd_sched_submit(s->d->sched, job, &err);
  if (rc != 0) { /* the scheduler released and freed the job */
    gd__session_unlink_job(s, rec);
    free(rec);
    gd__session_send_error(s, msgid, rc, err.message);
  }
}

static void on_reject(gd_session *s, const gp_event *ev) {
  gd_daemon *d = s->d;
  bool counted = s->in_request; /* its REQUEST event was counted already */
  gd__session_drop_current(s);
  s->in_request = false;
  if (ev->has_msgid) {
    if (!counted)
      count_request(d, ev->method);
    gd__session_send_error_for(s, ev->method, ev->msgid,
                               ev->err.code ? ev->err.code : GP_E_INVALID_ARGUMENT,
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

void gd__session_handle_event(gd_session *s, const gp_event *ev, const uint8_t *at, size_t left) {
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
