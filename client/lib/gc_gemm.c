/*
 * gc_gemm.c - gemm requests: the options struct, checking it, building the
 * request (a small head plus the caller's buffers as iovecs, or references to
 * them where they lie in shared memory), and the plain blocking gemm built on
 * gc_submit + gc_wait (gc__gemm_plain; gc_gemm itself is gc_scratch.c's, which
 * chooses between it and the staged paths).
 */
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "gc_internal.h"

_Static_assert((int)GC_DTYPE_F32 == (int)GP_DTYPE_F32 && (int)GC_DTYPE_F64 == (int)GP_DTYPE_F64 &&
                   (int)GC_DTYPE_F16 == (int)GP_DTYPE_F16 &&
                   (int)GC_DTYPE_BF16 == (int)GP_DTYPE_BF16 &&
                   (int)GC_DTYPE_I8 == (int)GP_DTYPE_I8 && (int)GC_DTYPE_I32 == (int)GP_DTYPE_I32 &&
                   (int)GC_DTYPE_E4M3 == (int)GP_DTYPE_E4M3 &&
                   (int)GC_DTYPE_E5M2 == (int)GP_DTYPE_E5M2 &&
                   (int)GC_DTYPE_C64 == (int)GP_DTYPE_C64 &&
                   (int)GC_DTYPE_C128 == (int)GP_DTYPE_C128,
               "gc_dtype must mirror gp_dtype");
_Static_assert(GP_DTYPE_COUNT == GC_DTYPE_C128 + 1, "every gp_dtype has its gc_dtype");
_Static_assert((int)GC_DTYPE_DEFAULT < 0, "GC_DTYPE_DEFAULT is no gp_dtype");

void gc_gemm_opts_init_sized(gc_gemm_opts *opts, size_t struct_size) {
  gc_gemm_opts defaults;
  memset(&defaults, 0, sizeof defaults);
  defaults.dtype = GC_DTYPE_F32;
  defaults.alpha = 1.0;
  defaults.beta = 0.0;
  defaults.batch = 1;
  defaults.precision = GC_PRECISION_EXACT;
  defaults.timeout_ms = -1;
  defaults.out_dtype = GC_DTYPE_DEFAULT;
  defaults.scale_a = 1.0;
  defaults.scale_b = 1.0;
  size_t n = struct_size < sizeof defaults ? struct_size : sizeof defaults;
  memcpy(opts, &defaults, n);
  if (struct_size >= sizeof(size_t)) opts->struct_size = struct_size;
}

/* out_dtype (1.4): GC_DTYPE_DEFAULT or a gc_dtype the gemm's dtype may be cast to (an i8
 * gemm's only result, i32, included; an fp8 gemm's f32, or f16 / bf16 from it). */
static int check_out_dtype(const gc_gemm_opts *o, gc_error *err) {
  if (o->out_dtype == GC_DTYPE_DEFAULT) return 0;
  if ((unsigned)o->out_dtype >= GP_DTYPE_COUNT)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT,
                         "out_dtype %d is not a gc_dtype (nor GC_DTYPE_DEFAULT)",
                         (int)o->out_dtype);
  if (!gp_dtype_cast_ok((gp_dtype)o->dtype, (gp_dtype)o->out_dtype))
    return gc__error_set(err, GC_E_INVALID_ARGUMENT,
                         "out_dtype: a %s gemm cannot return %s (an f32, f64, e4m3 or e5m2 "
                         "gemm's result may be cast to f16 or bf16; an i8 gemm returns i32)",
                         gp_dtype_name((gp_dtype)o->dtype), gp_dtype_name((gp_dtype)o->out_dtype));
  return 0;
}

/* Copies the caller's opts (whatever version of the struct it has) over the defaults and
 * translates them into a wire header. */
