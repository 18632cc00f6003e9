/*
 * gd_shm_calls.c - shared memory as the protocol layer uses it (see gd_shm_calls.h).
 */
#include "gd_shm_calls.h"

#include <string.h>

#include "gd_cuda_ipc.h"
#include "gd_stats.h"
#include "gp_encode.h"

/* Bytes handed to the backend at a time when it lends no window (GPU without a free staging
 * buffer): it then copies them aside, so keep that bounded. */
#define FEED_SPILL_BYTES (1u << 20)

static bool in_use(const gd_calls *calls, uint64_t id) {
  for (const gd_call *c = calls->head; c; c = c->next)
    if (!c->orphan && c->shm_out && c->out_region == id)
      return true;
  return false;
}

static int pack_register_reply(msgpack_sbuffer *out, uint32_t msgid, uint64_t id,
                               uint64_t size) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  if (gp_pack_response_head(&pk, msgid) != 0 || msgpack_pack_map(&pk, 2) != 0)
    return -1;
  gd_pack_kv_u64(&pk, "region", id);
  gd_pack_kv_u64(&pk, "size", size);
  return 0;
}

static int pack_nil_reply(msgpack_sbuffer *out, uint32_t msgid) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  return gp_pack_response_head(&pk, msgid) != 0 || msgpack_pack_nil(&pk) != 0 ? -1 : 0;
}

int gd_shm_calls_method(gd_shm *t, const gd_shm_limits *lim, const gd_calls *calls,
                        uint32_t msgid, gp_method method, uint64_t arg, msgpack_sbuffer *out,
                        gp_error *err) {
  int rc;
  if (method == GP_METHOD_SHM_REGISTER) {
    uint64_t id;
    if ((rc = gd_shm_register(t, lim, arg, &id, err)) != 0)
      return rc;
    if (pack_register_reply(out, msgid, id, arg) != 0)
      return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory building the reply");
    return 0;
  }
  if (in_use(calls, arg))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "region %llu is in use: a gemm in flight writes its result there",
                        (unsigned long long)arg);
  if ((rc = gd_shm_unregister(t, arg, err)) != 0)
    return rc;
  if (pack_nil_reply(out, msgid) != 0)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory building the reply");
  return 0;
}

int gd_shm_calls_cuda(gd_shm *t, const gd_shm_limits *lim, uint32_t msgid,
                      const gp_cuda_reg *reg, msgpack_sbuffer *out, gp_error *err) {
  uint64_t id;
  int rc = gd_cuda_ipc_register(t, lim, reg, &id, err);
  if (rc != 0)
    return rc;
  if (pack_register_reply(out, msgid, id, reg->bytes) != 0)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory building the reply");
  return 0;
}

static int need_shm(const gd_shm *t, gp_error *err) {
  if (t->totals)
    return 0;
  return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                      "shared memory needs a Unix socket connection (and shm.enabled)");
}

int gd_shm_calls_check_out(const gd_shm *t, const gp_gemm_hdr *hdr, gp_error *err) {
  uint64_t bytes;
  uint8_t *ptr;
  int rc = need_shm(t, err);
  if (rc != 0)
    return rc;
  if (!gp_gemm_result_bytes(hdr, &bytes)) /* validated: cannot happen */
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "out: the result size overflows");
  /* with ldc the backend must write the rows where they lie (a copy of the whole strided
   * extent would write between them): whole elements, so an aligned place */
  size_t elem = gp_dtype_size(gp_gemm_out_dtype(hdr));
  if (hdr->ld[GP_OPERAND_C] != 0 && hdr->out_offset % elem != 0)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "out: with ldc, offset %llu must be a multiple of the element size %zu",
                        (unsigned long long)hdr->out_offset, elem);
  return gd_shm_range(t, hdr->out_region, hdr->out_offset, bytes, "out", &ptr, err);
}

