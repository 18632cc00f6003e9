/*
 * gd_gpu_worker.c - what the thread that owns one GPU (gd_gpu_thread.c) does with each
 * command of its queue (gd_gpu_cmd.c). Worker thread only:
 *
 *   ALLOC     the job's device block from the pool, on the copy-in stream (gd_gpu_mem.c).
 *
 *   COPY_IN   staging buffer -> device on the copy-in stream, timed by the
 *             buffer's events; a host func queues IN_DONE when it lands.
 *   SPILL_IN  the rare bytes that found no staging buffer: a pageable copy.
 *   RUN       the compute stream waits for the job's input copies (an event
 *             recorded on the copy-in stream after them: the queue is FIFO, so
 *             every copy of the job was issued before its RUN), runs the
 *             kernel, and the job joins the output FIFO.
 *   REG/UNREG a shared-memory region pinned for DMA, or let go of (gd_gpu_shm.c). A job whose
 *             operands lie in a registered region copies them straight from there at RUN,
 *             and one whose result goes into one copies C straight there in one chunk.
 *   IPC_*     a client's CUDA IPC handle opened on this device, or closed (gd_gpu_ipc.c); a
 *             job naming one copies device to device from and into that memory.
 *   OUT_*     C leaves the device in chunks of staging_bytes into the free
 *             output buffers on the copy-out stream (which waits for the
 *             kernel's event); each chunk's host func queues OUT_DONE and the
 *             worker posts it to the loop, which writes it to the socket while
 *             the next chunk copies; OUT_FREE gives the buffer back.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_gpu_work.h"
#include "gd_log.h"

/* ---- the queue ---------------------------------------------------------- */

/* The host func of every copy: runs on CUDA's callback thread, where no CUDA call is allowed.
 * It only hands the completion node to the worker. */
static void CUDART_CB host_func_done(void *arg) {
  gd__gpu_cmd *cmd = arg;
  gd__gpu_dev *dev = cmd->buf->dev;
  pthread_mutex_lock(&dev->mu);
  gd__gpu_cmd_push(dev, cmd);
  pthread_mutex_unlock(&dev->mu);
}

/* ---- errors ------------------------------------------------------------- */

/* Under mu: a buffer goes back to the free set and lets go of its job. */
static void buf_free_locked(gd__gpu_buf *buf) {
  gd__gpu_job *job = buf->job;
  buf->state = GD__BUF_FREE;
  buf->job = NULL;
  buf->fill = 0;
  buf->posted = false;
  gd__gpu_staging_freed(buf->dev);
  if (job)
    gd__gpu_job_unref(job);
}

/* A job that ends failed or abandoned (its client gone) after its RUN began may still have its
 * kernel, or a block's copy out, queued on the compute and output streams, reading and writing
 * its device block: the block's free, queued on the copy-in stream, must come after them, or the
 * pool hands the block to the next job's copy in while that kernel still writes C there. So the
 * copy-in stream waits for what those two streams hold now (the job's own events, no longer
 * needed for timing, mark it). A job that ends normally needs none of this: its last chunk of C
 * was copied after its kernel. */
static void free_after_device_work(gd__gpu_dev *dev, gd__gpu_job *job) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  const cudaStream_t busy[2] = {worker->s_compute, worker->s_out};
  const cudaEvent_t marks[2] = {work->ev_c1, work->ev_o1};
  for (int i = 0; i < 2; i++) {
    if (gd__gpu_dev_dead(dev))
      return; /* the context is unusable: the pool goes with it */
    if (cudaEventRecord(marks[i], busy[i]) != cudaSuccess ||
        cudaStreamWaitEvent(worker->s_in, marks[i], 0) != cudaSuccess) {
      (void)cudaGetLastError();
      (void)cudaStreamSynchronize(busy[i]); /* the same order, the slow way */
    }
  }
}

/* The worker is done with a job: no device work of it remains queued or running, or (failed or
 * abandoned) the free of its block waits for it in stream order. A split's child then tells its
 * parent (gd_gpu_split.c), with no device mu held. */
