/*
 * gd_rpc.c - the protocol layer of a connection (see gd_rpc.h): decoding what the transport
 * read, each decoder event (requests counted, gemm calls admitted, payloads handed to the
 * scheduler, a finished message answered or submitted, rejected messages answered with an
 * error, a protocol error closing the connection), the job events of its calls, reading and
 * the timer.
 */
#include "gd_rpc.h"

#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gd_auth.h"
#include "gd_clock.h"
#include "gd_cuda_ipc.h"
#include "gd_log.h"
#include "gd_methods.h"
#include "gd_netloop.h"
#include "gd_timeouts.h"
#include "gp_encode.h"

static gd_session *session_of(gd_conn *c) { return (gd_session *)c; /* conn is first */ }

static void process(gd_session *s);
static void update_timer(gd_session *s);
static void on_timer(uv_timer_t *timer);

/* ---- replies ---------------------------------------------------------------- */

static void send_sbuffer(gd_session *s, msgpack_sbuffer *sbuf) {
  size_t len = sbuf->size;
  gd_replyq_send(&s->conn.out, msgpack_sbuffer_release(sbuf), len);
}

/* Counts (under method) and logs an error reply to msgid and sends it (unless the connection
 * is closing). */
/* An error reply, counted, without a log line of its own. */
static void send_error_quiet(gd_session *s, gp_method method, uint32_t msgid, int code,
                             const char *message) {
  gd_stats_error(s->nl->stats, code);
  gd_stats_reply(s->nl->stats, method, code);
  if (s->conn.closing)
    return;
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  if (gp_encode_error_response(&sbuf, msgid, code, message) != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    gd_conn_close(&s->conn, "out of memory encoding an error reply");
    return;
  }
  send_sbuffer(s, &sbuf);
}

static void send_error_for(gd_session *s, gp_method method, uint32_t msgid, int code,
                           const char *message) {
  gd_log_ctx ctx = {.conn = s->conn.id, .msgid = msgid, .has_msgid = true, .peer = s->conn.peer,
                    .code = gp_code_name(code)};
  gd_logx(GD_LOG_INFO, &ctx, "conn %llu: msgid %u: %s: %s", (unsigned long long)s->conn.id,
          (unsigned)msgid, gp_code_name(code), message);
  send_error_quiet(s, method, msgid, code, message);
}

/* An error reply to a gemm request. */
static void send_error(gd_session *s, uint32_t msgid, int code, const char *message) {
  send_error_for(s, GP_METHOD_GEMM, msgid, code, message);
}

/* What all loops share is under the scheduler's lock (gd_server.h). */
static void lock_shared(const gd_session *s) { gd_netsched_lock(s->d->sched); }
static void unlock_shared(const gd_session *s) { gd_netsched_unlock(s->d->sched); }

static bool is_shm_method(gp_method method) {
  return method == GP_METHOD_SHM_REGISTER || method == GP_METHOD_SHM_UNREGISTER;
}

/* ---- what a peer holds outside jobs (queue.peer_hold_share) ------------------ */

/* Bytes of resident operands and shared-memory regions that s's peer holds over all its
 * connections, every loop's. Under the shared lock (the sessions' list and their tables). */
static uint64_t peer_held(const gd_session *s) {
  uint64_t held = 0;
  for (const gd_session *o = s->d->all_sessions; o; o = o->all_next)
    if (strcmp(o->conn.peer_key, s->conn.peer_key) == 0)
      held += o->conn.resident.bytes + o->conn.shm.bytes;
  return held;
}

/* 0 when s's peer may hold `more` bytes besides what it holds, else RESOURCE_EXHAUSTED with
 * err (what: the method) and a warning, at most one a second per loop. Like
 * queue.peer_memory_share, only while another peer is connected: alone, a peer takes no room
 * from anyone (one that comes later and cannot fit is told why: gd_sched.h). Under the shared
 * lock. */
static int check_peer_hold(gd_session *s, const char *what, uint64_t more, gp_error *err) {
  if (s->d->peers.n <= 1)
    return 0;
  double budget = (double)gd_netsched_get_limits(s->d->sched).memory_budget;
  uint64_t share = (uint64_t)(budget * s->nl->limits.peer_hold_share);
  uint64_t held = peer_held(s);
  if (held <= share && more <= share - held)
    return 0;
  gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "%s: %llu more bytes are over the peer's share of "
               "queue.memory_budget for resident operands and regions (queue.peer_hold_share: "
               "%llu bytes, %llu held)", what, (unsigned long long)more,
               (unsigned long long)share, (unsigned long long)held);
  uint64_t now = gd_now_us();
  if (now - s->nl->hold_warned_us >= 1000000u) {
    s->nl->hold_warned_us = now;
    gd_warn("conn %llu (%s): %s", (unsigned long long)s->conn.id, s->conn.peer_key, err->message);
  }
  return GP_E_RESOURCE_EXHAUSTED;
}

static void reply_simple(gd_session *s) {
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  gp_error err;
  gp_error_clear(&err);
  lock_shared(s); /* the regions' totals, the daemon's figures */
  int rc = 0;
  if (s->method == GP_METHOD_SHM_REGISTER && s->conn.shm.totals &&
      (rc = check_peer_hold(s, "shm_register", s->arg, &err)) != 0)
    gd_shm_drop_fd(&s->conn.shm); /* requests and descriptors stay paired */
  if (rc == 0)
    rc = s->method == GP_METHOD_CUDA_REGISTER
               ? gd_shm_calls_cuda(&s->conn.shm, &s->nl->limits.shm, s->msgid, &s->cuda, &sbuf,
                                   &err)
           : is_shm_method(s->method)
               ? gd_shm_calls_method(&s->conn.shm, &s->nl->limits.shm, &s->conn.calls, s->msgid,
                                     s->method, s->arg, &sbuf, &err)
               : gd_methods_reply(s->d, s->msgid, s->method, s->conn.shm.totals != NULL,
                                  &sbuf, &err);
  unlock_shared(s);
  if (rc != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    send_error_for(s, s->method, s->msgid, err.code ? err.code : GP_E_INTERNAL, err.message);
    return;
  }
  gd_stats_reply(s->nl->stats, s->method, 0);
  send_sbuffer(s, &sbuf);
}

