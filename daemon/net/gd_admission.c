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
  for (const gd_session *o = gd_session_server(s)->all_sessions; o; o = gd_session_all_next(o))
    if (strcmp(gd_conn_peer_key(gd_session_conn(o)), gd_conn_peer_key(gd_session_conn(s))) == 0)
      held += gd_conn_resident(gd_session_conn(o))->bytes + gd_conn_shm(gd_session_conn(o))->bytes;
  return held;
}

/* gd_sched_share.peer_holds: what s's peer holds outside jobs (called under the shared lock;
 * takes the peers lock for the sessions' list). */
static uint64_t peer_holds_of(const void *arg) {
  const gd_session *s = arg;
  gd_server *d = gd_session_server(s);
  gd_peers_lock(&d->peers);
  uint64_t held = peer_held(s);
  gd_peers_unlock(&d->peers);
  return held;
}

/* 0 when s's peer may hold `more` bytes besides what it holds, else RESOURCE_EXHAUSTED with
 * err (what: the method) and a warning, at most one a second per loop. Like
 * queue.peer_memory_share, only while another peer is connected: alone, a peer takes no room
 * from anyone (one that comes later and cannot fit is told why: gd_sched.h). Under the shared
 * lock. */
int gd_admission_check_peer_hold(gd_session *s, const char *what, uint64_t more, gp_error *err) {
  gd_conn *c = gd_session_conn(s);
  gd_netloop *nl = gd_session_loop(s);
  gd_server *d = gd_session_server(s);
  gd_peers_lock(&d->peers);
  size_t peers = d->peers.n;
  uint64_t held = peers > 1 ? peer_held(s) : 0;
  gd_peers_unlock(&d->peers);
  if (peers <= 1)
    return 0;
  double budget = (double)gd_netsched_get_limits(d->sched).memory_budget;
  uint64_t share = (uint64_t)(budget * nl->limits.peer_hold_share);
  if (held <= share && more <= share - held)
    return 0;
  gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "%s: %llu more bytes are over the peer's share of "
               "queue.memory_budget for resident operands and regions (queue.peer_hold_share: "
               "%llu bytes, %llu held)", what, (unsigned long long)more,
               (unsigned long long)share, (unsigned long long)held);
  uint64_t now = gd_now_us();
  if (now - nl->hold_warned_us >= 1000000u) {
    nl->hold_warned_us = now;
    gd_warn("conn %llu (%s): %s", (unsigned long long)gd_conn_id(c), gd_conn_peer_key(c),
            err->message);
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
  gd_conn *c = gd_session_conn(s);
  const gd_net_limits *cfg = &gd_session_loop(s)->limits;
  return gd_conn_calls(c)->in_flight >= cfg->max_requests_in_flight ||
         gd_replyq_backlog(gd_conn_out(c)) >= cfg->max_buffered_bytes ||
         gd_conn_calls(c)->owed > cfg->max_buffered_bytes;
}

bool gd_admission_may_decode(const gd_session *s) {
  gd_session_msg *m = gd_session_msg_of(s);
  if (gd_conn_closing(gd_session_conn(s)) || m->paused || m->eof || gd_session_wait_of(s)->waiting)
    return false;
  return !(gd_session_at_boundary(s) && over_caps(s));
}

void gd_admission_update_reading(gd_session *s) {
  gd_conn_want_read(gd_session_conn(s), gd_admission_may_decode(s));
}

/* What this connection and its peer hold of the budget, and their shares
 * (queue.connection_memory_share; queue.peer_memory_share only while another peer is
 * connected: alone, a peer takes no room from anyone). */
static gd_sched_share share_of(const gd_session *s) {
  gd_conn *c = gd_session_conn(s);
  gd_netloop *nl = gd_session_loop(s);
  gd_server *d = gd_session_server(s);
  const gd_net_limits *lim = &nl->limits;
  double budget = (double)gd_netsched_get_limits(d->sched).memory_budget;
  gd_peers_lock(&d->peers);
  gd_sched_share share = {
      .conn_used = gd_conn_calls(c)->reserved,
      .conn_limit = (uint64_t)(budget * lim->connection_memory_share),
      .peer_used = gd_peers_reserved(&d->peers, gd_conn_peer_key(c)),
      /* the walk over every connection, only where the scheduler needs its sum (it runs
       * under the shared lock, which serialises the loops' admissions) */
      .peer_holds = peer_holds_of,
      .peer_holds_arg = s,
      .prefer_devices = gd_conn_resident(c)->devices,
      .port = nl->port};
  if (d->peers.n > 1)
    share.peer_limit = (uint64_t)(budget * lim->peer_memory_share);
  gd_peers_unlock(&d->peers);
  return share;
}

static bool must_wait(gd_admit a) { return a == GD_ADMIT_FULL || a == GD_ADMIT_OVER_SHARE; }

/* Admits the current message's gemm: GD_ADMITTED (the message's cur is its call), GD_ADMIT_FULL
 * or GD_ADMIT_OVER_SHARE (nothing done), or GD_ADMIT_REFUSED (answered). Under the shared lock;
 * the peers' counts under the peers lock, taken here. */