static void job_finish(gd__gpu_dev *dev, gd__gpu_job *job) {
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  pthread_mutex_lock(&dev->mu);
  const bool cut_short = job->failed || !job->owner;
  pthread_mutex_unlock(&dev->mu);
  if (work->events_made && work->dptr && cut_short)
    free_after_device_work(dev, job);
  gd__gpu_mem_release(dev, job);
  gd__gpu_job_events_free(job);
  gd__gpu_split *tell = NULL;
  gp_error why;
  gp_error_clear(&why);
  pthread_mutex_lock(&dev->mu);
  if (!job->finished) {
    job->finished = true;
    if (!job->failed && work->started)
      dev->jobs_done++;
    if (job->split_child && !job->split_told) {
      job->split_told = true;
      job->owner = NULL; /* the parent's: it may go once told */
      tell = job->split;
      if (job->failed || !work->started)
        gp_error_set(&why, GP_E_INTERNAL, "cuda:%d: its rows of the split job failed",
                     dev->ordinal);
    }
    gd__gpu_job_free_mem(job);
    gd__gpu_job_retire(job);
    if (job->split && !job->split_child)
      gd__gpu_split_maybe_final(job); /* a failure that waited for its own work to end */
    gd__gpu_job_unref(job); /* the worker's reference */
  }
  pthread_mutex_unlock(&dev->mu);
  if (tell) /* the split outlives the child: its parent waits for this */
    gd__gpu_split_child_ended(tell, why.code != GP_OK, &why);
}

/* ---- input -------------------------------------------------------------- */

static void handle_copy_in(gd__gpu_dev *dev, gd__gpu_buf *buf) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_job *job = buf->job;
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  pthread_mutex_lock(&dev->mu);
  bool skip = dev->dead || job->failed || job->mem_freed || dev->stopping || !work->dptr;
  pthread_mutex_unlock(&dev->mu);
  cudaError_t e = cudaSuccess;
  bool queued = false;
  const char *what = "copy in";
  if (!skip) {
    e = cudaEventRecord(buf->ev_start, worker->s_in);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(gd__gpu_mem_at(job, buf->dst), buf->host, buf->fill,
                          cudaMemcpyHostToDevice, worker->s_in);
    queued = e == cudaSuccess;
    if (e == cudaSuccess)
      e = cudaEventRecord(buf->ev_end, worker->s_in);
    if (e == cudaSuccess) {
      what = "cudaLaunchHostFunc";
      e = cudaLaunchHostFunc(worker->s_in, host_func_done, &buf->done);
    }
    if (e == cudaSuccess)
      return; /* IN_DONE frees the buffer */
    gd__gpu_job_cuda_error(dev, job, what, e);
    /* The buffer must not be refilled while a copy may still read it. */
    if (queued && !gd__gpu_dev_dead(dev))
      (void)cudaStreamSynchronize(worker->s_in);
  }
  pthread_mutex_lock(&dev->mu);
  dev->inflight_in--;
  buf_free_locked(buf);
  pthread_mutex_unlock(&dev->mu);
}

static void handle_in_done(gd__gpu_dev *dev, gd__gpu_buf *buf) {
  float ms = 0.0f;
  if (cudaEventElapsedTime(&ms, buf->ev_start, buf->ev_end) != cudaSuccess) {
    ms = 0.0f;
    (void)cudaGetLastError();
  }
  pthread_mutex_lock(&dev->mu);
  gd__gpu_work_half(buf->job)->in_ms += ms;
  dev->bytes_h2d += buf->fill;
  dev->inflight_in--;
  buf_free_locked(buf);
  pthread_mutex_unlock(&dev->mu);
}