static int opts_to_hdr(const gc_gemm_opts *in, gp_gemm_hdr *hdr, int64_t *timeout_ms,
                       void **user, uint64_t handles[3], gc_error *err) {
  if (in == NULL || in->struct_size < GC__GEMM_OPTS_V1_SIZE)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT,
                         "gemm options not set up with gc_gemm_opts_init");
  gc_gemm_opts o;
  gc_gemm_opts_init(&o);
  memcpy(&o, in, in->struct_size < sizeof o ? in->struct_size : sizeof o);
  if ((unsigned)o.dtype >= GP_DTYPE_COUNT)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "dtype %d is not a gc_dtype", (int)o.dtype);
  /* refused here, not only by gc_submit's checks, so that gc_gemm_operand_bytes gives 0 */
  if (o.dtype == GC_DTYPE_I32)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT,
                         "dtype: GC_DTYPE_I32 is a result dtype only (an I8 gemm returns it)");
  if (o.precision != GC_PRECISION_EXACT && o.precision != GC_PRECISION_FAST)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "precision %d is not a gc_precision",
                         (int)o.precision);
  if ((unsigned)o.activation >= GP_ACT_COUNT)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "activation %d is not a gc_activation",
                         (int)o.activation);
  int rc = check_out_dtype(&o, err);
  if (rc != 0) return rc;
  gp_gemm_hdr_init(hdr);
  hdr->m = o.m;
  hdr->n = o.n;
  hdr->k = o.k;
  hdr->dtype = (gp_dtype)o.dtype;
  hdr->trans_a = o.trans_a != 0;
  hdr->trans_b = o.trans_b != 0;
  hdr->alpha = o.alpha;
  hdr->beta = o.beta;
  hdr->batch = o.batch;
  hdr->precision = (gp_precision)o.precision;
  hdr->has_timeout = o.timeout_ms >= 0;
  hdr->timeout_ms = o.timeout_ms >= 0 ? (uint64_t)o.timeout_ms : 0;
  hdr->broadcast_b = o.broadcast_b != 0;
  hdr->bias = o.bias != 0;
  hdr->activation = (gp_act)o.activation;
  /* the result dtype uncast (i32 for i8) is no cast: nothing to send */
  hdr->has_out_dtype = o.out_dtype != GC_DTYPE_DEFAULT &&
                       (gp_dtype)o.out_dtype != gp_dtype_result(hdr->dtype);
  hdr->out_dtype = hdr->has_out_dtype ? (gp_dtype)o.out_dtype : gp_dtype_result(hdr->dtype);
  /* 1.6: sent only when not 1 (gp_encode); gc_submit's validation refuses them on a non-fp8
   * gemm and when not finite */
  hdr->scale_a = o.scale_a;
  hdr->scale_b = o.scale_b;
  /* 1.7: the complex keys, sent only when set (the daemon refuses them on a real dtype) */
  hdr->alpha_im = o.alpha_im;
  hdr->beta_im = o.beta_im;
  hdr->conj_a = o.conj_a != 0;
  hdr->conj_b = o.conj_b != 0;
  *timeout_ms = o.timeout_ms;
  *user = o.user;
  handles[GP_OPERAND_A] = o.a_handle;
  handles[GP_OPERAND_B] = o.b_handle;
  handles[GP_OPERAND_C] = o.c_handle;
  return 0;
}

uint64_t gc_gemm_operand_bytes(const gc_gemm_opts *opts, char operand) {
  gp_gemm_hdr hdr;
  int64_t timeout;
  gc_error err;
  void *user = NULL;
  uint64_t handles[3] = {0, 0, 0};
  if (opts_to_hdr(opts, &hdr, &timeout, &user, handles, &err) != 0) return 0;
  gp_operand op = operand == 'a' ? GP_OPERAND_A : operand == 'b' ? GP_OPERAND_B : GP_OPERAND_C;
  uint64_t bytes;
  if (operand == 'o') return gp_gemm_result_bytes(&hdr, &bytes) ? bytes : 0;
  if (operand != 'a' && operand != 'b' && operand != 'c') return 0;
  return gp_gemm_operand_bytes(&hdr, op, &bytes) ? bytes : 0;
}

/* 1.7: the leading dimensions are 0 or the rows' lengths (gc_submit sends packed operands). */
static bool lds_packed(const gc_gemm_opts *in) {
  if (in->struct_size < offsetof(gc_gemm_opts, ldc) + sizeof in->ldc) return true;
  uint64_t a_cols = in->trans_a ? in->m : in->k, b_cols = in->trans_b ? in->k : in->n;
  return (in->lda == 0 || in->lda == a_cols) && (in->ldb == 0 || in->ldb == b_cols) &&
         (in->ldc == 0 || in->ldc == in->n);
}

static void add_iov(gc__request *r, const void *base, uint64_t len, bool caller) {
  r->iov[r->iovcnt].iov_base = (void *)base;
  r->iov[r->iovcnt].iov_len = (size_t)len;
  r->iov_caller[r->iovcnt] = caller;
  r->iovcnt++;
  r->send_total += len;
}

/* An operand: a handle when it has one, a reference when it lies in a shared-memory buffer,
 * else its bin header and its bytes (which stay in the caller's memory). */
static void add_operand(gc_conn *conn, gc__request *r, gp_operand op, const void *p,
                        uint64_t bytes, uint64_t handle) {
  uint8_t *piece = r->op_hdr[op];
  uint64_t region, offset;
  if (handle != 0) {
    r->uses_shm = true; /* bound to this connection */
    add_iov(r, piece, gp_encode_handle_ref(piece, handle), false);
    return;
  }
  if (gc__shm_find(conn, p, bytes, &region, &offset)) {
    r->uses_shm = true;
    add_iov(r, piece, gp_encode_shm_ref(piece, region, offset), false);
    return;
  }
  add_iov(r, piece, gp_encode_bin_header(piece, bytes), false);
  add_iov(r, p, bytes, true);
}

