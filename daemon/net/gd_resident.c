/*
 * gd_resident.c - a connection's resident operands (see gd_resident.h).
 */
#include "gd_resident.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "gd_array.h"
#include "gd_stats.h"
#include "gp_encode.h"

void gd_resident_attach(gd_resident *t, gd_resident_totals *totals, gd_sched *sched) {
  memset(t, 0, sizeof *t);
  t->totals = totals;
  t->sched = sched;
}

/* Gives back what op holds (it was counted in t->bytes and the totals' bytes); a backend
 * holding the buffer too lets it go when it sees it freed. */
static void drop_bytes(gd_resident *t, gd_resident_op *op) {
  assert(t->bytes >= op->bytes && t->totals->bytes >= op->bytes);
  atomic_store_explicit(&op->buf->freed, true, memory_order_release);
  gd_resident_buf_unref(op->buf);
  op->buf = NULL;
  t->bytes -= op->bytes;
  t->totals->bytes -= op->bytes;
  gd_netsched_unreserve(t->sched, op->bytes);
}

static void drop(gd_resident *t, uint32_t i) {
  drop_bytes(t, &t->ops[i]);
  gd_netsched_resident_freed(t->sched); /* a backend's copies of it go too */
  assert(t->totals->handles > 0);
  t->totals->handles--;
  t->ops[i] = t->ops[--t->count];
}

void gd_resident_free(gd_resident *t) {
  if (!t->totals)
    return; /* never attached */
  gd_resident_abort(t);
  while (t->count > 0)
    drop(t, t->count - 1);
  free(t->ops);
  t->ops = NULL;
  t->cap = 0;
}

/* more bytes on top of used stay within max (max may have shrunk below used on SIGHUP). */
static bool over(uint64_t used, uint64_t more, uint64_t max) {
  return used > max || more > max - used;
}

static int check_quota(const gd_resident *t, const gd_resident_limits *lim, uint64_t bytes,
                       gp_error *err) {
  if (t->count >= lim->max_handles_per_connection)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "put: %u handles already held (resident.max_handles_per_connection)",
                        (unsigned)t->count);
  if (over(t->bytes, bytes, lim->max_bytes_per_connection))
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "put: %llu more bytes are over resident.max_bytes_per_connection (%llu, "
                        "%llu held)", (unsigned long long)bytes,
                        (unsigned long long)lim->max_bytes_per_connection,
                        (unsigned long long)t->bytes);
  if (over(t->totals->bytes, bytes, lim->max_bytes_total))
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "put: %llu more bytes are over resident.max_bytes_total (%llu)",
                        (unsigned long long)bytes, (unsigned long long)lim->max_bytes_total);
  return 0;
}

int gd_resident_begin(gd_resident *t, const gd_resident_limits *lim, const gp_put_hdr *hdr,
                      gp_error *err) {
  uint64_t bytes;
  assert(!t->receiving);
  if (!gp_put_bytes(hdr, &bytes) || bytes > SIZE_MAX) /* validated by the decoder */
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "put: the data size overflows");
  int rc = check_quota(t, lim, bytes, err);
  if (rc == 0)
    rc = gd_netsched_reserve(t->sched, bytes, err);
  if (rc != 0)
    return rc;
  gd_resident_buf *data = gd_resident_buf_new(bytes);
  if (!data) {
    gd_netsched_unreserve(t->sched, bytes);
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "put: out of memory for %llu bytes",
                        (unsigned long long)bytes);
  }
  t->pending = (gd_resident_op){0, *hdr, bytes, data};
  t->receiving = true;
  t->bytes += bytes;
  t->totals->bytes += bytes;
  return 0;
}

void gd_resident_data(gd_resident *t, uint64_t offset, const void *data, size_t len) {
  assert(t->receiving && offset <= t->pending.bytes && len <= t->pending.bytes - offset);
  memcpy(t->pending.buf->data + offset, data, len);
}

int gd_resident_commit(gd_resident *t, uint64_t *handle, gp_error *err) {
  assert(t->receiving);
  if (t->count == t->cap) {
    gd_resident_op *grown = gd_array_grow(t->ops, &t->cap, sizeof *grown, 4);
    if (!grown) {
      gd_resident_abort(t);
      return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "put: out of memory");
    }
    t->ops = grown;
  }
  t->receiving = false;
  t->pending.handle = ++t->totals->last_handle;
  t->pending.buf->id = t->pending.handle;
  t->ops[t->count++] = t->pending;
  t->totals->handles++;
  t->totals->put_total++;
  *handle = t->pending.handle;
  return 0;
}

void gd_resident_abort(gd_resident *t) {
  if (!t->receiving)
    return;
  t->receiving = false;
  drop_bytes(t, &t->pending);
}

static int find(const gd_resident *t, uint64_t handle) {
  for (uint32_t i = 0; i < t->count; i++)
    if (t->ops[i].handle == handle)
      return (int)i;
  return -1;
}

int gd_resident_release(gd_resident *t, uint64_t handle, gp_error *err) {
  int i = find(t, handle);
  if (i < 0)
    return gp_error_set(err, GP_E_NOT_FOUND, "free: handle %llu is not held by this connection",
                        (unsigned long long)handle);
  drop(t, (uint32_t)i);
  return 0;
}

int gd_resident_operand(const gd_resident *t, uint64_t handle, const gp_gemm_hdr *hdr,
                        gp_operand op, gd_resident_buf **buf, gp_error *err) {
  const char *what = gp_operand_name(op);
  int i = find(t, handle);
  if (i < 0)
    return gp_error_set(err, GP_E_NOT_FOUND, "%s: handle %llu is not held by this connection",
                        what, (unsigned long long)handle);
  const gd_resident_op *r = &t->ops[i];
  uint64_t rows, cols;
  gp_gemm_operand_shape(hdr, op, &rows, &cols);
  uint64_t batch = gp_gemm_operand_batch(hdr, op);
  const gp_dtype dtype = op == GP_OPERAND_C ? gp_gemm_out_dtype(hdr) : hdr->dtype;
  if (r->hdr.dtype != dtype || r->hdr.rows != rows || r->hdr.cols != cols ||
      r->hdr.batch != batch)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "%s: handle %llu holds %llu x %llu x %llu %s, the gemm needs %llu x %llu "
                        "x %llu %s (batch x rows x cols as stored)%s", what,
                        (unsigned long long)handle, (unsigned long long)r->hdr.batch,
                        (unsigned long long)r->hdr.rows, (unsigned long long)r->hdr.cols,
                        gp_dtype_name(r->hdr.dtype), (unsigned long long)batch,
                        (unsigned long long)rows, (unsigned long long)cols, gp_dtype_name(dtype),
                        op == GP_OPERAND_B && r->hdr.batch == 1 && batch > 1
                            ? "; set broadcast_b to use one B for every batch entry"
                            : "");
  *buf = r->buf;
  return 0;
}

int gd_resident_pack_put(msgpack_sbuffer *out, uint32_t msgid, uint64_t handle) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  if (gp_pack_response_head(&pk, msgid) != 0 || msgpack_pack_map(&pk, 1) != 0)
    return -1;
  gd_pack_kv_u64(&pk, "handle", handle);
  return 0;
}

int gd_resident_pack_free(msgpack_sbuffer *out, uint32_t msgid) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  return gp_pack_response_head(&pk, msgid) != 0 || msgpack_pack_nil(&pk) != 0 ? -1 : 0;
}
