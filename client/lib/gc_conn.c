/*
 * gc_conn.c - connections and the asynchronous calls on them: connect,
 * close, wait, poll, cancel, progress.
 */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gc_internal.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 10000

/* The first layout of gc_connect_opts ends with max_reply_bytes. */
#define CONNECT_OPTS_V1_SIZE (offsetof(gc_connect_opts, max_reply_bytes) + sizeof(uint64_t))

void gc_connect_opts_init_sized(gc_connect_opts *opts, size_t struct_size) {
  gc_connect_opts defaults;
  memset(&defaults, 0, sizeof defaults);
  gp_limits limits;
  gp_limits_default(&limits);
  defaults.connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
  defaults.max_reply_bytes = limits.max_message_bytes;
  memcpy(opts, &defaults, struct_size < sizeof defaults ? struct_size : sizeof defaults);
  if (struct_size >= sizeof(size_t)) opts->struct_size = struct_size;
}

static const char *default_address(void) {
  const char *env = getenv("GEMMD_ADDRESS");
  return env != NULL && env[0] != '\0' ? env : GC_DEFAULT_ADDRESS;
}

static gc_conn *conn_new(int fd, const gc_connect_opts *opts) {
  gc_conn *conn = calloc(1, sizeof *conn);
  if (conn == NULL) return NULL;
  conn->fd = fd;
  conn->next_msgid = 1;
  gc__reqtab_init(&conn->table);
  gp_limits_default(&conn->limits);
  conn->limits.max_message_bytes = opts->max_reply_bytes;
  conn->decoder = gp_decoder_new(GP_ROLE_CLIENT, &conn->limits);
  conn->rbuf = malloc(GC__READ_BUF_BYTES);
  if (conn->decoder == NULL || conn->rbuf == NULL) {
    gp_decoder_free(conn->decoder);
    free(conn->rbuf);
    free(conn);
    return NULL;
  }
  return conn;
}

int gc_connect_with(const char *addr, const gc_connect_opts *opts_in, gc_conn **out) {
  gc_error *err = gc__thread_error();
  *out = NULL;
  gc_connect_opts opts;
  gc_connect_opts_init(&opts);
  if (opts_in != NULL) {
    if (opts_in->struct_size < CONNECT_OPTS_V1_SIZE)
      return gc__error_set(err, GC_E_INVALID_ARGUMENT,
                           "connect options not set up with gc_connect_opts_init");
    memcpy(&opts, opts_in, opts_in->struct_size < sizeof opts ? opts_in->struct_size : sizeof opts);
  }
  if (opts.connect_timeout_ms < 0 || opts.max_reply_bytes < 64)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT,
                         "connect_timeout_ms must be >= 0 and max_reply_bytes >= 64");
  if (addr == NULL) addr = default_address();
  gp_addr parsed;
  char why[GC_ERROR_MESSAGE_MAX];
  if (gp_addr_parse(addr, GP_ADDR_CONNECT, &parsed, why, sizeof why) != 0)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "%s", why);
  /* poll() takes an int: a longer limit (over 24 days) waits that long */
  int connect_ms = opts.connect_timeout_ms > INT_MAX ? INT_MAX : (int)opts.connect_timeout_ms;
  int fd = gc__socket_connect(&parsed, connect_ms, err);
  if (fd < 0) return fd;
  gc_conn *conn = conn_new(fd, &opts);
  if (conn == NULL) {
    close(fd);
    return gc__error_set(err, GC_E_RESOURCE_EXHAUSTED, "out of memory for a connection");
  }
  gc__error_clear(err);
  *out = conn;
  return 0;
}

int gc_connect(const char *addr, gc_conn **out) { return gc_connect_with(addr, NULL, out); }

static void drop(gc__request *r, void *arg) {
  gc__request **list = arg;
  r->tmp_next = *list;
  *list = r;
}

void gc_close(gc_conn *conn) {
  if (conn == NULL) return;
  if (conn->fd >= 0) close(conn->fd);
  /* Requests live in the send queue, the table, or both; let go of each holder in turn. */
  for (gc__request *r = conn->send_head, *next; r != NULL; r = next) {
    next = r->send_next;
    r->in_sendq = false;
    gc__request_release(r);
  }
  gc__request *list = NULL;
  gc__reqtab_each(&conn->table, drop, &list);
  for (gc__request *r = list, *next; r != NULL; r = next) {
    next = r->tmp_next;
    r->in_table = r->in_done = false;
    gc__request_release(r);
  }
  gc__reqtab_free(&conn->table);
  gc__shm_free_all(conn);
  gp_decoder_free(conn->decoder);
  free(conn->rbuf);
  free(conn);
}

int gc_fd(const gc_conn *conn) { return conn->fd; }

