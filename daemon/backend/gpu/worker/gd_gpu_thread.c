/*
 * gd_gpu_thread.c - the life of a device's worker thread: start-up (device, kernel context,
 * streams, memory pool, pinned staging), the serving loop over the command FIFO (gd_gpu_cmd.c;
 * each command handled by gd_gpu_worker.c), the watchdog, giving idle memory back (the pool
 * itself is gd_gpu_mem.c), and shutdown.
 *
 * The worker never waits on a stream while the daemon runs, so a command is handled in
 * microseconds. A kernel fault shows up nowhere by itself (the host funcs after it never run),
 * so while work is in flight the worker wakes every GD__WATCHDOG_MS and asks each stream for
 * its status: an error there takes the device out of service. Only destroy synchronises.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "gd_clock.h"
#include "gd_gpu_work.h"
#include "gd_log.h"

#define GD__WATCHDOG_MS 200

/* While work is in flight: a stream that reports an error (not "not ready") carries a fault
 * that no host func will ever report. */
static void watchdog(gd__gpu_dev *dev) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  cudaStream_t streams[4] = {worker->s_in, worker->s_compute, worker->s_out, worker->s_small};
  for (int i = 0; i < 4 && streams[i]; i++) {
    cudaError_t e = cudaStreamQuery(streams[i]);
    if (e != cudaSuccess && e != cudaErrorNotReady) {
      gd__gpu_dev_kill(dev, "a queued copy or kernel", e);
      return;
    }
  }
}

static bool dev_busy_locked(const gd__gpu_dev *dev) {
  const gd__gpu_dev_work *worker = gd__gpu_worker_of_c(dev);
  return !dev->dead &&
         (dev->active > 0 || dev->inflight_in > 0 || worker->outq_head || worker->small_head);
}

static void timed_wait_us(gd__gpu_dev *dev, uint64_t us) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts); /* pthread_cond_timedwait's default clock */
  ts.tv_sec += (time_t)(us / 1000000u);
  ts.tv_nsec += (long)(us % 1000000u) * 1000L;
  ts.tv_sec += ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  (void)pthread_cond_timedwait(&dev->cv, &dev->mu, &ts);
}

static void timed_wait(gd__gpu_dev *dev, uint64_t ms) { timed_wait_us(dev, ms * 1000u); }

/* Under mu, small jobs in flight or a batch waiting for more (due in forming_us) and no command:
 * waits gpu.small_poll_us for a command (0: only yields the CPU), or until the waiting batch is
 * due, then runs the watchdog when it is due. */
static void small_wait(gd__gpu_dev *dev, uint64_t forming_us) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  uint64_t us = dev->be->cfg.small_poll_us;
  if (worker->forming && forming_us > 0 && (!worker->small_head || forming_us < us))
    us = forming_us;
  if (us > 0) {
    timed_wait_us(dev, us);
  } else {
    pthread_mutex_unlock(&dev->mu);
    (void)sched_yield();
    pthread_mutex_lock(&dev->mu);
  }
  uint64_t now = gd_now_us();
  if (dev->q_head || dev->stopping || now - worker->watchdog_us < GD__WATCHDOG_MS * 1000u)
    return;
  worker->watchdog_us = now;
  pthread_mutex_unlock(&dev->mu);
  watchdog(dev);
  pthread_mutex_lock(&dev->mu);
}

/* Under mu, nothing to do: sleeps until a command comes, or gives the pool's memory back once
 * the device has been idle for gpu.memory_idle_ms. */
static void idle(gd__gpu_dev *dev) {
  uint64_t wait_ms = 0;
  if (!gd__gpu_mem_trim_due(dev, gd_now_us(), &wait_ms)) {
    pthread_cond_wait(&dev->cv, &dev->mu);
    return;
  }
  if (wait_ms > 0) {
    timed_wait(dev, wait_ms);
    return;
  }
  pthread_mutex_unlock(&dev->mu);
  gd__gpu_resident_sweep(dev, false);
  gd__gpu_mem_trim(dev);
  pthread_mutex_lock(&dev->mu);
}

