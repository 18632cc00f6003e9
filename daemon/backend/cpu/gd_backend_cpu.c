/*
 * gd_backend_cpu.c - see gd_backend_cpu.h and the job life in gd_backend.h.
 *
 * Threads: prepare, input_window, input, submit, release and destroy run on
 * the loop thread; workers only pop the queue, compute and post. The job
 * queue and the counters are under one mutex. The list of live jobs is the
 * loop's alone.
 */
#include "gd_backend_cpu.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gd_clock.h"
#include "gd_completion.h"
#include "gd_cpu_bufcache.h"
#include "gd_list.h"
#include "gd_log.h"
#include "gd_problem.h"
#include "gd_stats.h"
#include "gk_cpu.h"

#define CPU_THREADS_MAX 4096

/* A job runs as one or more parts (row runs of C, gk_cpu_gemm_part), taken by whichever workers
 * are free, in FIFO order: a lone large request uses every core, and a queue of many requests
 * keeps every core busy with whole ones. */
/* cpu_job.buf's slots: a, b, c as sent, and with a bias (c is then the bias row) the result's
 * own buffer. */
/* Beyond a, b, c: the result's own buffer (with a bias row in c), the output cast's work area. */
enum { CPU_BUF_OUT = 3, CPU_BUF_WORK = 4, CPU_BUFS = 5 };

typedef struct cpu_job {
  gd_job *job;
  uint8_t *buf[CPU_BUFS];        /* our own (NULL where in place, or not needed) */
  size_t cap[CPU_BUFS];          /* their sizes, to give them back to the cache */
  const uint8_t *in[2];          /* where a and b are read: buf, or the client's region */
  uint8_t *c;                    /* where C is read and written: buf, or the result's region */
  unsigned parts;                /* fixed at submit */
  unsigned parts_taken;          /* lock: the next part a worker takes */
  unsigned parts_done;           /* lock */
  bool late;                     /* lock: its deadline had passed when its first part started */
  int rc;                        /* lock: the first part's failure, 0 while none */
  uint64_t start_us;             /* lock: when its first part started */
  struct cpu_job *queue_next;    /* in the FIFO while parts are left to take */
  struct cpu_job *prev, *next;   /* live list (loop thread) */
} cpu_job;

typedef struct {
  gd_backend base; /* first */
  unsigned threads, blas_threads;
  uint64_t min_part_flops;       /* 0: never split a job */
  uint64_t host_memory;          /* physical memory, read once: devices() runs per admission */
  pthread_t *workers;
  unsigned started;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  cpu_job *head, *tail;          /* FIFO of submitted jobs with parts left to take (lock) */
  bool stopping;                 /* lock */
  size_t busy;                   /* submitted, not yet completed (lock) */
  uint64_t busy_us, jobs_done;   /* lock */
  uint64_t parts_run;            /* lock */
  cpu_job *live;                 /* loop thread */
  gd_cpu_bufcache cache;         /* loop thread */
} cpu_backend;

static cpu_backend *cpu_of(gd_backend *b) { return (cpu_backend *)b; }

/* ---- worker side --------------------------------------------------------- */

static gk_problem problem_of(const gd_job *job, cpu_job *cj) {
  gk_problem p;
  gd_problem_from_hdr(&job->hdr, &p);
  if (cj) {
    p.a = cj->in[GP_OPERAND_A];
    p.b = cj->in[GP_OPERAND_B];
    p.c = cj->c;
    p.bias = job->hdr.bias ? cj->buf[GP_OPERAND_C] : NULL; /* one row for every batch entry */
    p.work = cj->buf[CPU_BUF_WORK];
  }
  p.cast = gp_gemm_casts(&job->hdr); /* C and the bias in the out dtype, the product in work */
  p.out_dtype = gd_problem_dtype(gp_gemm_out_dtype(&job->hdr));
  return p;
}

