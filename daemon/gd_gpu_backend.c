/*
 * gd_gpu_backend.c - the GPU backend's ops table: what the loop thread calls.
 *
 * Nothing here calls CUDA (see gd_gpu_internal.h for the thread rules). The
 * loop reserves a job's device memory from the pool of the least-loaded
 * device, lands payload bytes in that device's input staging buffers and
 * queues commands for its worker; completions come back from the worker
 * through gd_backend_post().
 *
 * Input, per job, on the loop:
 *   - a job gets pool memory at prepare() if it fits now and nobody waits
 *     before it (FIFO, so a large job is not starved by small ones); else it
 *     waits. prepare() refuses only what could never fit on any device;
 *   - input_window() lends the job the free part of a staging buffer (one
 *     operand's contiguous bytes); the session reads the socket into it;
 *   - input() counts the bytes. A full buffer, or the end of an operand,
 *     goes to the worker (COPY_IN) and the job takes the next free buffer; if
 *     none is free (both in flight) it sets *pause, and the first buffer that
 *     comes back posts GD_EV_INPUT_RESUME;
 *   - bytes handed to input() from elsewhere are copied into the buffer; when
 *     there is no buffer (or no pool memory yet) they are spilled to ordinary
 *     memory and copied pageable by the worker, and the session is paused, so
 *     a spill is at most what the session had already read;
 *   - submit() sends the last partial buffer and then RUN (after every copy of
 *     the job in the worker's FIFO).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_gpu_internal.h"
#include "gd_log.h"

#define MIB (1024ull * 1024ull)
#define GD__STAGING_MIN 4096u /* as the config parser allows */
#define GD__STAGING_MAX (1024ull * MIB)
#define GD__STAGING_BUFFERS_MAX 64u

static gd__gpu_job *job_of(gd_job *job) { return job ? (gd__gpu_job *)job->backend_data : NULL; }

/* ---- helpers the worker shares (all under mu) ----------------------------- */

bool gd__gpu_post(gd__gpu_job *job, gd_backend_event *ev) {
  if (!job->owner || job->dev->stopping)
    return false;
  ev->job = job->owner;
  return gd_backend_post(&job->dev->be->base, ev) == 0;
}

void gd__gpu_fail(gd__gpu_job *job, int code, const char *fmt, ...) {
  if (job->failed)
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
  (void)gd__gpu_post(job, &ev);
}

void gd__gpu_job_ref(gd__gpu_job *job) { job->refs++; }

static void job_free_spills(gd__gpu_job *job) {
  while (job->pending) {
    gd__gpu_spill *s = job->pending;
    job->pending = s->next;
    free(s);
    job->refs--; /* each spill held one; the caller holds another */
  }
  job->pending_tail = &job->pending;
}

void gd__gpu_job_unref(gd__gpu_job *job) {
  if (--job->refs > 0)
    return;
  gd__gpu_dev *dev = job->dev;
  if (job->prev)
    job->prev->next = job->next;
  else
    dev->jobs = job->next;
  if (job->next)
    job->next->prev = job->prev;
  free(job);
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
static void assign_mem(gd__gpu_job *job, uint64_t off) {
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
  job->refs++; /* the worker's, until it finishes the job */
  while (job->pending) {
    gd__gpu_spill *s = job->pending;
    job->pending = s->next;
    s->dst += off;
    gd__gpu_worker_push(dev, &s->cmd);
  }
  job->pending_tail = &job->pending;
  if (job->submitted && !job->run_queued) {
    job->run_queued = true;
    gd__gpu_worker_push(dev, &job->run_cmd);
  }
  resume(job);
}

static void wait_remove(gd__gpu_job *job) {
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
    wait_remove(job);
    assign_mem(job, off);
  }
}

void gd__gpu_job_free_mem(gd__gpu_job *job) {
  if (!job->mem_ready || job->mem_freed)
    return;
  job->mem_freed = true;
  gd__gpu_pool_free(&job->dev->pool, job->dev_off, job->alloc_len);
  assign_waiters(job->dev);
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
  gd_error("gpu: cuda:%d out of service: %s failed with %s (%s); its jobs fail, other devices "
           "keep serving",
           dev->ordinal, what, cudaGetErrorName(e), cudaGetErrorString(e));
  for (gd__gpu_job *j = dev->jobs; j; j = j->next) {
    if (j->waiting_mem)
      wait_remove(j);
    gd__gpu_fail(j, GP_E_UNAVAILABLE, "cuda:%d went out of service: %s", dev->ordinal,
                 cudaGetErrorString(e));
  }
  pthread_mutex_unlock(&dev->mu);
}

