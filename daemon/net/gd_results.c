/*
 * gd_results.c - the job events of a connection's calls (see gd_results.h): result chunks
 * checked and handed to the reply queue (or copied into the call's region), failures answered,
 * a paused payload resumed.
 */
#include "gd_results.h"

#include <assert.h>
#include <stddef.h>

#include "gd_log.h"
#include "gd_netloop.h"
#include "gp_encode.h"

/* The reply's bytes go out in the order posted: a gap, an overlap or a short C would corrupt
 * the stream for every later reply on this connection. */
static bool continues_c(const gd_call *call, const gd_backend_event *ev, uint64_t c_bytes) {
  return !(ev->offset != call->next_offset || ev->len > c_bytes - call->next_offset ||
           (ev->last && call->next_offset + ev->len != c_bytes));
}

/* The gemm response head (owned) into *head, or -1 when out of memory. */
static int encode_head(const gd_call *call, char **head, size_t *head_len) {
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  if (gp_encode_gemm_response_head(&sbuf, call->msgid, &call->job->result,
                                   call->job->result_bytes) != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    return -1;
  }
  *head_len = sbuf.size;
  *head = msgpack_sbuffer_release(&sbuf);
  return 0;
}

/* The result goes into the call's region: each chunk is copied there and given back; the
 * last one sends the reply, which carries no bytes, and answers the job. */
static void job_output_shm(gd_session *s, gd_call *call, const gd_backend_event *ev) {
  gd_conn *c = gd_session_conn(s);
  gd_netloop *nl = gd_session_loop(s);
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  int rc = gd_shm_calls_output(gd_conn_shm(c), call, ev->offset, ev->data, ev->len);
  gd_call_chunk_done(call, ev->data, ev->len);
  if (rc == 0 && ev->last)
    rc = gd_shm_calls_reply(call, &sbuf);
  if (rc != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    gd_conn_close(c, "internal error: a result could not be written to its region");
    return;
  }
  call->next_offset += ev->len;
  if (!ev->last)
    return;
  call->head_sent = true;
  nl->stats->gemm_ok++;
  gd_stats_reply(nl->stats, GP_METHOD_GEMM, 0);
  gd_session_send(s, &sbuf);
  gd_call_finish(call, true);
}

/* A chunk of call's result: checked, headed on the first, handed to the reply queue (which
 * owns it from there); a chunk refused here is given back at once. */
static void job_output(gd_session *s, gd_call *call, const gd_backend_event *ev) {
  gd_conn *c = gd_session_conn(s);
  char *head = NULL;
  size_t head_len = 0;
  uint64_t c_bytes = call->job->result_bytes;
  const char *bad = NULL;
  if (!continues_c(call, ev, c_bytes)) {
    gd_error("conn %llu: msgid %u: backend chunk at %llu+%zu does not continue C (%llu of %llu "
             "bytes sent)", (unsigned long long)gd_conn_id(c), (unsigned)call->msgid,
             (unsigned long long)ev->offset, ev->len, (unsigned long long)call->next_offset,
             (unsigned long long)c_bytes);
    bad = "internal error: bad result chunk";
  } else if (!call->head_sent && !call->shm_out && encode_head(call, &head, &head_len) != 0) {
    bad = "out of memory encoding a reply";
  }
  if (bad) {
    gd_call_chunk_done(call, ev->data, ev->len);
    gd_conn_close(c, bad);
    return;
  }
  if (call->shm_out) {
    job_output_shm(s, call, ev);
    return;
  }
  call->next_offset += ev->len;
  call->head_sent = true;
  gd_debug("conn %llu: msgid %u: result chunk of %zu bytes%s", (unsigned long long)gd_conn_id(c),
           (unsigned)call->msgid, ev->len, ev->last ? " (last)" : "");
  gd_replyq_chunk(gd_conn_out(c), call, head, head_len, ev->data, ev->len, ev->last,
                  gd_netsched_chunks_in_job_memory(gd_session_server(s)->sched, call->job));
}

static void job_failed(gd_session *s, gd_call *call, const gp_error *err) {
  gd_conn *c = gd_session_conn(s);
  if (call->head_sent) {
    /* Half a reply is out: the stream cannot carry an error for it any more. */
    gd_error("conn %llu: msgid %u failed after its reply started: %s",
             (unsigned long long)gd_conn_id(c), (unsigned)call->msgid, err->message);
    gd_conn_close(c, "a result failed half-way");
    return;
  }
  uint32_t msgid = call->msgid;
  gd_call_finish(call, false);
  gd_session_error(s, msgid, err->code ? err->code : GP_E_INTERNAL, err->message);
  gd_session_hooks_of(s)->kick(c);
}

/* The waiter of every call this layer admits (gd_job.h). */
void gd_results_on_event(gd_job_waiter *w, gd_job *job, const gd_backend_event *ev) {
  gd_call *call = (gd_call *)w; /* the waiter is the record's first member */
  gd_session *s = gd_session_of_calls(call->list);
  assert(call->job == job && !call->orphan && !gd_conn_closing(gd_session_conn(s)));
  (void)job;
  if (ev->type == GD_EV_FAILED || (ev->type == GD_EV_OUTPUT_CHUNK && ev->last))
    gd_call_uncount(call); /* computed: it holds no shared budget any more (gd_sched.h) */
  switch (ev->type) {
  case GD_EV_OUTPUT_CHUNK: job_output(s, call, ev); return;
  case GD_EV_FAILED: job_failed(s, call, &ev->err); return;
  case GD_EV_INPUT_RESUME: gd_session_hooks_of(s)->resume(s); return;
  }
}
