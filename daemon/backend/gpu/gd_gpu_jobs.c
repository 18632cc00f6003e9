/*
 * gd_gpu_jobs.c - a GPU job's life on its device, shared by the loop and the worker (all under
 * the device's mu; see gd_gpu_shared.h): posting events, failing, references, the FIFO of
 * jobs waiting for pool memory and handing memory to them, and taking a dead device out of
 * service. Nothing here calls CUDA but cudaGetErrorName/String.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "gd_gpu_shared.h"
#include "gd_list.h"
#include "gd_log.h"

bool gd__gpu_post(gd__gpu_job *job, gd_backend_event *ev) {
  if (!job->owner || job->dev->stopping || job->final_posted)
    return false;
  ev->job = job->owner;
  if (gd_completion_post(job->dev->be->base.sink, ev) != 0)
    return false;
  job->final_posted = ev->type == GD_EV_FAILED || (ev->type == GD_EV_OUTPUT_CHUNK && ev->last);
  return true;
}

void gd__gpu_fail(gd__gpu_job *job, int code, const char *fmt, ...) {
  /* A job whose whole result was handed over keeps it: its chunks are in host memory (staging
   * or the client's region), whole, whatever befalls the device now (dev_kill meets such jobs
   * while a slow client still holds their last chunk). */
  if (job->failed || job->final_posted)
    return;
  job->failed = true;
  job->paused = false; /* the failure ends the request: no resume is owed */
  job->dev->jobs_failed++;
  gd_backend_event ev = {.type = GD_EV_FAILED};
  va_list ap;
  va_start(ap, fmt);
  gp_error_vset(&ev.err, code, fmt, ap);
  va_end(ap);
  gd_debug("gpu: job %llu failed: %s", (unsigned long long)job->id, ev.err.message);
  if (job->split_child) { /* its parent fails with it, once the child's work is over */
    gd__gpu_split_child_failed(job, &ev.err);
    return;
  }
  if (job->split && gd__gpu_split_defer_fail(job, &ev.err))
    return; /* posted when the child's work is over (gd_gpu_split.c) */
  (void)gd__gpu_post(job, &ev);
}

void gd__gpu_job_ref(gd__gpu_job *job) { job->refs++; }

void gd__gpu_job_free_spills(gd__gpu_job *job) {
  while (job->pending) {
    gd__gpu_spill *s = job->pending;
    job->pending = s->next;
    free(s);
    job->refs--; /* each spill held one; the caller holds another */
  }
  job->pending_tail = &job->pending;
}

/* The slot's job was let go by everyone: the slot is free again. */
static void slot_put(gd__gpu_slot *slot) {
  gd__gpu_dev *dev = slot->job.dev;
  assert(slot->in_use && !slot->posted);
  slot->in_use = false;
  slot->next_free = dev->slot_free;
  dev->slot_free = slot;
}

void gd__gpu_job_drop_resident(gd__gpu_job *job) {
  for (int op = 0; op < 3; op++) {
    if (job->res[op])
      gd_resident_buf_unref(job->res[op]);
    job->res[op] = NULL;
  }
}

void gd__gpu_job_unref(gd__gpu_job *job) {
  if (--job->refs > 0)
    return;
  gd__gpu_dev *dev = job->dev;
  GD_LIST_UNLINK(dev->jobs, job);
  gd__gpu_job_drop_resident(job);
  gd__gpu_job_free_split(job);
  if (job->slot)
    slot_put(job->slot); /* the job lives in the slot */
  else
    free(job);
}

/* Bytes of the output cast's work area: the result in the compute dtype (0: no cast). */
static bool work_bytes_of(const gp_gemm_hdr *hdr, uint64_t *bytes) {
  if (!gp_gemm_casts(hdr)) {
    *bytes = 0;
    return true;
  }
  gp_gemm_hdr plain = *hdr;
  plain.has_out_dtype = false;
  return gp_gemm_result_bytes(&plain, bytes);
}

int gd__gpu_job_sizes(gd__gpu_job *job, gp_error *err) {
  uint64_t total = 0;
  for (int op = 0; op < 4; op++) { /* a, b, c and the work area */
    uint64_t len = 0, rounded = 0;
    bool ok = op == 3               ? work_bytes_of(&job->hdr, &len)
              : op == GP_OPERAND_C ? gp_gemm_result_bytes(&job->hdr, &len) /* C's area: the result */
                                   : gp_gemm_operand_bytes(&job->hdr, (gp_operand)op, &len);
    if (!ok ||
        !gd__gpu_pool_round(len, &rounded) || total > UINT64_MAX - rounded) {
      return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "operand %s is too large",
                          op == 3 ? "c (as computed before the cast)"
                                  : gp_operand_name((gp_operand)op));
    }
    if (op == GP_OPERAND_C)
      job->c_bytes = len;
    if (op == 3)
      job->work_bytes = len;
    total += rounded;
  }
  job->alloc_len = total;
  return 0;
}

