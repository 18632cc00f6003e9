/*
 * gd_methods.c - ping, info and stats (see gd_methods.h).
 */
#include "gd_methods.h"

#include <stdio.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_netloop.h"
#include "gd_stats.h"
#include "gp_encode.h"

#ifndef GEMMD_VERSION
#define GEMMD_VERSION "0.0.0"
#endif

#define INFO_DEVICES_MAX 64
#define INFO_KERNELS_MAX 64

static void pack_devices(gd_backend *b, msgpack_packer *pk) {
  static gd_device_info devs[INFO_DEVICES_MAX]; /* loop thread only; too big for the stack */
  size_t n = b->ops->devices ? b->ops->devices(b, devs, INFO_DEVICES_MAX) : 0;
  if (n > INFO_DEVICES_MAX)
    n = INFO_DEVICES_MAX;
  msgpack_pack_array(pk, n);
  for (size_t i = 0; i < n; i++) {
    const gd_device_info *dev = &devs[i];
    char cc[16] = "";
    if (dev->id >= 0)
      snprintf(cc, sizeof cc, "%d.%d", dev->cc_major, dev->cc_minor);
    msgpack_pack_map(pk, 6);
    gd_pack_str(pk, "id");
    msgpack_pack_int(pk, dev->id);
    gd_pack_kv_str(pk, "name", dev->name);
    gd_pack_kv_u64(pk, "memory", dev->memory_bytes);
    gd_pack_str(pk, "sms");
    msgpack_pack_int(pk, dev->sm_count);
    gd_pack_kv_str(pk, "cc", cc);
    gd_pack_str(pk, "in_service");
    if (dev->in_service)
      msgpack_pack_true(pk);
    else
      msgpack_pack_false(pk);
  }
}

static void pack_kernels(gd_backend *b, msgpack_packer *pk) {
  const char *names[INFO_KERNELS_MAX];
  size_t n = b->ops->kernels ? b->ops->kernels(b, names, INFO_KERNELS_MAX) : 0;
  if (n > INFO_KERNELS_MAX)
    n = INFO_KERNELS_MAX;
  msgpack_pack_array(pk, n);
  for (size_t i = 0; i < n; i++)
    gd_pack_str(pk, names[i]);
}

static void pack_limits(const gd_server *d, msgpack_packer *pk) {
  const gd_net_limits *cfg = &d->limits;
  const gp_limits *l = &cfg->proto;
  gd_sched_limits queue = gd_netsched_get_limits(d->sched);
  msgpack_pack_map(pk, 15);
  gd_pack_kv_u64(pk, "max_connections", cfg->max_connections);
  gd_pack_kv_u64(pk, "max_requests_in_flight", cfg->max_requests_in_flight);
  gd_pack_kv_u64(pk, "max_buffered_bytes", cfg->max_buffered_bytes);
  gd_pack_kv_u64(pk, "max_message_bytes", l->max_message_bytes);
  gd_pack_kv_u64(pk, "max_header_bytes", l->max_header_bytes);
  gd_pack_kv_u64(pk, "max_depth", l->max_depth);
  gd_pack_kv_u64(pk, "max_items", l->max_items);
  gd_pack_kv_u64(pk, "max_string_bytes", l->max_string_bytes);
  gd_pack_kv_u64(pk, "max_dim", l->max_dim);
  gd_pack_kv_u64(pk, "max_batch", l->max_batch);
  gd_pack_kv_u64(pk, "max_work", l->max_work);
  gd_pack_kv_u64(pk, "max_operand_bytes", l->max_operand_bytes);
  gd_pack_kv_u64(pk, "max_jobs", queue.max_jobs);
  gd_pack_kv_u64(pk, "memory_budget", queue.memory_budget);
  gd_pack_kv_u64(pk, "timeout_idle_ms", cfg->idle_ms);
}

