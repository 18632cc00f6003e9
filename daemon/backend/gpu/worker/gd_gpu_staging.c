/*
 * gd_gpu_staging.c - one device's pinned host staging: staging_buffers
 * buffers of staging_bytes for input (socket -> pinned -> device) and as many
 * for output (device -> pinned -> socket), allocated once at start with
 * cudaHostAlloc on the worker thread, each with the two events that time its
 * copy.
 *
 * Pinned memory is what lets cudaMemcpyAsync run at the bus's speed and
 * overlap the next socket read; it is a scarce kind of memory (it cannot be
 * swapped), so its total is fixed at start (staging_buffers x staging_bytes
 * each way, 256 MiB a device by default) and logged, and compared with
 * RLIMIT_MEMLOCK as a hint (the CUDA driver pins through its own path, which
 * that limit does not bound).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "gd_gpu_work.h"
#include "gd_log.h"

static int buf_init(gd__gpu_dev *dev, gd__gpu_buf *buf, bool out, size_t cap, gp_error *err) {
  memset(buf, 0, sizeof(*buf));
  buf->dev = dev;
  buf->is_out = out;
  buf->cap = cap;
  buf->state = GD__BUF_FREE;
  /* the completion node its host func hands to the worker */
  buf->done.type = out ? GD__CMD_OUT_DONE : GD__CMD_IN_DONE;
  buf->done.buf = buf;
  buf->cmd.buf = buf;
  void *host = NULL;
  cudaError_t e = cudaHostAlloc(&host, cap, cudaHostAllocPortable);
  if (e != cudaSuccess)
    return gp_error_set(err, GP_E_UNAVAILABLE,
                        "cuda:%d: cannot pin %zu bytes of staging (gpu.staging_bytes): %s",
                        dev->ordinal, cap, cudaGetErrorString(e));
  buf->host = host;
  e = cudaEventCreate(&buf->ev_start);
  if (e == cudaSuccess)
    e = cudaEventCreate(&buf->ev_end);
  if (e != cudaSuccess)
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: cannot create events: %s",
                        dev->ordinal, cudaGetErrorString(e));
  return 0;
}

static void buf_fini(gd__gpu_buf *buf) {
  if (buf->ev_start)
    (void)cudaEventDestroy(buf->ev_start);
  if (buf->ev_end)
    (void)cudaEventDestroy(buf->ev_end);
  if (buf->host)
    (void)cudaFreeHost(buf->host);
  buf->host = NULL;
  buf->ev_start = buf->ev_end = NULL;
}

static void warn_memlock(const gd__gpu_dev *dev, uint64_t total) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    return;
  /* The NVIDIA driver does not charge cudaHostAlloc to this limit (checked on an H200 with
   * driver 580), so this is a hint for whoever debugs a failed pinning, not a warning. */
  if (total > (uint64_t)rl.rlim_cur)
    gd_debug("gpu: cuda:%d pins %llu bytes of staging, over RLIMIT_MEMLOCK (%llu): if pinning "
             "fails, lower gpu.staging_bytes or raise LimitMEMLOCK",
             dev->ordinal, (unsigned long long)total, (unsigned long long)rl.rlim_cur);
}

int gd__gpu_staging_create(gd__gpu_dev *dev, gp_error *err) {
  const gd_gpu_config *cfg = &dev->be->cfg;
  dev->nbuf = cfg->staging_buffers;
  dev->staging_bytes = (size_t)cfg->staging_bytes;
  warn_memlock(dev, 2ull * dev->nbuf * dev->staging_bytes);
  dev->in_bufs = calloc(dev->nbuf, sizeof(gd__gpu_buf));
  dev->out_bufs = calloc(dev->nbuf, sizeof(gd__gpu_buf));
  if (!dev->in_bufs || !dev->out_bufs)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "cuda:%d: out of host memory",
                        dev->ordinal);
  for (uint32_t i = 0; i < dev->nbuf; i++) {
    int rc = buf_init(dev, &dev->in_bufs[i], false, dev->staging_bytes, err);
    if (rc == 0)
      rc = buf_init(dev, &dev->out_bufs[i], true, dev->staging_bytes, err);
    if (rc != 0)
      return rc; /* gd__gpu_staging_destroy frees what was made */
  }
  return 0;
}

void gd__gpu_staging_destroy(gd__gpu_dev *dev) {
  for (uint32_t i = 0; i < dev->nbuf; i++) {
    if (dev->in_bufs)
      buf_fini(&dev->in_bufs[i]);
    if (dev->out_bufs)
      buf_fini(&dev->out_bufs[i]);
  }
  free(dev->in_bufs);
  free(dev->out_bufs);
  dev->in_bufs = dev->out_bufs = NULL;
  dev->nbuf = 0;
}