/* The end of put (its data came whole) or free. */
static void reply_resident(gd_session *s) {
  gd_resident *t = &s->conn.resident;
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  gp_error err;
  gp_error_clear(&err);
  uint64_t handle = 0;
  lock_shared(s); /* the resident totals */
  int rc = s->method == GP_METHOD_PUT ? gd_resident_commit(t, &handle, &err)
                                      : gd_resident_release(t, s->arg, &err);
  if (rc == 0 && (s->method == GP_METHOD_PUT ? gd_resident_pack_put(&sbuf, s->msgid, handle)
                                             : gd_resident_pack_free(&sbuf, s->msgid)) != 0) {
    if (s->method == GP_METHOD_PUT) /* a handle the client never hears of would be stuck */
      gd_resident_release(t, handle, &err);
    rc = gp_error_set(&err, GP_E_RESOURCE_EXHAUSTED, "out of memory building the reply");
  }
  unlock_shared(s);
  if (rc != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    send_error_for(s, s->method, s->msgid, rc, err.message);
    return;
  }
  gd_debug("conn %llu: msgid %u: %s handle %llu", (unsigned long long)s->conn.id,
           (unsigned)s->msgid, gp_method_name(s->method),
           (unsigned long long)(s->method == GP_METHOD_PUT ? handle : s->arg));
  gd_stats_reply(s->nl->stats, s->method, 0);
  send_sbuffer(s, &sbuf);
}

/* ---- reading and backpressure ------------------------------------------------ */

static bool at_boundary(const gd_session *s) {
  return gp_decoder_message_bytes(s->dec) == 0 && !s->in_request;
}

/* Between messages: has this connection used its share for now? Results its replies still owe
 * count as well as bytes already queued: on the GPU a computed result waits in staging or on
 * the device, outside the queue and outside queue.memory_budget, and is copied into host memory
 * when its client does not read; a client that pipelines and never reads would get every
 * request it sent (max_requests_in_flight of them) computed into host memory. So what one
 * connection holds stays within max_buffered_bytes and the one result that crosses it. */
static bool over_caps(const gd_session *s) {
  const gd_net_limits *cfg = &s->nl->limits;
  return s->conn.calls.in_flight >= cfg->max_requests_in_flight ||
         gd_replyq_backlog(&s->conn.out) >= cfg->max_buffered_bytes ||
         s->conn.calls.owed > cfg->max_buffered_bytes;
}

static bool may_decode(const gd_session *s) {
  if (s->conn.closing || s->paused || s->eof || s->waiting)
    return false;
  return !(at_boundary(s) && over_caps(s));
}

static void update_reading(gd_session *s) { gd_conn_want_read(&s->conn, may_decode(s)); }

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

bool gd_rpc_window(gd_conn *c, void **ptr, size_t *len) {
  gd_session *s = session_of(c);
  gp_operand operand;
  uint64_t offset, remaining;
  if (!s->cur || !gp_decoder_payload_window(s->dec, &operand, &offset, &remaining) ||
      !gd_netsched_input_window(s->d->sched, s->cur->job, operand, offset, ptr, len) || *len == 0)
    return false;
  if (*len > remaining)
    *len = (size_t)remaining; /* never read past this payload into the job's memory */
  return *len > 0;
}

void gd_rpc_data(gd_conn *c) { process(session_of(c)); }

/* Something that held this connection back went away (a reply was written, a call answered,
 * limits changed): decode what is already read, then read more if allowed. May close. */
void gd_rpc_kick(gd_conn *c) {
  gd_session *s = session_of(c);
  if (c->closing)
    return;
  if (s->eof) {
    if (c->calls.in_flight == 0 && c->out.writes == 0)
      gd_conn_close(c, s->hangup ? "invalid token" : "closed by client");
    return;
  }
  if (c->pending_len > 0) {
    process(s); /* ends with update_reading and update_timer */
    return;
  }
  update_reading(s);
  if (!c->closing)
    update_timer(s);
}

void gd_rpc_queued(gd_conn *c) { update_timer(session_of(c)); }

/* ---- the current call ---------------------------------------------------------- */

/* Bytes read into the current job's window and not decoded yet are all payload of the current
 * message: let the decoder count them off now, before the job and its memory go. */
static void consume_window_bytes(gd_session *s) {
  gd_conn *c = &s->conn;
  while (c->pending_in_window && c->pending_len > 0) {
    gp_event ev;
    size_t used = gp_decoder_feed(s->dec, c->pending, c->pending_len, &ev);
    gd_conn_consumed(c, used);
    if (ev.type == GP_EV_NEED_MORE || ev.type == GP_EV_FATAL || ev.type == GP_EV_MESSAGE_END)
      break;
  }
  gd_conn_leave_window(c);
}

/* Drops the request being read before it was submitted, with any pause it asked for. The caller
 * makes the decoder skip the rest of the message (or it already does). No-op without one. */
static void drop_current(gd_session *s) {
  gd_call *call = s->cur;
  if (s->conn.resident.receiving) {
    lock_shared(s);
    gd_resident_abort(&s->conn.resident); /* a put cut short (no call of its own) */
    unlock_shared(s);
  }
  if (!call)
    return;
  consume_window_bytes(s);
  s->cur = NULL;
  s->paused = false;
  s->feed.left = 0;
  gd_call_abandon(call);
}

