/*
 * gd_gpu_small_lane.c - the small-job lane's start and stop on the worker: its slots' pinned
 * memory and events, the batch area and the lane's stream and kernel context, made once when
 * gpu.small_job_bytes is on and the budget can spare them. The slots are taken on the loop
 * (loop/gd_gpu_small.c, which says the whole design) and run here (gd_gpu_small_run.c).
 */
#include <stdlib.h>
#include <string.h>

#include "gd_gpu_work.h"
#include "gd_log.h"

/* The lane stays off where its device memory would take more than this share of the budget. */
#define GD__SMALL_BUDGET_SHARE 4u

static int slot_events(gd__gpu_dev *dev, gd__gpu_slot *slot, gp_error *err) {
  for (int i = 0; i < 4; i++) {
    cudaError_t e = cudaEventCreate(&slot->ev[i]);
    if (e != cudaSuccess) {
      slot->ev[i] = NULL;
      return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: small slots: cudaEventCreate: %s",
                          dev->ordinal, cudaGetErrorString(e));
    }
  }
  return 0;
}

/* Makes the slots over the lane's memory; dev->work.slot_host and slot_dev are allocated. */
static int slots_init(gd__gpu_dev *dev, gp_error *err) {
  for (uint32_t i = dev->nslots; i-- > 0;) { /* slot 0 first: jobs in a row take adjacent slots */
    gd__gpu_slot *slot = &dev->slots[i];
    slot->host = gd__gpu_worker_of(dev)->slot_host + (size_t)i * dev->slot_bytes;
    int rc = slot_events(dev, slot, err);
    if (rc != 0)
      return rc;
    slot->next_free = dev->slot_free;
    dev->slot_free = slot;
  }
  return 0;
}

int gd__gpu_small_create(gd__gpu_dev *dev, uint64_t *budget, gp_error *err) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  const gd_gpu_config *cfg = &dev->be->cfg;
  uint64_t slot_bytes = 0;
  if (cfg->small_job_bytes == 0 || cfg->small_slots == 0 ||
      !gd__gpu_pool_round(cfg->small_job_bytes, &slot_bytes))
    return 0;
  uint64_t total = slot_bytes * cfg->small_slots; /* <= 64 MiB x 4096: no overflow */
  uint64_t area = slot_bytes * cfg->max_batch_jobs; /* <= 64 MiB x 1024 */
  if (area > *budget / GD__SMALL_BUDGET_SHARE) {
    gd_info("gpu: cuda:%d: small-job lane off: a batch area of %u slots of %llu bytes would take "
            "more than a quarter of its %llu-byte budget",
            dev->ordinal, cfg->max_batch_jobs, (unsigned long long)slot_bytes,
            (unsigned long long)*budget);
    return 0;
  }
  dev->slots = calloc(cfg->small_slots, sizeof(gd__gpu_slot));
  if (!dev->slots)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "cuda:%d: out of host memory",
                        dev->ordinal);
  dev->nslots = cfg->small_slots;
  dev->slot_bytes = (size_t)slot_bytes;
  void *host = NULL, *dptr = NULL;
  cudaError_t e = cudaHostAlloc(&host, (size_t)total, cudaHostAllocPortable);
  if (e != cudaSuccess)
    return gp_error_set(err, GP_E_UNAVAILABLE,
                        "cuda:%d: cannot pin %llu bytes of small slots (gpu.small_slots x "
                        "gpu.small_job_bytes): %s",
                        dev->ordinal, (unsigned long long)total, cudaGetErrorString(e));
  worker->slot_host = host;
  e = cudaMalloc(&dptr, (size_t)area);
  if (e != cudaSuccess)
    return gp_error_set(err, GP_E_UNAVAILABLE,
                        "cuda:%d: cannot take %llu bytes for small jobs' batches: %s",
                        dev->ordinal, (unsigned long long)area, cudaGetErrorString(e));
  worker->small_area = dptr;
  e = gk_gpu_ctx_create(dev->ordinal, &worker->kctx_small);
  if (e != cudaSuccess) {
    worker->kctx_small = NULL;
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: small lane kernel context: %s",
                        dev->ordinal, cudaGetErrorString(e));
  }
  gk_gpu_ctx_set_pool_keep(worker->kctx_small, dev->be->cfg.kernel_pool_bytes);
  e = cudaStreamCreateWithFlags(&worker->s_small, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    worker->s_small = NULL;
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: cudaStreamCreate: %s", dev->ordinal,
                        cudaGetErrorString(e));
  }
  *budget -= area;
  return slots_init(dev, err);
}

void gd__gpu_small_destroy(gd__gpu_dev *dev) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  for (uint32_t i = 0; dev->slots && i < dev->nslots; i++)
    for (int k = 0; k < 4; k++)
      if (dev->slots[i].ev[k])
        (void)cudaEventDestroy(dev->slots[i].ev[k]);
  if (worker->s_small)
    (void)cudaStreamDestroy(worker->s_small);
  if (worker->kctx_small)
    gk_gpu_ctx_destroy(worker->kctx_small);
  worker->kctx_small = NULL;
  if (worker->small_area)
    (void)cudaFree(worker->small_area);
  if (worker->slot_host)
    (void)cudaFreeHost(worker->slot_host);
  /* The slots themselves (dev->slots) stay until the device's teardown: the jobs in them are
   * on its list of jobs until then. */
  worker->s_small = NULL;
  worker->small_area = worker->slot_host = NULL;
  (void)cudaGetLastError();
}
