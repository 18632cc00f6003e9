/*
 * gd_rpc.c - the request dispatch of a connection (see gd_rpc.h): decoding what the transport
 * read and each decoder event (requests counted, gemm headers handed to admission, payloads
 * handed to the scheduler, a finished message answered or submitted, rejected messages answered
 * with an error, a protocol error closing the connection). Admission and backpressure are
 * gd_admission.c, the job events gd_results.c, auth gd_auth_calls.c, the timer gd_rpc_timer.c.
 */
#include "gd_rpc.h"

#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gd_admission.h"
#include "gd_auth_calls.h"
#include "gd_clock.h"
#include "gd_log.h"
#include "gd_methods.h"
#include "gd_netloop.h"
#include "gd_rpc_timer.h"

static void process(gd_session *s);

static bool is_shm_method(gp_method method) {
  return method == GP_METHOD_SHM_REGISTER || method == GP_METHOD_SHM_UNREGISTER;
}

static void reply_simple(gd_session *s) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_conn *c = gd_session_conn(s);
  gd_netloop *nl = gd_session_loop(s);
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  gp_error err;
  gp_error_clear(&err);
  gd_session_lock_shared(s); /* the regions' totals, the daemon's figures */
  int rc = 0;
  if (m->method == GP_METHOD_SHM_REGISTER && gd_conn_shm(c)->totals &&
      (rc = gd_admission_check_peer_hold(s, "shm_register", m->arg, &err)) != 0)
    gd_shm_drop_fd(gd_conn_shm(c)); /* requests and descriptors stay paired */
  if (rc == 0)
    rc = m->method == GP_METHOD_CUDA_REGISTER
               ? gd_shm_calls_cuda(gd_conn_shm(c), &nl->limits.shm, m->msgid, &m->cuda, &sbuf,
                                   &err)
           : is_shm_method(m->method)
               ? gd_shm_calls_method(gd_conn_shm(c), &nl->limits.shm, gd_conn_calls(c), m->msgid,
                                     m->method, m->arg, &sbuf, &err)
               : gd_methods_reply(gd_session_server(s), m->msgid, m->method,
                                  gd_conn_shm(c)->totals != NULL, &sbuf, &err);
  gd_session_unlock_shared(s);
  if (rc != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    gd_session_error_for(s, m->method, m->msgid, err.code ? err.code : GP_E_INTERNAL, err.message);
    return;
  }
  gd_stats_reply(nl->stats, m->method, 0);
  gd_session_send(s, &sbuf);
}

/* The end of put (its data came whole) or free. */
static void reply_resident(gd_session *s) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_conn *c = gd_session_conn(s);
  gd_resident *t = gd_conn_resident(c);
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  gp_error err;
  gp_error_clear(&err);
  uint64_t handle = 0;
  gd_session_lock_shared(s); /* the resident totals */
  int rc = m->method == GP_METHOD_PUT ? gd_resident_commit(t, &handle, &err)
                                      : gd_resident_release(t, m->arg, &err);
  if (rc == 0 && (m->method == GP_METHOD_PUT ? gd_resident_pack_put(&sbuf, m->msgid, handle)
                                             : gd_resident_pack_free(&sbuf, m->msgid)) != 0) {
    if (m->method == GP_METHOD_PUT) /* a handle the client never hears of would be stuck */
      gd_resident_release(t, handle, &err);
    rc = gp_error_set(&err, GP_E_RESOURCE_EXHAUSTED, "out of memory building the reply");
  }
  gd_session_unlock_shared(s);
  if (rc != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    gd_session_error_for(s, m->method, m->msgid, rc, err.message);
    return;
  }
  gd_debug("conn %llu: msgid %u: %s handle %llu", (unsigned long long)gd_conn_id(c),
           (unsigned)m->msgid, gp_method_name(m->method),
           (unsigned long long)(m->method == GP_METHOD_PUT ? handle : m->arg));
  gd_stats_reply(gd_session_loop(s)->stats, m->method, 0);
  gd_session_send(s, &sbuf);
}

/* ---- reading ---------------------------------------------------------------- */

