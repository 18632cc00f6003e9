/*
 * gc_link.c - a connection's link to its daemons: one socket at a time, opened at the next
 * address of the list that answers; the token sent first on a TCP socket; requests parked
 * while there is no socket to carry them and re-sent, under their own msgids, on the next
 * one (a lost socket, an UNAVAILABLE answer: a gemm has no side effects). Ping, info and
 * stats are not repeated. A socket lost while idle costs nothing: requests after it simply go
 * to the next one. Above the pump (gc_io.c): each step replaces a lost socket first, then
 * pumps; a new request enters the table and the link here (gc__link_start).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gc_internal.h"

/* ---- the token ------------------------------------------------------------ */

/* [0, msgid, "auth", [token]], first in the send queue of a fresh TCP socket. */
static int queue_auth(gc_conn *conn) {
  gc__request *r;
  int made = gc__request_new(conn, GC__KIND_AUTH, &r, &conn->broken_error);
  if (made != 0) return made;
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
  gc__request_sendq_append(conn, r);
  return 0;
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
    if (rc == 0) gc__request_dispatch(conn, r);
    else finish_unsent(conn, r);
  }
  return rc;
}

/* ---- moving requests ---------------------------------------------------- */

int gc__link_progress(gc_conn *conn) {
  (void)gc__link_maintain(conn);
  (void)gc__io_pump(conn);
  /* a socket lost or retired just now: its parked requests go out on a fresh one at once */
  if (conn->broken || conn->retiring) {
    (void)gc__link_maintain(conn);
    (void)gc__io_pump(conn);
  }
  return conn->broken ? conn->broken_error.code : 0;
}

int gc__link_start(gc_conn *conn, gc__request *r) {
  /* An idle socket may have been closed by the daemon (timeouts.idle_ms): read first (r not
   * yet known), so that r goes to a fresh socket instead of spending a retry on a dead one. */
  if (!conn->broken && conn->wire_count == 0) (void)gc__link_progress(conn);
  if (gc__reqtab_put(&conn->table, r) != 0) {
    gc__request_release(r); /* nothing holds it yet: freed */
    return gc__conn_failf(conn, GC_E_RESOURCE_EXHAUSTED, "out of memory for the request table");
  }
  r->in_table = true;
  gc__request_submit(conn, r);
  /* Send what the socket takes now. A failure finishes r with the error: the caller hears
   * of it from gc_wait / gc_poll like any other outcome. */
  (void)gc__link_progress(conn);
  return 0;
}