void gd__gpu_dev_add_job(gd__gpu_dev *dev, gd__gpu_job *job) {
  job->next = dev->jobs;
  if (dev->jobs)
    dev->jobs->prev = job;
  dev->jobs = job;
  dev->active++;
  dev->load += job->load;
}

void gd__gpu_job_free_split(gd__gpu_job *job) {
  if (!job->split || job->split_child)
    return;
  pthread_mutex_destroy(&job->split->mu);
  free(job->split);
  job->split = NULL;
}

void gd__gpu_job_retire(gd__gpu_job *job) {
  if (job->retired)
    return;
  job->retired = true;
  job->dev->load -= job->load;
  if (job->dev->load < 0)
    job->dev->load = 0;
  job->dev->active--;
}

static void resume(gd__gpu_job *job) {
  if (!job->paused)
    return;
  job->paused = false;
  gd_backend_event ev = {.type = GD_EV_INPUT_RESUME};
  (void)gd__gpu_post(job, &ev);
}

void gd__gpu_staging_freed(gd__gpu_dev *dev) {
  for (gd__gpu_job *j = dev->jobs; j; j = j->next)
    if (j->paused && j->mem_ready)
      resume(j);
}

/* Memory arrived for a job: what was held back for it can go to the worker now. */
void gd__gpu_job_assign_mem(gd__gpu_job *job, uint64_t off) {
  gd__gpu_dev *dev = job->dev;
  job->mem_ready = true;
  job->dev_off = off;
  uint64_t at = off;
  for (int op = 0; op < 3; op++) {
    job->op_dev[op] = at;
    uint64_t len = op == GP_OPERAND_C ? job->c_bytes : job->bytes[op];
    uint64_t rounded = 0;
    (void)gd__gpu_pool_round(len, &rounded); /* cannot overflow: alloc_len was computed so */
    at += rounded;
  }
  job->work_dev = at; /* last: work_bytes of it (0 without the cast) */
  job->refs++; /* the worker's, until it finishes the job */
  job->alloc_cmd.type = GD__CMD_ALLOC;
  job->alloc_cmd.job = job;
  gd__gpu_cmd_push(dev, &job->alloc_cmd); /* first: every copy of the job comes after it */
  while (job->pending) {
    gd__gpu_spill *s = job->pending;
    job->pending = s->next;
    s->dst += off;
    gd__gpu_cmd_push(dev, &s->cmd);
  }
  job->pending_tail = &job->pending;
  if (job->submitted && !job->run_queued) {
    job->run_queued = true;
    gd__gpu_cmd_push(dev, &job->run_cmd);
  }
  resume(job);
}

void gd__gpu_wait_remove(gd__gpu_job *job) {
  gd__gpu_dev *dev = job->dev;
  gd__gpu_job **pp = &dev->wait_head;
  dev->wait_tail = NULL;
  while (*pp) {
    if (*pp == job) {
      *pp = job->wait_next;
      job->wait_next = NULL;
      continue;
    }
    dev->wait_tail = *pp;
    pp = &(*pp)->wait_next;
  }
  job->waiting_mem = false;
}

static void assign_waiters(gd__gpu_dev *dev) {
  while (dev->wait_head) {
    gd__gpu_job *job = dev->wait_head;
    uint64_t off;
    if (!gd__gpu_pool_alloc(&dev->pool, job->alloc_len, &off))
      return;
    gd__gpu_wait_remove(job);
    gd__gpu_job_assign_mem(job, off);
  }
}

void gd__gpu_job_free_mem(gd__gpu_job *job) {
  if (!job->mem_ready || job->mem_freed)
    return;
  job->mem_freed = true;
  gd__gpu_pool_free(&job->dev->pool, job->dev_off, job->alloc_len);
  assign_waiters(job->dev);
}

bool gd__gpu_dev_dead(gd__gpu_dev *dev) {
  pthread_mutex_lock(&dev->mu);
  bool dead = dev->dead;
  pthread_mutex_unlock(&dev->mu);
  return dead;
}