static void serve(gd__gpu_dev *dev) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  bool synced = false;
  pthread_mutex_lock(&dev->mu);
  for (;;) {
    if (dev->q_head || dev_busy_locked(dev))
      gd__gpu_mem_note_work(dev, gd_now_us());
    uint64_t forming_us = 0;
    if (worker->small_head || worker->forming) {
      pthread_mutex_unlock(&dev->mu);
      gd__gpu_small_poll(dev); /* first: a finished pass may let a waiting batch go */
      forming_us = gd__gpu_small_forming(dev);
      pthread_mutex_lock(&dev->mu);
    }
    gd__gpu_cmd *cmd = gd__gpu_cmd_pop(dev);
    if (cmd) {
      synced = false;
      pthread_mutex_unlock(&dev->mu);
      gd__gpu_worker_handle(dev, cmd);
      pthread_mutex_lock(&dev->mu);
      continue;
    }
    if (dev->res_sweep) {
      dev->res_sweep = false;
      pthread_mutex_unlock(&dev->mu);
      gd__gpu_resident_sweep(dev, false);
      pthread_mutex_lock(&dev->mu);
      continue;
    }
    if (dev->stopping) {
      if ((synced || dev->dead) && !worker->small_head && !worker->forming)
        break;
      /* Destroy: let every copy land (its host func queues a completion) and serve those. */
      pthread_mutex_unlock(&dev->mu);
      (void)cudaStreamSynchronize(worker->s_in);
      (void)cudaStreamSynchronize(worker->s_compute);
      (void)cudaStreamSynchronize(worker->s_out);
      if (worker->s_small)
        (void)cudaStreamSynchronize(worker->s_small);
      pthread_mutex_lock(&dev->mu);
      synced = true;
      continue;
    }
    if ((worker->small_head || worker->forming) && !dev->dead) {
      small_wait(dev, forming_us);
    } else if (dev_busy_locked(dev)) {
      timed_wait(dev, GD__WATCHDOG_MS);
      if (!dev->q_head && !dev->stopping && dev_busy_locked(dev)) {
        pthread_mutex_unlock(&dev->mu);
        watchdog(dev);
        pthread_mutex_lock(&dev->mu);
      }
    } else {
      idle(dev);
    }
  }
  pthread_mutex_unlock(&dev->mu);
}

/* The worker's waits of gpu.small_poll_us (20 us) must end on time: with Linux's default timer
 * slack of 50 us a 20 us wait lasted ~70 us, and a small job's completion was seen that much
 * later. Best effort. */
static void tighten_timer_slack(const gd__gpu_dev *dev) {
  if (prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL) != 0)
    gd_log(GD_LOG_INFO, "cuda:%d: worker: PR_SET_TIMERSLACK: %s (small jobs' polls may wake late)",
           dev->ordinal, strerror(errno));
}

static int worker_init(gd__gpu_dev *dev, gp_error *err) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_numa_bind(dev->ordinal); /* first: the staging below is allocated on its node */
  tighten_timer_slack(dev);
  cudaError_t e = cudaSetDevice(dev->ordinal);
  if (e != cudaSuccess)
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: cudaSetDevice: %s", dev->ordinal,
                        cudaGetErrorString(e));
  e = gk_gpu_ctx_create(dev->ordinal, &worker->kctx);
  if (e != cudaSuccess)
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: kernel context: %s", dev->ordinal,
                        cudaGetErrorString(e));
  gk_gpu_ctx_set_pool_keep(worker->kctx, dev->be->cfg.kernel_pool_bytes);
  cudaStream_t *streams[3] = {&worker->s_in, &worker->s_compute, &worker->s_out};
  for (int i = 0; i < 3; i++) {
    e = cudaStreamCreateWithFlags(streams[i], cudaStreamNonBlocking);
    if (e != cudaSuccess)
      return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: cudaStreamCreate: %s", dev->ordinal,
                          cudaGetErrorString(e));
  }
  size_t free_bytes = 0, total_bytes = 0;
  e = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (e != cudaSuccess)
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: cudaMemGetInfo: %s", dev->ordinal,
                        cudaGetErrorString(e));
  uint64_t budget = gd__gpu_device_budget(&dev->be->cfg, free_bytes);
  budget &= ~(uint64_t)(GD_GPU_POOL_ALIGN - 1);
  if (budget == 0)
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: no device memory free (%zu of %zu)",
                        dev->ordinal, free_bytes, total_bytes);
  int rc = gd__gpu_mem_create(dev, err);
  if (rc == 0)
    rc = gd__gpu_small_create(dev, &budget, err); /* its device memory comes off the budget */
  if (rc != 0)
    return rc;
  rc = gd__gpu_pool_init(&dev->pool, budget, err);
  if (rc != 0)
    return rc;
  rc = gd__gpu_staging_create(dev, err);
  if (rc != 0)
    return rc;
  gd_info("gpu: cuda:%d %s: memory on demand up to %llu MiB (given back after %llu ms idle), "
          "%u x %zu KiB staging each way, %u small-job slots of %zu KiB, kernel %s",
          dev->ordinal, dev->info.name, (unsigned long long)(budget >> 20),
          (unsigned long long)dev->be->cfg.memory_idle_ms, dev->nbuf, dev->staging_bytes >> 10,
          dev->nslots, dev->slot_bytes >> 10, dev->be->cfg.kernel);
  return 0;
}

