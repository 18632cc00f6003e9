/*
 * gc_call.c - the small calls: ping, info and stats (and shm_register /
 * shm_unregister for gc_shm.c). Their results are kept as packed msgpack and
 * handed to the caller as a buffer.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "gc_internal.h"

/* Sends r (its request encoded in r->head, or rc the encoder's failure) and waits for the
 * reply; see gc__call. */
static int call_run(gc_conn *conn, gc__request *r, int rc, int64_t timeout_ms,
                    msgpack_sbuffer *packed) {
  gp_method method = r->method;
  if (rc != 0) {
    gc__request_release(r);
    return gc__conn_failf(conn, rc, "encoding the %s request", gp_method_name(method));
  }
  r->iov[0].iov_base = r->head.data;
  r->iov[0].iov_len = r->head.size;
  r->iovcnt = 1;
  r->send_total = r->head.size;
  return gc__call_run(conn, r, timeout_ms, packed);
}

int gc__call_run(gc_conn *conn, gc__request *r, int64_t timeout_ms, msgpack_sbuffer *packed) {
  gp_method method = r->method;
  gc_req req = r->msgid;
  int rc;
  rc = gc__link_start(conn, r);
  if (rc != 0) return rc;
  if (gc__drive_until_done(conn, r, gc__deadline(timeout_ms)) != 0) {
    gc_cancel(conn, req);
    return gc__conn_failf(conn, GC_E_DEADLINE_EXCEEDED, "no reply to %s within %lld ms",
                          gp_method_name(method), (long long)timeout_ms);
  }
  if (r->error.code == GC_OK && packed != NULL) {
    *packed = r->packed;
    msgpack_sbuffer_init(&r->packed);
  }
  return gc_wait(conn, req, 0, NULL);
}

/* Sends method (with one integer argument when has_arg, and the descriptor pass_fd on the same
 * sendmsg when >= 0), waits for its reply; on success *packed (when not NULL) takes the result
 * object's msgpack bytes (caller frees). */
int gc__call(gc_conn *conn, gp_method method, bool has_arg, uint64_t arg, int pass_fd,
             int64_t timeout_ms, msgpack_sbuffer *packed) {
  gc__request *r;
  int made = gc__request_new(conn, GC__KIND_CALL, &r, &conn->last_error);
  if (made != 0) return made;
  r->method = method;
  r->pass_fd = pass_fd;
  int rc = has_arg ? gp_encode_request_u64(&r->head, r->msgid, gp_method_name(method), arg)
                   : gp_encode_request(&r->head, r->msgid, gp_method_name(method));
  return call_run(conn, r, rc, timeout_ms, packed);
}

int gc__call_cuda_register(gc_conn *conn, const gp_cuda_reg *reg, int64_t timeout_ms,
                           msgpack_sbuffer *packed) {
  gc__request *r;
  int made = gc__request_new(conn, GC__KIND_CALL, &r, &conn->last_error);
  if (made != 0) return made;
  r->method = GP_METHOD_CUDA_REGISTER;
  r->pass_fd = -1;
  return call_run(conn, r, gp_encode_cuda_register(&r->head, r->msgid, reg), timeout_ms,
                  packed);
}

int gc_ping(gc_conn *conn, int64_t timeout_ms) {
  msgpack_sbuffer packed;
  msgpack_sbuffer_init(&packed);
  int rc = gc__call(conn, GP_METHOD_PING, false, 0, -1, timeout_ms, &packed);
  static const char pong[] = "\xa4pong"; /* msgpack fixstr "pong" */
  if (rc == 0 && (packed.size != sizeof pong - 1 || memcmp(packed.data, pong, packed.size) != 0))
    rc = gc__conn_failf(conn, GC_E_INTERNAL, "ping answered with something other than \"pong\"");
  msgpack_sbuffer_destroy(&packed);
  return rc;
}

static int map_call(gc_conn *conn, gp_method method, int64_t timeout_ms, void **buf, size_t *len) {
  msgpack_sbuffer packed;
  msgpack_sbuffer_init(&packed);
  if (buf) *buf = NULL;
  if (len) *len = 0;
  int rc = gc__call(conn, method, false, 0, -1, timeout_ms, &packed);
  if (rc != 0) {
    msgpack_sbuffer_destroy(&packed);
    return rc;
  }
  if (len) *len = packed.size;
  if (buf) *buf = msgpack_sbuffer_release(&packed);
  msgpack_sbuffer_destroy(&packed);
  return 0;
}

int gc_info(gc_conn *conn, int64_t timeout_ms, void **buf, size_t *len) {
  return map_call(conn, GP_METHOD_INFO, timeout_ms, buf, len);
}

int gc_stats(gc_conn *conn, int64_t timeout_ms, void **buf, size_t *len) {
  return map_call(conn, GP_METHOD_STATS, timeout_ms, buf, len);
}

void gc_free(void *buf) { free(buf); }