/* ---- staging on the loop (under mu) ---------------------------------------- */

static void claim(gd__gpu_job *job, gd__gpu_buf *buf, gp_operand op, uint64_t offset) {
  buf->state = GD__BUF_FILLING;
  buf->job = job;
  job->refs++;
  buf->operand = op;
  buf->op_offset = offset;
  buf->fill = 0;
  buf->dst = job->op_dev[op] + offset;
  job->cur = buf;
}

/* The job's current buffer goes to the worker (or back to the free set when empty). */
static void flush(gd__gpu_job *job) {
  gd__gpu_buf *buf = job->cur;
  if (!buf)
    return;
  job->cur = NULL;
  gd__gpu_dev *dev = job->dev;
  if (buf->fill == 0 || job->failed || dev->dead) {
    buf->state = GD__BUF_FREE;
    buf->job = NULL;
    buf->fill = 0;
    gd__gpu_staging_freed(dev);
    gd__gpu_job_unref(job);
    return;
  }
  buf->state = GD__BUF_BUSY;
  buf->cmd.type = GD__CMD_COPY_IN;
  buf->cmd.buf = buf;
  buf->cmd.job = job;
  dev->inflight_in++;
  gd__gpu_worker_push(dev, &buf->cmd);
}

static bool continues(const gd__gpu_buf *buf, gp_operand op, uint64_t offset) {
  return buf && buf->operand == op && buf->op_offset + buf->fill == offset && buf->fill < buf->cap;
}

static uint64_t job_input_total(const gd__gpu_job *job) {
  return job->bytes[GP_OPERAND_A] + job->bytes[GP_OPERAND_B] +
         (job->has_c ? job->bytes[GP_OPERAND_C] : 0);
}

/* Keeps bytes that found no staging buffer. Before the job has pool memory they wait in its
 * pending list (their offset made absolute later); after, they go to the worker at once. */
static int spill(gd__gpu_job *job, gp_operand op, uint64_t offset, const void *data, size_t len,
                 gp_error *err) {
  gd__gpu_spill *s = malloc(sizeof(*s) + len);
  if (!s)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory buffering %zu payload bytes",
                        len);
  memset(s, 0, sizeof(*s));
  s->cmd.type = GD__CMD_SPILL_IN;
  s->cmd.job = job;
  s->len = len;
  memcpy(s->data, data, len);
  job->refs++;
  if (job->mem_ready) {
    s->dst = job->op_dev[op] + offset;
    gd__gpu_worker_push(job->dev, &s->cmd);
  } else {
    /* relative to the job's block until assign_mem() adds the block's offset */
    uint64_t rel = 0;
    for (int i = 0; i < (int)op; i++) {
      uint64_t rounded = 0;
      (void)gd__gpu_pool_round(job->bytes[i], &rounded);
      rel += rounded;
    }
    s->dst = rel + offset;
    *job->pending_tail = s;
    job->pending_tail = &s->next;
  }
  return 0;
}

/* ---- the ops ------------------------------------------------------------- */

static bool job_sizes(gd__gpu_job *job, gp_error *err) {
  uint64_t total = 0;
  for (int op = 0; op < 3; op++) {
    uint64_t len = 0, rounded = 0;
    if (!gp_gemm_operand_bytes(&job->hdr, (gp_operand)op, &len) ||
        !gd__gpu_pool_round(len, &rounded) || total > UINT64_MAX - rounded) {
      gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "operand %s is too large",
                   gp_operand_name((gp_operand)op));
      return false;
    }
    if (op == GP_OPERAND_C)
      job->c_bytes = len;
    total += rounded;
  }
  job->alloc_len = total;
  return true;
}

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

/* The device already serving a job of this session, or -1.
 *
 * One connection's jobs stay on one device: its worker sends results back strictly in the order
 * the jobs ran, so the chunks of one reply are never interleaved with those of another reply on
 * the same connection (the session writes each chunk as it comes). Different connections still
 * spread over every device. */