static void worker_fini(gd__gpu_dev *dev) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  /* After a sticky error these calls fail (and are ignored): the process cannot get that
   * device back, but whatever the driver can still release, it does. */
  for (gd__gpu_job *j = dev->jobs; j; j = j->next) /* jobs a dead device never finished */
    gd__gpu_job_events_free(j);
  gd__gpu_small_destroy(dev);
  gd__gpu_ipc_maps_free(dev);
  gd__gpu_staging_destroy(dev);
  gd__gpu_resident_sweep(dev, true); /* before the pool its copies came from */
  gd__gpu_mem_destroy(dev);
  gd__gpu_pool_fini(&dev->pool);
  cudaStream_t *streams[3] = {&worker->s_in, &worker->s_compute, &worker->s_out};
  for (int i = 0; i < 3; i++) {
    if (*streams[i])
      (void)cudaStreamDestroy(*streams[i]);
    *streams[i] = NULL;
  }
  if (worker->kctx)
    gk_gpu_ctx_destroy(worker->kctx);
  worker->kctx = NULL;
  (void)cudaGetLastError();
}

static void *worker_main(void *arg) {
  gd__gpu_dev *dev = arg;
  dev->worker_tid = pthread_self(); /* before init_done: whoever saw the start sees it */
  dev->worker_started = true;
  gp_error err;
  gp_error_clear(&err);
  /* named, so that top -H and /proc/PID/task/TID/stat tell the device workers from the loop */
  char name[16];
  snprintf(name, sizeof name, "gd-cuda%d", dev->ordinal);
  (void)pthread_setname_np(pthread_self(), name); /* best effort: only a name */
  int rc = worker_init(dev, &err);
  pthread_mutex_lock(&dev->mu);
  dev->init_err = err;
  dev->init_done = true;
  if (rc != 0)
    dev->dead = true;
  pthread_cond_broadcast(&dev->cv);
  pthread_mutex_unlock(&dev->mu);
  if (rc == 0)
    serve(dev);
  worker_fini(dev);
  return NULL;
}

int gd__gpu_worker_start(gd__gpu_dev *dev, gp_error *err) {
  int rc = pthread_create(&dev->thread, NULL, worker_main, dev);
  if (rc != 0)
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: cannot start its worker: %s",
                        dev->ordinal, strerror(rc));
  dev->thread_started = true;
  pthread_mutex_lock(&dev->mu);
  while (!dev->init_done)
    pthread_cond_wait(&dev->cv, &dev->mu);
  gp_error init_err = dev->init_err;
  pthread_mutex_unlock(&dev->mu);
  if (init_err.code != 0) {
    gd__gpu_worker_stop(dev);
    if (err)
      *err = init_err;
    return init_err.code;
  }
  return 0;
}

void gd__gpu_worker_stop(gd__gpu_dev *dev) {
  if (!dev->thread_started)
    return;
  pthread_mutex_lock(&dev->mu);
  dev->stopping = true;
  pthread_cond_broadcast(&dev->cv);
  pthread_mutex_unlock(&dev->mu);
  (void)pthread_join(dev->thread, NULL);
  dev->thread_started = false;
  dev->worker_started = false; /* its id may be another thread's from now on */
}