static void pack_info(gd_server *d, bool shm, msgpack_packer *pk) {
  gd_backend *b = d->backend;
  msgpack_pack_map(pk, 9);
  gd_pack_kv_str(pk, "version", GEMMD_VERSION);
  gd_pack_kv_u64(pk, "protocol", GP_PROTOCOL_VERSION);
  gd_pack_kv_str(pk, "backend", b->ops->name);
  gd_pack_str(pk, "devices");
  pack_devices(b, pk);
  gd_pack_str(pk, "kernels");
  pack_kernels(b, pk);
  gd_pack_str(pk, "dtypes");
  msgpack_pack_array(pk, GP_DTYPE_COUNT);
  for (int t = 0; t < GP_DTYPE_COUNT; t++)
    gd_pack_str(pk, gp_dtype_name((gp_dtype)t));
  gd_pack_str(pk, "limits");
  pack_limits(d, pk);
  gd_pack_str(pk, "features"); /* optional protocol features this connection may use */
  /* cuda_ipc: CUDA memory of the client's process, where the backend can open it */
  bool cuda = shm && d->limits.shm.cuda_enabled && b->ops->device_region_open;
  /* ld: leading dimensions, for operands in place: in a region, or CUDA memory */
  bool ld = (shm || cuda) && b->ops->leading_dims;
  msgpack_pack_array(pk, 8 + shm + cuda + ld);
  gd_pack_str(pk, "auth");
  gd_pack_str(pk, "resident");    /* put, free, {"handle": N} operands */
  gd_pack_str(pk, "broadcast_b"); /* one B for every batch entry */
  gd_pack_str(pk, "epilogue");    /* the header keys bias and activation */
  gd_pack_str(pk, "out_dtype");   /* an f16 / bf16 result of an f32 / f64 gemm */
  gd_pack_str(pk, "i8");          /* the integer gemm: i8 operands, an i32 result */
  gd_pack_str(pk, "fp8");         /* e4m3 / e5m2 operands with scale_a / scale_b, f32 result */
  gd_pack_str(pk, "complex");     /* c64 / c128 with alpha_im, beta_im, conj_a, conj_b */
  if (shm)
    gd_pack_str(pk, "shm");
  if (cuda)
    gd_pack_str(pk, "cuda_ipc");
  if (ld)
    gd_pack_str(pk, "ld");
  gd_pack_str(pk, "backend_info");
  if (b->ops->pack_info)
    b->ops->pack_info(b, pk);
  else
    msgpack_pack_map(pk, 0);
}

static void pack_stats(gd_server *d, msgpack_packer *pk) {
  gd_backend *b = d->backend;
  msgpack_pack_map(pk, GD_STATS_PAIRS + 16);
  gd_stats every_loop;
  gd_netloops_stats(d, &every_loop);
  gd_stats_pack_pairs(&every_loop, gd_now_us(), pk);
  gd_pack_kv_u64(pk, "queue_depth", gd_netsched_jobs(d->sched));
  gd_pack_kv_u64(pk, "jobs_running", gd_netsched_running(d->sched));
  gd_pack_kv_u64(pk, "jobs_delivering", gd_netsched_delivering(d->sched));
  gd_pack_kv_u64(pk, "reserved_bytes", gd_netsched_reserved_bytes(d->sched));
  gd_pack_kv_u64(pk, "connections", d->connections);
  gd_pack_kv_u64(pk, "shm_regions", d->shm.regions);
  gd_pack_kv_u64(pk, "shm_bytes", d->shm.bytes);
  gd_pack_kv_u64(pk, "shm_registered_total", d->shm.registered);
  gd_pack_kv_u64(pk, "shm_fds_dropped", d->shm.fds_dropped);
  gd_pack_kv_u64(pk, "resident_handles", d->resident.handles);
  gd_pack_kv_u64(pk, "resident_bytes", d->resident.bytes);
  gd_pack_kv_u64(pk, "resident_put_total", d->resident.put_total);
  gd_pack_kv_u64(pk, "cuda_ipc_regions", d->shm.cuda_regions);
  gd_pack_kv_u64(pk, "cuda_ipc_registered_total", d->shm.cuda_registered);
  gd_pack_kv_str(pk, "backend", b->ops->name);
  gd_pack_str(pk, "backend_stats");
  if (b->ops->pack_stats)
    b->ops->pack_stats(b, pk);
  else
    msgpack_pack_map(pk, 0);
}

/* msgpack_sbuffer_write returns -1 when realloc fails, and the pack functions only pass that
 * on per call: a write callback of our own remembers the first failure for the whole reply. */
typedef struct {
  msgpack_sbuffer *sbuf;
  int failed;
} guarded;

static int guarded_write(void *data, const char *buf, size_t len) {
  guarded *g = data;
  if (g->failed)
    return -1;
  if (msgpack_sbuffer_write(g->sbuf, buf, len) != 0) {
    g->failed = 1;
    return -1;
  }
  return 0;
}

int gd_methods_reply(gd_server *d, uint32_t msgid, gp_method method, bool shm,
                     msgpack_sbuffer *out, gp_error *err) {
  if (method == GP_METHOD_PING) {
    if (gp_encode_pong_response(out, msgid) != 0)
      return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory");
    return 0;
  }
  if (method == GP_METHOD_AUTH) /* the caller checked the token */
    return gp_encode_true_response(out, msgid) != 0
               ? gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory")
               : 0;
  if (method != GP_METHOD_INFO && method != GP_METHOD_STATS)
    return gp_error_set(err, GP_E_UNIMPLEMENTED, "method not implemented");
  guarded g = {out, 0};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &g, guarded_write);
  if (gp_pack_response_head(&pk, msgid) != 0)
    g.failed = 1;
  if (method == GP_METHOD_INFO)
    pack_info(d, shm, &pk);
  else
    pack_stats(d, &pk);
  if (g.failed)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory building the reply");
  return 0;
}
