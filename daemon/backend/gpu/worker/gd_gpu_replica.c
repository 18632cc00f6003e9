/*
 * gd_gpu_replica.c - resident operands' device copies, on the worker: at RUN each operand of a
 * job is placed (its block, or the device's copy of a resident buffer, made once when new and
 * room allows within gpu.resident_bytes, evicting the least recently used copies no job of this
 * run reads), and freed buffers' copies are swept. The loop's side (a job noting the buffer) is
 * loop/gd_gpu_resident.c, which says the whole design.
 */
#include <stdlib.h>

#include "gd_gpu_work.h"

struct gd__gpu_res {
  gd__gpu_res *next;
  gd_resident_buf *buf; /* referenced while the copy lives */
  uint8_t *dptr;
  uint64_t used;        /* the device's run count when a job last read it (LRU) */
};

static gd__gpu_res *find(const gd__gpu_dev *dev, const gd_resident_buf *buf) {
  for (gd__gpu_res *e = gd__gpu_worker_of_c(dev)->res_cache; e; e = e->next)
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
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_res *entry = *link;
  *link = entry->next;
  if (!dev->dead && worker->s_compute) /* after every kernel already queued that reads it */
    (void)cudaFreeAsync(entry->dptr, worker->s_compute);
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
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  if (need > limit)
    return false;
  uint64_t want = dev->res_bytes > limit - need ? dev->res_bytes - (limit - need) : 0;
  uint64_t could = 0;
  for (gd__gpu_res *e = worker->res_cache; e; e = e->next)
    if (e->used < tick)
      could += e->buf->bytes;
  if (could < want)
    return false;
  while (want > 0) {
    gd__gpu_res **oldest = NULL;
    for (gd__gpu_res **link = &worker->res_cache; *link; link = &(*link)->next)
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
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  uint64_t limit = dev->be->cfg.resident_bytes;
  *e = cudaSuccess;
  if (!make_room(dev, buf->bytes, limit, tick))
    return NULL;
  gd__gpu_res *entry = malloc(sizeof(*entry));
  if (!entry)
    return NULL;
  void *p = NULL;
  if (cudaMallocFromPoolAsync(&p, (size_t)buf->bytes, worker->mempool, worker->s_in) !=
      cudaSuccess) {
    (void)cudaGetLastError(); /* out of memory is not sticky: copy into the job instead */
    free(entry);
    return NULL;
  }
  *e = cudaMemcpyAsync(p, buf->data, (size_t)buf->bytes, cudaMemcpyHostToDevice, worker->s_in);
  if (*e != cudaSuccess) {
    (void)cudaFreeAsync(p, worker->s_in);
    free(entry);
    return NULL;
  }
  count_h2d(dev, buf->bytes);
  gd_resident_buf_ref(buf);
  gd_resident_buf_mark(buf, (int)(dev - dev->be->devs), true); /* the scheduler's index */
  entry->buf = buf;
  entry->dptr = p;
  entry->used = tick;
  entry->next = worker->res_cache;
  worker->res_cache = entry;
  pthread_mutex_lock(&dev->mu);
  dev->res_bytes += buf->bytes;
  dev->res_uploads++;
  dev->res_replicas++;
  pthread_mutex_unlock(&dev->mu);
  return entry;
}

cudaError_t gd__gpu_resident_place(gd__gpu_dev *dev, gd__gpu_job *job, uint8_t *ptr[3]) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  GD__GPU_ON_WORKER(dev);
  uint64_t tick = ++worker->res_tick; /* copies this job reads are used at tick: never evicted */
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
                        worker->s_in);
    if (e != cudaSuccess)
      return e;
    count_h2d(dev, buf->bytes);
  }
  return cudaSuccess;
}

void gd__gpu_resident_sweep(gd__gpu_dev *dev, bool all) {
  GD__GPU_ON_WORKER(dev);
  for (gd__gpu_res **link = &gd__gpu_worker_of(dev)->res_cache; *link;) {
    if (!all && !gd_resident_buf_freed((*link)->buf)) {
      link = &(*link)->next;
      continue;
    }
    drop(dev, link, false);
  }
}
