/*
 * gd_gpu_resident.c - resident operands (protocol put) on the GPU: a job that names one takes
 * it from a copy in device memory, a replica made once per device when a job there first needs
 * it and kept until the handle is freed (its connection's end included) or room is needed for
 * another, instead of the bytes coming through staging with every gemm.
 *
 * The loop (input_resident) only notes the buffer in the job and holds a reference. The worker
 * (at RUN) looks the buffer up in the device's cache, a list only it touches: found, the
 * kernel reads the copy; not found, it allocates a copy from the device's memory pool on the
 * copy-in stream and copies the host bytes there (pageable: CUDA stages them before the call
 * returns). Each device's copies are bounded by gpu.resident_bytes: past it, the copies least
 * recently used by a job are evicted (none the current job reads) when that makes room; else
 * (or with no device memory) the bytes are copied into the job's own block, as staging would
 * have (always for C, which the kernel overwrites with the result). A copy let go of (evicted,
 * or its buffer freed: at the worker's next command or idle pass) is freed in order on the
 * compute stream, after every kernel already queued that reads it.
 *
 * Where the copies are shows in the buffer's device bits (gd_resident_buf_mark): the scheduler
 * sends a connection's next job to the least loaded device holding its operands while that is
 * not more than one job busier than the least loaded of all (core/gd_sched.c); else the job
 * goes there and a replica is made there. A pipelining client so ends with a replica on every
 * device it keeps busy, and each request's operand crosses the host bus only once per device.
 */
#include <stdlib.h>

#include "gd_gpu_internal.h"

struct gd__gpu_res {
  gd__gpu_res *next;
  gd_resident_buf *buf; /* referenced while the copy lives */
  uint8_t *dptr;
  uint64_t used;        /* the device's run count when a job last read it (LRU) */
};

bool gd__gpu_op_input_resident(gd_backend *b, gd_job *job, gp_operand op, gd_resident_buf *res) {
  (void)b;
  gd__gpu_job *gj = gd__gpu_job_of(job);
  /* a small job's operands travel side by side in its slot: it takes the bytes as sent */
  if (!gj || gj->slot || op > GP_OPERAND_C || gj->res[op] || res->bytes != gj->bytes[op])
    return false;
  gd__gpu_dev *dev = gj->dev;
  pthread_mutex_lock(&dev->mu);
  gd_resident_buf_ref(res);
  gj->res[op] = res;
  gj->loop.received += res->bytes; /* counted as landed: nothing of it comes through input() */
  pthread_mutex_unlock(&dev->mu);
  return true;
}

static gd__gpu_res *find(const gd__gpu_dev *dev, const gd_resident_buf *buf) {
  for (gd__gpu_res *e = dev->res_cache; e; e = e->next)
    if (e->buf == buf)
      return e;
  return NULL;
}

static void count_h2d(gd__gpu_dev *dev, uint64_t bytes) {
  pthread_mutex_lock(&dev->mu);
  dev->bytes_h2d += bytes;
  pthread_mutex_unlock(&dev->mu);
}

/* Unlinks *link's copy and frees it in stream order; evicted: to make room (counted). */
static void drop(gd__gpu_dev *dev, gd__gpu_res **link, bool evicted) {
  gd__gpu_res *entry = *link;
  *link = entry->next;
  if (!dev->dead && dev->s_compute) /* after every kernel already queued that reads it */
    (void)cudaFreeAsync(entry->dptr, dev->s_compute);
  gd_resident_buf_mark(entry->buf, (int)(dev - dev->be->devs), false);
  pthread_mutex_lock(&dev->mu);
  dev->res_bytes -= entry->buf->bytes;
  dev->res_replicas--;
  if (evicted)
    dev->res_evictions++;
  pthread_mutex_unlock(&dev->mu);
  gd_resident_buf_unref(entry->buf);
  free(entry);
}

/* Room for need more bytes within limit: evicts the least recently used copies no job of this
 * run reads (used < tick), oldest first, when together with the free room they make enough;
 * false (nothing evicted) otherwise. */
