/*
 * gd_gpu_backend.c - the GPU backend's ops table: what the loop thread calls.
 *
 * Nothing here calls CUDA (see gd_gpu_shared.h for the thread rules). The
 * loop reserves a job's device memory from the pool of the least-loaded
 * device, lands payload bytes in that device's input staging buffers and
 * queues commands for its worker; completions come back from the worker
 * through gd_completion_post().
 *
 * Input, per job, on the loop:
 *   - a job gets pool memory at prepare() if it fits now and nobody waits
 *     before it (FIFO, so a large job is not starved by small ones); else it
 *     waits. prepare() refuses only what could never fit on any device;
 *   - payload bytes go through staging buffers (gd_gpu_input.c);
 *   - submit() sends the last partial buffer and then RUN (after every copy of
 *     the job in the worker's FIFO).
 *
 * Job life and the memory FIFO are in gd_gpu_jobs.c, info and stats in gd_gpu_info.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_gpu_loop.h"
#include "gd_log.h"

#define MIB (1024ull * 1024ull)
#define GD__STAGING_MIN 4096u /* as the config parser allows */
#define GD__STAGING_MAX (1024ull * MIB)
#define GD__STAGING_BUFFERS_MAX 64u

/* ---- the ops ------------------------------------------------------------- */

/* The device for a job of len pool bytes: the scheduler's pick (`hint`, an index into
 * devices()) when it is in service and its budget can hold the job, else the least-loaded such
 * device. NULL when none can ever hold it. */
static gd__gpu_dev *pick_device(gd__gpu_backend *be, int hint, uint64_t len, bool *any_in_service,
                                uint64_t *largest) {
  gd__gpu_dev *best = NULL;
  double best_load = 0;
  *any_in_service = false;
  *largest = 0;
  for (size_t i = 0; i < be->ndev; i++) {
    gd__gpu_dev *dev = &be->devs[i];
    pthread_mutex_lock(&dev->mu);
    bool ok = dev->in_service && !dev->dead;
    double load = dev->load;
    uint64_t size = dev->pool.size;
    pthread_mutex_unlock(&dev->mu);
    if (!ok)
      continue;
    *any_in_service = true;
    if (size > *largest)
      *largest = size;
    if (!gd__gpu_pool_fits_ever(&dev->pool, len))
      continue;
    if (hint >= 0 && (size_t)hint == i)
      load = -1.0; /* the scheduler's pick wins when it fits */
    if (!best || load < best_load) {
      best = dev;
      best_load = load;
    }
  }
  return best;
}

/* Device i when it is in service and can ever hold len pool bytes (a job fixed there by its
 * CUDA IPC regions), else NULL with the same figures as pick_device. */
static gd__gpu_dev *fixed_device(gd__gpu_backend *be, int i, uint64_t len, bool *any_in_service,
                                 uint64_t *largest) {
  *any_in_service = false;
  *largest = 0;
  if (i < 0 || (size_t)i >= be->ndev)
    return NULL;
  gd__gpu_dev *dev = &be->devs[i];
  pthread_mutex_lock(&dev->mu);
  *any_in_service = dev->in_service && !dev->dead;
  *largest = dev->pool.size;
  pthread_mutex_unlock(&dev->mu);
  return *any_in_service && gd__gpu_pool_fits_ever(&dev->pool, len) ? dev : NULL;
}

/* Seconds of work, roughly: the kernel at ~20 TFLOP/s plus the bytes through the socket at
 * ~5 GB/s. Only the comparison between devices matters. */
static double job_load(const gd__gpu_job *job) {
  return gp_gemm_flops(&job->hdr) / 20e12 +
         (double)(gd__gpu_job_input_total(job) + job->c_bytes) / 5e9;
}

/* Fills gj with the backend's copy of what the worker needs from job, its pool size and load
 * worked out; 0, or the error (an operand too large). */