static void handle_spill(gd__gpu_dev *dev, gd__gpu_spill *spill) {
  gd__gpu_job *job = spill->cmd.job;
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  pthread_mutex_lock(&dev->mu);
  bool skip = dev->dead || job->failed || job->mem_freed || dev->stopping || !work->dptr;
  pthread_mutex_unlock(&dev->mu);
  if (!skip) {
    /* Pageable source: CUDA stages it before returning, so it may be freed right after. */
    cudaError_t e = cudaMemcpyAsync(gd__gpu_mem_at(job, spill->dst), spill->data, spill->len,
                                    cudaMemcpyHostToDevice, gd__gpu_worker_of(dev)->s_in);
    if (e != cudaSuccess)
      gd__gpu_job_cuda_error(dev, job, "copy in (pageable)", e);
  }
  pthread_mutex_lock(&dev->mu);
  dev->bytes_h2d += spill->len;
  gd__gpu_job_unref(job);
  pthread_mutex_unlock(&dev->mu);
  free(spill);
}

/* ---- compute ------------------------------------------------------------ */

/* The copies straight from registered regions or a client's device memory (mapped_in; CUDA
 * IPC: device to device) on the copy-in stream, after every staged copy of the job: the event
 * recorded after them covers both. A job run in row blocks copies only B here; its A and C go
 * block by block (gd_gpu_pieces.c). */
static cudaError_t copy_direct_in(gd__gpu_dev *dev, gd__gpu_job *job) {
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  uint64_t bytes = 0, ipc_bytes = 0;
  cudaError_t e = cudaSuccess;
  for (int op = 0; op < 3 && e == cudaSuccess; op++) {
    if (!job->mapped_in[op] || (work->pieces > 1 && op != GP_OPERAND_B))
      continue;
    e = gd__gpu_copy_from_region(dev, job, (gp_operand)op, 0, job->bytes[op]);
    *(job->ipc_in[op] ? &ipc_bytes : &bytes) += job->bytes[op]; /* device memory, or pages */
  }
  if (e == cudaSuccess && ipc_bytes > 0)
    gd__gpu_ipc_count(dev->be, ipc_bytes, 0);
  if (e == cudaSuccess && bytes > 0)
    gd__gpu_count_direct_in(dev, bytes);
  return e;
}

static void pump_out(gd__gpu_dev *dev);

/* Launches the job; false when it failed (then it is finished by the caller). */
static bool run_launch(gd__gpu_dev *dev, gd__gpu_job *job) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  const char *what = "cudaEventCreate";
  uint8_t *ptr[3];
  bool out_queued = false; /* a block's rows of C may still be copying into the region */
  work->pieces = gd__gpu_pieces_of(dev, job);
  work->out_early = 0;
  cudaError_t e = gd__gpu_job_events_make(job);
  if (e == cudaSuccess) {
    what = "copy in (shared memory)";
    e = copy_direct_in(dev, job);
  }
  if (e == cudaSuccess) {
    what = "copy in (resident)";
    e = gd__gpu_resident_place(dev, job, ptr);
  }
  if (e == cudaSuccess && work->pieces > 1) {
    e = gd__gpu_pieces_launch(dev, job, ptr, &what, &out_queued);
    goto launched;
  }
  if (e == cudaSuccess) {
    what = "cudaEventRecord";
    e = cudaEventRecord(work->ev_in, worker->s_in);
  }
  if (e == cudaSuccess) {
    what = "cudaStreamWaitEvent";
    e = cudaStreamWaitEvent(worker->s_compute, work->ev_in, 0);
  }
  if (e == cudaSuccess)
    e = cudaEventRecord(work->ev_c0, worker->s_compute);
  if (e == cudaSuccess) {
    gk_problem p;
    gd__gpu_job_problem(job, &p, ptr[GP_OPERAND_A], ptr[GP_OPERAND_B], ptr[GP_OPERAND_C],
                        gd__gpu_mem_at(job, job->work_dev));
    what = "gemm launch";
    e = gd__gpu_launch(dev, worker->kctx, job, &p, worker->s_compute);
  }
  if (e == cudaSuccess) {
    what = "cudaEventRecord";
    e = cudaEventRecord(work->ev_c1, worker->s_compute);
  }
