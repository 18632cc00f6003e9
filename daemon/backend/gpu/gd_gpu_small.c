/*
 * gd_gpu_small.c - the small-job lane's slots: made once per device at start (worker thread),
 * taken and given back by bookkeeping on the loop (under the device's mu), and the loop ops of
 * a job that lives in one.
 *
 * A job whose a, b and c (each rounded to GD_GPU_POOL_ALIGN) fit gpu.small_job_bytes takes a
 * free slot at prepare: the socket reads its payload straight into the slot's pinned memory
 * (input_window), the worker copies it to the device, runs the kernel (batched with the small
 * jobs of its shape already waiting) and copies C back into the slot on the lane's own stream
 * (gd_gpu_small_run.c), and the reply is written from the slot. The lane's device memory (a batch
 * area of gpu.max_batch_jobs slots) was taken at start, out of the device's budget, so a small job
 * needs neither the memory pool, nor a staging buffer, nor an allocation: it never waits behind a
 * large job. A small job that finds no slot free takes the staging path like any other.
 *
 * References on a slot's job are the ones of any job (gd_gpu_jobs.c): the loop's until
 * release(), the worker's from prepare until its pass is finished (or release() before submit),
 * and one while C is posted, until output_consumed(). The last one frees the slot.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "gd_gpu_internal.h"
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

/* Makes the slots over the lane's memory; dev->slot_host and slot_dev are allocated. */
static int slots_init(gd__gpu_dev *dev, gp_error *err) {
  for (uint32_t i = dev->nslots; i-- > 0;) { /* slot 0 first: jobs in a row take adjacent slots */
    gd__gpu_slot *slot = &dev->slots[i];
    slot->host = dev->slot_host + (size_t)i * dev->slot_bytes;
    int rc = slot_events(dev, slot, err);
    if (rc != 0)
      return rc;
    slot->next_free = dev->slot_free;
    dev->slot_free = slot;
  }
  return 0;
}

int gd__gpu_small_create(gd__gpu_dev *dev, uint64_t *budget, gp_error *err) {
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
  dev->slot_host = host;
  e = cudaMalloc(&dptr, (size_t)area);
  if (e != cudaSuccess)
    return gp_error_set(err, GP_E_UNAVAILABLE,
                        "cuda:%d: cannot take %llu bytes for small jobs' batches: %s",
                        dev->ordinal, (unsigned long long)area, cudaGetErrorString(e));
  dev->small_area = dptr;
  e = gk_gpu_ctx_create(dev->ordinal, &dev->kctx_small);
  if (e != cudaSuccess) {
    dev->kctx_small = NULL;
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: small lane kernel context: %s",
                        dev->ordinal, cudaGetErrorString(e));
  }
  gk_gpu_ctx_set_pool_keep(dev->kctx_small, dev->be->cfg.kernel_pool_bytes);
  e = cudaStreamCreateWithFlags(&dev->s_small, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    dev->s_small = NULL;
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: cudaStreamCreate: %s", dev->ordinal,
                        cudaGetErrorString(e));
  }
  *budget -= area;
  return slots_init(dev, err);
}

void gd__gpu_small_destroy(gd__gpu_dev *dev) {
  for (uint32_t i = 0; dev->slots && i < dev->nslots; i++)
    for (int k = 0; k < 4; k++)
      if (dev->slots[i].ev[k])
        (void)cudaEventDestroy(dev->slots[i].ev[k]);
  if (dev->s_small)
    (void)cudaStreamDestroy(dev->s_small);
  if (dev->kctx_small)
    gk_gpu_ctx_destroy(dev->kctx_small);
  dev->kctx_small = NULL;
  if (dev->small_area)
    (void)cudaFree(dev->small_area);
  if (dev->slot_host)
    (void)cudaFreeHost(dev->slot_host);
  /* The slots themselves (dev->slots) stay until the device's teardown: the jobs in them are
   * on its list of jobs until then. */
  dev->s_small = NULL;
  dev->small_area = dev->slot_host = NULL;
  (void)cudaGetLastError();
}

/* ---- the loop ------------------------------------------------------------ */

/* The least-loaded device in service with a free slot (the scheduler's pick first); its mu is
 * held on return. NULL when there is none. */
static gd__gpu_dev *lock_device_with_slot(gd__gpu_backend *be, int hint) {
  if (hint >= 0 && (size_t)hint < be->ndev) {
    gd__gpu_dev *dev = &be->devs[hint];
    pthread_mutex_lock(&dev->mu);
    if (dev->in_service && !dev->dead && dev->slot_free)
      return dev;
    pthread_mutex_unlock(&dev->mu);
  }
  gd__gpu_dev *best = NULL;
  double best_load = 0;
  for (size_t i = 0; i < be->ndev; i++) {
    gd__gpu_dev *dev = &be->devs[i];
    pthread_mutex_lock(&dev->mu);
    bool ok = dev->in_service && !dev->dead && dev->slot_free;
    double load = dev->load;
    pthread_mutex_unlock(&dev->mu);
    if (ok && (!best || load < best_load)) {
      best = dev;
      best_load = load;
    }
  }
  if (!best)
    return NULL;
  pthread_mutex_lock(&best->mu);
  if (best->in_service && !best->dead && best->slot_free)
    return best;
  pthread_mutex_unlock(&best->mu); /* taken meanwhile (another thread's prepare cannot; a fault
                                      can): the staging path then */
  return NULL;
}