/* The current gemm is answered with an error now: skip the rest of it, drop its call. */
static void refuse_current(gd_session *s, uint32_t msgid, int code, const char *message) {
  gp_decoder_skip_message(s->dec); /* first: window bytes are then skipped too */
  drop_current(s);
  s->in_request = false;
  send_error(s, msgid, code, message);
}

/* ---- authentication (policy: gd_auth.h) -------------------------------------- */

#define NOT_YET "authenticate first"

/* The connection stops reading and closes once its replies are out (no line of its own: the
 * failed auths are logged counted). */
static void hang_up(gd_session *s) {
  s->hangup = true;
  s->quiet = true;
  s->eof = true;
  gd_rpc_kick(&s->conn);
}

/* The end of an auth request: true, or UNAUTHENTICATED (and, on TCP, the end of the
 * connection: a client guessing tokens gets one guess per connection). */
static void reply_auth(gd_session *s) {
  assert(s->method == GP_METHOD_AUTH && !s->in_request);
  if (s->token_ok) {
    s->authenticated = true;
    reply_simple(s);
    return;
  }
  lock_shared(s); /* every loop's failures */
  uint64_t log_now = gd_auth_limit_failed(&s->d->auth_limit, s->conn.peer_key, gd_now_us());
  unlock_shared(s);
  if (log_now > 0)
    gd_warn("auth: %llu failed attempt(s) from %s (one line a second per peer; "
            "auth.max_failures_per_second %u)", (unsigned long long)log_now, s->conn.peer_key,
            (unsigned)s->nl->limits.auth_max_failures);
  send_error_quiet(s, GP_METHOD_AUTH, s->msgid, GP_E_UNAUTHENTICATED,
                   s->auth_throttled ? "too many failed auths from this peer: try again in a "
                                       "second" : "invalid token");
  if (s->tcp)
    hang_up(s);
}

/* ---- decoder events ------------------------------------------------------------ */

static void count_request(gd_stats *stats, gp_method method) {
  stats->requests++;
  if ((unsigned)method < sizeof stats->requests_by_method / sizeof(gd_counter))
    stats->requests_by_method[method]++;
}

static void on_job_event(gd_job_waiter *w, gd_job *job, const gd_backend_event *ev);
static uint64_t peer_held(const gd_session *s);

/* What this connection and its peer hold of the budget, and their shares
 * (queue.connection_memory_share; queue.peer_memory_share only while another peer is
 * connected: alone, a peer takes no room from anyone). */
static gd_sched_share share_of(const gd_session *s) {
  const gd_server *d = s->d;
  const gd_net_limits *lim = &s->nl->limits;
  double budget = (double)gd_netsched_get_limits(d->sched).memory_budget;
  gd_sched_share share = {
      .conn_used = s->conn.calls.reserved,
      .conn_limit = (uint64_t)(budget * lim->connection_memory_share),
      .peer_used = gd_peers_reserved(&d->peers, s->conn.peer_key),
      .peer_holds = peer_held(s),
      .prefer_devices = s->conn.resident.devices,
      .port = s->nl->port};
  if (d->peers.n > 1)
    share.peer_limit = (uint64_t)(budget * lim->peer_memory_share);
  return share;
}

static bool must_wait(gd_admit a) { return a == GD_ADMIT_FULL || a == GD_ADMIT_OVER_SHARE; }

/* Admits the current message's gemm: GD_ADMITTED (s->cur is its call), GD_ADMIT_FULL or
 * GD_ADMIT_OVER_SHARE (nothing done), or GD_ADMIT_REFUSED (answered). Under the shared lock
 * (the peers' counts). */
static gd_admit admit_gemm(gd_session *s, const gp_gemm_hdr *hdr, bool has_c) {
  gp_error err;
  gp_error_clear(&err);
  gd_call *call = NULL;
  /* a result into a region: the region and range are checked on every try (a waiting request
   * meets regions as they are when it is admitted) */
  int rc = hdr->has_out ? gd_shm_calls_check_out(&s->conn.shm, hdr, &err) : 0;
  if (rc != 0) {
    refuse_current(s, s->msgid, rc, err.message);
    return GD_ADMIT_REFUSED;
  }
  gd_sched_share share = share_of(s);
  share.fixed_device = gd_cuda_ipc_fixed_device(&s->conn.shm, hdr);
  gd_admit a = gd_call_admit(&s->conn.calls, hdr, has_c, s->msgid, &share, on_job_event, &call,
                             &err);
  if (must_wait(a)) {
    gd_debug("conn %llu: msgid %u: waits: %s", (unsigned long long)s->conn.id,
             (unsigned)s->msgid, err.message);
    return a;
  }
  if (a != GD_ADMITTED) {
    refuse_current(s, s->msgid, err.code ? err.code : GP_E_INTERNAL, err.message);
    return a;
  }
  if (s->peer_counted)
    gd_peers_charge(&s->d->peers, s->conn.peer_key, call->counted);
  call->shm_out = hdr->has_out;
  call->out_region = hdr->out_region;
  call->out_offset = hdr->out_offset;
  if (call->shm_out)
    gd_shm_calls_out_mapped(&s->conn.shm, call);
  else
    gd_call_owe(call);
  s->cur = call;
  gd_debug("conn %llu: msgid %u: gemm %s m=%llu n=%llu k=%llu batch=%llu admitted as job %llu",
           (unsigned long long)s->conn.id, (unsigned)s->msgid, gp_dtype_name(hdr->dtype),
           (unsigned long long)hdr->m, (unsigned long long)hdr->n, (unsigned long long)hdr->k,
           (unsigned long long)hdr->batch, (unsigned long long)call->job->id);
  return GD_ADMITTED;
}

/* ---- waiting for admission (see gd_rpc.h) ----------------------------------- */