/* Losing a completion would leave its client waiting forever: retry while memory is short. */
static void post_or_retry(cpu_backend *cb, const gd_backend_event *ev) {
  for (unsigned attempt = 0;; attempt++) {
    int rc = gd_completion_post(cb->base.sink, ev);
    if (rc == 0)
      return;
    if (attempt == 0)
      gd_warn("cpu backend: cannot queue a completion (%s); retrying", gp_code_name(rc));
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
}

static void post_failed(cpu_backend *cb, gd_job *job, const gp_error *err) {
  gd_backend_event ev;
  memset(&ev, 0, sizeof ev);
  ev.type = GD_EV_FAILED;
  ev.job = job;
  ev.err = *err;
  post_or_retry(cb, &ev);
}

/* The job's last part is done: post its result or its failure. The loop may free cj as soon as
 * the event is posted, so nothing touches cj after that. */
static void complete_job(cpu_backend *cb, cpu_job *cj, bool late, int rc, uint64_t start,
                         uint64_t end) {
  gd_job *job = cj->job;
  gp_error err;
  if (late) {
    gp_error_set(&err, GP_E_DEADLINE_EXCEEDED, "not started within timeout_ms = %llu (queued %llu us)",
                 (unsigned long long)job->hdr.timeout_ms,
                 (unsigned long long)(start - job->admitted_us));
    post_failed(cb, job, &err);
    return;
  }
  if (rc != 0) {
    gp_error_set(&err, rc == -ENOMEM ? GP_E_RESOURCE_EXHAUSTED : GP_E_INTERNAL,
                 "cpu gemm failed: %s", strerror(-rc));
    post_failed(cb, job, &err);
    return;
  }
  gp_gemm_result_hdr *r = &job->result;
  r->m = job->hdr.m;
  r->n = job->hdr.n;
  r->batch = job->hdr.batch;
  r->dtype = gp_gemm_out_dtype(&job->hdr); /* the result's */
  snprintf(r->device, sizeof r->device, "cpu");
  snprintf(r->kernel, sizeof r->kernel, "openblas");
  r->queue_us = start - job->submitted_us; /* waiting for a worker, not for the payload */
  r->transfer_in_us = 0;
  r->compute_us = end - start;
  r->transfer_out_us = 0;
  gd_backend_event ev;
  memset(&ev, 0, sizeof ev);
  ev.type = GD_EV_OUTPUT_CHUNK;
  ev.job = job;
  ev.data = cj->c; /* in the result's region when located there (locate): nothing left to copy */
  ev.len = (size_t)job->result_bytes;
  ev.offset = 0;
  ev.last = true;
  post_or_retry(cb, &ev);
}

/* Takes the next part of the first queued job (lock held); the job leaves the queue with its
 * last part. The first part to start checks the deadline for the whole job. */
static cpu_job *take_part(cpu_backend *cb, unsigned *part, bool *late) {
  cpu_job *cj = cb->head;
  assert(cj && cj->parts_taken < cj->parts);
  *part = cj->parts_taken++;
  if (cj->parts_taken == cj->parts) {
    cb->head = cj->queue_next;
    if (!cb->head)
      cb->tail = NULL;
  }
  if (*part == 0) {
    cj->start_us = gd_now_us();
    cj->late = cj->job->deadline_us && cj->start_us > cj->job->deadline_us;
  }
  *late = cj->late;
  return cj;
}

static void *worker_main(void *arg) {
  cpu_backend *cb = arg;
  (void)pthread_setname_np(pthread_self(), "gd-cpu"); /* best effort, for top -H */
  if (pthread_mutex_lock(&cb->lock) != 0)
    return NULL;
  for (;;) {
    while (!cb->stopping && !cb->head)
      pthread_cond_wait(&cb->wake, &cb->lock);
    if (cb->stopping)
      break;
    unsigned part;
    bool late;
    cpu_job *cj = take_part(cb, &part, &late);
    if (cb->head)
      pthread_cond_signal(&cb->wake); /* more parts or jobs: wake the next idle worker */
    pthread_mutex_unlock(&cb->lock);

    uint64_t t0 = gd_now_us();
    int rc = 0;
    if (!late) {
      gk_problem p = problem_of(cj->job, cj);
      rc = gk_cpu_gemm_part(&p, part, cj->parts, NULL);
    }
    uint64_t t1 = gd_now_us();

    if (pthread_mutex_lock(&cb->lock) != 0)
      return NULL;
    cb->busy_us += t1 - t0;
    cb->parts_run++;
    if (rc != 0 && cj->rc == 0)
      cj->rc = rc;
    assert(cj->parts_done < cj->parts);
    if (++cj->parts_done < cj->parts)
      continue;
    cb->jobs_done++;
    assert(cb->busy > 0);
    cb->busy--;
    bool job_late = cj->late;
    int job_rc = cj->rc;
    uint64_t start = cj->start_us;
    pthread_mutex_unlock(&cb->lock);
    complete_job(cb, cj, job_late, job_rc, start, t1);
    if (pthread_mutex_lock(&cb->lock) != 0)
      return NULL;
  }
  pthread_mutex_unlock(&cb->lock);
  return NULL;
}

/* How many parts a job runs as: one per min_part_flops of work, at most one per worker and
 * per row of C. Depends on the shape alone, so host_bytes and submit agree. */
static unsigned parts_of(const cpu_backend *cb, const gd_job *job) {
  if (cb->min_part_flops == 0 || cb->threads < 2)
    return 1;
  const gp_gemm_hdr *h = &job->hdr;
  double flops = 2.0 * (double)h->m * (double)h->n * (double)h->k * (double)h->batch;
  double rows = (double)h->m * (double)h->batch;
  double parts = flops / (double)cb->min_part_flops;
  if (parts > cb->threads)
    parts = cb->threads;
  if (parts > rows)
    parts = rows;
  return parts < 1 ? 1 : (unsigned)parts;
}

/* ---- loop side ----------------------------------------------------------- */

static uint64_t cpu_host_bytes(gd_backend *b, const gd_job *job) {
  gk_problem p = problem_of(job, NULL);
  return job->operand_bytes[0] + job->operand_bytes[1] + job->operand_bytes[2] +
         (job->hdr.bias ? job->result_bytes : 0) + gk_problem_work_bytes(&p) +
         gk_cpu_scratch_bytes_split(&p, parts_of(cpu_of(b), job));
}

static void free_cpu_job(cpu_backend *cb, cpu_job *cj) {
  for (int i = 0; i < CPU_BUFS; i++)
    gd_cpu_bufcache_give(&cb->cache, cj->buf[i], cj->cap[i]);
  free(cj);
}

static int cpu_prepare(gd_backend *b, gd_job *job, gp_error *err) {
  cpu_backend *cb = cpu_of(b);
  cpu_job *cj = calloc(1, sizeof *cj);
  if (!cj)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of host memory");
  cj->job = job;
  for (int op = 0; op < 3; op++) {
    /* Fresh memory reserves address space (pages are touched when the payload lands); a
     * cached buffer is already faulted in. */
    cj->buf[op] = gd_cpu_bufcache_take(&cb->cache, (size_t)job->operand_bytes[op], &cj->cap[op]);
    if (!cj->buf[op]) {
      free_cpu_job(cb, cj);
      return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of host memory for %s (%llu bytes)",
                          gp_operand_name((gp_operand)op),
                          (unsigned long long)job->operand_bytes[op]);
    }
  }
  /* c is the bias row: the result needs its own buffer; the cast computes in a work area */
  const gk_problem shape = problem_of(job, NULL);
  const uint64_t extra[2] = {job->hdr.bias ? job->result_bytes : 0, gk_problem_work_bytes(&shape)};
  for (int i = 0; i < 2; i++) {
    if (extra[i] == 0)
      continue;
    cj->buf[CPU_BUF_OUT + i] =
        gd_cpu_bufcache_take(&cb->cache, (size_t)extra[i], &cj->cap[CPU_BUF_OUT + i]);
    if (!cj->buf[CPU_BUF_OUT + i]) {
      free_cpu_job(cb, cj);
      return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of host memory for %s (%llu bytes)",
                          i == 0 ? "the result" : "the result before its cast",
                          (unsigned long long)extra[i]);
    }
  }
  cj->in[GP_OPERAND_A] = cj->buf[GP_OPERAND_A];
  cj->in[GP_OPERAND_B] = cj->buf[GP_OPERAND_B];
  cj->c = cj->buf[job->hdr.bias ? CPU_BUF_OUT : GP_OPERAND_C];
  job->device = 0;
  job->backend_data = cj;
  cj->next = cb->live;
  if (cb->live)
    cb->live->prev = cj;
  cb->live = cj;
  return 0;
}