launched:
  if (e != cudaSuccess) {
    /* A copy straight from or into a region may still touch it, and the failure posted below
     * lets the region go (unregistered and unmapped, maybe by another device's worker): the
     * copy must be over first. */
    if (work->direct_in && !gd__gpu_dev_dead(dev))
      (void)cudaStreamSynchronize(worker->s_in);
    if (out_queued && !gd__gpu_dev_dead(dev))
      (void)cudaStreamSynchronize(worker->s_out);
    gd__gpu_job_cuda_error(dev, job, what, e);
    return false;
  }
  return true;
}


static void handle_run(gd__gpu_dev *dev, gd__gpu_job *job) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  if (!gd__gpu_run_admit(dev, job, work->dptr != NULL, gd_now_us()) ||
      !gd__gpu_ipc_resolve(dev, job) || !run_launch(dev, job)) {
    job_finish(dev, job);
    return;
  }
  work->started = true;
  work->in_outq = true;
  work->out_next_job = NULL;
  if (worker->outq_tail)
    gd__gpu_work_half(worker->outq_tail)->out_next_job = job;
  else
    worker->outq_head = job;
  worker->outq_tail = job;
  pump_out(dev);
}

/* ---- output ------------------------------------------------------------- */

static void outq_pop(gd__gpu_dev *dev) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_job *job = worker->outq_head;
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  worker->outq_head = work->out_next_job;
  if (!worker->outq_head)
    worker->outq_tail = NULL;
  work->in_outq = false;
  work->out_next_job = NULL;
}

/* Under mu: where the next chunk of job's C goes: straight into its region (one chunk, the
 * whole of C: mapped_out), or a free output staging buffer (NULL when none is). */
static gd__gpu_buf *out_buffer(gd__gpu_dev *dev, gd__gpu_job *job) {
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  if (!job->mapped_out)
    return gd__gpu_staging_take(dev, true);
  gd__gpu_buf *buf = &job->direct_out;
  if (buf->state != GD__BUF_FREE)
    return NULL;
  buf->ev_start = work->ev_o0;
  buf->ev_end = work->ev_o1;
  return buf;
}

/* Queues one chunk of the head job's C; false when no buffer is free or the job is abandoned. */
static bool issue_chunk(gd__gpu_dev *dev, gd__gpu_job *job) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  pthread_mutex_lock(&dev->mu);
  bool abandon = job->failed || !job->owner || dev->dead || dev->stopping;
  gd__gpu_buf *buf = abandon ? NULL : out_buffer(dev, job);
  if (buf) {
    buf->state = GD__BUF_BUSY;
    buf->job = job;
    job->refs++;
  }
  pthread_mutex_unlock(&dev->mu);
  if (abandon) {
    outq_pop(dev);
    if (work->inflight_out == 0)
      job_finish(dev, job);
    return true;
  }
  if (!buf)
    return false;
  uint64_t off = work->out_next;
  size_t n = buf->cap;
  if (job->c_bytes - off < n)
    n = (size_t)(job->c_bytes - off);
  buf->dst = off;
  buf->fill = n;
  buf->last = off + n == job->c_bytes;
  buf->posted = false;
  const char *what = "cudaStreamWaitEvent";
  cudaError_t e = cudaSuccess;
  if (off == 0)
    e = cudaStreamWaitEvent(worker->s_out, work->ev_c1, 0);
  if (e == cudaSuccess)
    e = cudaEventRecord(buf->ev_start, worker->s_out);
  bool queued = false;
  /* a job run in row blocks copied all but its last block's rows into the region already */
  uint64_t early = buf == &job->direct_out ? work->out_early : 0;
  assert(off == 0 || early == 0);
  if (e == cudaSuccess) {
    what = "copy out";
    e = gd__gpu_copy_out(job, buf->host + early,
                         gd__gpu_mem_at(job, job->op_dev[GP_OPERAND_C] + off + early), n - early,
                         buf == &job->direct_out && job->ipc_out ? cudaMemcpyDeviceToDevice
                                                                 : cudaMemcpyDeviceToHost,
                         worker->s_out);
    queued = e == cudaSuccess;
  }
  if (e == cudaSuccess)
    e = cudaEventRecord(buf->ev_end, worker->s_out);
  if (e == cudaSuccess) {
    what = "cudaLaunchHostFunc";
    e = cudaLaunchHostFunc(worker->s_out, host_func_done, &buf->done);
  }
  if (e == cudaSuccess) {
    work->out_next += n;
    work->inflight_out++;
    if (buf->last)
      outq_pop(dev);
    return true;
  }
  /* The copy may still write the buffer (or, straight into a region, the client's pages, which
   * the failure lets go of): it must be over before either is reused. */
  if (queued && !gd__gpu_dev_dead(dev))
    (void)cudaStreamSynchronize(worker->s_out);
  gd__gpu_job_cuda_error(dev, job, what, e);
  pthread_mutex_lock(&dev->mu);
  buf_free_locked(buf);
  pthread_mutex_unlock(&dev->mu);
  return true; /* the next round sees the job failed and abandons it */
}

