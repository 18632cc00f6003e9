/*
 * gc_request.c - one request's life: built by gc_gemm.c / gc_call.c, put in
 * the table (by msgid) and the send queue (or parked while there is no socket
 * for it), finished when its reply ends (or the connection breaks), held in the
 * done list until the caller hears of it. The lowest layer of the connection:
 * it moves requests between lists and never touches the socket.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "gc_internal.h"

int gc__request_new(gc_conn *conn, gc__kind kind, gc__request **out, gc_error *err) {
  gc__request *r = calloc(1, sizeof *r);
  *out = r;
  if (r == NULL) return gc__error_set(err, GC_E_RESOURCE_EXHAUSTED, "out of memory");
  r->kind = kind;
  r->state = GC__ST_SENDING;
  r->pass_fd = -1;
  msgpack_sbuffer_init(&r->head);
  msgpack_sbuffer_init(&r->packed);
  /* msgid: the next one not in flight, never 0 (gc_req 0 means "none") */
  do {
    r->msgid = conn->next_msgid++;
  } while (r->msgid == 0 || gc__reqtab_get(&conn->table, r->msgid) != NULL ||
           (conn->auth_waiting && r->msgid == conn->auth_msgid));
  return 0;
}

static void request_free(gc__request *r) {
  msgpack_sbuffer_destroy(&r->head);
  msgpack_sbuffer_destroy(&r->packed);
  free(r);
}

void gc__request_release(gc__request *r) {
  if (!r->in_sendq && !r->in_table && !r->in_done) request_free(r);
}

/* ---- the request lists --------------------------------------------------- */

void gc__request_wire_leave(gc_conn *conn, gc__request *r) {
  if (!r->on_wire) return;
  assert(conn->wire_count > 0);
  r->on_wire = false;
  conn->wire_count--;
}

void gc__request_sendq_append(gc_conn *conn, gc__request *r) {
  r->in_sendq = true;
  r->send_next = NULL;
  if (conn->send_tail) conn->send_tail->send_next = r;
  else conn->send_head = r;
  conn->send_tail = r;
  conn->send_count++;
}

/* r goes out on the current socket from its first byte. */
void gc__request_dispatch(gc_conn *conn, gc__request *r) {
  assert(!conn->broken && !r->in_sendq && !r->on_wire);
  r->state = GC__ST_SENDING;
  r->iov_next = 0;
  r->iov_done = 0;
  r->sent = 0;
  r->received = 0;
  r->zero_fill = false;
  r->retry_pending = false;
  gc__error_clear(&r->error);
  memset(&r->result, 0, sizeof r->result);
  msgpack_sbuffer_destroy(&r->packed); /* a reply half-taken by the last attempt */
  msgpack_sbuffer_init(&r->packed);
  r->on_wire = true;
  conn->wire_count++;
  gc__request_sendq_append(conn, r);
}

void gc__request_park(gc_conn *conn, gc__request *r) {
  gc__request_wire_leave(conn, r);
  assert(!r->in_sendq);
  if (r->abandoned) { /* cancelled: nothing to retry */
    gc__request_finish(conn, r, NULL);
    return;
  }
  r->state = GC__ST_PARKED;
  r->retry_pending = false;
  r->send_next = NULL;
  if (conn->park_tail) conn->park_tail->send_next = r;
  else conn->park_head = r;
  conn->park_tail = r;
}

bool gc__list_unlink(gc__request **head, gc__request **tail, gc__request *r) {
  gc__request *prev = NULL;
  for (gc__request *it = *head; it != NULL; prev = it, it = it->send_next) {
    if (it != r) continue;
    if (prev) prev->send_next = r->send_next;
    else *head = r->send_next;
    if (*tail == r) *tail = prev;
    r->send_next = NULL;
    return true;
  }
  return false;
}

void gc__request_unpark(gc_conn *conn, gc__request *r) {
  assert(r->state == GC__ST_PARKED);
  (void)gc__list_unlink(&conn->park_head, &conn->park_tail, r);
}

void gc__request_submit(gc_conn *conn, gc__request *r) {
  if (conn->broken || conn->retiring) gc__request_park(conn, r);
  else gc__request_dispatch(conn, r);
}

void gc__request_lost(gc_conn *conn, gc__request *r, const gc_error *err) {
  gc__request_wire_leave(conn, r);
  /* a gemm naming a region cannot be re-sent: the region went with the old socket */
  bool may_retry = r->kind == GC__KIND_GEMM && !r->uses_shm && r->retries < conn->max_retries;
  if (r->abandoned || (!r->retry_pending && !may_retry)) {
    gc__request_finish(conn, r, err);
    return;
  }
  /* an UNAVAILABLE answer counted its retry when it came */
  if (!r->retry_pending) r->retries++;
  r->error = *err; /* why it goes again: told with the reconnect's failure, if that fails */
  if (r->in_sendq) { /* bytes the old socket still owes: zeros, then parked (gc_io.c) */
    r->zero_fill = true;
    r->retry_pending = true;
    return;
  }
  gc__request_park(conn, r);
}

static void done_push(gc_conn *conn, gc__request *r) {
  r->in_done = true;
  r->done_next = NULL;
  r->done_prev = conn->done_tail;
  if (conn->done_tail) conn->done_tail->done_next = r;
  else conn->done_head = r;
  conn->done_tail = r;
}

void gc__request_finish(gc_conn *conn, gc__request *r, const gc_error *err) {
  if (err != NULL && err->code != GC_OK) r->error = *err;
  else gc__error_clear(&r->error);
  r->state = GC__ST_DONE;
  r->retry_pending = false;
  gc__request_wire_leave(conn, r);
  if (conn->receiving == r) conn->receiving = NULL;
  /* The caller may reuse its buffers as soon as it hears of the outcome; a reply that came
   * before all of the request was sent (a refusal at admission) leaves bytes that the stream
   * still owes: those go out as zeros. */
  r->out = NULL;
  if (r->in_sendq) r->zero_fill = true;
  if (r->abandoned) {
    gc__reqtab_del(&conn->table, r->msgid);
    r->in_table = false;
    conn->abandoned_count--;
    gc__request_release(r);
  } else {
    done_push(conn, r);
  }
}

void gc__request_reported(gc_conn *conn, gc__request *r) {
  if (r->done_prev) r->done_prev->done_next = r->done_next;
  else conn->done_head = r->done_next;
  if (r->done_next) r->done_next->done_prev = r->done_prev;
  else conn->done_tail = r->done_prev;
  r->in_done = false;
  gc__reqtab_del(&conn->table, r->msgid);
  r->in_table = false;
  gc__request_release(r);
}