static void wait_link(gd_session *s) {
  gd_netloop *nl = s->nl;
  s->wait_prev = nl->wait_tail;
  s->wait_next = NULL;
  if (nl->wait_tail)
    nl->wait_tail->wait_next = s;
  else
    nl->wait_head = s;
  nl->wait_tail = s;
  atomic_fetch_add(&s->d->line_waiters, 1);
}

static void wait_unlink(gd_session *s) {
  gd_netloop *nl = s->nl;
  if (s->wait_prev)
    s->wait_prev->wait_next = s->wait_next;
  else
    nl->wait_head = s->wait_next;
  if (s->wait_next)
    s->wait_next->wait_prev = s->wait_prev;
  else
    nl->wait_tail = s->wait_prev;
  s->wait_prev = s->wait_next = NULL;
  atomic_fetch_sub(&s->d->line_waiters, 1);
}

/* Another loop's room reaches this one only while something waits here (gd_sched.h). Set
 * under the shared lock, with the admission that failed: room made after it is heard. */
static void want_room(gd_netloop *nl) {
  atomic_store(&nl->share_waiting, nl->share_waiters);
  gd_netsched_port_want_room(nl->port, nl->wait_head || nl->share_waiters > 0);
}

/* A gemm header waits: in the FIFO for shared room (GD_ADMIT_FULL), or, over its own share
 * (GD_ADMIT_OVER_SHARE), out of line until its connection's or peer's jobs are computed. */
static void start_waiting(gd_session *s, const gp_gemm_hdr *hdr, bool has_c, gd_admit why) {
  assert(!s->waiting && !s->cur && must_wait(why));
  s->waiting = true;
  s->in_line = why == GD_ADMIT_FULL;
  s->wait_hdr = *hdr;
  s->wait_has_c = has_c;
  s->wait_since_us = gd_now_us();
  if (s->in_line)
    wait_link(s);
  else
    s->nl->share_waiters++;
  want_room(s->nl);
}

/* Stops waiting; the time spent waiting does not count against timeouts.request_ms. The next
 * in line is woken: room that was meant for s may be its. */
static void stop_waiting(gd_session *s) {
  if (!s->waiting)
    return;
  if (s->in_line) {
    wait_unlink(s);
  } else {
    assert(s->nl->share_waiters > 0);
    s->nl->share_waiters--;
  }
  want_room(s->nl);
  s->waiting = s->in_line = false;
  s->wake = false;
  s->msg_started_us += gd_now_us() - s->wait_since_us;
  gd_rpc_room(s->nl);
}

static void wake(gd_session *s) {
  if (s->wake)
    return;
  s->wake = true;
  uv_timer_start(&s->conn.timer, on_timer, 0, 0); /* cannot fail on an initialised timer */
}

/* Wakes nl's connections waiting over their share (those of peer_key only, unless NULL). */
static void wake_share_waiters(gd_netloop *nl, const char *peer_key) {
  if (nl->share_waiters == 0)
    return;
  for (gd_session *o = nl->sessions; o; o = o->next)
    if (o->waiting && !o->in_line && !o->conn.closing &&
        (!peer_key || strcmp(o->conn.peer_key, peer_key) == 0))
      wake(o);
}

/* Only a timer is started here: this runs inside scheduler calls. Every request in line
 * tries again, in the order they came (timers of equal due time run in the order started): a
 * large one that still does not fit keeps its place and holds up no smaller one behind it.
 * Draining: every waiter is woken, to be answered UNAVAILABLE. */
void gd_rpc_room(void *netloop) {
  gd_netloop *nl = netloop;
  for (gd_session *s = nl->wait_head; s; s = s->wait_next)
    wake(s);
  if (atomic_load(&nl->d->draining))
    wake_share_waiters(nl, NULL);
}

void gd_rpc_peer_room(gd_netloop *nl) { wake_share_waiters(nl, NULL); }

/* Budget bytes of s's jobs stopped counting (computed, or let go): its peer's count goes down,
 * and whoever of that peer waits over its share tries again (on other loops: whoever waits
 * over its share, which looks again). */
static void peer_uncharge(gd_session *s, uint64_t bytes) {
  gd_server *d = s->d;
  if (!s->peer_counted || bytes == 0)
    return;
  lock_shared(s);
  gd_peers_uncharge(&d->peers, s->conn.peer_key, bytes);
  unlock_shared(s);
  wake_share_waiters(s->nl, s->conn.peer_key);
  for (size_t i = 0; i < d->nloops; i++) {
    gd_netloop *other = d->loops[i];
    if (other != s->nl && atomic_load(&other->share_waiting) > 0)
      gd_netloop_post(other, GD_NETLOOP_PEER_ROOM, NULL);
  }
}

static void on_uncounted(gd_calls *l, uint64_t bytes) {
  peer_uncharge((gd_session *)((char *)l - offsetof(gd_session, conn.calls)), bytes);
}

void gd_rpc_closing(gd_session *s) {
  stop_waiting(s);
  peer_uncharge(s, s->conn.calls.reserved); /* its jobs are let go right after this */
  s->conn.calls.uncounted = NULL;
}

bool gd_rpc_idle(const gd_session *s) {
  const gd_conn *c = &s->conn;
  return !c->closing && at_boundary(s) && !s->waiting && c->pending_len == 0 &&
         c->calls.in_flight == 0 && c->out.writes == 0 && gd_replyq_backlog(&c->out) == 0;
}

/* A waiter's timer fired after room appeared: it tries again. Still waiting for the same thing,
 * it keeps its place (the first in line stays first); waiting for the other thing now, it moves;
 * admitted or refused, it reads on. */