/* Where an operand's bytes land: C sent with beta where C is computed (our buffer, or the
 * result's region), a bias row and a and b in their own buffers. */
static uint8_t *input_at(gd_job *job, gp_operand operand) {
  cpu_job *cj = job->backend_data;
  return operand == GP_OPERAND_C && !job->hdr.bias ? cj->c : cj->buf[operand];
}

static bool cpu_input_window(gd_backend *b, gd_job *job, gp_operand operand, uint64_t offset,
                             void **ptr, size_t *len) {
  (void)b;
  if ((int)operand < 0 || operand > GP_OPERAND_C || offset >= job->operand_bytes[operand])
    return false;
  *ptr = input_at(job, operand) + offset;
  *len = (size_t)(job->operand_bytes[operand] - offset);
  return true;
}

static int cpu_input(gd_backend *b, gd_job *job, gp_operand operand, uint64_t offset,
                     const void *data, size_t len, bool *pause, gp_error *err) {
  (void)b;
  *pause = false;
  if ((int)operand < 0 || operand > GP_OPERAND_C || offset > job->operand_bytes[operand] ||
      len > job->operand_bytes[operand] - offset)
    return gp_error_set(err, GP_E_INTERNAL, "payload of %s past its end",
                        gp_operand_name(operand));
  uint8_t *dst = input_at(job, operand) + offset;
  if (dst != data) /* already there when the session read into our window */
    memcpy(dst, data, len);
  return 0;
}