bool gd_rpc_window(gd_conn *c, void **ptr, size_t *len) {
  gd_session *s = gd_session_of(c);
  gd_session_msg *m = gd_session_msg_of(s);
  gp_operand operand;
  uint64_t offset, remaining;
  if (!m->cur ||
      !gp_decoder_payload_window(gd_session_decoder(s), &operand, &offset, &remaining) ||
      !gd_netsched_input_window(gd_session_server(s)->sched, m->cur->job, operand, offset, ptr,
                                len) ||
      *len == 0)
    return false;
  if (*len > remaining)
    *len = (size_t)remaining; /* never read past this payload into the job's memory */
  return *len > 0;
}

void gd_rpc_data(gd_conn *c) { process(gd_session_of(c)); }

/* Something that held this connection back went away (a reply was written, a call answered,
 * limits changed): decode what is already read, then read more if allowed. May close. */
void gd_rpc_kick(gd_conn *c) {
  gd_session *s = gd_session_of(c);
  gd_session_msg *m = gd_session_msg_of(s);
  if (gd_conn_closing(c))
    return;
  if (m->eof) {
    if (gd_conn_calls(c)->in_flight == 0 && gd_conn_out(c)->writes == 0)
      gd_conn_close(c, m->hangup ? "invalid token" : "closed by client");
    return;
  }
  if (gd_conn_pending_len(c) > 0) {
    process(s); /* ends with update_reading and update_timer */
    return;
  }
  gd_admission_update_reading(s);
  if (!gd_conn_closing(c))
    gd_rpc_timer_update(s);
}

void gd_rpc_queued(gd_conn *c) { gd_rpc_timer_update(gd_session_of(c)); }

/* ---- decoder events ------------------------------------------------------------ */

static void count_request(gd_stats *stats, gp_method method) {
  stats->requests++;
  if ((unsigned)method < sizeof stats->requests_by_method / sizeof(gd_counter))
    stats->requests_by_method[method]++;
}

/* A put's header: its bytes are reserved now, or it is refused before any data byte. */
static void on_put_request(gd_session *s, const gp_event *ev) {
  gd_conn *c = gd_session_conn(s);
  gp_error err;
  gp_error_clear(&err);
  gd_session_lock_shared(s); /* the resident totals */
  uint64_t bytes = 0;
  int rc = !gd_session_auth_of(s)->authenticated
               ? gp_error_set(&err, GP_E_UNAUTHENTICATED, GD_AUTH_NOT_YET)
           : gp_put_bytes(&ev->put, &bytes)
               ? gd_admission_check_peer_hold(s, "put", bytes, &err)
               : 0; /* gd_resident_begin says what is wrong */
  if (rc == 0)
    rc = gd_resident_begin(gd_conn_resident(c), &gd_session_loop(s)->limits.resident, &ev->put,
                           &err);
  gd_session_unlock_shared(s);
  if (rc == 0)
    return;
  gp_decoder_skip_message(gd_session_decoder(s));
  gd_session_msg_of(s)->in_request = false;
  gd_session_error_for(s, GP_METHOD_PUT, ev->msgid, rc, err.message);
}

static void on_request(gd_session *s, const gp_event *ev) {
  gd_session_msg *m = gd_session_msg_of(s);
  count_request(gd_session_loop(s)->stats, ev->method);
  m->in_request = true;
  m->method = ev->method;
  m->msgid = ev->msgid;
  m->arg = ev->arg;
  if (ev->method == GP_METHOD_CUDA_REGISTER)
    m->cuda = ev->cuda;
  m->cur = NULL;
  if (ev->method == GP_METHOD_AUTH)
    gd_auth_calls_begin(s, ev);
  if (ev->method == GP_METHOD_GEMM && !gd_session_auth_of(s)->authenticated)
    gd_session_refuse_current(s, ev->msgid, GP_E_UNAUTHENTICATED,
                              GD_AUTH_NOT_YET); /* before any payload byte */
  else if (ev->method == GP_METHOD_GEMM)
    gd_admission_request(s, ev);
  else if (ev->method == GP_METHOD_PUT)
    on_put_request(s, ev);
  else
    gd_debug("conn %llu: msgid %u: %s", (unsigned long long)gd_conn_id(gd_session_conn(s)),
             (unsigned)ev->msgid, gp_method_name(ev->method) ? gp_method_name(ev->method) : "?");
}

