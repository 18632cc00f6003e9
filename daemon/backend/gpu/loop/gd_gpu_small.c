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

#include "gd_gpu_loop.h"
#include "gd_log.h"

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
  gd__gpu_job_loop *loop = gd__gpu_loop_half(gj);
  gd__gpu_dev *dev = gj->dev;
  gd__gpu_slot *slot = gj->slot;
  pthread_mutex_lock(&dev->mu);
  loop->received += len;
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
