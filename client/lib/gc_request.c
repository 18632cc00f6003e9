/*
 * gc_request.c - one request's life: built by gc_gemm.c / gc_call.c, put in
 * the table (by msgid) and the send queue, finished when its reply ends (or
 * the connection breaks), held in the done list until the caller hears of it.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "gc_internal.h"

gc__request *gc__request_new(gc_conn *conn, gc__kind kind) {
  gc__request *r = calloc(1, sizeof *r);
  if (r == NULL) return NULL;
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
  return r;
}

static void request_free(gc__request *r) {
  msgpack_sbuffer_destroy(&r->head);
  msgpack_sbuffer_destroy(&r->packed);
  free(r);
}

void gc__request_release(gc__request *r) {
  if (!r->in_sendq && !r->in_table && !r->in_done) request_free(r);
}

int gc__request_start(gc_conn *conn, gc__request *r) {
  /* An idle socket may have been closed by the daemon (timeouts.idle_ms): read first (r not
   * yet known), so that r goes to a fresh socket instead of spending a retry on a dead one. */
  if (!conn->broken && conn->wire_count == 0) (void)gc__io_progress(conn);
  if (gc__reqtab_put(&conn->table, r) != 0) {
    request_free(r);
    return gc__conn_failf(conn, GC_E_RESOURCE_EXHAUSTED, "out of memory for the request table");
  }
  r->in_table = true;
  gc__link_submit(conn, r);
  /* Send what the socket takes now. A failure finishes r with the error: the caller hears
   * of it from gc_wait / gc_poll like any other outcome. */
  (void)gc__io_progress(conn);
  return 0;
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
  gc__link_wire_leave(conn, r);
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