static int session_device(gd__gpu_backend *be, const void *session) {
  if (!session)
    return -1;
  for (size_t i = 0; i < be->ndev; i++) {
    gd__gpu_dev *dev = &be->devs[i];
    bool found = false;
    pthread_mutex_lock(&dev->mu);
    if (dev->in_service && !dev->dead)
      for (gd__gpu_job *j = dev->jobs; j && !found; j = j->next)
        found = j->owner && j->owner->session == session && !j->finished;
    pthread_mutex_unlock(&dev->mu);
    if (found)
      return (int)i;
  }
  return -1;
}

/* Seconds of work, roughly: the kernel at ~20 TFLOP/s plus the bytes through the socket at
 * ~5 GB/s. Only the comparison between devices matters. */
static double job_load(const gd__gpu_job *job) {
  return gp_gemm_flops(&job->hdr) / 20e12 + (double)(job_input_total(job) + job->c_bytes) / 5e9;
}

static int op_prepare(gd_backend *b, gd_job *job, gp_error *err) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  gd__gpu_job *gj = calloc(1, sizeof(*gj));
  if (!gj)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory");
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
  if (!job_sizes(gj, err)) {
    free(gj);
    return err ? err->code : GP_E_RESOURCE_EXHAUSTED;
  }
  bool any = false;
  uint64_t largest = 0;
  int hint = session_device(be, job->session);
  if (hint < 0)
    hint = job->device;
  gd__gpu_dev *dev = pick_device(be, hint, gj->alloc_len, &any, &largest);
  if (!dev) {
    uint64_t need = gj->alloc_len;
    free(gj);
    if (!any)
      return gp_error_set(err, GP_E_UNAVAILABLE, "no GPU is in service");
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "needs %llu bytes of GPU memory; the largest device budget is %llu "
                        "(gpu.memory_bytes / gpu.memory_fraction)",
                        (unsigned long long)need, (unsigned long long)largest);
  }
  gj->dev = dev;
  job->device = (int)(dev - be->devs);
  gj->owner = job;
  gj->refs = 1; /* the loop's, until release() */
  gj->run_cmd.type = GD__CMD_RUN;
  gj->run_cmd.job = gj;
  gj->load = job_load(gj);
  pthread_mutex_lock(&dev->mu);
  gj->next = dev->jobs;
  if (dev->jobs)
    dev->jobs->prev = gj;
  dev->jobs = gj;
  dev->active++;
  dev->load += gj->load;
  uint64_t off;
  if (!dev->wait_head && gd__gpu_pool_alloc(&dev->pool, gj->alloc_len, &off)) {
    assign_mem(gj, off);
  } else {
    gj->waiting_mem = true;
    if (dev->wait_tail)
      dev->wait_tail->wait_next = gj;
    else
      dev->wait_head = gj;
    dev->wait_tail = gj;
  }
  pthread_mutex_unlock(&dev->mu);
  job->backend_data = gj;
  return 0;
}

static bool op_input_window(gd_backend *b, gd_job *job, gp_operand operand, uint64_t offset,
                            void **ptr, size_t *len) {
  (void)b;
  gd__gpu_job *gj = job_of(job);
  if (!gj || operand > GP_OPERAND_C || offset >= gj->bytes[operand])
    return false;
  gd__gpu_dev *dev = gj->dev;
  bool ok = false;
  pthread_mutex_lock(&dev->mu);
  if (!gj->failed && gj->mem_ready && !dev->dead) {
    if (gj->cur && !continues(gj->cur, operand, offset))
      flush(gj);
    if (!gj->cur) {
      gd__gpu_buf *buf = gd__gpu_staging_take(dev, false);
      if (buf)
        claim(gj, buf, operand, offset);
    }
    gd__gpu_buf *buf = gj->cur;
    if (buf) {
      uint64_t left = gj->bytes[operand] - offset;
      size_t room = buf->cap - buf->fill;
      *ptr = buf->host + buf->fill;
      *len = left < room ? (size_t)left : room;
      ok = true;
    }
  }
  pthread_mutex_unlock(&dev->mu);
  return ok;
}

/* Lands len bytes of operand at offset in the job's staging (they may already be there). Returns
 * how many were taken; fewer than len when no buffer was free. */