static int gpu_job_init(gd__gpu_job *gj, const gd_job *job, gp_error *err) {
  memset(gj, 0, sizeof(*gj));
  gj->id = job->id;
  gj->hdr = job->hdr;
  gj->has_c = job->has_c;
  for (int op = 0; op < 3; op++)
    gj->bytes[op] = job->operand_bytes[op];
  if (!gj->has_c)
    gj->bytes[GP_OPERAND_C] = 0;
  gj->admitted_us = job->admitted_us;
  gj->deadline_us = job->deadline_us;
  gj->pending_tail = &gj->pending;
  int rc = gd__gpu_job_sizes(gj, err);
  if (rc != 0)
    return rc;
  gj->load = job_load(gj);
  return 0;
}

/* No device can ever hold need pool bytes: why, in err. */
static int refuse_no_device(bool any_in_service, uint64_t need, uint64_t largest,
                            gp_error *err) {
  if (!any_in_service)
    return gp_error_set(err, GP_E_UNAVAILABLE, "no GPU is in service");
  return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                      "needs %llu bytes of GPU memory; the largest device budget is %llu "
                      "(gpu.memory_bytes / gpu.memory_fraction)",
                      (unsigned long long)need, (unsigned long long)largest);
}

/* Under dev's mu: gj joins the device's jobs and load, and gets pool memory now if it fits and
 * nobody waits before it, else joins the FIFO of jobs waiting for memory. */
static void place_on_device(gd__gpu_dev *dev, gd__gpu_job *gj) {
  gd__gpu_dev_add_job(dev, gj);
  uint64_t off;
  if (!dev->wait_head && gd__gpu_pool_alloc(&dev->pool, gj->alloc_len, &off)) {
    gd__gpu_job_assign_mem(gj, off);
  } else {
    gj->waiting_mem = true;
    if (dev->wait_tail)
      dev->wait_tail->wait_next = gj;
    else
      dev->wait_head = gj;
    dev->wait_tail = gj;
  }
}

static int op_prepare(gd_backend *b, gd_job *job, gp_error *err) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  gd__gpu_job tmp;
  int rc = gpu_job_init(&tmp, job, err);
  if (rc != 0)
    return rc;
  /* a job whose memory is a client's on one device runs there, alone (never batched) */
  /* ... and one with leading dimensions takes the staging lane, whose copies know them
   * (gd__gpu_copy_from_region, the copy out) */
  gd__gpu_job *gj =
      job->device_fixed || gp_gemm_has_ld(&job->hdr) ? NULL : gd__gpu_small_take(be, &tmp, job);
  if (gj) { /* the small lane: a slot, no pool memory, no staging */
    job->device = (int)(gj->dev - be->devs);
    job->backend_data = gj;
    return 0;
  }
  gj = malloc(sizeof(*gj));
  if (!gj)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory");
  *gj = tmp;
  gj->pending_tail = &gj->pending;
  bool any = false;
  uint64_t largest = 0;
  /* Each job goes where the load is least, also within one connection: the connection's reply
   * queue holds other replies while a result leaves in several chunks, so results of one
   * connection coming back from several devices never interleave. */
  gd__gpu_dev *dev = job->device_fixed
                         ? fixed_device(be, job->device, gj->alloc_len, &any, &largest)
                         : pick_device(be, job->device, gj->alloc_len, &any, &largest);
  if (!dev) {
    uint64_t need = gj->alloc_len;
    free(gj);
    return refuse_no_device(any, need, largest, err);
  }
  gj->dev = dev;
  job->device = (int)(dev - be->devs);
  gj->owner = job;
  gj->refs = 1; /* the loop's, until release() */
  gj->run_cmd.type = GD__CMD_RUN;
  gj->run_cmd.job = gj;
  pthread_mutex_lock(&dev->mu);
  place_on_device(dev, gj);
  pthread_mutex_unlock(&dev->mu);
  job->backend_data = gj;
  return 0;
}