static gd_admit admit_gemm(gd_session *s, const gp_gemm_hdr *hdr, bool has_c) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_conn *c = gd_session_conn(s);
  gd_server *d = gd_session_server(s);
  gp_error err;
  gp_error_clear(&err);
  gd_call *call = NULL;
  /* a result into a region: the region and range are checked on every try (a waiting request
   * meets regions as they are when it is admitted) */
  int rc = hdr->has_out ? gd_shm_calls_check_out(gd_conn_shm(c), hdr, &err) : 0;
  if (rc != 0) {
    gd_session_refuse_current(s, m->msgid, rc, err.message);
    return GD_ADMIT_REFUSED;
  }
  gd_sched_share share = share_of(s);
  share.fixed_device = gd_cuda_ipc_fixed_device(gd_conn_shm(c), hdr);
  gd_admit a = gd_call_admit(gd_conn_calls(c), hdr, has_c, m->msgid, &share, gd_results_on_event,
                             &call, &err);
  if (must_wait(a)) {
    gd_debug("conn %llu: msgid %u: waits: %s", (unsigned long long)gd_conn_id(c),
             (unsigned)m->msgid, err.message);
    return a;
  }
  if (a != GD_ADMITTED) {
    gd_session_refuse_current(s, m->msgid, err.code ? err.code : GP_E_INTERNAL, err.message);
    return a;
  }
  if (gd_session_peer_counted(s)) {
    gd_peers_lock(&d->peers);
    gd_peers_charge(&d->peers, gd_conn_peer_key(c), call->counted);
    gd_peers_unlock(&d->peers);
  }
  call->shm_out = hdr->has_out;
  call->out_region = hdr->out_region;
  call->out_offset = hdr->out_offset;
  if (call->shm_out)
    gd_shm_calls_out_mapped(gd_conn_shm(c), call);
  else
    gd_call_owe(call);
  m->cur = call;
  gd_debug("conn %llu: msgid %u: gemm %s m=%llu n=%llu k=%llu batch=%llu admitted as job %llu",
           (unsigned long long)gd_conn_id(c), (unsigned)m->msgid, gp_dtype_name(hdr->dtype),
           (unsigned long long)hdr->m, (unsigned long long)hdr->n, (unsigned long long)hdr->k,
           (unsigned long long)hdr->batch, (unsigned long long)call->job->id);
  return GD_ADMITTED;
}

static void wait_link(gd_session *s) {
  gd_netloop *nl = gd_session_loop(s);
  gd_session_wait *w = gd_session_wait_of(s);
  w->prev = nl->wait_tail;
  w->next = NULL;
  if (nl->wait_tail)
    gd_session_wait_of(nl->wait_tail)->next = s;
  else
    nl->wait_head = s;
  nl->wait_tail = s;
  atomic_fetch_add(&gd_session_server(s)->line_waiters, 1);
}

static void wait_unlink(gd_session *s) {
  gd_netloop *nl = gd_session_loop(s);
  gd_session_wait *w = gd_session_wait_of(s);
  if (w->prev)
    gd_session_wait_of(w->prev)->next = w->next;
  else
    nl->wait_head = w->next;
  if (w->next)
    gd_session_wait_of(w->next)->prev = w->prev;
  else
    nl->wait_tail = w->prev;
  w->prev = w->next = NULL;
  atomic_fetch_sub(&gd_session_server(s)->line_waiters, 1);
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
  gd_session_wait *w = gd_session_wait_of(s);
  gd_netloop *nl = gd_session_loop(s);
  assert(!w->waiting && !gd_session_msg_of(s)->cur && must_wait(why));
  w->waiting = true;
  w->in_line = why == GD_ADMIT_FULL;
  w->hdr = *hdr;
  w->has_c = has_c;
  w->since_us = gd_now_us();
  if (w->in_line)
    wait_link(s);
  else
    nl->share_waiters++;
  want_room(nl);
}

/* Stops waiting; the time spent waiting does not count against timeouts.request_ms. The next
 * in line is woken: room that was meant for s may be its. */
void gd_admission_stop_waiting(gd_session *s) {
  gd_session_wait *w = gd_session_wait_of(s);
  gd_netloop *nl = gd_session_loop(s);
  if (!w->waiting)
    return;
  if (w->in_line) {
    wait_unlink(s);
  } else {
    assert(nl->share_waiters > 0);
    nl->share_waiters--;
  }
  want_room(nl);
  w->waiting = w->in_line = false;
  w->wake = false;
  gd_session_msg_of(s)->msg_started_us += gd_now_us() - w->since_us;
  gd_admission_room(nl);
}

static void wake(gd_session *s) {
  gd_session_wait *w = gd_session_wait_of(s);
  if (w->wake)
    return;
  w->wake = true;
  /* cannot fail on an initialised timer */
  uv_timer_start(gd_conn_timer(gd_session_conn(s)), gd_session_hooks_of(s)->tick, 0, 0);
}

