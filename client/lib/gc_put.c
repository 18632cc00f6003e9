/*
 * gc_put.c - resident operands: put (the data sent from the caller's memory, the reply's
 * handle read back) and free.
 */
#include <string.h>

#include "gc_internal.h"

int gc_put(gc_conn *conn, gc_dtype dtype, uint64_t batch, uint64_t rows, uint64_t cols,
           const void *data, int64_t timeout_ms, uint64_t *handle) {
  if (handle == NULL || data == NULL)
    return gc__conn_failf(conn, GC_E_INVALID_ARGUMENT, "gc_put needs data and handle");
  *handle = 0;
  gp_put_hdr hdr = {(gp_dtype)dtype, rows, cols, batch};
  gp_limits limits;
  gp_limits_default(&limits);
  gp_error perr;
  gp_error_clear(&perr);
  uint64_t bytes;
  if (gp_put_hdr_validate(&hdr, &limits, &perr) != 0 || !gp_put_bytes(&hdr, &bytes))
    return gc__conn_failf(conn, perr.code ? perr.code : GC_E_INVALID_ARGUMENT, "put: %s",
                          perr.message);
  gc__request *r;
  int made = gc__request_new(conn, GC__KIND_CALL, &r, &conn->last_error);
  if (made != 0) return made;
  r->method = GP_METHOD_PUT;
  int rc = gp_encode_put_request_head(&r->head, r->msgid, &hdr);
  if (rc != 0) {
    gc__request_release(r);
    return gc__conn_failf(conn, rc, "encoding the put request");
  }
  r->iov[0] = (struct iovec){r->head.data, r->head.size};
  r->iov[1] = (struct iovec){(void *)data, (size_t)bytes};
  r->iov_caller[1] = true;
  r->iovcnt = 2;
  r->send_total = r->head.size + bytes;
  msgpack_sbuffer packed;
  msgpack_sbuffer_init(&packed);
  rc = gc__call_run(conn, r, timeout_ms, &packed);
  int64_t id = 0;
  if (rc == 0 && (gc_map_int(packed.data, packed.size, "handle", &id) != 0 || id <= 0))
    rc = gc__conn_failf(conn, GC_E_INTERNAL, "put answered without a handle");
  msgpack_sbuffer_destroy(&packed);
  if (rc == 0) *handle = (uint64_t)id;
  return rc;
}

int gc_put_free(gc_conn *conn, uint64_t handle, int64_t timeout_ms) {
  return gc__call(conn, GP_METHOD_FREE, true, handle, -1, timeout_ms, NULL);
}