static int op_submit(gd_backend *b, gd_job *job, gp_error *err) {
  gd__gpu_job *gj = gd__gpu_job_of(job);
  if (!gj)
    return gp_error_set(err, GP_E_INTERNAL, "submit of a job the GPU backend does not know");
  gd__gpu_split_try((gd__gpu_backend *)b, gj); /* before RUN; takes the devices' mu itself */
  gd__gpu_dev *dev = gj->dev;
  pthread_mutex_lock(&dev->mu);
  gd__gpu_flush(gj);
  gj->submitted = true;
  if (gj->slot)
    gj->submit_us = gd_now_us();
  gj->paused = false; /* every byte is in: no resume is owed (and none may follow the reply) */
  if ((gj->mem_ready || gj->slot) && !gj->run_queued) {
    gj->run_queued = true; /* a slot's job: its worker reference was taken at prepare */
    gd__gpu_cmd_push(dev, &gj->run_cmd);
  }
  pthread_mutex_unlock(&dev->mu);
  return 0;
}

/* Under mu: a posted output chunk of gj is done with; the worker frees its staging buffer. */
static void queue_out_free(gd__gpu_dev *dev, gd__gpu_buf *buf, gd__gpu_job *gj) {
  buf->posted = false;
  buf->cmd.type = GD__CMD_OUT_FREE;
  buf->cmd.buf = buf;
  buf->cmd.job = gj;
  gd__gpu_cmd_push(dev, &buf->cmd);
}

static void op_output_consumed(gd_backend *b, gd_job *job, const void *chunk, size_t len) {
  (void)b;
  (void)len;
  gd__gpu_job *gj = gd__gpu_job_of(job);
  if (!gj)
    return;
  if (gj->slot) {
    gd__gpu_small_consumed(gj, chunk);
    return;
  }
  gd__gpu_dev *dev = gj->dev;
  pthread_mutex_lock(&dev->mu);
  gd__gpu_buf *direct = &gj->direct_out;
  if (gj->mapped_out && direct->host == chunk && direct->job == gj && direct->posted)
    queue_out_free(dev, direct, gj);
  for (uint32_t i = 0; i < dev->nbuf; i++) {
    gd__gpu_buf *buf = &dev->out_bufs[i];
    if (buf->host == chunk && buf->job == gj && buf->posted) {
      queue_out_free(dev, buf, gj);
      break;
    }
  }
  pthread_mutex_unlock(&dev->mu);
}

static void op_release(gd_backend *b, gd_job *job) {
  (void)b;
  gd__gpu_job *gj = gd__gpu_job_of(job);
  if (!gj)
    return;
  job->backend_data = NULL;
  if (gj->slot) {
    gd__gpu_small_release(gj);
    return;
  }
  gd__gpu_dev *dev = gj->dev;
  pthread_mutex_lock(&dev->mu);
  gj->owner = NULL;
  gj->paused = false;
  gd__gpu_job_loop *loop = gd__gpu_loop_half(gj);
  if (loop->cur)
    loop->cur->fill = 0; /* nobody will read the result: copy nothing more */
  gd__gpu_flush(gj);
  for (uint32_t i = 0; i < dev->nbuf; i++) {
    gd__gpu_buf *buf = &dev->out_bufs[i];
    if (buf->job == gj && buf->posted)
      queue_out_free(dev, buf, gj);
  }
  if (gj->mapped_out && gj->direct_out.job == gj && gj->direct_out.posted)
    queue_out_free(dev, &gj->direct_out, gj);
  if (gj->waiting_mem)
    gd__gpu_wait_remove(gj);
  gd__gpu_job_free_spills(gj);
  if (!gj->mem_ready) {
    gd__gpu_job_retire(gj); /* the worker never had it */
  } else if (!gj->run_queued && !loop->dropped) {
    loop->dropped = true;
    gj->run_cmd.type = GD__CMD_DROP; /* frees its memory after its copies, in FIFO order */
    gd__gpu_cmd_push(dev, &gj->run_cmd);
  }
  gd__gpu_job_unref(gj);
  pthread_mutex_unlock(&dev->mu);
}

/* Host memory a GPU job holds: its payload goes through the preallocated pinned staging, so
 * only a spill (at most what the session had read when it was paused) is its own. */