static void on_payload(gd_session *s, const gp_event *ev) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_call *call = m->cur;
  if (m->method == GP_METHOD_PUT) {
    gd_resident_data(gd_conn_resident(gd_session_conn(s)), ev->offset, ev->data, ev->len);
    return;
  }
  if (!call)
    return; /* a payload of a request we refused: the decoder skips those itself */
  gp_error err;
  bool pause = false;
  int rc = gd_netsched_input(gd_session_server(s)->sched, call->job, ev->operand, ev->offset,
                             ev->data, ev->len, &pause, &err);
  if (rc != 0) {
    gd_session_refuse_current(s, call->msgid, rc, err.message);
    return;
  }
  if (pause)
    gd_session_pause(s);
}

/* Copies the rest of the current operand reference into the job; refuses the request when
 * the backend fails. */
static void feed_ref(gd_session *s) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_call *call = m->cur;
  gp_error err;
  bool pause = false;
  int rc = gd_shm_calls_feed(gd_session_server(s)->sched, call, &m->feed, &pause, &err);
  if (rc != 0) {
    gd_session_refuse_current(s, call->msgid, rc, err.message);
    return;
  }
  if (pause)
    gd_session_pause(s);
}

/* A put's data given as a region reference: copied from the mapping now. */
static void put_from_region(gd_session *s, const gp_event *ev) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_conn *c = gd_session_conn(s);
  gd_resident *t = gd_conn_resident(c);
  gp_error err;
  uint8_t *src;
  int rc = gd_conn_shm(c)->totals
               ? gd_shm_range(gd_conn_shm(c), ev->region, ev->offset, t->pending.bytes, "data",
                              &src, &err)
               : gp_error_set(&err, GP_E_INVALID_ARGUMENT,
                              "shared memory needs a Unix socket connection (and shm.enabled)");
  if (rc != 0) {
    gp_decoder_skip_message(gd_session_decoder(s));
    gd_session_lock_shared(s);
    gd_resident_abort(t);
    gd_session_unlock_shared(s);
    m->in_request = false;
    gd_session_error_for(s, GP_METHOD_PUT, m->msgid, rc, err.message);
    return;
  }
  gd_resident_data(t, 0, src, (size_t)t->pending.bytes);
}

/* A gemm operand given as {"handle": N}: its bytes come from the connection's resident
 * operand, through the same copy as a region's. */
static int handle_ref(gd_session *s, const gd_call *call, const gp_event *ev, gp_error *err) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_conn *c = gd_session_conn(s);
  gd_resident_buf *res;
  int rc = gd_resident_operand(gd_conn_resident(c), ev->handle, &call->job->hdr, ev->operand, &res,
                               err);
  if (rc != 0)
    return rc;
  assert(res->bytes == call->job->operand_bytes[ev->operand]); /* same shape, same dtype */
  /* where its copies live from now: this job's device, and those holding one already */
  gd_conn_resident(c)->devices = gd_resident_buf_devices(res) |
                             (call->job->device >= 0 && call->job->device < 64
                                  ? 1ull << call->job->device : 0);
  if (gd_netsched_input_resident(gd_session_server(s)->sched, call->job, ev->operand, res)) {
    m->feed.left = 0; /* the backend uses its own copy: nothing to feed */
    return 0;
  }
  m->feed = (gd_shm_feed){ev->operand, res->data, 0, res->bytes};
  return 0;
}

/* An operand given as {"region", "offset"} (its bytes come from the mapping) or as
 * {"handle"}. */
static void on_operand_ref(gd_session *s, const gp_event *ev) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_conn *c = gd_session_conn(s);
  gd_call *call = m->cur;
  if (m->method == GP_METHOD_PUT && gd_conn_resident(c)->receiving) {
    put_from_region(s, ev);
    return;
  }
  if (!call)
    return; /* a request we refused */
  gp_error err;
  int rc = ev->by_handle ? handle_ref(s, call, ev, &err)
                         : gd_shm_calls_ref(gd_conn_shm(c), call, ev, &m->feed, &err);
  if (rc != 0) {
    gd_session_refuse_current(s, call->msgid, rc, err.message);
    return;
  }
  feed_ref(s);
}