static size_t land(gd__gpu_job *job, gp_operand op, uint64_t offset, const uint8_t *data,
                   size_t len) {
  size_t done = 0;
  while (done < len) {
    if (job->cur && !continues(job->cur, op, offset + done))
      flush(job);
    if (!job->cur) {
      gd__gpu_buf *buf = gd__gpu_staging_take(job->dev, false);
      if (!buf)
        break;
      claim(job, buf, op, offset + done);
    }
    gd__gpu_buf *buf = job->cur;
    size_t n = buf->cap - buf->fill;
    if (n > len - done)
      n = len - done;
    if (data + done != buf->host + buf->fill) /* else the socket read landed it there already */
      memcpy(buf->host + buf->fill, data + done, n);
    buf->fill += n;
    done += n;
    if (buf->fill == buf->cap || buf->op_offset + buf->fill == job->bytes[op])
      flush(job);
  }
  return done;
}

static int op_input(gd_backend *b, gd_job *job, gp_operand operand, uint64_t offset,
                    const void *data, size_t len, bool *pause, gp_error *err) {
  (void)b;
  gd__gpu_job *gj = job_of(job);
  if (pause)
    *pause = false;
  if (!gj)
    return gp_error_set(err, GP_E_INTERNAL, "input for a job the GPU backend does not know");
  if (operand > GP_OPERAND_C || offset > gj->bytes[operand] ||
      len > gj->bytes[operand] - offset)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "payload bytes past the end of operand %s",
                        gp_operand_name(operand));
  gd__gpu_dev *dev = gj->dev;
  int rc = 0;
  pthread_mutex_lock(&dev->mu);
  gj->received += len;
  if (gj->failed || dev->dead) {
    pthread_mutex_unlock(&dev->mu);
    return 0; /* its FAILED event is on the way; the bytes are of no use */
  }
  size_t taken = gj->mem_ready ? land(gj, operand, offset, data, len) : 0;
  if (taken < len)
    rc = spill(gj, operand, offset + taken, (const uint8_t *)data + taken, len - taken, err);
  if (rc != 0) {
    gj->failed = true; /* the session answers with err; later bytes are dropped */
    dev->jobs_failed++;
  } else {
    bool more = gj->received < job_input_total(gj);
    bool room = gj->mem_ready && ((gj->cur && gj->cur->fill < gj->cur->cap) ||
                                  gd__gpu_staging_any_free(dev, false));
    if (more && !room) {
      gj->paused = true;
      if (pause)
        *pause = true;
    }
  }
  pthread_mutex_unlock(&dev->mu);
  return rc;
}

static int op_submit(gd_backend *b, gd_job *job, gp_error *err) {
  (void)b;
  gd__gpu_job *gj = job_of(job);
  if (!gj)
    return gp_error_set(err, GP_E_INTERNAL, "submit of a job the GPU backend does not know");
  gd__gpu_dev *dev = gj->dev;
  pthread_mutex_lock(&dev->mu);
  flush(gj);
  gj->submitted = true;
  gj->paused = false; /* every byte is in: no resume is owed (and none may follow the reply) */
  if (gj->mem_ready && !gj->run_queued) {
    gj->run_queued = true;
    gd__gpu_worker_push(dev, &gj->run_cmd);
  }
  pthread_mutex_unlock(&dev->mu);
  return 0;
}

static void op_output_consumed(gd_backend *b, gd_job *job, const void *chunk, size_t len) {
  (void)b;
  (void)len;
  gd__gpu_job *gj = job_of(job);
  if (!gj)
    return;
  gd__gpu_dev *dev = gj->dev;
  pthread_mutex_lock(&dev->mu);
  for (uint32_t i = 0; i < dev->nbuf; i++) {
    gd__gpu_buf *buf = &dev->out_bufs[i];
    if (buf->host == chunk && buf->job == gj && buf->posted) {
      buf->posted = false;
      buf->cmd.type = GD__CMD_OUT_FREE;
      buf->cmd.buf = buf;
      buf->cmd.job = gj;
      gd__gpu_worker_push(dev, &buf->cmd);
      break;
    }
  }
  pthread_mutex_unlock(&dev->mu);
}