void gd__gpu_dev_kill(gd__gpu_dev *dev, const char *what, cudaError_t e) {
  pthread_mutex_lock(&dev->mu);
  if (dev->dead) {
    pthread_mutex_unlock(&dev->mu);
    return;
  }
  dev->dead = true;
  dev->in_service = false;
  dev->info.in_service = false;
  char device[16];
  snprintf(device, sizeof device, "cuda:%d", dev->ordinal);
  gd_log_ctx ctx = {.device = device, .code = "UNAVAILABLE"};
  gd_logx(GD_LOG_ERROR, &ctx,
          "gpu: cuda:%d out of service: %s failed with %s (%s); its jobs fail, other devices "
          "keep serving",
          dev->ordinal, what, cudaGetErrorName(e), cudaGetErrorString(e));
  gd__gpu_job *children = NULL; /* split children: their work never ends now */
  for (gd__gpu_job *j = dev->jobs; j; j = j->next) {
    if (j->waiting_mem)
      gd__gpu_wait_remove(j);
    gd__gpu_fail(j, GP_E_UNAVAILABLE, "cuda:%d went out of service: %s", dev->ordinal,
                 cudaGetErrorString(e));
    if (j->split && !j->split_child) /* its own work is over now: a FAILED that waited goes */
      gd__gpu_split_maybe_final(j);
    if (j->split_child && !j->split_told) {
      j->split_told = true;
      j->owner = NULL; /* the parent's: it may go once told */
      j->refs++;
      j->kill_next = children;
      children = j;
    }
  }
  pthread_mutex_unlock(&dev->mu);
  /* Their parents, on other devices, are told without this device's mu held. */
  gp_error err;
  gp_error_set(&err, GP_E_UNAVAILABLE, "cuda:%d went out of service: %s", dev->ordinal,
               cudaGetErrorString(e));
  while (children) {
    gd__gpu_job *j = children;
    children = j->kill_next;
    gd__gpu_split_child_ended(j->split, true, &err);
    pthread_mutex_lock(&dev->mu);
    gd__gpu_job_unref(j);
    pthread_mutex_unlock(&dev->mu);
  }
}

/* ---- a split job's end (gd_gpu_split.c): what failing and dying do to it -------- */

void gd__gpu_split_child_failed(gd__gpu_job *child, const gp_error *err) {
  gd__gpu_split *split = child->split;
  pthread_mutex_lock(&split->mu);
  if (!split->child_failed) {
    split->child_failed = true;
    split->child_err = *err;
  }
  pthread_mutex_unlock(&split->mu);
}

void gd__gpu_split_child_ended(gd__gpu_split *split, bool failed, const gp_error *err) {
  pthread_mutex_lock(&split->mu);
  assert(split->ends_owed > 0);
  bool last = --split->ends_owed == 0;
  if (failed && !split->child_failed) {
    split->child_failed = true;
    split->child_err = *err;
  }
  pthread_mutex_unlock(&split->mu);
  if (!last)
    return;
  gd__gpu_dev *dev = split->parent->dev; /* the parent lives until SPLIT_DONE is handled */
  pthread_mutex_lock(&dev->mu);
  if (!split->pushed) {
    split->pushed = true;
    split->done_cmd = (gd__gpu_cmd){.type = GD__CMD_SPLIT_DONE, .job = split->parent};
    gd__gpu_cmd_push(dev, &split->done_cmd);
  }
  pthread_mutex_unlock(&dev->mu);
}

/* Under the parent's mu: its own device work is over (finished, or its device died). */
static bool own_work_over(const gd__gpu_job *parent) {
  return parent->finished || parent->dev->dead;
}

bool gd__gpu_split_defer_fail(gd__gpu_job *parent, const gp_error *err) {
  gd__gpu_split *split = parent->split;
  if (split->handled && own_work_over(parent))
    return false;
  if (!split->fail_pending) {
    split->fail_pending = true;
    split->fail_err = *err;
  }
  return true;
}

void gd__gpu_split_maybe_final(gd__gpu_job *parent) {
  gd__gpu_split *split = parent->split;
  if (!split->handled || !own_work_over(parent) || !split->fail_pending || split->final_posted)
    return;
  split->final_posted = true;
  gd_backend_event ev = {.type = GD_EV_FAILED, .err = split->fail_err};
  (void)gd__gpu_post(parent, &ev);
}

gd__gpu_buf *gd__gpu_staging_take(gd__gpu_dev *dev, bool out) {
  gd__gpu_buf *bufs = out ? dev->out_bufs : dev->in_bufs;
  for (uint32_t i = 0; i < dev->nbuf; i++)
    if (bufs[i].state == GD__BUF_FREE && bufs[i].host)
      return &bufs[i];
  return NULL;
}

bool gd__gpu_staging_any_free(gd__gpu_dev *dev, bool out) {
  return gd__gpu_staging_take(dev, out) != NULL;
}

void gd__gpu_direct_out_set(gd__gpu_job *gj, uint8_t *ptr) {
  gd__gpu_buf *buf = &gj->direct_out;
  gj->mapped_out = ptr;
  buf->dev = gj->dev;
  buf->is_out = true;
  buf->host = ptr;
  buf->cap = (size_t)gj->c_bytes;
  buf->state = GD__BUF_FREE;
  buf->done = (gd__gpu_cmd){.type = GD__CMD_OUT_DONE, .buf = buf};
  buf->cmd = (gd__gpu_cmd){.buf = buf};
}

bool gd__gpu_job_has_ipc(const gd__gpu_job *job) {
  return job->ipc_out || job->ipc_in[0] || job->ipc_in[1] || job->ipc_in[2];
}