static void on_message_end(gd_session *s) {
  gd_session_msg *m = gd_session_msg_of(s);
  if (!m->in_request)
    return; /* the end of a notification */
  m->in_request = false;
  if (m->method == GP_METHOD_AUTH) {
    if (gd_auth_calls_end(s))
      reply_simple(s);
    return;
  }
  if (m->method != GP_METHOD_GEMM && !gd_session_auth_of(s)->authenticated) {
    gd_session_error_for(s, m->method, m->msgid, GP_E_UNAUTHENTICATED, GD_AUTH_NOT_YET);
    return;
  }
  if (m->method == GP_METHOD_PUT || m->method == GP_METHOD_FREE) {
    reply_resident(s);
    return;
  }
  if (m->method != GP_METHOD_GEMM) {
    reply_simple(s);
    return;
  }
  gd_call *call = m->cur;
  m->cur = NULL;
  if (!call)
    return;
  gp_error err;
  int rc = gd_netsched_submit(gd_session_server(s)->sched, call->job, &err);
  if (rc != 0) { /* the scheduler released the job */
    uint32_t msgid = call->msgid;
    gd_call_forget(call);
    gd_session_error(s, msgid, rc, err.message);
  }
}

static void on_reject(gd_session *s, const gp_event *ev) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_conn *c = gd_session_conn(s);
  gd_netloop *nl = gd_session_loop(s);
  bool counted = m->in_request; /* its REQUEST event was counted already */
  gd_session_drop_current(s);
  m->in_request = false;
  /* Before authentication a request learns nothing but that (its method, its header). */
  bool hide = !gd_session_auth_of(s)->authenticated && ev->method != GP_METHOD_AUTH;
  if (ev->has_msgid) {
    if (!counted)
      count_request(nl->stats, ev->method);
    gd_session_error_for(s, ev->method, ev->msgid,
                         hide ? GP_E_UNAUTHENTICATED
                              : ev->err.code ? ev->err.code : GP_E_INVALID_ARGUMENT,
                         hide ? GD_AUTH_NOT_YET : ev->err.message);
    if (ev->method == GP_METHOD_SHM_REGISTER)
      gd_shm_drop_fd(gd_conn_shm(c)); /* its descriptor, to keep the rest paired */
  } else {
    gd_stats_error(nl->stats, ev->err.code ? ev->err.code : GP_E_INVALID_ARGUMENT);
    gd_info("conn %llu: message without a readable msgid dropped: %s",
            (unsigned long long)gd_conn_id(c), ev->err.message);
  }
}

static void on_fatal(gd_session *s, const gp_event *ev, const uint8_t *at, size_t len) {
  gd_conn *c = gd_session_conn(s);
  char prefix[160];
  gd_log_clean(prefix, sizeof prefix, at, len < 32 ? len : 32);
  gd_warn("conn %llu: protocol error: %s (bytes at the error: \"%s\")",
          (unsigned long long)gd_conn_id(c), ev->err.message, prefix);
  gd_conn_close(c, "protocol error");
}

/* Handles one decoder event; at/left are the bytes after it (for a protocol error's log). */
static void handle_event(gd_session *s, const gp_event *ev, const uint8_t *at, size_t left) {
  gd_conn *c = gd_session_conn(s);
  switch (ev->type) {
  case GP_EV_NEED_MORE: return;
  case GP_EV_REQUEST: on_request(s, ev); return;
  case GP_EV_NOTIFICATION:
    gd_session_loop(s)->stats->notifications++;
    gd_session_msg_of(s)->in_request = false;
    if (ev->method == GP_METHOD_SHM_REGISTER)
      gd_shm_drop_fd(gd_conn_shm(c));
    gd_debug("conn %llu: notification %s ignored", (unsigned long long)gd_conn_id(c),
             gp_method_name(ev->method) ? gp_method_name(ev->method) : "(unknown)");
    return;
  case GP_EV_PAYLOAD: on_payload(s, ev); return;
  case GP_EV_OPERAND_REF: on_operand_ref(s, ev); return;
  case GP_EV_MESSAGE_END: on_message_end(s); return;
  case GP_EV_REJECT: on_reject(s, ev); return;
  case GP_EV_FATAL: on_fatal(s, ev, at, left); return;
  case GP_EV_RESPONSE:
    gd_conn_close(c, "a client sent a response");
    return;
  }
}