static void op_release(gd_backend *b, gd_job *job) {
  (void)b;
  gd__gpu_job *gj = job_of(job);
  if (!gj)
    return;
  job->backend_data = NULL;
  gd__gpu_dev *dev = gj->dev;
  pthread_mutex_lock(&dev->mu);
  gj->owner = NULL;
  gj->paused = false;
  if (gj->cur)
    gj->cur->fill = 0; /* nobody will read the result: copy nothing more */
  flush(gj);
  for (uint32_t i = 0; i < dev->nbuf; i++) {
    gd__gpu_buf *buf = &dev->out_bufs[i];
    if (buf->job == gj && buf->posted) {
      buf->posted = false;
      buf->cmd.type = GD__CMD_OUT_FREE;
      buf->cmd.buf = buf;
      buf->cmd.job = gj;
      gd__gpu_worker_push(dev, &buf->cmd);
    }
  }
  if (gj->waiting_mem)
    wait_remove(gj);
  job_free_spills(gj);
  if (!gj->mem_ready) {
    gd__gpu_job_retire(gj); /* the worker never had it */
  } else if (!gj->run_queued && !gj->dropped) {
    gj->dropped = true;
    gj->run_cmd.type = GD__CMD_DROP; /* frees its memory after its copies, in FIFO order */
    gd__gpu_worker_push(dev, &gj->run_cmd);
  }
  gd__gpu_job_unref(gj);
  pthread_mutex_unlock(&dev->mu);
}

/* ---- info and stats ------------------------------------------------------- */

static void pack_str(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s, n);
}

static void pack_kv_u64(msgpack_packer *pk, const char *key, uint64_t v) {
  pack_str(pk, key);
  msgpack_pack_uint64(pk, v);
}

static void op_pack_info(gd_backend *b, msgpack_packer *pk) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  msgpack_pack_map(pk, 6);
  pack_str(pk, "backend");
  pack_str(pk, "gpu");
  pack_str(pk, "devices");
  msgpack_pack_array(pk, be->ndev);
  for (size_t i = 0; i < be->ndev; i++) {
    gd__gpu_dev *dev = &be->devs[i];
    pthread_mutex_lock(&dev->mu);
    gd_device_info info = dev->info;
    uint64_t pool = dev->pool.size;
    pthread_mutex_unlock(&dev->mu);
    char cc[16];
    snprintf(cc, sizeof(cc), "%d.%d", info.cc_major, info.cc_minor);
    msgpack_pack_map(pk, 8);
    pack_str(pk, "id");
    msgpack_pack_int(pk, info.id);
    pack_str(pk, "device");
    char name[32];
    snprintf(name, sizeof(name), "cuda:%d", info.id);
    pack_str(pk, name);
    pack_str(pk, "name");
    pack_str(pk, info.name);
    pack_kv_u64(pk, "memory", info.memory_bytes);
    pack_kv_u64(pk, "pool_bytes", pool);
    pack_str(pk, "sms");
    msgpack_pack_int(pk, info.sm_count);
    pack_str(pk, "compute_capability");
    pack_str(pk, cc);
    pack_str(pk, "in_service");
    if (info.in_service)
      msgpack_pack_true(pk);
    else
      msgpack_pack_false(pk);
  }
  size_t nk = 0;
  const gk_kernel *const *kernels = gk_kernels(&nk);
  pack_str(pk, "kernels");
  msgpack_pack_array(pk, nk);
  for (size_t i = 0; i < nk; i++) {
    msgpack_pack_map(pk, 2);
    pack_str(pk, "name");
    pack_str(pk, kernels[i]->name);
    pack_str(pk, "description");
    pack_str(pk, kernels[i]->description ? kernels[i]->description : "");
  }
  pack_str(pk, "kernel");
  pack_str(pk, be->cfg.kernel);
  pack_kv_u64(pk, "staging_bytes", be->cfg.staging_bytes);
  pack_kv_u64(pk, "staging_buffers", be->cfg.staging_buffers);
}

static void op_pack_stats(gd_backend *b, msgpack_packer *pk) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  msgpack_pack_map(pk, 1);
  pack_str(pk, "devices");
  msgpack_pack_array(pk, be->ndev);
  for (size_t i = 0; i < be->ndev; i++) {
    gd__gpu_dev *dev = &be->devs[i];
    pthread_mutex_lock(&dev->mu);
    uint64_t v[] = {dev->busy_us,   dev->jobs_done, dev->jobs_failed, dev->bytes_h2d,
                    dev->bytes_d2h, dev->pool.in_use, dev->pool.size, dev->active};
    bool in_service = dev->in_service;
    pthread_mutex_unlock(&dev->mu);
    static const char *const keys[] = {"busy_us",   "jobs",        "jobs_failed", "bytes_h2d",
                                       "bytes_d2h", "pool_in_use", "pool_bytes",  "active"};
    msgpack_pack_map(pk, 2 + sizeof(keys) / sizeof(keys[0]));
    pack_str(pk, "id");
    msgpack_pack_int(pk, dev->ordinal);
    pack_str(pk, "in_service");
    if (in_service)
      msgpack_pack_true(pk);
    else
      msgpack_pack_false(pk);
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
      pack_kv_u64(pk, keys[k], v[k]);
  }
}