static uint64_t op_host_bytes(gd_backend *b, const gd_job *job) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  uint64_t total = job->operand_bytes[GP_OPERAND_A] + job->operand_bytes[GP_OPERAND_B] +
                   (job->has_c ? job->operand_bytes[GP_OPERAND_C] : 0);
  return total < be->cfg.staging_bytes ? total : be->cfg.staging_bytes;
}

static void dev_teardown(gd__gpu_dev *dev) {
  gd__gpu_worker_stop(dev);
  /* Jobs the scheduler never released, or that a dead device still holds: free them. */
  gd__gpu_job *j = dev->jobs;
  while (j) {
    gd__gpu_job *next = j->next;
    if (j->owner)
      j->owner->backend_data = NULL;
    gd__gpu_job_free_spills(j);
    gd__gpu_job_drop_resident(j);
    gd__gpu_job_free_split(j);
    if (!j->slot) /* a slot's job goes with the slots */
      free(j);
    j = next;
  }
  dev->jobs = NULL;
  free(dev->slots);
  dev->slots = NULL;
  dev->slot_free = NULL;
  pthread_cond_destroy(&dev->cv);
  pthread_mutex_destroy(&dev->mu);
}

static void op_destroy(gd_backend *b) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  if (!be)
    return;
  /* Every worker stops before any device's jobs are freed: a split's child on one device
   * tells its parent on another when it ends. */
  for (size_t i = 0; i < be->ndev; i++)
    gd__gpu_worker_stop(&be->devs[i]);
  for (size_t i = 0; i < be->ndev; i++)
    dev_teardown(&be->devs[i]);
  gd__gpu_ipc_destroy(be);
  gd__gpu_reg_destroy(be);
  free(be->devs);
  free(be);
}

/* A region's last reference: a host mapping's DMA registration (gd_gpu_shm.c), or a CUDA IPC
 * handle (gd_gpu_ipc.c). */
static void op_region_gone(gd_backend *b, gd_region *r) {
  if (r->kind == GD_REGION_DEVICE)
    gd__gpu_ipc_gone(r);
  else
    gd__gpu_op_region_gone(b, r);
}

/* The locate op (gd_backend.h): each kind of place to the file that keeps it. */
static bool op_locate(gd_backend *b, gd_job *job, const gd_where *w) {
  switch (w->kind) {
  case GD_WHERE_MAPPED:
    return w->out ? gd__gpu_op_output_mapped(b, job, w->r, w->ptr)
                  : gd__gpu_op_input_mapped(b, job, w->operand, w->r, w->ptr);
  case GD_WHERE_DEVICE:
    return w->out ? gd__gpu_op_output_device(b, job, w->r, w->offset)
                  : gd__gpu_op_input_device(b, job, w->operand, w->r, w->offset);
  case GD_WHERE_RESIDENT:
    return gd__gpu_op_input_resident(b, job, w->operand, w->res);
  }
  return false;
}

static const gd_backend_ops gpu_ops = {
    .name = "gpu",
    .leading_dims = true, /* packed on the device: the copies in and out are 2D */
    .prepare = op_prepare,
    .input_window = gd__gpu_op_input_window,
    .input = gd__gpu_op_input,
    .locate = op_locate,
    .resident_freed = gd__gpu_op_resident_freed,
    .submit = op_submit,
    .output_consumed = op_output_consumed,
    .release = op_release,
    .region_added = gd__gpu_op_region_added,
    .region_gone = op_region_gone,
    .device_region_open = gd__gpu_op_device_region_open,
    .shm_pinned_bytes = gd__gpu_op_shm_pinned_bytes,
    .host_bytes = op_host_bytes,
    .kernels = gd__gpu_op_kernels,
    .pack_info = gd__gpu_op_pack_info,
    .pack_stats = gd__gpu_op_pack_stats,
    .devices = gd__gpu_op_devices,
    .busy = gd__gpu_op_busy,
    .destroy = op_destroy,
};

