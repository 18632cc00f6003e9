/*
 * gd_admission.c - a connection's gemm headers admitted, or waiting for room (see
 * gd_admission.h): its share of the budget and its peer's, the FIFO of its loop's waiters, the
 * wake-ups when room appears, and backpressure (whether the connection may read on).
 */
#include "gd_admission.h"

#include <assert.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_cuda_ipc.h"
#include "gd_log.h"
#include "gd_netloop.h"
#include "gd_results.h"

/* ---- what a peer holds outside jobs (queue.peer_hold_share) ------------------ */

/* Bytes of resident operands and shared-memory regions that s's peer holds over all its
 * connections, every loop's. Under the shared lock (their tables) and the peers lock (the
 * sessions' list). */
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
int gd_admission_check_peer_hold(gd_session *s, const char *what, uint64_t more, gp_error *err) {
  gd_peers_lock(&s->d->peers);
  size_t peers = s->d->peers.n;
  uint64_t held = peers > 1 ? peer_held(s) : 0;
  gd_peers_unlock(&s->d->peers);
  if (peers <= 1)
    return 0;
  double budget = (double)gd_netsched_get_limits(s->d->sched).memory_budget;
  uint64_t share = (uint64_t)(budget * s->nl->limits.peer_hold_share);
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

bool gd_admission_may_decode(const gd_session *s) {
  if (s->conn.closing || s->paused || s->eof || s->waiting)
    return false;
  return !(gd_session_at_boundary(s) && over_caps(s));
}

void gd_admission_update_reading(gd_session *s) {
  gd_conn_want_read(&s->conn, gd_admission_may_decode(s));
}

/* What this connection and its peer hold of the budget, and their shares
 * (queue.connection_memory_share; queue.peer_memory_share only while another peer is
 * connected: alone, a peer takes no room from anyone). */
static gd_sched_share share_of(const gd_session *s) {
  gd_server *d = s->d;
  const gd_net_limits *lim = &s->nl->limits;
  double budget = (double)gd_netsched_get_limits(d->sched).memory_budget;
  gd_peers_lock(&d->peers);
  gd_sched_share share = {
      .conn_used = s->conn.calls.reserved,
      .conn_limit = (uint64_t)(budget * lim->connection_memory_share),
      .peer_used = gd_peers_reserved(&d->peers, s->conn.peer_key),
      .peer_holds = peer_held(s),
      .prefer_devices = s->conn.resident.devices,
      .port = s->nl->port};
  if (d->peers.n > 1)
    share.peer_limit = (uint64_t)(budget * lim->peer_memory_share);
  gd_peers_unlock(&d->peers);
  return share;
}

static bool must_wait(gd_admit a) { return a == GD_ADMIT_FULL || a == GD_ADMIT_OVER_SHARE; }

/* Admits the current message's gemm: GD_ADMITTED (s->cur is its call), GD_ADMIT_FULL or
 * GD_ADMIT_OVER_SHARE (nothing done), or GD_ADMIT_REFUSED (answered). Under the shared lock;
 * the peers' counts under the peers lock, taken here. */
static gd_admit admit_gemm(gd_session *s, const gp_gemm_hdr *hdr, bool has_c) {
  gp_error err;
  gp_error_clear(&err);
  gd_call *call = NULL;
  /* a result into a region: the region and range are checked on every try (a waiting request
   * meets regions as they are when it is admitted) */
  int rc = hdr->has_out ? gd_shm_calls_check_out(&s->conn.shm, hdr, &err) : 0;
  if (rc != 0) {
    gd_session_refuse_current(s, s->msgid, rc, err.message);
    return GD_ADMIT_REFUSED;
  }
  gd_sched_share share = share_of(s);
  share.fixed_device = gd_cuda_ipc_fixed_device(&s->conn.shm, hdr);
  gd_admit a = gd_call_admit(&s->conn.calls, hdr, has_c, s->msgid, &share, gd_results_on_event,
                             &call, &err);
  if (must_wait(a)) {
    gd_debug("conn %llu: msgid %u: waits: %s", (unsigned long long)s->conn.id,
             (unsigned)s->msgid, err.message);
    return a;
  }
  if (a != GD_ADMITTED) {
    gd_session_refuse_current(s, s->msgid, err.code ? err.code : GP_E_INTERNAL, err.message);
    return a;
  }
  if (s->peer_counted) {
    gd_peers_lock(&s->d->peers);
    gd_peers_charge(&s->d->peers, s->conn.peer_key, call->counted);
    gd_peers_unlock(&s->d->peers);
  }
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
void gd_admission_stop_waiting(gd_session *s) {
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
  gd_admission_room(s->nl);
}

static void wake(gd_session *s) {
  if (s->wake)
    return;
  s->wake = true;
  uv_timer_start(&s->conn.timer, s->hooks->tick, 0, 0); /* cannot fail on an initialised timer */
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
void gd_admission_room(void *netloop) {
  gd_netloop *nl = netloop;
  for (gd_session *s = nl->wait_head; s; s = s->wait_next)
    wake(s);
  if (atomic_load(&nl->d->draining))
    wake_share_waiters(nl, NULL);
}

void gd_admission_peer_room(gd_netloop *nl) { wake_share_waiters(nl, NULL); }

/* Budget bytes of s's jobs stopped counting (computed, or let go): its peer's count goes down,
 * and whoever of that peer waits over its share tries again (on other loops: whoever waits
 * over its share, which looks again). */
static void peer_uncharge(gd_session *s, uint64_t bytes) {
  gd_server *d = s->d;
  if (!s->peer_counted || bytes == 0)
    return;
  gd_peers_lock(&d->peers);
  gd_peers_uncharge(&d->peers, s->conn.peer_key, bytes);
  gd_peers_unlock(&d->peers);
  wake_share_waiters(s->nl, s->conn.peer_key);
  for (size_t i = 0; i < d->nloops; i++) {
    gd_netloop *other = d->loops[i];
    if (other != s->nl && atomic_load(&other->share_waiting) > 0)
      gd_netloop_post(other, GD_NETLOOP_PEER_ROOM, NULL);
  }
}

void gd_admission_uncounted(gd_calls *l, uint64_t bytes) {
  peer_uncharge((gd_session *)((char *)l - offsetof(gd_session, conn.calls)), bytes);
}

void gd_admission_closing(gd_session *s) {
  gd_admission_stop_waiting(s);
  peer_uncharge(s, s->conn.calls.reserved); /* its jobs are let go right after this */
  s->conn.calls.uncounted = NULL;
}

/* A waiter's timer fired after room appeared: it tries again. Still waiting for the same thing,
 * it keeps its place (the first in line stays first); waiting for the other thing now, it moves;
 * admitted or refused, it reads on. */
void gd_admission_retry(gd_session *s) {
  s->wake = false;
  gd_session_lock_shared(s);
  gd_admit a = admit_gemm(s, &s->wait_hdr, s->wait_has_c);
  bool still = s->in_line ? a == GD_ADMIT_FULL : a == GD_ADMIT_OVER_SHARE;
  if (!still) {
    gp_gemm_hdr hdr = s->wait_hdr;
    bool has_c = s->wait_has_c;
    gd_admission_stop_waiting(s);
    if (must_wait(a))
      start_waiting(s, &hdr, has_c, a);
  }
  gd_session_unlock_shared(s);
  s->hooks->kick(&s->conn);
}

/* Room appeared and requests in line have not tried it yet: it is theirs first. */
static bool line_trying(const gd_netloop *nl) {
  for (const gd_session *o = nl->wait_head; o; o = o->wait_next)
    if (o->wake)
      return true;
  return false;
}

void gd_admission_request(gd_session *s, const gp_event *ev) {
  gd_session_lock_shared(s); /* admission and the wait it may start: see want_room */
  /* A request that fits now goes now, even past others in line that do not fit: one large
   * request that cannot be admitted must not hold up every small one behind it. But room that
   * just appeared goes to those in line first (their retries are due). */
  gd_admit a = line_trying(s->nl) ? GD_ADMIT_FULL : admit_gemm(s, &ev->gemm, ev->has_c);
  if (must_wait(a)) {
    s->nl->stats->admission_waits++;
    start_waiting(s, &ev->gemm, ev->has_c, a);
  }
  gd_session_unlock_shared(s);
}

/* The payload bytes a waiting request still needs: its client gone with fewer sent, it can
 * never be admitted usefully. */
uint64_t gd_admission_needs(const gd_session *s) {
  uint64_t bytes[3], total = 0;
  if (!gd_netsched_operand_total(&s->wait_hdr, bytes, &total))
    return UINT64_MAX;
  return s->wait_has_c ? total : total - bytes[GP_OPERAND_C];
}