/* Shared memory in place (gd_backend.h): BLAS reads a and b from the client's mapping and
 * computes C straight in the result's region, so a region costs no copy at all. C sent with
 * beta (from a region or the socket) lands where it is computed: the result's region when that
 * is in place (input_window points there), else our buffer. */
/* Our own buffer in slot (an operand or CPU_BUF_OUT) is not needed: back to the cache. */
static void drop_buffer(cpu_backend *cb, cpu_job *cj, int slot) {
  gd_cpu_bufcache_give(&cb->cache, cj->buf[slot], cj->cap[slot]);
  cj->buf[slot] = NULL;
  cj->cap[slot] = 0;
}

/* Whether ptr may be read as the job's elements in place: a client may name any byte offset,
 * and the kernels load whole elements (the socket fuzzer's odd offset for f16 was a misaligned
 * uint16_t load under UBSan). An unaligned operand takes the copy into our buffer instead. */
static bool aligned_for(gp_dtype dtype, const uint8_t *ptr) {
  return (uintptr_t)ptr % gp_dtype_size(dtype) == 0;
}

static bool cpu_output_mapped(gd_backend *b, gd_job *job, gd_region *r, uint8_t *ptr) {
  (void)r;
  if (!aligned_for(gp_gemm_out_dtype(&job->hdr), ptr))
    return false;
  cpu_job *cj = job->backend_data;
  drop_buffer(cpu_of(b), cj, job->hdr.bias ? CPU_BUF_OUT : GP_OPERAND_C);
  cj->c = ptr;
  return true;
}

static bool cpu_input_mapped(gd_backend *b, gd_job *job, gp_operand operand, gd_region *r,
                             const uint8_t *ptr) {
  (void)r;
  cpu_job *cj = job->backend_data;
  if (operand != GP_OPERAND_A && operand != GP_OPERAND_B)
    return false; /* C is written where it is read: it must be copied there */
  if (!aligned_for(job->hdr.dtype, ptr))
    return false;
  drop_buffer(cpu_of(b), cj, operand);
  cj->in[operand] = ptr;
  return true;
}

/* The locate op: the CPU backend takes shared-memory places only. */
static bool cpu_locate(gd_backend *b, gd_job *job, const gd_where *where) {
  if (where->kind != GD_WHERE_MAPPED)
    return false;
  if (where->out)
    return cpu_output_mapped(b, job, where->r, where->ptr);
  return cpu_input_mapped(b, job, where->operand, where->r, where->ptr);
}

