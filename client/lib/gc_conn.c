/*
 * gc_conn.c - connections and the asynchronous calls on them: connect,
 * close, wait, poll, cancel, progress. Above the link (gc_link.c); the calls
 * and the API files build on it.
 */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
  defaults.max_retries = GC_DEFAULT_MAX_RETRIES;
  defaults.scratch = 1;
  defaults.scratch_min_bytes = GC_DEFAULT_SCRATCH_MIN_BYTES;
  defaults.scratch_max_bytes = GC_DEFAULT_SCRATCH_MAX_BYTES;
  memcpy(opts, &defaults, struct_size < sizeof defaults ? struct_size : sizeof defaults);
  if (struct_size >= sizeof(size_t)) opts->struct_size = struct_size;
}

#define MAX_RETRIES_LIMIT 100

static const char *default_address(void) {
  const char *env = getenv("GEMMD_ADDRESS");
  return env != NULL && env[0] != '\0' ? env : GC_DEFAULT_ADDRESS;
}

static void conn_free(gc_conn *conn) {
  gp_decoder_free(conn->decoder);
  free(conn->rbuf);
  free(conn->addrs);
  free(conn->token);
  free(conn);
}

/* A connection with no socket yet (gc__link_open makes one). */
static gc_conn *conn_new(const gc_connect_opts *opts) {
  gc_conn *conn = calloc(1, sizeof *conn);
  if (conn == NULL) return NULL;
  conn->fd = -1;
  conn->broken = true;
  conn->next_msgid = 1;
  gc__reqtab_init(&conn->table);
  gp_limits_default(&conn->limits);
  conn->limits.max_message_bytes = opts->max_reply_bytes;
  /* poll() takes an int: a longer limit (over 24 days) waits that long */
  conn->connect_ms = opts->connect_timeout_ms > INT_MAX ? INT_MAX : (int)opts->connect_timeout_ms;
  conn->max_retries = (unsigned)opts->max_retries;
  conn->scratch_on = opts->scratch != 0;
  conn->scratch_min = opts->scratch_min_bytes;
  conn->scratch_max = opts->scratch_max_bytes;
  conn->rbuf = malloc(GC__READ_BUF_BYTES);
  if (conn->rbuf == NULL) {
    free(conn);
    return NULL;
  }
  return conn;
}

/* The caller's options over the defaults, checked. 0, or a code with err filled. */
static int settle_opts(const gc_connect_opts *in, gc_connect_opts *opts, gc_error *err) {
  gc_connect_opts_init(opts);
  if (in != NULL) {
    if (in->struct_size < CONNECT_OPTS_V1_SIZE)
      return gc__error_set(err, GC_E_INVALID_ARGUMENT,
                           "connect options not set up with gc_connect_opts_init");
    memcpy(opts, in, in->struct_size < sizeof *opts ? in->struct_size : sizeof *opts);
  }
  if (opts->connect_timeout_ms < 0 || opts->max_reply_bytes < 64)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT,
                         "connect_timeout_ms must be >= 0 and max_reply_bytes >= 64");
  if (opts->max_retries < 0 || opts->max_retries > MAX_RETRIES_LIMIT)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "max_retries must be 0..%d",
                         MAX_RETRIES_LIMIT);
  return 0;
}

int gc_connect_with(const char *addr, const gc_connect_opts *opts_in, gc_conn **out) {
  gc_error *err = gc__thread_error();
  *out = NULL;
  gc_connect_opts opts;
  int rc = settle_opts(opts_in, &opts, err);
  if (rc != 0) return rc;
  gp_addr *addrs;
  size_t count;
  rc = gc__addrlist_parse(addr != NULL ? addr : default_address(), &addrs, &count, err);
  if (rc != 0) return rc;
  char *token;
  rc = gc__token_resolve(opts.token, opts.token_file, &token, err);
  if (rc != 0) {
    free(addrs);
    return rc;
  }
  gc_conn *conn = conn_new(&opts);
  if (conn == NULL) {
    free(addrs);
    free(token);
    return gc__error_set(err, GC_E_RESOURCE_EXHAUSTED, "out of memory for a connection");
  }
  conn->addrs = addrs;
  conn->addr_count = count;
  conn->addr_next = gc__addrlist_first(count);
  conn->token = token;
  rc = gc__link_open(conn);
  if (rc != 0) {
    *err = conn->broken_error;
    conn_free(conn);
    return rc;
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

/* Unmaps every shared-memory buffer of conn (its list goes with it). */
static void shm_free_all(gc_conn *conn) {
  while (conn->shm != NULL) {
    gc__shm *s = conn->shm;
    conn->shm = s->next;
    if (!s->device)
      munmap(s->base, s->size);
    free(s);
  }
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
  shm_free_all(conn);
  conn_free(conn);
}

int gc_fd(const gc_conn *conn) { return conn->fd; }

size_t gc_in_flight(const gc_conn *conn) { return conn->table.count - conn->abandoned_count; }

size_t gc_pending_sends(const gc_conn *conn) {
  return gc__io_may_send(conn) ? conn->send_count : 0; /* POLLOUT would only spin */
}

int64_t gc__deadline(int64_t timeout_ms) {
  return timeout_ms < 0 ? -1 : gc__now_ms() + timeout_ms;
}

int gc__drive_until_done(gc_conn *conn, gc__request *r, int64_t deadline_ms) {
  for (;;) {
    (void)gc__link_progress(conn); /* a broken connection finishes r with its error */
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
    int rc = gc__link_progress(conn);
    if (conn->done_head != NULL || max == 0) return (int)reap(conn, done, max);
    if (rc != 0) return gc__conn_fail(conn, &conn->broken_error);
    if (deadline >= 0 && gc__now_ms() >= deadline) return 0;
    if (gc__io_wait(conn, deadline) == 0) return 0;
  }
}

static void sendq_unlink(gc_conn *conn, gc__request *r) {
  if (!gc__list_unlink(&conn->send_head, &conn->send_tail, r)) return;
  conn->send_count--;
  r->in_sendq = false;
}

int gc_cancel(gc_conn *conn, gc_req req) {
  gc__request *r = find_live(conn, req);
  if (r == NULL) return gc__conn_failf(conn, GC_E_NOT_FOUND, "request %u is not in flight", req);
  if (r->state == GC__ST_DONE) { /* finished already: just forget it */
    gc__request_reported(conn, r);
    return 0;
  }
  r->out = NULL;
  if (r->state == GC__ST_PARKED || (r->in_sendq && r->sent == 0 && !r->retry_pending)) {
    /* nothing of it is on a socket: the daemon never hears of it */
    if (r->state == GC__ST_PARKED) gc__request_unpark(conn, r);
    else sendq_unlink(conn, r);
    gc__request_wire_leave(conn, r);
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