/* Decodes pending bytes until they are used up or the connection must stop, then updates
 * reading and the timer (unless it closed meanwhile). */
static void process(gd_session *s) {
  gd_conn *c = gd_session_conn(s);
  while (gd_admission_may_decode(s)) {
    if (gd_session_at_boundary(s) && gd_conn_pending_len(c) > 0)
      gd_session_msg_of(s)->msg_started_us = gd_now_us();
    gp_event ev;
    size_t used =
        gp_decoder_feed(gd_session_decoder(s), gd_conn_pending(c), gd_conn_pending_len(c), &ev);
    gd_conn_consumed(c, used);
    handle_event(s, &ev, gd_conn_pending(c), gd_conn_pending_len(c));
    if (ev.type == GP_EV_NEED_MORE || ev.type == GP_EV_FATAL)
      break;
  }
  if (gd_conn_closing(c))
    return;
  gd_admission_update_reading(s);
  gd_rpc_timer_update(s);
}

/* The client closed its side. A request cut short is dropped at once (it can never complete);
 * replies to the complete ones still go out, for a client that only shut down writing. */
void gd_rpc_eof(gd_conn *c) {
  gd_session *s = gd_session_of(c);
  gd_session_msg *m = gd_session_msg_of(s);
  m->eof = true;
  gd_admission_stop_waiting(s);
  if (!gd_session_at_boundary(s)) {
    gd_info("conn %llu: %s: went away in the middle of a request",
            (unsigned long long)gd_conn_id(c), gd_conn_peer(c));
    gd_session_drop_current(s);
    m->in_request = false;
  }
  gd_admission_update_reading(s);
  if (!gd_conn_closing(c))
    gd_rpc_timer_update(s);
  gd_rpc_kick(c);
}

/* The backend wants payload again (INPUT_RESUME, through gd_results.c): a region's operand
 * being copied goes on first, then decoding. */
static void job_resume(gd_session *s) {
  gd_session_msg *m = gd_session_msg_of(s);
  if (!m->paused)
    return;
  gd_session_resume(s);
  if (m->feed.left > 0 && m->cur)
    feed_ref(s); /* an operand reference comes first: it may pause again */
  if (!m->paused && !gd_conn_closing(gd_session_conn(s)))
    process(s);
}

/* ---- the connection as a whole ------------------------------------------------- */

/* What the layers below this one ask of it (gd_session.h). */
static const gd_session_hooks hooks = {gd_rpc_kick, job_resume, gd_rpc_timer_tick};

void gd_rpc_start(gd_session *s, bool tcp) {
  gd_conn *c = gd_session_conn(s);
  gd_session_set_hooks(s, &hooks);
  gd_auth_calls_start(s, tcp);
  gd_conn_calls(c)->uncounted = gd_admission_uncounted;
  gd_admission_update_reading(s);
  if (!gd_conn_closing(c))
    gd_rpc_timer_update(s);
}

void gd_rpc_apply_limits(gd_session *s) {
  gp_decoder_set_limits(gd_session_decoder(s), &gd_session_loop(s)->limits.proto);
  gd_rpc_kick(gd_session_conn(s));
}

size_t gd_rpc_fail_pending(gd_session *s, const char *why) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_conn *c = gd_session_conn(s);
  size_t answered = 0;
  if (gd_session_wait_of(s)->waiting) {
    gd_admission_stop_waiting(s);
    gd_session_refuse_current(s, m->msgid, GP_E_UNAVAILABLE, why);
    answered++;
  }
  gd_call *call = gd_conn_calls(c)->head;
  while (call) {
    gd_call *next = call->next;
    if (!call->head_sent && !call->orphan) {
      uint32_t msgid = call->msgid;
      if (m->cur == call) {
        /* first: window bytes are then skipped too */
        gp_decoder_skip_message(gd_session_decoder(s));
        gd_session_drop_current(s);
        m->in_request = false;
      } else {
        gd_call_abandon(call);
      }
      gd_session_error(s, msgid, GP_E_UNAVAILABLE, why);
      answered++;
    }
    call = next;
  }
  gd_rpc_kick(c);
  return answered;
}