size_t gc_in_flight(const gc_conn *conn) { return conn->table.count - conn->abandoned_count; }

size_t gc_pending_sends(const gc_conn *conn) { return conn->send_count; }

int64_t gc__deadline(int64_t timeout_ms) {
  return timeout_ms < 0 ? -1 : gc__now_ms() + timeout_ms;
}

int gc__drive_until_done(gc_conn *conn, gc__request *r, int64_t deadline_ms) {
  for (;;) {
    (void)gc__io_progress(conn); /* a broken connection finishes r with its error */
    if (r->state == GC__ST_DONE) return 0;
    if (deadline_ms >= 0 && gc__now_ms() >= deadline_ms) return GC_E_DEADLINE_EXCEEDED;
    if (gc__io_wait(conn, deadline_ms) == 0) return GC_E_DEADLINE_EXCEEDED;
  }
}

/* A request the caller may still ask about, or NULL. */
static gc__request *find_live(const gc_conn *conn, gc_req req) {
  gc__request *r = gc__reqtab_get(&conn->table, req);
  return r != NULL && !r->abandoned ? r : NULL;
}

/* Reports r's outcome to the caller and forgets it. */
static int report(gc_conn *conn, gc__request *r, gc_gemm_result *result) {
  int code = r->error.code;
  if (code != GC_OK) conn->last_error = r->error;
  else if (result != NULL) *result = r->result;
  gc__request_reported(conn, r);
  return code;
}

int gc_wait(gc_conn *conn, gc_req req, int64_t timeout_ms, gc_gemm_result *result) {
  gc__request *r = find_live(conn, req);
  if (r == NULL) return gc__conn_failf(conn, GC_E_NOT_FOUND, "request %u is not in flight", req);
  if (gc__drive_until_done(conn, r, gc__deadline(timeout_ms)) != 0)
    return gc__conn_failf(conn, GC_E_DEADLINE_EXCEEDED,
                          "request %u not complete after %lld ms (still in flight)", req,
                          (long long)timeout_ms);
  return report(conn, r, result);
}

static size_t reap(gc_conn *conn, gc_completion *done, size_t max) {
  size_t n = 0;
  while (n < max && conn->done_head != NULL) {
    gc__request *r = conn->done_head;
    done[n].req = r->msgid;
    done[n].error = r->error;
    done[n].result = r->result;
    done[n].user = r->user;
    gc__request_reported(conn, r);
    n++;
  }
  return n;
}

int gc_poll(gc_conn *conn, int64_t timeout_ms, gc_completion *done, size_t max) {
  int64_t deadline = gc__deadline(timeout_ms);
  for (;;) {
    int rc = gc__io_progress(conn);
    if (conn->done_head != NULL || max == 0) return (int)reap(conn, done, max);
    if (rc != 0) return gc__conn_fail(conn, &conn->broken_error);
    if (deadline >= 0 && gc__now_ms() >= deadline) return 0;
    if (gc__io_wait(conn, deadline) == 0) return 0;
  }
}

static void sendq_unlink(gc_conn *conn, gc__request *r) {
  gc__request *prev = NULL;
  for (gc__request *it = conn->send_head; it != NULL; prev = it, it = it->send_next) {
    if (it != r) continue;
    if (prev) prev->send_next = r->send_next;
    else conn->send_head = r->send_next;
    if (conn->send_tail == r) conn->send_tail = prev;
    conn->send_count--;
    r->in_sendq = false;
    return;
  }
}

int gc_cancel(gc_conn *conn, gc_req req) {
  gc__request *r = find_live(conn, req);
  if (r == NULL) return gc__conn_failf(conn, GC_E_NOT_FOUND, "request %u is not in flight", req);
  if (r->state == GC__ST_DONE) { /* finished already: just forget it */
    gc__request_reported(conn, r);
    return 0;
  }
  r->out = NULL;
  if (r->in_sendq && r->sent == 0) {
    /* nothing of it went out: the daemon never hears of it */
    sendq_unlink(conn, r);
    gc__reqtab_del(&conn->table, r->msgid);
    r->in_table = false;
    gc__request_release(r);
    return 0;
  }
  r->abandoned = true;
  conn->abandoned_count++;
  if (r->in_sendq) r->zero_fill = true;
  return 0;
}

int gc_progress(const gc_conn *conn, gc_req req, uint64_t *sent, uint64_t *send_total,
                uint64_t *received, uint64_t *receive_total) {
  const gc__request *r = find_live(conn, req);
  if (r == NULL) return GC_E_NOT_FOUND;
  if (sent) *sent = r->sent;
  if (send_total) *send_total = r->send_total;
  if (received) *received = r->received;
  if (receive_total) *receive_total = r->out_bytes;
  return 0;
}