static void retry_admission(gd_session *s) {
  s->wake = false;
  lock_shared(s);
  gd_admit a = admit_gemm(s, &s->wait_hdr, s->wait_has_c);
  bool still = s->in_line ? a == GD_ADMIT_FULL : a == GD_ADMIT_OVER_SHARE;
  if (!still) {
    gp_gemm_hdr hdr = s->wait_hdr;
    bool has_c = s->wait_has_c;
    stop_waiting(s);
    if (must_wait(a))
      start_waiting(s, &hdr, has_c, a);
  }
  unlock_shared(s);
  gd_rpc_kick(&s->conn);
}

/* Room appeared and requests in line have not tried it yet: it is theirs first. */
static bool line_trying(const gd_netloop *nl) {
  for (const gd_session *o = nl->wait_head; o; o = o->wait_next)
    if (o->wake)
      return true;
  return false;
}

static void on_gemm_request(gd_session *s, const gp_event *ev) {
  lock_shared(s); /* admission and the wait it may start: see want_room */
  /* A request that fits now goes now, even past others in line that do not fit: one large
   * request that cannot be admitted must not hold up every small one behind it. But room that
   * just appeared goes to those in line first (their retries are due). */
  gd_admit a = line_trying(s->nl) ? GD_ADMIT_FULL : admit_gemm(s, &ev->gemm, ev->has_c);
  if (must_wait(a)) {
    s->nl->stats->admission_waits++;
    start_waiting(s, &ev->gemm, ev->has_c, a);
  }
  unlock_shared(s);
}

/* A put's header: its bytes are reserved now, or it is refused before any data byte. */
static void on_put_request(gd_session *s, const gp_event *ev) {
  gp_error err;
  gp_error_clear(&err);
  lock_shared(s); /* the resident totals */
  uint64_t bytes = 0;
  int rc = !s->authenticated ? gp_error_set(&err, GP_E_UNAUTHENTICATED, NOT_YET)
           : gp_put_bytes(&ev->put, &bytes) ? check_peer_hold(s, "put", bytes, &err)
                                             : 0; /* gd_resident_begin says what is wrong */
  if (rc == 0)
    rc = gd_resident_begin(&s->conn.resident, &s->nl->limits.resident, &ev->put, &err);
  unlock_shared(s);
  if (rc == 0)
    return;
  gp_decoder_skip_message(s->dec);
  s->in_request = false;
  send_error_for(s, GP_METHOD_PUT, ev->msgid, rc, err.message);
}

static void on_request(gd_session *s, const gp_event *ev) {
  count_request(s->nl->stats, ev->method);
  s->in_request = true;
  s->method = ev->method;
  s->msgid = ev->msgid;
  s->arg = ev->arg;
  if (ev->method == GP_METHOD_CUDA_REGISTER)
    s->cuda = ev->cuda;
  s->cur = NULL;
  if (ev->method == GP_METHOD_AUTH) {
    lock_shared(s); /* SIGHUP may re-read the token; every loop counts failures */
    s->auth_throttled = !gd_auth_limit_allows(&s->d->auth_limit, s->conn.peer_key,
                                              s->nl->limits.auth_max_failures, gd_now_us());
    s->token_ok = !s->auth_throttled &&
                  gd_auth_token_matches(&s->d->token, ev->token, ev->token_len);
    unlock_shared(s);
  }
  if (ev->method == GP_METHOD_GEMM && !s->authenticated)
    refuse_current(s, ev->msgid, GP_E_UNAUTHENTICATED, NOT_YET); /* before any payload byte */
  else if (ev->method == GP_METHOD_GEMM)
    on_gemm_request(s, ev);
  else if (ev->method == GP_METHOD_PUT)
    on_put_request(s, ev);
  else
    gd_debug("conn %llu: msgid %u: %s", (unsigned long long)s->conn.id, (unsigned)ev->msgid,
             gp_method_name(ev->method) ? gp_method_name(ev->method) : "?");
}

static void on_payload(gd_session *s, const gp_event *ev) {
  gd_call *call = s->cur;
  if (s->method == GP_METHOD_PUT) {
    gd_resident_data(&s->conn.resident, ev->offset, ev->data, ev->len);
    return;
  }
  if (!call)
    return; /* a payload of a request we refused: the decoder skips those itself */
  gp_error err;
  bool pause = false;
  int rc = gd_netsched_input(s->d->sched, call->job, ev->operand, ev->offset, ev->data, ev->len,
                          &pause, &err);
  if (rc != 0) {
    refuse_current(s, call->msgid, rc, err.message);
    return;
  }
  if (pause)
    pause_reading(s);
}

/* Copies the rest of the current operand reference into the job; refuses the request when
 * the backend fails. */
static void feed_ref(gd_session *s) {
  gd_call *call = s->cur;
  gp_error err;
  bool pause = false;
  int rc = gd_shm_calls_feed(s->d->sched, call, &s->feed, &pause, &err);
  if (rc != 0) {
    refuse_current(s, call->msgid, rc, err.message);
    return;
  }
  if (pause)
    pause_reading(s);
}

/* A put's data given as a region reference: copied from the mapping now. */
static void put_from_region(gd_session *s, const gp_event *ev) {
  gd_resident *t = &s->conn.resident;
  gp_error err;
  uint8_t *src;
  int rc = s->conn.shm.totals
               ? gd_shm_range(&s->conn.shm, ev->region, ev->offset, t->pending.bytes, "data",
                              &src, &err)
               : gp_error_set(&err, GP_E_INVALID_ARGUMENT,
                              "shared memory needs a Unix socket connection (and shm.enabled)");
  if (rc != 0) {
    gp_decoder_skip_message(s->dec);
    lock_shared(s);
    gd_resident_abort(t);
    unlock_shared(s);
    s->in_request = false;
    send_error_for(s, GP_METHOD_PUT, s->msgid, rc, err.message);
    return;
  }
  gd_resident_data(t, 0, src, (size_t)t->pending.bytes);
}

/* A gemm operand given as {"handle": N}: its bytes come from the connection's resident
 * operand, through the same copy as a region's. */