static size_t op_devices(gd_backend *b, gd_device_info *out, size_t max) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  size_t n = 0;
  for (size_t i = 0; i < be->ndev && n < max; i++) {
    pthread_mutex_lock(&be->devs[i].mu);
    out[n++] = be->devs[i].info;
    pthread_mutex_unlock(&be->devs[i].mu);
  }
  return n;
}

static size_t op_busy(gd_backend *b) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  size_t n = 0;
  for (size_t i = 0; i < be->ndev; i++) {
    pthread_mutex_lock(&be->devs[i].mu);
    n += be->devs[i].active;
    pthread_mutex_unlock(&be->devs[i].mu);
  }
  return n;
}

/* Host memory a GPU job holds: its payload goes through the preallocated pinned staging, so
 * only a spill (at most what the session had read when it was paused) is its own. */
static uint64_t op_host_bytes(gd_backend *b, const gd_job *job) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  uint64_t total = job->operand_bytes[GP_OPERAND_A] + job->operand_bytes[GP_OPERAND_B] +
                   (job->has_c ? job->operand_bytes[GP_OPERAND_C] : 0);
  return total < be->cfg.staging_bytes ? total : be->cfg.staging_bytes;
}

static size_t op_kernels(gd_backend *b, const char **names, size_t max) {
  (void)b;
  size_t n = 0;
  const gk_kernel *const *kernels = gk_kernels(&n);
  for (size_t i = 0; i < n && i < max; i++)
    names[i] = kernels[i]->name;
  return n;
}

static void dev_teardown(gd__gpu_dev *dev) {
  gd__gpu_worker_stop(dev);
  /* Jobs the scheduler never released, or that a dead device still holds: free them. */
  gd__gpu_job *j = dev->jobs;
  while (j) {
    gd__gpu_job *next = j->next;
    if (j->owner)
      j->owner->backend_data = NULL;
    job_free_spills(j);
    free(j);
    j = next;
  }
  dev->jobs = NULL;
  pthread_cond_destroy(&dev->cv);
  pthread_mutex_destroy(&dev->mu);
}

static void op_destroy(gd_backend *b) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  if (!be)
    return;
  for (size_t i = 0; i < be->ndev; i++)
    dev_teardown(&be->devs[i]);
  free(be->devs);
  free(be);
}

static const gd_backend_ops gpu_ops = {
    .name = "gpu",
    .prepare = op_prepare,
    .input_window = op_input_window,
    .input = op_input,
    .submit = op_submit,
    .output_consumed = op_output_consumed,
    .release = op_release,
    .host_bytes = op_host_bytes,
    .kernels = op_kernels,
    .pack_info = op_pack_info,
    .pack_stats = op_pack_stats,
    .devices = op_devices,
    .busy = op_busy,
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
  be->base.ops = &gpu_ops;
  be->cfg = *cfg;
  if (!be->cfg.kernel[0])
    snprintf(be->cfg.kernel, sizeof(be->cfg.kernel), "auto");
  be->devs = devs;
  size_t up = 0;
  gp_error last;
  gp_error_clear(&last);
  for (size_t i = 0; i < count; i++) {
    gd__gpu_dev *dev = &devs[i];
    dev->be = be;
    dev->ordinal = ordinals[i];
    pthread_mutex_init(&dev->mu, NULL);
    pthread_cond_init(&dev->cv, NULL);
    be->ndev = i + 1;
    if (gd__gpu_device_describe(dev->ordinal, &dev->info, &last) == 0 &&
        gd__gpu_worker_start(dev, &last) == 0) {
      dev->in_service = true;
      up++;
    } else {
      dev->dead = true;
      dev->info.id = dev->ordinal;
      dev->info.in_service = false;
      gd_warn("gpu: cuda:%d left out: %s", dev->ordinal, last.message);
    }
  }
  if (up == 0) {
    op_destroy(&be->base);
    return gp_error_set(err, GP_E_UNAVAILABLE, "no usable CUDA device: %s", last.message);
  }
  *out = &be->base;
  return 0;
}