static void pump_out(gd__gpu_dev *dev) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  while (worker->outq_head && issue_chunk(dev, worker->outq_head)) {
  }
}

static void first_chunk_timings(gd__gpu_dev *dev, gd__gpu_job *job, float chunk_ms) {
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  float compute_ms = 0.0f;
  if (cudaEventElapsedTime(&compute_ms, work->ev_c0, work->ev_c1) != cudaSuccess) {
    compute_ms = 0.0f;
    (void)cudaGetLastError();
  }
  work->result.compute_us = (uint64_t)(compute_ms * 1000.0f);
  float direct_ms = 0.0f;
  if (work->direct_in &&
      cudaEventElapsedTime(&direct_ms, work->ev_d0, work->ev_in) != cudaSuccess) {
    direct_ms = 0.0f;
    (void)cudaGetLastError();
  }
  work->result.transfer_in_us = (uint64_t)((work->in_ms + direct_ms) * 1000.0);
  /* The reply's header leaves with the first chunk, before later chunks are copied: the time
   * of the whole copy out is extrapolated from the first chunk's rate. */
  double per_byte = work->first_out_len ? chunk_ms / (double)work->first_out_len : 0.0;
  work->result.transfer_out_us = (uint64_t)(per_byte * (double)job->c_bytes * 1000.0);
  pthread_mutex_lock(&dev->mu);
  dev->busy_us += work->result.compute_us;
  pthread_mutex_unlock(&dev->mu);
}