static bool make_room(gd__gpu_dev *dev, uint64_t need, uint64_t limit, uint64_t tick) {
  if (need > limit)
    return false;
  uint64_t want = dev->res_bytes > limit - need ? dev->res_bytes - (limit - need) : 0;
  uint64_t could = 0;
  for (gd__gpu_res *e = dev->res_cache; e; e = e->next)
    if (e->used < tick)
      could += e->buf->bytes;
  if (could < want)
    return false;
  while (want > 0) {
    gd__gpu_res **oldest = NULL;
    for (gd__gpu_res **link = &dev->res_cache; *link; link = &(*link)->next)
      if ((*link)->used < tick && (!oldest || (*link)->used < (*oldest)->used))
        oldest = link;
    uint64_t bytes = (*oldest)->buf->bytes;
    drop(dev, oldest, true);
    want = bytes >= want ? 0 : want - bytes;
  }
  return true;
}

/* A new device copy of buf, or NULL when gpu.resident_bytes has no room (even after evicting)
 * or the device no memory (the caller then copies into the job); *e is a failed copy's
 * error. */
static gd__gpu_res *upload(gd__gpu_dev *dev, gd_resident_buf *buf, uint64_t tick,
                           cudaError_t *e) {
  uint64_t limit = dev->be->cfg.resident_bytes;
  *e = cudaSuccess;
  if (!make_room(dev, buf->bytes, limit, tick))
    return NULL;
  gd__gpu_res *entry = malloc(sizeof(*entry));
  if (!entry)
    return NULL;
  void *p = NULL;
  if (cudaMallocFromPoolAsync(&p, (size_t)buf->bytes, dev->mempool, dev->s_in) != cudaSuccess) {
    (void)cudaGetLastError(); /* out of memory is not sticky: copy into the job instead */
    free(entry);
    return NULL;
  }
  *e = cudaMemcpyAsync(p, buf->data, (size_t)buf->bytes, cudaMemcpyHostToDevice, dev->s_in);
  if (*e != cudaSuccess) {
    (void)cudaFreeAsync(p, dev->s_in);
    free(entry);
    return NULL;
  }
  count_h2d(dev, buf->bytes);
  gd_resident_buf_ref(buf);
  gd_resident_buf_mark(buf, (int)(dev - dev->be->devs), true); /* the scheduler's index */
  entry->buf = buf;
  entry->dptr = p;
  entry->used = tick;
  entry->next = dev->res_cache;
  dev->res_cache = entry;
  pthread_mutex_lock(&dev->mu);
  dev->res_bytes += buf->bytes;
  dev->res_uploads++;
  dev->res_replicas++;
  pthread_mutex_unlock(&dev->mu);
  return entry;
}

cudaError_t gd__gpu_resident_place(gd__gpu_dev *dev, gd__gpu_job *job, uint8_t *ptr[3]) {
  uint64_t tick = ++dev->res_tick; /* copies this job reads are used at tick: never evicted */
  for (int op = 0; op < 3; op++) {
    ptr[op] = gd__gpu_mem_at(job, job->op_dev[op]);
    gd_resident_buf *buf = job->res[op];
    if (!buf)
      continue;
    cudaError_t e = cudaSuccess;
    gd__gpu_res *entry = NULL;
    if (op != GP_OPERAND_C) { /* C is the kernel's output too: always the job's own copy */
      entry = find(dev, buf);
      if (!entry)
        entry = upload(dev, buf, tick, &e);
    }
    if (e != cudaSuccess)
      return e;
    if (entry) {
      entry->used = tick;
      ptr[op] = entry->dptr;
      continue;
    }
    e = cudaMemcpyAsync(ptr[op], buf->data, (size_t)buf->bytes, cudaMemcpyHostToDevice,
                        dev->s_in);
    if (e != cudaSuccess)
      return e;
    count_h2d(dev, buf->bytes);
  }
  return cudaSuccess;
}

void gd__gpu_resident_sweep(gd__gpu_dev *dev, bool all) {
  for (gd__gpu_res **link = &dev->res_cache; *link;) {
    if (!all && !gd_resident_buf_freed((*link)->buf)) {
      link = &(*link)->next;
      continue;
    }
    drop(dev, link, false);
  }
}

void gd__gpu_op_resident_freed(gd_backend *b) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  for (size_t i = 0; i < be->ndev; i++) {
    gd__gpu_dev *dev = &be->devs[i];
    pthread_mutex_lock(&dev->mu);
    if (dev->res_bytes > 0) {
      dev->res_sweep = true;
      pthread_cond_signal(&dev->cv);
    }
    pthread_mutex_unlock(&dev->mu);
  }
}