/* Head, then each operand; the result goes into a shared-memory buffer when out lies in one. */
static int build_gemm(gc_conn *conn, gc__request *r, gp_gemm_hdr *hdr, const void *a,
                      const void *b, const void *c, const void *out, const uint64_t handles[3]) {
  bool has_c = c != NULL || handles[GP_OPERAND_C] != 0;
  uint64_t bytes[3], result_bytes = 0;
  for (gp_operand op = GP_OPERAND_A; op <= GP_OPERAND_C; op++)
    gp_gemm_operand_bytes(hdr, op, &bytes[op]);
  gp_gemm_result_bytes(hdr, &result_bytes);
  hdr->has_out = gc__shm_find(conn, out, result_bytes, &hdr->out_region, &hdr->out_offset);
  int rc = gp_encode_gemm_request_hdr(&r->head, r->msgid, hdr, has_c);
  if (rc != 0) return rc;
  add_iov(r, r->head.data, r->head.size, false);
  add_operand(conn, r, GP_OPERAND_A, a, bytes[GP_OPERAND_A], handles[GP_OPERAND_A]);
  add_operand(conn, r, GP_OPERAND_B, b, bytes[GP_OPERAND_B], handles[GP_OPERAND_B]);
  if (has_c) add_operand(conn, r, GP_OPERAND_C, c, bytes[GP_OPERAND_C], handles[GP_OPERAND_C]);
  r->expect = *hdr;
  r->out_bytes = result_bytes;
  r->out_in_shm = hdr->has_out;
  r->uses_shm |= hdr->has_out;
  return 0;
}

int gc_submit(gc_conn *conn, const gc_gemm_opts *opts, const void *a, const void *b,
              const void *c, void *out, gc_req *req) {
  gp_gemm_hdr hdr;
  int64_t timeout_ms;
  void *user = NULL;
  gc_error err;
  uint64_t handles[3] = {0, 0, 0};
  if (req != NULL) *req = 0;
  if (opts_to_hdr(opts, &hdr, &timeout_ms, &user, handles, &err) != 0)
    return gc__conn_fail(conn, &err);
  if (!lds_packed(opts))
    return gc__conn_failf(conn, GC_E_INVALID_ARGUMENT,
                          "lda, ldb, ldc other than packed need the blocking gc_gemm");
  if ((a == NULL && handles[GP_OPERAND_A] == 0) || (b == NULL && handles[GP_OPERAND_B] == 0) ||
      out == NULL || req == NULL)
    return gc__conn_failf(conn, GC_E_INVALID_ARGUMENT,
                          "gemm needs a and b (or their handles), out and req");
  bool has_c = c != NULL || handles[GP_OPERAND_C] != 0;
  /* Requests are checked against the protocol's own limits (what any daemon could accept);
   * the daemon applies its configured ones. conn->limits is for replies. */
  gp_limits request_limits;
  gp_limits_default(&request_limits);
  gp_error perr;
  gp_error_clear(&perr);
  if (gp_gemm_hdr_validate(&hdr, has_c, &request_limits, &perr) != 0)
    return gc__conn_failf(conn, perr.code, "%s", perr.message);
  gc__request *r;
  int made = gc__request_new(conn, GC__KIND_GEMM, &r, &conn->last_error);
  if (made != 0) return made;
  r->method = GP_METHOD_GEMM;
  int rc = build_gemm(conn, r, &hdr, a, b, c, out, handles);
  if (rc != 0) {
    gc__request_release(r);
    return gc__conn_failf(conn, rc, "encoding the gemm request: %s", gp_strerror(rc));
  }
  r->out = out;
  r->user = user;
  *req = r->msgid;
  rc = gc__link_start(conn, r);
  if (rc != 0) *req = 0;
  return rc;
}

int gc__gemm_plain(gc_conn *conn, const gc_gemm_opts *opts, const void *a, const void *b,
                   const void *c, void *out, gc_gemm_result *result) {
  gc_req req;
  int rc = gc_submit(conn, opts, a, b, c, out, &req);
  if (rc != 0) return rc;
  int64_t wait_ms = opts->timeout_ms < 0 ? -1 : opts->timeout_ms;
  rc = gc_wait(conn, req, wait_ms, result);
  /* Still in flight: the client-side limit struck (the daemon's own DEADLINE_EXCEEDED
   * reply has already been reported). Let go of the caller's buffers before returning. */
  if (rc == GC_E_DEADLINE_EXCEEDED && gc__reqtab_get(&conn->table, req) != NULL) {
    gc_cancel(conn, req);
    gc__conn_failf(conn, GC_E_DEADLINE_EXCEEDED, "gemm not complete after %lld ms (client side)",
                   (long long)wait_ms);
  }
  return rc;
}
