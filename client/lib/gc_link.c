/*
 * gc_link.c - a connection's link to its daemons: one socket at a time, opened at the next
 * address of the list that answers; the token sent first on a TCP socket; requests parked
 * while there is no socket to carry them and re-sent, under their own msgids, on the next
 * one (a lost socket, an UNAVAILABLE answer: a gemm has no side effects). Ping, info and
 * stats are not repeated. A socket lost while idle costs nothing: requests after it simply go
 * to the next one.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gc_internal.h"

/* ---- the request lists --------------------------------------------------- */

void gc__link_wire_leave(gc_conn *conn, gc__request *r) {
  if (!r->on_wire) return;
  assert(conn->wire_count > 0);
  r->on_wire = false;
  conn->wire_count--;
}

static void sendq_append(gc_conn *conn, gc__request *r) {
  r->in_sendq = true;
  r->send_next = NULL;
  if (conn->send_tail) conn->send_tail->send_next = r;
  else conn->send_head = r;
  conn->send_tail = r;
  conn->send_count++;
}

/* r goes out on the current socket from its first byte. */
static void dispatch(gc_conn *conn, gc__request *r) {
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
  sendq_append(conn, r);
}

void gc__link_park(gc_conn *conn, gc__request *r) {
  gc__link_wire_leave(conn, r);
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

void gc__link_unpark(gc_conn *conn, gc__request *r) {
  assert(r->state == GC__ST_PARKED);
  (void)gc__list_unlink(&conn->park_head, &conn->park_tail, r);
}

void gc__link_submit(gc_conn *conn, gc__request *r) {
  if (conn->broken || conn->retiring) gc__link_park(conn, r);
  else dispatch(conn, r);
}

void gc__link_lost(gc_conn *conn, gc__request *r, const gc_error *err) {
  gc__link_wire_leave(conn, r);
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
  gc__link_park(conn, r);
}

/* ---- the token ------------------------------------------------------------ */

/* [0, msgid, "auth", [token]], first in the send queue of a fresh TCP socket. */
static int queue_auth(gc_conn *conn) {
  gc__request *r = gc__request_new(conn, GC__KIND_AUTH);
  if (r == NULL) return gc__error_set(&conn->broken_error, GC_E_RESOURCE_EXHAUSTED, "out of memory");
  size_t len = strlen(conn->token);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &r->head, msgpack_sbuffer_write);
  int bad = msgpack_pack_array(&pk, 4) || msgpack_pack_uint8(&pk, 0) ||
            msgpack_pack_uint32(&pk, r->msgid) || msgpack_pack_str_with_body(&pk, "auth", 4) ||
            msgpack_pack_array(&pk, 1) || msgpack_pack_str_with_body(&pk, conn->token, len);
  if (bad) {
    gc__request_release(r);
    return gc__error_set(&conn->broken_error, GC_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  r->iov[0].iov_base = r->head.data;
  r->iov[0].iov_len = r->head.size;
  r->iovcnt = 1;
  r->send_total = r->head.size;
  conn->auth_msgid = r->msgid;
  conn->auth_waiting = true;
  sendq_append(conn, r);
  return 0;
}

int gc__link_auth_reply(gc_conn *conn, const gp_event *ev) {
  assert(conn->auth_waiting && ev->msgid == conn->auth_msgid);
  conn->auth_waiting = false;
  bool accepted = ev->err.code == GC_OK && !ev->is_gemm_result && ev->result != NULL &&
                  ev->result->type == MSGPACK_OBJECT_BOOLEAN && ev->result->via.boolean;
  gp_decoder_skip_message(conn->decoder);
  if (accepted) return 0;
  char message[GC_ERROR_MESSAGE_MAX];
  int code = ev->err.code != GC_OK ? ev->err.code : GC_E_INTERNAL;
  snprintf(message, sizeof message, "auth: %.200s",
           ev->err.code != GC_OK ? ev->err.message : "the daemon's answer is not true");
  gc__io_break(conn, code, message);
  return code;
}

/* ---- sockets -------------------------------------------------------------- */

static int open_at(gc_conn *conn, const gp_addr *addr) {
  int fd = gc__socket_connect(addr, conn->connect_ms, &conn->broken_error);
  if (fd < 0) return fd;
  gp_decoder *decoder = gp_decoder_new(GP_ROLE_CLIENT, &conn->limits);
  if (decoder == NULL) {
    close(fd);
    return gc__error_set(&conn->broken_error, GC_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  gp_decoder_free(conn->decoder);
  conn->decoder = decoder;
  conn->fd = fd;
  conn->link_serial++;
  conn->broken = false;
  conn->retiring = false;
  conn->auth_waiting = false;
  conn->rbuf_start = conn->rbuf_end = 0;
  conn->receiving = NULL;
  gc__error_clear(&conn->broken_error);
  if (addr->kind == GP_ADDR_TCP && conn->token != NULL && queue_auth(conn) != 0) {
    gc_error why = conn->broken_error;
    gc__io_break(conn, why.code, why.message);
    return why.code;
  }
  return 0;
}

int gc__link_open(gc_conn *conn) {
  assert(conn->broken && conn->fd < 0 && conn->send_head == NULL && conn->wire_count == 0);
  int rc = GC_E_UNAVAILABLE;
  gc_error first;
  gc__error_clear(&first);
  for (size_t tried = 0; tried < conn->addr_count; tried++) {
    size_t i = (conn->addr_next + tried) % conn->addr_count;
    rc = open_at(conn, &conn->addrs[i]);
    if (rc == 0) {
      conn->addr_next = (i + 1) % conn->addr_count; /* the next socket: the next address */
      return 0;
    }
    if (first.code == GC_OK) first = conn->broken_error;
  }
  if (conn->addr_count > 1) {
    char message[GC_ERROR_MESSAGE_MAX];
    snprintf(message, sizeof message, "none of %zu addresses answered; first: %.180s",
             conn->addr_count, first.message);
    gc__error_set(&conn->broken_error, rc, "%s", message);
  }
  return rc;
}

static void count_live(gc__request *r, void *arg) {
  if (r->on_wire && !r->abandoned) ++*(size_t *)arg;
}

/* A retiring socket may close once no request the caller still waits for is on it (cancelled
 * ones and leftover zeros go with it; a request waiting for its zeros is parked by the
 * close). Only scanned while retiring, which is rare. */
static bool retiring_idle(const gc_conn *conn) {
  if (conn->wire_count == 0) return true;
  size_t live = 0;
  gc__reqtab_each(&conn->table, count_live, &live);
  return live == 0;
}

/* A parked request that found no socket: the connect error, after why it was parked when
 * it had gone out before (a lost connection, an UNAVAILABLE answer), so that a daemon killed
 * mid-request does not read as one that never answered. */
static void finish_unsent(gc_conn *conn, gc__request *r) {
  if (r->retries == 0 || r->error.code == GC_OK) {
    gc__request_finish(conn, r, &conn->broken_error);
    return;
  }
  gc_error err;
  char lost[GC_ERROR_MESSAGE_MAX / 2];
  snprintf(lost, sizeof lost, "%.120s", r->error.message);
  gc__error_set(&err, conn->broken_error.code,
                "the connection was lost during the request (%s); reconnecting failed: %s", lost,
                conn->broken_error.message);
  gc__request_finish(conn, r, &err);
}

int gc__link_maintain(gc_conn *conn) {
  if (!conn->broken && conn->retiring && retiring_idle(conn))
    gc__io_break(conn, GC_E_UNAVAILABLE, "the daemon answered UNAVAILABLE: trying another");
  if (!conn->broken || conn->park_head == NULL) return conn->broken ? conn->broken_error.code : 0;
  int rc = gc__link_open(conn);
  while (conn->park_head != NULL) {
    gc__request *r = conn->park_head;
    conn->park_head = r->send_next;
    if (conn->park_head == NULL) conn->park_tail = NULL;
    r->send_next = NULL;
    if (rc == 0) dispatch(conn, r);
    else finish_unsent(conn, r);
  }
  return rc;
}