static int handle_ref(gd_session *s, const gd_call *call, const gp_event *ev, gp_error *err) {
  gd_resident_buf *res;
  int rc = gd_resident_operand(&s->conn.resident, ev->handle, &call->job->hdr, ev->operand, &res,
                               err);
  if (rc != 0)
    return rc;
  assert(res->bytes == call->job->operand_bytes[ev->operand]); /* same shape, same dtype */
  /* where its copies live from now: this job's device, and those holding one already */
  s->conn.resident.devices = gd_resident_buf_devices(res) |
                             (call->job->device >= 0 && call->job->device < 64
                                  ? 1ull << call->job->device : 0);
  if (gd_netsched_input_resident(s->d->sched, call->job, ev->operand, res)) {
    s->feed.left = 0; /* the backend uses its own copy: nothing to feed */
    return 0;
  }
  s->feed = (gd_shm_feed){ev->operand, res->data, 0, res->bytes};
  return 0;
}

/* An operand given as {"region", "offset"} (its bytes come from the mapping) or as
 * {"handle"}. */
static void on_operand_ref(gd_session *s, const gp_event *ev) {
  gd_call *call = s->cur;
  if (s->method == GP_METHOD_PUT && s->conn.resident.receiving) {
    put_from_region(s, ev);
    return;
  }
  if (!call)
    return; /* a request we refused */
  gp_error err;
  int rc = ev->by_handle ? handle_ref(s, call, ev, &err)
                         : gd_shm_calls_ref(&s->conn.shm, call, ev, &s->feed, &err);
  if (rc != 0) {
    refuse_current(s, call->msgid, rc, err.message);
    return;
  }
  feed_ref(s);
}

static void on_message_end(gd_session *s) {
  if (!s->in_request)
    return; /* the end of a notification */
  s->in_request = false;
  if (s->method == GP_METHOD_AUTH) {
    reply_auth(s);
    return;
  }
  if (s->method != GP_METHOD_GEMM && !s->authenticated) {
    send_error_for(s, s->method, s->msgid, GP_E_UNAUTHENTICATED, NOT_YET);
    return;
  }
  if (s->method == GP_METHOD_PUT || s->method == GP_METHOD_FREE) {
    reply_resident(s);
    return;
  }
  if (s->method != GP_METHOD_GEMM) {
    reply_simple(s);
    return;
  }
  gd_call *call = s->cur;
  s->cur = NULL;
  if (!call)
    return;
  gp_error err;
  int rc = gd_netsched_submit(s->d->sched, call->job, &err);
  if (rc != 0) { /* the scheduler released the job */
    uint32_t msgid = call->msgid;
    gd_call_forget(call);
    send_error(s, msgid, rc, err.message);
  }
}

static void on_reject(gd_session *s, const gp_event *ev) {
  bool counted = s->in_request; /* its REQUEST event was counted already */
  drop_current(s);
  s->in_request = false;
  /* Before authentication a request learns nothing but that (its method, its header). */
  bool hide = !s->authenticated && ev->method != GP_METHOD_AUTH;
  if (ev->has_msgid) {
    if (!counted)
      count_request(s->nl->stats, ev->method);
    send_error_for(s, ev->method, ev->msgid,
                   hide ? GP_E_UNAUTHENTICATED
                        : ev->err.code ? ev->err.code : GP_E_INVALID_ARGUMENT,
                   hide ? NOT_YET : ev->err.message);
    if (ev->method == GP_METHOD_SHM_REGISTER)
      gd_shm_drop_fd(&s->conn.shm); /* its descriptor, to keep the rest paired */
  } else {
    gd_stats_error(s->nl->stats, ev->err.code ? ev->err.code : GP_E_INVALID_ARGUMENT);
    gd_info("conn %llu: message without a readable msgid dropped: %s",
            (unsigned long long)s->conn.id, ev->err.message);
  }
}

static void on_fatal(gd_session *s, const gp_event *ev, const uint8_t *at, size_t len) {
  char prefix[160];
  gd_log_clean(prefix, sizeof prefix, at, len < 32 ? len : 32);
  gd_warn("conn %llu: protocol error: %s (bytes at the error: \"%s\")",
          (unsigned long long)s->conn.id, ev->err.message, prefix);
  gd_conn_close(&s->conn, "protocol error");
}

/* Handles one decoder event; at/left are the bytes after it (for a protocol error's log). */
static void handle_event(gd_session *s, const gp_event *ev, const uint8_t *at, size_t left) {
  switch (ev->type) {
  case GP_EV_NEED_MORE: return;
  case GP_EV_REQUEST: on_request(s, ev); return;
  case GP_EV_NOTIFICATION:
    s->nl->stats->notifications++;
    s->in_request = false;
    if (ev->method == GP_METHOD_SHM_REGISTER)
      gd_shm_drop_fd(&s->conn.shm);
    gd_debug("conn %llu: notification %s ignored", (unsigned long long)s->conn.id,
             gp_method_name(ev->method) ? gp_method_name(ev->method) : "(unknown)");
    return;
  case GP_EV_PAYLOAD: on_payload(s, ev); return;
  case GP_EV_OPERAND_REF: on_operand_ref(s, ev); return;
  case GP_EV_MESSAGE_END: on_message_end(s); return;
  case GP_EV_REJECT: on_reject(s, ev); return;
  case GP_EV_FATAL: on_fatal(s, ev, at, left); return;
  case GP_EV_RESPONSE:
    gd_conn_close(&s->conn, "a client sent a response");
    return;
  }
}

/* Decodes pending bytes until they are used up or the connection must stop, then updates
 * reading and the timer (unless it closed meanwhile). */