/* Wakes nl's connections waiting over their share (those of peer_key only, unless NULL). */
static void wake_share_waiters(gd_netloop *nl, const char *peer_key) {
  if (nl->share_waiters == 0)
    return;
  for (gd_session *o = nl->sessions; o; o = gd_session_next(o))
    if (gd_session_wait_of(o)->waiting && !gd_session_wait_of(o)->in_line &&
        !gd_conn_closing(gd_session_conn(o)) &&
        (!peer_key || strcmp(gd_conn_peer_key(gd_session_conn(o)), peer_key) == 0))
      wake(o);
}

/* Only a timer is started here: this runs inside scheduler calls. Every request in line
 * tries again, in the order they came (timers of equal due time run in the order started): a
 * large one that still does not fit keeps its place and holds up no smaller one behind it.
 * Draining: every waiter is woken, to be answered UNAVAILABLE. */
void gd_admission_room(void *netloop) {
  gd_netloop *nl = netloop;
  for (gd_session *s = nl->wait_head; s; s = gd_session_wait_of(s)->next)
    wake(s);
  if (atomic_load(&nl->d->draining))
    wake_share_waiters(nl, NULL);
}

void gd_admission_peer_room(gd_netloop *nl) { wake_share_waiters(nl, NULL); }

/* Budget bytes of s's jobs stopped counting (computed, or let go): its peer's count goes down,
 * and whoever of that peer waits over its share tries again (on other loops: whoever waits
 * over its share, which looks again). */
static void peer_uncharge(gd_session *s, uint64_t bytes) {
  gd_conn *c = gd_session_conn(s);
  gd_netloop *nl = gd_session_loop(s);
  gd_server *d = gd_session_server(s);
  if (!gd_session_peer_counted(s) || bytes == 0)
    return;
  gd_peers_lock(&d->peers);
  gd_peers_uncharge(&d->peers, gd_conn_peer_key(c), bytes);
  gd_peers_unlock(&d->peers);
  wake_share_waiters(nl, gd_conn_peer_key(c));
  for (size_t i = 0; i < d->nloops; i++) {
    gd_netloop *other = d->loops[i];
    if (other != nl && atomic_load(&other->share_waiting) > 0)
      gd_netloop_post(other, GD_NETLOOP_PEER_ROOM, NULL);
  }
}

void gd_admission_uncounted(gd_calls *l, uint64_t bytes) {
  peer_uncharge(gd_session_of_calls(l), bytes);
}

void gd_admission_closing(gd_session *s) {
  gd_conn *c = gd_session_conn(s);
  gd_admission_stop_waiting(s);
  peer_uncharge(s, gd_conn_calls(c)->reserved); /* its jobs are let go right after this */
  gd_conn_calls(c)->uncounted = NULL;
}

/* A waiter's timer fired after room appeared: it tries again. Still waiting for the same thing,
 * it keeps its place (the first in line stays first); waiting for the other thing now, it moves;
 * admitted or refused, it reads on. */
void gd_admission_retry(gd_session *s) {
  gd_session_wait *w = gd_session_wait_of(s);
  w->wake = false;
  gd_session_lock_shared(s);
  gd_admit a = admit_gemm(s, &w->hdr, w->has_c);
  bool still = w->in_line ? a == GD_ADMIT_FULL : a == GD_ADMIT_OVER_SHARE;
  if (!still) {
    gp_gemm_hdr hdr = w->hdr;
    bool has_c = w->has_c;
    gd_admission_stop_waiting(s);
    if (must_wait(a))
      start_waiting(s, &hdr, has_c, a);
  }
  gd_session_unlock_shared(s);
  gd_session_hooks_of(s)->kick(gd_session_conn(s));
}

/* Room appeared and requests in line have not tried it yet: it is theirs first. */
static bool line_trying(const gd_netloop *nl) {
  for (const gd_session *o = nl->wait_head; o; o = gd_session_wait_of(o)->next)
    if (gd_session_wait_of(o)->wake)
      return true;
  return false;
}

void gd_admission_request(gd_session *s, const gp_event *ev) {
  gd_netloop *nl = gd_session_loop(s);
  gd_session_lock_shared(s); /* admission and the wait it may start: see want_room */
  /* A request that fits now goes now, even past others in line that do not fit: one large
   * request that cannot be admitted must not hold up every small one behind it. But room that
   * just appeared goes to those in line first (their retries are due). */
  gd_admit a = line_trying(nl) ? GD_ADMIT_FULL : admit_gemm(s, &ev->gemm, ev->has_c);
  if (must_wait(a)) {
    nl->stats->admission_waits++;
    start_waiting(s, &ev->gemm, ev->has_c, a);
  }
  gd_session_unlock_shared(s);
}

/* The payload bytes a waiting request still needs: its client gone with fewer sent, it can
 * never be admitted usefully. */
uint64_t gd_admission_needs(const gd_session *s) {
  gd_session_wait *w = gd_session_wait_of(s);
  uint64_t bytes[3], total = 0;
  if (!gd_netsched_operand_total(&w->hdr, bytes, &total))
    return UINT64_MAX;
  return w->has_c ? total : total - bytes[GP_OPERAND_C];
}