static int cpu_submit(gd_backend *b, gd_job *job, gp_error *err) {
  cpu_backend *cb = cpu_of(b);
  cpu_job *cj = job->backend_data;
  if (pthread_mutex_lock(&cb->lock) != 0)
    return gp_error_set(err, GP_E_INTERNAL, "cpu backend lock failed");
  cj->parts = parts_of(cb, job);
  cj->parts_taken = cj->parts_done = 0;
  cj->queue_next = NULL;
  if (cb->tail)
    cb->tail->queue_next = cj;
  else
    cb->head = cj;
  cb->tail = cj;
  cb->busy++;
  pthread_cond_signal(&cb->wake);
  pthread_mutex_unlock(&cb->lock);
  return 0;
}

static void cpu_output_consumed(gd_backend *b, gd_job *job, const void *chunk, size_t len) {
  (void)b, (void)job, (void)chunk, (void)len; /* C stays in its buffer until release */
}

static void unlink_live(cpu_backend *cb, cpu_job *cj) {
  GD_LIST_UNLINK(cb->live, cj);
}

static void cpu_release(gd_backend *b, gd_job *job) {
  cpu_backend *cb = cpu_of(b);
  cpu_job *cj = job->backend_data;
  if (!cj)
    return;
  unlink_live(cb, cj);
  free_cpu_job(cb, cj);
  job->backend_data = NULL;
}

static uint64_t host_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

static size_t cpu_devices(gd_backend *b, gd_device_info *out, size_t max) {
  cpu_backend *cb = cpu_of(b);
  if (max < 1)
    return 1;
  memset(&out[0], 0, sizeof out[0]);
  out[0].id = -1;
  snprintf(out[0].name, sizeof out[0].name, "cpu (OpenBLAS, %u workers x %u threads)",
           cb->threads, cb->blas_threads);
  out[0].memory_bytes = cb->host_memory;
  out[0].sm_count = (int)cb->threads;
  out[0].in_service = true;
  if (pthread_mutex_lock(&cb->lock) == 0) {
    out[0].busy_us = cb->busy_us;
    pthread_mutex_unlock(&cb->lock);
  }
  return 1;
}

static size_t cpu_kernels(gd_backend *b, const char **names, size_t max) {
  (void)b;
  if (max >= 1)
    names[0] = "openblas";
  return 1;
}

static size_t cpu_busy(gd_backend *b) {
  cpu_backend *cb = cpu_of(b);
  size_t busy = 0;
  if (pthread_mutex_lock(&cb->lock) == 0) {
    busy = cb->busy;
    pthread_mutex_unlock(&cb->lock);
  }
  return busy;
}

static void cpu_pack_info(gd_backend *b, msgpack_packer *pk) {
  cpu_backend *cb = cpu_of(b);
  msgpack_pack_map(pk, 4);
  gd_pack_kv_u64(pk, "threads", cb->threads);
  gd_pack_kv_u64(pk, "blas_threads", cb->blas_threads);
  gd_pack_kv_u64(pk, "min_part_mflop", cb->min_part_flops / 1000000);
  gd_pack_kv_u64(pk, "buffer_cache_bytes", cb->cache.limit);
}

static void cpu_pack_stats(gd_backend *b, msgpack_packer *pk) {
  cpu_backend *cb = cpu_of(b);
  uint64_t busy_us = 0, done = 0, parts = 0;
  size_t busy = 0;
  if (pthread_mutex_lock(&cb->lock) == 0) {
    busy_us = cb->busy_us;
    done = cb->jobs_done;
    parts = cb->parts_run;
    busy = cb->busy;
    pthread_mutex_unlock(&cb->lock);
  }
  msgpack_pack_map(pk, 1);
  gd_pack_str(pk, "devices");
  msgpack_pack_array(pk, 1);
  msgpack_pack_map(pk, 6);
  msgpack_pack_str(pk, 2);
  msgpack_pack_str_body(pk, "id", 2);
  msgpack_pack_int(pk, -1);
  gd_pack_kv_str(pk, "name", "cpu");
  gd_pack_kv_u64(pk, "busy_us", busy_us);
  gd_pack_kv_u64(pk, "jobs", done);
  gd_pack_kv_u64(pk, "outstanding", busy);
  gd_pack_kv_u64(pk, "parts", parts); /* pieces run: more than jobs when large ones were split */
}

