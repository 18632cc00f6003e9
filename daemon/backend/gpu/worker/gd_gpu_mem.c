/*
 * gd_gpu_mem.c - a device's memory, on its worker thread: a CUDA stream-ordered memory pool
 * (cudaMemPoolCreate) that grows as jobs need memory and gives it back after the device has
 * been idle for gpu.memory_idle_ms (cudaMemPoolTrimTo, down to gpu.memory_keep_bytes).
 *
 * The cap is not CUDA's business: the loop counts every job's bytes against the device's
 * budget with the sub-allocator of gd_gpu_pool.c before it assigns memory (a job that does not
 * fit now waits in the device's FIFO), so the pool never holds more than the budget. Offsets
 * that allocator hands out are only accounting; the job's real memory is one
 * cudaMallocFromPoolAsync block, taken by the GD__CMD_ALLOC that gd__gpu_job_assign_mem queues
 * ahead of the job's copies, and freed with cudaFreeAsync on the copy-in stream when the worker
 * finishes the job. Every use of the block is ordered after its allocation on that stream (the
 * copies in are on it; the kernel and the copies out wait for events recorded on it).
 *
 * When the budget is larger than what other processes left free on the GPU, growing can fail:
 * that job fails with RESOURCE_EXHAUSTED, and the next ones try again.
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_gpu_work.h"
#include "gd_log.h"

/* Reads what the pool holds from the driver into dev->mem_reserved (stats, metrics, info). */
static void refresh_reserved(gd__gpu_dev *dev) {
  uint64_t reserved = 0;
  if (cudaMemPoolGetAttribute(gd__gpu_worker_of(dev)->mempool,
                              cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  pthread_mutex_lock(&dev->mu);
  dev->mem_reserved = (uint64_t)reserved;
  pthread_mutex_unlock(&dev->mu);
}

int gd__gpu_mem_create(gd__gpu_dev *dev, gp_error *err) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev->ordinal;
  cudaError_t e = cudaMemPoolCreate(&worker->mempool, &props);
  if (e != cudaSuccess) {
    worker->mempool = NULL;
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: cudaMemPoolCreate: %s", dev->ordinal,
                        cudaGetErrorString(e));
  }
  /* Without a threshold the pool would hand memory back at every synchronisation; it is given
   * back when the device is idle instead (gd__gpu_mem_trim). */
  uint64_t keep_all = UINT64_MAX;
  e = cudaMemPoolSetAttribute(worker->mempool, cudaMemPoolAttrReleaseThreshold, &keep_all);
  if (e != cudaSuccess)
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: cudaMemPoolSetAttribute: %s",
                        dev->ordinal, cudaGetErrorString(e));
  dev->last_work_us = gd_now_us();
  return 0;
}

void gd__gpu_mem_destroy(gd__gpu_dev *dev) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  if (!worker->mempool)
    return;
  /* Blocks of jobs a dead device never finished: CUDA releases them with the pool. */
  for (gd__gpu_job *j = dev->jobs; j; j = j->next)
    if (gd__gpu_work_half(j)->dptr) {
      (void)cudaFreeAsync(gd__gpu_work_half(j)->dptr, worker->s_in);
      gd__gpu_work_half(j)->dptr = NULL;
    }
  (void)cudaMemPoolDestroy(worker->mempool);
  worker->mempool = NULL;
  (void)cudaGetLastError();
}

void gd__gpu_mem_alloc(gd__gpu_dev *dev, gd__gpu_job *job) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  GD__GPU_ON_WORKER(dev);
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  pthread_mutex_lock(&dev->mu);
  bool skip = dev->dead || job->failed || job->mem_freed || dev->stopping;
  pthread_mutex_unlock(&dev->mu);
  if (skip || work->dptr)
    return;
  void *block = NULL;
  cudaError_t e = cudaMallocFromPoolAsync(&block, job->alloc_len, worker->mempool, worker->s_in);
  if (e == cudaSuccess) {
    work->dptr = block;
    refresh_reserved(dev);
    return;
  }
  if (gd__gpu_error_is_sticky(e)) {
    gd__gpu_dev_kill(dev, "cudaMallocFromPoolAsync", e);
    return;
  }
  (void)cudaGetLastError();
  pthread_mutex_lock(&dev->mu);
  gd__gpu_fail(job, GP_E_RESOURCE_EXHAUSTED,
               "cuda:%d: cannot take %llu more bytes of GPU memory (%s): other processes hold "
               "what gpu.memory_bytes / memory_fraction allowed",
               dev->ordinal, (unsigned long long)job->alloc_len, cudaGetErrorString(e));
  pthread_mutex_unlock(&dev->mu);
}

void gd__gpu_mem_release(gd__gpu_dev *dev, gd__gpu_job *job) {
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  if (!work->dptr)
    return;
  cudaError_t e = cudaFreeAsync(work->dptr, gd__gpu_worker_of(dev)->s_in);
  work->dptr = NULL;
  if (e != cudaSuccess)
    (void)cudaGetLastError(); /* a dead device: the pool goes with it */
}

uint8_t *gd__gpu_mem_at(const gd__gpu_job *job, uint64_t pool_off) {
  const gd__gpu_job_work *work = gd__gpu_work_half_c(job);
  assert(work->dptr && pool_off >= job->dev_off && pool_off - job->dev_off <= job->alloc_len);
  return work->dptr + (pool_off - job->dev_off);
}

bool gd__gpu_mem_trim_due(const gd__gpu_dev *dev, uint64_t now_us, uint64_t *wait_ms) {
  uint64_t idle_ms = dev->be->cfg.memory_idle_ms;
  if (idle_ms == 0 || !gd__gpu_worker_of_c(dev)->mempool || dev->dead || dev->trimmed ||
      dev->mem_reserved <= dev->be->cfg.memory_keep_bytes)
    return false;
  uint64_t due = dev->last_work_us + idle_ms * 1000u;
  *wait_ms = now_us >= due ? 0 : (due - now_us + 999) / 1000;
  return true;
}

void gd__gpu_mem_trim(gd__gpu_dev *dev) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  uint64_t before = dev->mem_reserved;
  /* A block freed with cudaFreeAsync counts as outstanding until the host has seen its stream
   * reach the free: without this the trim released nothing on a real GPU (the fake runtime
   * frees at once). The device is idle, so the wait is short. */
  cudaError_t e = cudaStreamSynchronize(worker->s_in);
  if (e != cudaSuccess)
    (void)cudaGetLastError();
  e = cudaMemPoolTrimTo(worker->mempool, (size_t)dev->be->cfg.memory_keep_bytes);
  if (e != cudaSuccess)
    (void)cudaGetLastError();
  refresh_reserved(dev);
  pthread_mutex_lock(&dev->mu);
  dev->trimmed = true;
  uint64_t after = dev->mem_reserved;
  pthread_mutex_unlock(&dev->mu);
  gd_debug("gpu: cuda:%d idle: pool trimmed from %llu to %llu MiB", dev->ordinal,
           (unsigned long long)(before >> 20), (unsigned long long)(after >> 20));
}

void gd__gpu_mem_note_work(gd__gpu_dev *dev, uint64_t now_us) {
  dev->last_work_us = now_us;
  dev->trimmed = false;
}