/* ---- creation ------------------------------------------------------------- */

static int check_config(const gd_gpu_config *cfg, gp_error *err) {
  if (cfg->staging_buffers < 2 || cfg->staging_buffers > GD__STAGING_BUFFERS_MAX)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "gpu.staging_buffers must be 2..%u, not %u",
                        GD__STAGING_BUFFERS_MAX, cfg->staging_buffers);
  if (cfg->staging_bytes < GD__STAGING_MIN || cfg->staging_bytes > GD__STAGING_MAX)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "gpu.staging_bytes must be 4KiB..1GiB, not %llu",
                        (unsigned long long)cfg->staging_bytes);
  if (cfg->memory_bytes == 0 && !(cfg->memory_fraction > 0.0 && cfg->memory_fraction <= 1.0))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "gpu.memory_fraction must be in (0, 1]");
  if (cfg->kernel[0] && strcmp(cfg->kernel, "auto") != 0 && !gk_kernel_by_name(cfg->kernel)) {
    char known[256] = "";
    size_t n = 0, used = 0;
    const gk_kernel *const *ks = gk_kernels(&n);
    for (size_t i = 0; i < n && used < sizeof(known); i++) {
      int w = snprintf(known + used, sizeof(known) - used, "%s%s", i ? ", " : "", ks[i]->name);
      if (w < 0)
        break;
      used += (size_t)w;
    }
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "gpu.kernel: no kernel named \"%s\" (auto, %s)", cfg->kernel, known);
  }
  return 0;
}

/* Sets up dev (cuda:ordinal) and starts its worker. 0, or the error it is left out for (dead,
 * the reason in last); it still needs dev_teardown. */
static int start_device(gd__gpu_backend *be, gd__gpu_dev *dev, int ordinal, gp_error *last) {
  dev->be = be;
  dev->ordinal = ordinal;
  pthread_mutex_init(&dev->mu, NULL);
  pthread_cond_init(&dev->cv, NULL);
  if (gd__gpu_device_describe(dev->ordinal, &dev->info, last) == 0 &&
      gd__gpu_worker_start(dev, last) == 0) {
    gd__gpu_ipc_describe(dev);
    dev->speed = gd__gpu_device_speed(&dev->info);
    dev->in_service = true;
    return 0;
  }
  dev->dead = true;
  dev->info.id = dev->ordinal;
  dev->info.in_service = false;
  gd_warn("gpu: cuda:%d left out: %s", dev->ordinal, last->message);
  return last->code;
}

int gd_backend_gpu_create(const gd_gpu_config *cfg, gd_backend **out, gp_error *err) {
  *out = NULL;
  int rc = check_config(cfg, err);
  if (rc != 0)
    return rc;
  int ordinals[GD_GPU_MAX_DEVICES];
  size_t count = 0;
  rc = gd__gpu_device_resolve(cfg, ordinals, &count, err);
  if (rc != 0)
    return rc;
  gd__gpu_backend *be = calloc(1, sizeof(*be));
  gd__gpu_dev *devs = calloc(count, sizeof(*devs));
  if (!be || !devs) {
    free(be);
    free(devs);
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory");
  }
  rc = gd__gpu_reg_init(be, err);
  if (rc != 0) {
    free(be);
    free(devs);
    return rc;
  }
  be->base.ops = &gpu_ops;
  be->cfg = *cfg;
  if (!be->cfg.kernel[0])
    snprintf(be->cfg.kernel, sizeof(be->cfg.kernel), "auto");
  be->devs = devs;
  size_t up = 0;
  gp_error last;
  gp_error_clear(&last);
  for (size_t i = 0; i < count; i++) {
    be->ndev = i + 1;
    if (start_device(be, &devs[i], ordinals[i], &last) == 0)
      up++;
  }
  if (up == 0) {
    op_destroy(&be->base);
    return gp_error_set(err, GP_E_UNAVAILABLE, "no usable CUDA device: %s", last.message);
  }
  *out = &be->base;
  return 0;
}