static void stop_workers(cpu_backend *cb) {
  if (pthread_mutex_lock(&cb->lock) == 0) {
    cb->stopping = true;
    cb->head = cb->tail = NULL; /* queued jobs are dropped; they stay on the live list */
    pthread_cond_broadcast(&cb->wake);
    pthread_mutex_unlock(&cb->lock);
  }
  for (unsigned i = 0; i < cb->started; i++)
    pthread_join(cb->workers[i], NULL);
  cb->started = 0;
}

static void cpu_destroy(gd_backend *b) {
  cpu_backend *cb = cpu_of(b);
  stop_workers(cb);
  while (cb->live) {
    cpu_job *cj = cb->live;
    cb->live = cj->next;
    cj->job->backend_data = NULL;
    free_cpu_job(cb, cj);
  }
  gd_cpu_bufcache_free(&cb->cache);
  pthread_cond_destroy(&cb->wake);
  pthread_mutex_destroy(&cb->lock);
  free(cb->workers);
  free(cb);
}

static const gd_backend_ops cpu_ops = {
    .name = "cpu",
    .output_in_job_memory = true, /* C goes out from the job's buffer: no copy */
    .leading_dims = true,         /* lda, ldb, ldc go to OpenBLAS as they are */
    .prepare = cpu_prepare,
    .input_window = cpu_input_window,
    .input = cpu_input,
    .submit = cpu_submit,
    .output_consumed = cpu_output_consumed,
    .locate = cpu_locate,
    .release = cpu_release,
    .host_bytes = cpu_host_bytes,
    .kernels = cpu_kernels,
    .pack_info = cpu_pack_info,
    .pack_stats = cpu_pack_stats,
    .devices = cpu_devices,
    .busy = cpu_busy,
    .destroy = cpu_destroy,
};

static unsigned core_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (unsigned)n : 1u;
}

int gd_backend_cpu_create(const gd_cpu_config *cfg, gd_backend **out, gp_error *err) {
  cpu_backend *cb = calloc(1, sizeof *cb);
  if (!cb)
    return gp_error_set(err, GP_E_INTERNAL, "out of memory");
  cb->base.ops = &cpu_ops;
  cb->threads = cfg->threads ? cfg->threads : core_count();
  if (cb->threads > CPU_THREADS_MAX)
    cb->threads = CPU_THREADS_MAX;
  cb->blas_threads = cfg->blas_threads ? cfg->blas_threads : 1;
  cb->min_part_flops = (uint64_t)cfg->min_part_mflop * 1000000u;
  cb->host_memory = host_memory();
  gd_cpu_bufcache_init(&cb->cache, cfg->buffer_cache_bytes);
  gk_cpu_set_blas_threads((int)cb->blas_threads);
  cb->workers = calloc(cb->threads, sizeof *cb->workers);
  if (!cb->workers || pthread_mutex_init(&cb->lock, NULL) != 0) {
    free(cb->workers);
    free(cb);
    return gp_error_set(err, GP_E_INTERNAL, "out of memory");
  }
  if (pthread_cond_init(&cb->wake, NULL) != 0) {
    pthread_mutex_destroy(&cb->lock);
    free(cb->workers);
    free(cb);
    return gp_error_set(err, GP_E_INTERNAL, "cannot create a condition variable");
  }
  for (unsigned i = 0; i < cb->threads; i++) {
    int rc = pthread_create(&cb->workers[i], NULL, worker_main, cb);
    if (rc != 0) {
      gp_error_set(err, GP_E_INTERNAL, "cannot start cpu worker %u: %s", i, strerror(rc));
      cpu_destroy(&cb->base);
      return GP_E_INTERNAL;
    }
    cb->started++;
  }
  *out = &cb->base;
  return 0;
}
