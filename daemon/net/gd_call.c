/*
 * gd_call.c - a connection's records of its gemm calls (see gd_call.h).
 */
#include "gd_call.h"

#include <assert.h>
#include <stdlib.h>

#include "gd_list.h"

void gd_calls_init(gd_calls *l, gd_sched *sched) {
  l->sched = sched;
  l->head = NULL;
  l->in_flight = 0;
  l->reserved = 0;
  l->owed = 0;
  l->uncounted = NULL;
}

gd_admit gd_call_admit(gd_calls *l, const gp_gemm_hdr *hdr, bool has_c, uint32_t msgid,
                       const gd_sched_share *share,
                       void (*on_event)(gd_job_waiter *, gd_job *, const gd_backend_event *),
                       gd_call **out, gp_error *err) {
  gd_call *c = calloc(1, sizeof *c);
  if (!c) {
    gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory");
    return GD_ADMIT_REFUSED;
  }
  c->waiter.on_event = on_event;
  gd_admit a = gd_netsched_admit(l->sched, hdr, has_c, msgid, share, &c->waiter, &c->job, err);
  if (a != GD_ADMITTED) {
    free(c);
    return a;
  }
  c->list = l;
  c->msgid = msgid;
  c->next = l->head;
  if (l->head)
    l->head->prev = c;
  l->head = c;
  l->in_flight++;
  c->counted = c->job->reserved_bytes;
  l->reserved += c->counted;
  *out = c;
  return GD_ADMITTED;
}

void gd_call_uncount(gd_call *c) {
  gd_calls *l = c->list;
  uint64_t bytes = c->counted;
  if (bytes == 0)
    return;
  assert(l->reserved >= bytes);
  c->counted = 0;
  l->reserved -= bytes;
  if (l->uncounted)
    l->uncounted(l, bytes);
}

void gd_call_owe(gd_call *c) {
  assert(c->owed == 0 && !c->orphan);
  c->owed = c->job->result_bytes;
  c->list->owed += c->owed;
}

/* c's reply owes the socket nothing any more (answered, let go, or the connection closed). */
static void settle(gd_call *c) {
  assert(c->list->owed >= c->owed);
  c->list->owed -= c->owed;
  c->owed = 0;
}

static void unlink_call(gd_call *c) {
  gd_calls *l = c->list;
  gd_call_uncount(c);
  settle(c);
  GD_LIST_UNLINK(l->head, c);
  c->prev = c->next = NULL;
  if (!c->orphan) {
    assert(l->in_flight > 0);
    l->in_flight--;
  }
}

void gd_call_chunk_done(gd_call *c, const void *data, size_t len) {
  gd_netsched_chunk_done(c->list->sched, c->job, data, len);
}

void gd_call_finish(gd_call *c, bool ok) {
  assert(!c->orphan && c->writes_pending == 0);
  gd_sched *sched = c->list->sched;
  gd_job *job = c->job;
  unlink_call(c);
  free(c);
  gd_netsched_finish(sched, job, ok);
}

void gd_call_abandon(gd_call *c) {
  assert(!c->orphan && c->writes_pending == 0);
  gd_sched *sched = c->list->sched;
  gd_job *job = c->job;
  unlink_call(c);
  free(c);
  gd_netsched_abandon(sched, job);
}

void gd_call_forget(gd_call *c) {
  assert(!c->orphan);
  unlink_call(c);
  free(c);
}

void gd_calls_orphan_all(gd_calls *l) {
  for (gd_call *c = l->head; c; c = c->next) {
    if (c->orphan)
      continue;
    gd_call_uncount(c);
    settle(c);
    c->orphan = true;
    l->in_flight--;
    gd_netsched_abandon(l->sched, c->job);
  }
  assert(l->in_flight == 0 && l->owed == 0);
}

void gd_calls_free_all(gd_calls *l) {
  while (l->head) {
    gd_call *c = l->head;
    l->head = c->next;
    free(c);
  }
}