int gd_shm_calls_ref(const gd_shm *t, const gd_call *call, const gp_event *ev,
                     gd_shm_feed *feed, gp_error *err) {
  const char *what = gp_operand_name(ev->operand);
  uint64_t len = call->job->operand_bytes[ev->operand];
  uint8_t *src;
  int rc = need_shm(t, err);
  if (rc == 0)
    rc = gd_shm_range(t, ev->region, ev->offset, len, what, &src, err);
  if (rc != 0)
    return rc;
  /* c at the result's own place, with ldc: C updated in place (the decoder allows no other c) */
  bool c_in_place = ev->operand == GP_OPERAND_C && call->job->hdr.ld[GP_OPERAND_C] != 0;
  if (!c_in_place && call->shm_out && call->out_region == ev->region &&
      gd_shm_overlap(ev->offset, len, call->out_offset, call->job->result_bytes))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "%s: bytes %llu..%llu of region %llu overlap the output", what,
                        (unsigned long long)ev->offset, (unsigned long long)(ev->offset + len),
                        (unsigned long long)ev->region);
  gd_region *r = gd_shm_find(t, ev->region);
  if (r->kind == GD_REGION_DEVICE) {
    *feed = (gd_shm_feed){ev->operand, NULL, len, 0}; /* the backend reads it, or refused */
    return gd_cuda_ipc_ref(t->sched, call->job, ev->operand, r, ev->region, ev->offset, err);
  }
  *feed = (gd_shm_feed){ev->operand, src, 0, len};
  /* In place when the backend can: it reads the mapping itself, and nothing is fed. */
  if (gd_netsched_input_mapped(t->sched, call->job, ev->operand, r, src))
    *feed = (gd_shm_feed){ev->operand, src, len, 0};
  return 0;
}

void gd_shm_calls_out_mapped(const gd_shm *t, gd_call *call) {
  uint8_t *dst;
  gp_error err;
  /* checked at admission (gd_shm_calls_check_out), and regions do not go while reading */
  if (gd_shm_range(t, call->out_region, call->out_offset, call->job->result_bytes, "out", &dst,
                   &err) != 0)
    return;
  gd_region *r = gd_shm_find(t, call->out_region);
  if (r->kind == GD_REGION_DEVICE)
    gd_cuda_ipc_out(t->sched, call->job, r, call->out_offset);
  else
    gd_netsched_output_mapped(t->sched, call->job, r, dst);
}

int gd_shm_calls_feed(gd_sched *sched, gd_call *call, gd_shm_feed *feed, bool *pause,
                      gp_error *err) {
  *pause = false;
  while (feed->left > 0 && !*pause) {
    const void *data = feed->src + feed->done;
    void *window;
    size_t len;
    if (gd_netsched_input_window(sched, call->job, feed->operand, feed->done, &window, &len) &&
        len > 0) {
      if (len > feed->left)
        len = (size_t)feed->left;
      if (window != data) /* c at the result's own place: already there */
        memcpy(window, data, len); /* the one copy, as the socket's read would have made */
      data = window;
    } else {
      len = feed->left < FEED_SPILL_BYTES ? (size_t)feed->left : FEED_SPILL_BYTES;
    }
    int rc = gd_netsched_input(sched, call->job, feed->operand, feed->done, data, len, pause, err);
    if (rc != 0)
      return rc;
    feed->done += len;
    feed->left -= len;
  }
  return 0;
}

int gd_shm_calls_output(const gd_shm *t, const gd_call *call, uint64_t offset, const void *data,
                        size_t len) {
  uint8_t *dst;
  gp_error err;
  if (gd_shm_range(t, call->out_region, call->out_offset + offset, len, "out", &dst, &err) != 0)
    return -1;
  if (!dst) /* a DEVICE region: only a backend that wrote it in place may post into it */
    return call->job->mapped[GD_JOB_OUT] ? 0 : -1;
  if (dst != data) /* else the backend wrote it in place (output_mapped) */
    memcpy(dst, data, len);
  return 0;
}

int gd_shm_calls_reply(const gd_call *call, msgpack_sbuffer *out) {
  return gp_encode_gemm_response_shm(out, call->msgid, &call->job->result, call->out_region,
                                     call->out_offset, call->job->result_bytes);
}