static void process(gd_session *s) {
  gd_conn *c = &s->conn;
  while (may_decode(s)) {
    if (at_boundary(s) && c->pending_len > 0)
      s->msg_started_us = gd_now_us();
    gp_event ev;
    size_t used = gp_decoder_feed(s->dec, c->pending, c->pending_len, &ev);
    gd_conn_consumed(c, used);
    handle_event(s, &ev, c->pending, c->pending_len);
    if (ev.type == GP_EV_NEED_MORE || ev.type == GP_EV_FATAL)
      break;
  }
  if (c->closing)
    return;
  update_reading(s);
  update_timer(s);
}

/* The client closed its side. A request cut short is dropped at once (it can never complete);
 * replies to the complete ones still go out, for a client that only shut down writing. */
void gd_rpc_eof(gd_conn *c) {
  gd_session *s = session_of(c);
  s->eof = true;
  stop_waiting(s);
  if (!at_boundary(s)) {
    gd_info("conn %llu: %s: went away in the middle of a request", (unsigned long long)c->id,
            c->peer);
    drop_current(s);
    s->in_request = false;
  }
  update_reading(s);
  if (!c->closing)
    update_timer(s);
  gd_rpc_kick(c);
}

/* ---- job events of this connection's calls ----------------------------------- */

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
  msgpack_sbuffer sbuf;
  msgpack_sbuffer_init(&sbuf);
  int rc = gd_shm_calls_output(&s->conn.shm, call, ev->offset, ev->data, ev->len);
  gd_call_chunk_done(call, ev->data, ev->len);
  if (rc == 0 && ev->last)
    rc = gd_shm_calls_reply(call, &sbuf);
  if (rc != 0) {
    msgpack_sbuffer_destroy(&sbuf);
    gd_conn_close(&s->conn, "internal error: a result could not be written to its region");
    return;
  }
  call->next_offset += ev->len;
  if (!ev->last)
    return;
  call->head_sent = true;
  s->nl->stats->gemm_ok++;
  gd_stats_reply(s->nl->stats, GP_METHOD_GEMM, 0);
  send_sbuffer(s, &sbuf);
  gd_call_finish(call, true);
}

/* A chunk of call's result: checked, headed on the first, handed to the reply queue (which
 * owns it from there); a chunk refused here is given back at once. */
static void job_output(gd_session *s, gd_call *call, const gd_backend_event *ev) {
  char *head = NULL;
  size_t head_len = 0;
  uint64_t c_bytes = call->job->result_bytes;
  const char *bad = NULL;
  if (!continues_c(call, ev, c_bytes)) {
    gd_error("conn %llu: msgid %u: backend chunk at %llu+%zu does not continue C (%llu of %llu "
             "bytes sent)", (unsigned long long)s->conn.id, (unsigned)call->msgid,
             (unsigned long long)ev->offset, ev->len, (unsigned long long)call->next_offset,
             (unsigned long long)c_bytes);
    bad = "internal error: bad result chunk";
  } else if (!call->head_sent && !call->shm_out && encode_head(call, &head, &head_len) != 0) {
    bad = "out of memory encoding a reply";
  }
  if (bad) {
    gd_call_chunk_done(call, ev->data, ev->len);
    gd_conn_close(&s->conn, bad);
    return;
  }
  if (call->shm_out) {
    job_output_shm(s, call, ev);
    return;
  }
  call->next_offset += ev->len;
  call->head_sent = true;
  gd_debug("conn %llu: msgid %u: result chunk of %zu bytes%s", (unsigned long long)s->conn.id,
           (unsigned)call->msgid, ev->len, ev->last ? " (last)" : "");
  gd_replyq_chunk(&s->conn.out, call, head, head_len, ev->data, ev->len, ev->last,
                  gd_netsched_chunks_in_job_memory(s->d->sched, call->job));
}

static void job_failed(gd_session *s, gd_call *call, const gp_error *err) {
  if (call->head_sent) {
    /* Half a reply is out: the stream cannot carry an error for it any more. */
    gd_error("conn %llu: msgid %u failed after its reply started: %s",
             (unsigned long long)s->conn.id, (unsigned)call->msgid, err->message);
    gd_conn_close(&s->conn, "a result failed half-way");
    return;
  }
  uint32_t msgid = call->msgid;
  gd_call_finish(call, false);
  send_error(s, msgid, err->code ? err->code : GP_E_INTERNAL, err->message);
  gd_rpc_kick(&s->conn);
}

static void job_resume(gd_session *s) {
  if (!s->paused)
    return;
  resume_reading(s);
  if (s->feed.left > 0 && s->cur)
    feed_ref(s); /* an operand reference comes first: it may pause again */
  if (!s->paused && !s->conn.closing)
    process(s);
}

/* The waiter of every call this layer admits (gd_job.h). */
static void on_job_event(gd_job_waiter *w, gd_job *job, const gd_backend_event *ev) {
  gd_call *call = (gd_call *)w; /* the waiter is the record's first member */
  gd_session *s = (gd_session *)((char *)call->list - offsetof(gd_session, conn.calls));
  assert(call->job == job && !call->orphan && !s->conn.closing);
  (void)job;
  if (ev->type == GD_EV_FAILED || (ev->type == GD_EV_OUTPUT_CHUNK && ev->last))
    gd_call_uncount(call); /* computed: it holds no shared budget any more (gd_sched.h) */
  switch (ev->type) {
  case GD_EV_OUTPUT_CHUNK: job_output(s, call, ev); return;
  case GD_EV_FAILED: job_failed(s, call, &ev->err); return;
  case GD_EV_INPUT_RESUME: job_resume(s); return;
  }
}

/* ---- the timer ---------------------------------------------------------------- */

/* The payload bytes of the gemm being read (0 for anything else): what makes it large. */
static uint64_t payload_bytes(const gd_session *s) {
  if (!s->cur)
    return 0;
  const uint64_t *b = s->cur->job->operand_bytes;
  return b[GP_OPERAND_A] + b[GP_OPERAND_B] + b[GP_OPERAND_C];
}