static void slot_layout(gd__gpu_slot *slot) {
  const gd__gpu_job *job = &slot->job;
  uint64_t at = 0;
  for (int op = 0; op < 3; op++) {
    slot->off[op] = at;
    uint64_t len = op == GP_OPERAND_C ? job->c_bytes : job->bytes[op];
    uint64_t rounded = 0;
    (void)gd__gpu_pool_round(len, &rounded); /* alloc_len was computed so: no overflow */
    at += rounded;
  }
  slot->in_len = job->has_c ? slot->off[GP_OPERAND_C] + job->bytes[GP_OPERAND_C] /* c as sent */
                            : slot->off[GP_OPERAND_B] + job->bytes[GP_OPERAND_B];
}

gd__gpu_job *gd__gpu_small_take(gd__gpu_backend *be, const gd__gpu_job *tmp, gd_job *owner) {
  if (be->cfg.small_job_bytes == 0 || tmp->alloc_len > be->cfg.small_job_bytes ||
      tmp->hdr.broadcast_b || /* a dynamic batch stacks B per entry: a shared B does not fit */
      (tmp->hdr.bias && tmp->hdr.batch > 1)) /* nor one bias row for several entries */
    return NULL;
  gd__gpu_dev *dev = lock_device_with_slot(be, owner->device);
  if (!dev)
    return NULL;
  gd__gpu_slot *slot = dev->slot_free;
  assert(!slot->in_use && tmp->alloc_len <= dev->slot_bytes);
  dev->slot_free = slot->next_free;
  slot->next_free = NULL;
  slot->in_use = true;
  slot->posted = false;
  slot->job = *tmp;
  gd__gpu_job *gj = &slot->job;
  gj->slot = slot;
  gj->dev = dev;
  gj->owner = owner; /* before the job is on the device's list: a device fault must reach it */
  gj->pending_tail = &gj->pending;
  slot_layout(slot);
  gj->next = dev->jobs;
  gj->prev = NULL;
  if (dev->jobs)
    dev->jobs->prev = gj;
  dev->jobs = gj;
  dev->active++;
  dev->load += gj->load;
  gj->refs = 2; /* the loop's, until release(); the worker's, until its pass is finished */
  gj->run_cmd.type = GD__CMD_SMALL_RUN;
  gj->run_cmd.job = gj;
  pthread_mutex_unlock(&dev->mu);
  return gj;
}


bool gd__gpu_small_window(gd__gpu_job *gj, gp_operand operand, uint64_t offset, void **ptr,
                          size_t *len) {
  gd__gpu_dev *dev = gj->dev;
  gd__gpu_slot *slot = gj->slot;
  pthread_mutex_lock(&dev->mu);
  bool ok = !gj->failed && !dev->dead && !gj->run_queued;
  pthread_mutex_unlock(&dev->mu);
  if (ok) {
    *ptr = slot->host + slot->off[operand] + offset;
    *len = (size_t)(gj->bytes[operand] - offset);
  }
  return ok;
}

int gd__gpu_small_input(gd__gpu_job *gj, gp_operand operand, uint64_t offset, const void *data,
                        size_t len) {
  gd__gpu_dev *dev = gj->dev;
  gd__gpu_slot *slot = gj->slot;
  pthread_mutex_lock(&dev->mu);
  gj->loop.received += len;
  bool skip = gj->failed || dev->dead || gj->run_queued;
  pthread_mutex_unlock(&dev->mu);
  uint8_t *dst = slot->host + slot->off[operand] + offset;
  if (!skip && data != dst) /* else the socket read landed it there already */
    memcpy(dst, data, len);
  return 0;
}

void gd__gpu_small_consumed(gd__gpu_job *gj, const void *chunk) {
  gd__gpu_dev *dev = gj->dev;
  gd__gpu_slot *slot = gj->slot;
  pthread_mutex_lock(&dev->mu);
  if (slot->posted && chunk == slot->host + slot->off[GP_OPERAND_C]) {
    slot->posted = false;
    gd__gpu_job_unref(gj); /* the posted chunk's */
  }
  pthread_mutex_unlock(&dev->mu);
}

void gd__gpu_small_release(gd__gpu_job *gj) {
  gd__gpu_dev *dev = gj->dev;
  pthread_mutex_lock(&dev->mu);
  gj->owner = NULL;
  gj->paused = false;
  if (gj->slot->posted) { /* the scheduler releases with no chunk out; kept for safety */
    gj->slot->posted = false;
    gd__gpu_job_unref(gj);
  }
  if (!gj->run_queued) {
    gd__gpu_job_retire(gj); /* the worker never had it */
    gj->finished = true;
    gd__gpu_job_unref(gj); /* the worker's */
  }
  gd__gpu_job_unref(gj); /* the loop's */
  pthread_mutex_unlock(&dev->mu);
}