static void handle_out_done(gd__gpu_dev *dev, gd__gpu_buf *buf) {
  gd__gpu_job *job = buf->job;
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  float ms = 0.0f;
  if (cudaEventElapsedTime(&ms, buf->ev_start, buf->ev_end) != cudaSuccess) {
    ms = 0.0f;
    (void)cudaGetLastError();
  }
  work->inflight_out--;
  if (buf->dst == 0) { /* the rate of this copy: of the last block's rows alone when blocked */
    work->first_out_len = buf->fill - (buf == &job->direct_out ? work->out_early : 0);
    first_chunk_timings(dev, job, ms);
  }
  bool ipc = buf == &job->direct_out && job->ipc_out; /* into a client's device memory */
  if (ipc)
    gd__gpu_ipc_count(dev->be, 0, buf->fill);
  else if (buf == &job->direct_out)
    gd__gpu_reg_count_direct(dev->be, 0, buf->fill);
  pthread_mutex_lock(&dev->mu);
  if (!ipc)
    dev->bytes_d2h += buf->fill;
  bool posted = false, held = false;
  if (job->split_child) {
    /* its rows are in the region: the parent posts the whole C */
  } else if (job->split && buf == &job->direct_out && !job->failed && job->owner &&
             !dev->stopping) {
    if (!gd__gpu_split_settled(job)) {
      job->split->held = buf; /* posted once the child's rows are in too */
      held = true;
    } else if (!(posted = gd__gpu_split_post_whole(job, buf))) {
      gd__gpu_fail(job, GP_E_INTERNAL, "cannot hand the result to the loop");
    }
  } else if (!job->failed && job->owner && !dev->stopping) {
    if (buf->dst == 0)
      job->owner->result = work->result;
    gd_backend_event ev = {.type = GD_EV_OUTPUT_CHUNK,
                           .data = buf->host,
                           .len = buf->fill,
                           .offset = buf->dst,
                           .last = buf->last};
    buf->posted = true;
    posted = gd__gpu_post(job, &ev);
    if (!posted) {
      buf->posted = false;
      if (job->owner && !dev->stopping)
        gd__gpu_fail(job, GP_E_INTERNAL, "cannot hand a chunk of the result to the loop");
    }
  }
  gd__gpu_job_ref(job); /* keep it while we look at it below */
  if (!posted && !held)
    buf_free_locked(buf);
  pthread_mutex_unlock(&dev->mu);
  if (!work->in_outq && work->inflight_out == 0)
    job_finish(dev, job);
  pthread_mutex_lock(&dev->mu);
  gd__gpu_job_unref(job);
  pthread_mutex_unlock(&dev->mu);
  if (!posted)
    pump_out(dev);
}

/* The child of parent's split ended on its device: what the parent held back goes now. */
static void handle_split_done(gd__gpu_dev *dev, gd__gpu_job *parent) {
  pthread_mutex_lock(&dev->mu);
  gd__gpu_buf *unposted = gd__gpu_split_handle(dev, parent->split);
  if (unposted)
    buf_free_locked(unposted);
  gd__gpu_job_unref(parent); /* the child's end held it */
  pthread_mutex_unlock(&dev->mu);
}

static void handle_out_free(gd__gpu_dev *dev, gd__gpu_buf *buf) {
  pthread_mutex_lock(&dev->mu);
  buf_free_locked(buf);
  pthread_mutex_unlock(&dev->mu);
  pump_out(dev);
}

/* ---- one command -------------------------------------------------------- */

void gd__gpu_worker_handle(gd__gpu_dev *dev, gd__gpu_cmd *cmd) {
  GD__GPU_ON_WORKER(dev);
  if (gd__gpu_worker_of(dev)->res_cache)
    gd__gpu_resident_sweep(dev, false); /* copies of freed resident operands go */
  switch (cmd->type) {
  case GD__CMD_ALLOC:
    gd__gpu_mem_alloc(dev, cmd->job);
    break;
  case GD__CMD_COPY_IN:
    handle_copy_in(dev, cmd->buf);
    break;
  case GD__CMD_SPILL_IN:
    handle_spill(dev, (gd__gpu_spill *)cmd);
    break;
  case GD__CMD_RUN:
    handle_run(dev, cmd->job);
    break;
  case GD__CMD_DROP:
    job_finish(dev, cmd->job);
    break;
  case GD__CMD_OUT_FREE:
    handle_out_free(dev, cmd->buf);
    break;
  case GD__CMD_IN_DONE:
    handle_in_done(dev, cmd->buf);
    break;
  case GD__CMD_OUT_DONE:
    handle_out_done(dev, cmd->buf);
    break;
  case GD__CMD_SMALL_RUN:
    gd__gpu_small_run(dev, cmd->job->slot);
    break;
  case GD__CMD_REG:
  case GD__CMD_UNREG:
    gd__gpu_reg_handle(dev, cmd);
    break;
  case GD__CMD_SPLIT_DONE:
    handle_split_done(dev, cmd->job);
    break;
  case GD__CMD_IPC_OPEN:
  case GD__CMD_IPC_CLOSE:
    gd__gpu_ipc_handle(dev, cmd);
    break;
  }
}