static gd_timeout_kind next_timeout(gd_session *s, uint64_t *due) {
  const gd_net_limits *cfg = &s->nl->limits;
  gd_timeout_state st = {
      .at_boundary = at_boundary(s), .paused = s->paused || s->waiting, .eof = s->eof,
      .in_flight = s->conn.calls.in_flight, .writes = s->conn.out.writes,
      .msg_started_us = s->msg_started_us, .last_activity_us = s->conn.last_activity_us,
      .write_progress_us = s->conn.out.write_progress_us,
      .idle_ms = cfg->idle_ms, .request_ms = cfg->request_ms,
      .hold_ms = cfg->staging_hold_ms, .msg_bytes = gp_decoder_message_bytes(s->dec),
      .payload_bytes = payload_bytes(s), .min_rate = cfg->min_receive_rate,
      .min_rate_bytes = cfg->min_rate_bytes, .rate_grace_ms = cfg->min_rate_grace_ms,
      .holds_room = s->cur != NULL || s->conn.resident.receiving,
      .others_waiting = atomic_load(&s->d->line_waiters) > 0,
      .stall_ms = cfg->hold_stall_ms, .now_us = gd_now_us()};
  st.holding = gd_replyq_hold_since(&s->conn.out, &st.hold_since_us);
  return gd_timeout_next(&st, due);
}

/* How often a connection waiting for admission (not read meanwhile) looks whether its client
 * hung up: one that did must not stay in line, nor stay counted. */
#define WAIT_LOOK_MS 200

/* The payload bytes a waiting request still needs: its client gone with fewer sent, it can
 * never be admitted usefully. */
static uint64_t waiting_needs(const gd_session *s) {
  uint64_t bytes[3], total = 0;
  if (!gd_netsched_operand_total(&s->wait_hdr, bytes, &total))
    return UINT64_MAX;
  return s->wait_has_c ? total : total - bytes[GP_OPERAND_C];
}

static void on_timer(uv_timer_t *timer) {
  gd_session *s = session_of(timer->data);
  if (s->wake) {
    retry_admission(s);
    return;
  }
  if (s->waiting && gd_conn_peer_gone(&s->conn, waiting_needs(s))) {
    gd_conn_close(&s->conn, "client hung up while its request waited for admission");
    return;
  }
  uint64_t due = 0;
  gd_replyq_look_for_progress(&s->conn.out);
  gd_timeout_kind kind = next_timeout(s, &due);
  if (kind == GD_TIMEOUT_HOLD && gd_now_us() >= due) {
    gd_replyq_expire(&s->conn.out); /* copies, gives staging back, kicks (may close) */
    if (s->conn.closing)
      return;
  } else if (kind != GD_TIMEOUT_NONE && gd_now_us() >= due) {
    gd_conn_close(&s->conn, gd_timeout_why(kind));
    return;
  }
  update_timer(s);
}

/* (Re)arms the timer for the earliest timeout that applies now, or stops it. It runs after every
 * change of the connection's state, so it also tells other loops whether the connection is idle
 * (the connection caps' choice of one to close: gd_session.c). */
static void update_timer(gd_session *s) {
  uint64_t due = 0;
  atomic_store_explicit(&s->idle_since_us, gd_rpc_idle(s) ? s->conn.last_activity_us | 1 : 0,
                        memory_order_relaxed);
  if (s->wake)
    return; /* a retry of admission is due now: its tick re-arms the timer */
  gd_timeout_kind kind = next_timeout(s, &due);
  uint64_t now = gd_now_us();
  if (s->waiting && (kind == GD_TIMEOUT_NONE || due > now + WAIT_LOOK_MS * 1000u)) {
    kind = GD_TIMEOUT_BLOCKING; /* any: on_timer looks at the client, then re-arms */
    due = now + WAIT_LOOK_MS * 1000u;
  }
  if (kind == GD_TIMEOUT_NONE) {
    uv_timer_stop(&s->conn.timer);
    return;
  }
  uint64_t left_ms = due <= now ? 0 : (due - now + 999u) / 1000u;
  uv_timer_start(&s->conn.timer, on_timer, left_ms, 0); /* cannot fail on an initialised timer */
}

/* ---- the connection as a whole ------------------------------------------------- */

void gd_rpc_start(gd_session *s, bool tcp) {
  s->tcp = tcp;
  lock_shared(s);
  s->authenticated = gd_auth_trusted_at_accept(s->d, tcp);
  unlock_shared(s);
  assert(tcp || s->authenticated); /* a Unix socket's file mode is its guard */
  s->conn.calls.uncounted = on_uncounted;
  update_reading(s);
  if (!s->conn.closing)
    update_timer(s);
}

void gd_rpc_apply_limits(gd_session *s) {
  gp_decoder_set_limits(s->dec, &s->nl->limits.proto);
  gd_rpc_kick(&s->conn);
}

size_t gd_rpc_fail_pending(gd_session *s, const char *why) {
  size_t answered = 0;
  if (s->waiting) {
    stop_waiting(s);
    refuse_current(s, s->msgid, GP_E_UNAVAILABLE, why);
    answered++;
  }
  gd_call *call = s->conn.calls.head;
  while (call) {
    gd_call *next = call->next;
    if (!call->head_sent && !call->orphan) {
      uint32_t msgid = call->msgid;
      if (s->cur == call) {
        gp_decoder_skip_message(s->dec); /* first: window bytes are then skipped too */
        drop_current(s);
        s->in_request = false;
      } else {
        gd_call_abandon(call);
      }
      send_error(s, msgid, GP_E_UNAVAILABLE, why);
      answered++;
    }
    call = next;
  }
  gd_rpc_kick(&s->conn);
  return answered;
}
