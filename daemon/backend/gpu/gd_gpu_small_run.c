/*
 * gd_gpu_small_run.c - the small-job lane on the device's worker thread (slots: gd_gpu_small.c).
 *
 * SMALL_RUN queues a small job's whole pass at once on the lane's stream: one copy of the slot
 * in (a, b and c side by side), the kernel, one copy of C out, with the slot's four pooled events
 * between them (timings; the last one marks the pass done). No host func is queued: a host func
 * holds back all later work of its stream until CUDA's callback thread has run it, which
 * serialised small jobs. Instead the worker polls the last event of the oldest slot in flight
 * (cudaEventQuery) between commands and at least every gpu.small_poll_us while any is in flight;
 * the stream runs the passes in order, so the slots finish in the FIFO's order.
 */
#include <assert.h>

#include "gd_clock.h"
#include "gd_gpu_internal.h"

/* The worker is done with the slot's job: no device work of it remains queued or running. */
static void small_finish(gd__gpu_dev *dev, gd__gpu_job *job) {
  pthread_mutex_lock(&dev->mu);
  assert(!job->finished);
  job->finished = true;
  if (!job->failed && job->work.started)
    dev->jobs_done++;
  dev->small_jobs++;
  gd__gpu_job_retire(job);
  gd__gpu_job_unref(job); /* the worker's reference */
  pthread_mutex_unlock(&dev->mu);
}

/* Queues the pass; the name of the call that failed in *what otherwise. */
static cudaError_t queue_pass(gd__gpu_dev *dev, gd__gpu_slot *slot, const char **what,
                              bool *queued) {
  gd__gpu_job *job = &slot->job;
  cudaStream_t s = dev->s_small;
  const uint64_t *off = slot->off;
  *what = "cudaEventRecord";
  cudaError_t e = cudaEventRecord(slot->ev[0], s);
  if (e == cudaSuccess) {
    *what = "copy in";
    e = cudaMemcpyAsync(slot->dptr, slot->host, (size_t)slot->in_len, cudaMemcpyHostToDevice, s);
    *queued = e == cudaSuccess;
  }
  if (e == cudaSuccess)
    e = cudaEventRecord(slot->ev[1], s);
  if (e == cudaSuccess) {
    gk_problem p;
    gd__gpu_job_problem(job, &p, slot->dptr + off[GP_OPERAND_A], slot->dptr + off[GP_OPERAND_B],
                        slot->dptr + off[GP_OPERAND_C]);
    *what = "gemm launch";
    e = gd__gpu_launch(dev, dev->kctx_small, job, &p, s);
  }
  if (e == cudaSuccess) {
    *what = "cudaEventRecord";
    e = cudaEventRecord(slot->ev[2], s);
  }
  if (e == cudaSuccess) {
    *what = "copy out";
    e = cudaMemcpyAsync(slot->host + off[GP_OPERAND_C], slot->dptr + off[GP_OPERAND_C],
                        (size_t)job->c_bytes, cudaMemcpyDeviceToHost, s);
  }
  if (e == cudaSuccess) {
    *what = "cudaEventRecord";
    e = cudaEventRecord(slot->ev[3], s);
  }
  return e;
}

void gd__gpu_small_run(gd__gpu_dev *dev, gd__gpu_slot *slot) {
  gd__gpu_job *job = &slot->job;
  assert(slot->in_use && dev->s_small);
  if (!gd__gpu_run_admit(dev, job, true, gd_now_us())) {
    small_finish(dev, job);
    return;
  }
  const char *what = NULL;
  bool queued = false;
  cudaError_t e = queue_pass(dev, slot, &what, &queued);
  if (e == cudaSuccess) {
    job->work.started = true;
    slot->next_run = NULL;
    if (dev->small_tail)
      dev->small_tail->next_run = slot;
    else
      dev->small_head = slot;
    dev->small_tail = slot;
    return;
  }
  gd__gpu_job_cuda_error(dev, job, what, e);
  /* The slot must not be reused while a queued copy may still touch it. */
  if (queued && !gd__gpu_dev_dead(dev))
    (void)cudaStreamSynchronize(dev->s_small);
  small_finish(dev, job);
}

static float elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0.0f;
  if (cudaEventElapsedTime(&ms, from, to) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0.0f;
  }
  return ms;
}

/* The pass is done: C goes to the loop (when anyone still wants it) straight from the slot. */
static void small_complete(gd__gpu_dev *dev, gd__gpu_slot *slot) {
  gd__gpu_job *job = &slot->job;
  gp_gemm_result_hdr *r = &job->work.result;
  r->transfer_in_us = (uint64_t)(elapsed_ms(slot->ev[0], slot->ev[1]) * 1000.0f);
  r->compute_us = (uint64_t)(elapsed_ms(slot->ev[1], slot->ev[2]) * 1000.0f);
  r->transfer_out_us = (uint64_t)(elapsed_ms(slot->ev[2], slot->ev[3]) * 1000.0f);
  pthread_mutex_lock(&dev->mu);
  dev->busy_us += r->compute_us;
  dev->bytes_h2d += slot->in_len;
  dev->bytes_d2h += job->c_bytes;
  if (!job->failed && job->owner && !dev->stopping) {
    job->owner->result = *r;
    gd_backend_event ev = {.type = GD_EV_OUTPUT_CHUNK,
                           .data = slot->host + slot->off[GP_OPERAND_C],
                           .len = (size_t)job->c_bytes,
                           .offset = 0,
                           .last = true};
    slot->posted = true;
    job->refs++; /* the posted chunk's, until output_consumed() */
    if (!gd__gpu_post(job, &ev)) {
      slot->posted = false;
      job->refs--; /* the worker's reference still holds it */
      if (job->owner && !dev->stopping)
        gd__gpu_fail(job, GP_E_INTERNAL, "cannot hand the result to the loop");
    }
  }
  pthread_mutex_unlock(&dev->mu);
  small_finish(dev, job);
}

void gd__gpu_small_poll(gd__gpu_dev *dev) {
  while (dev->small_head) {
    gd__gpu_slot *slot = dev->small_head;
    /* A dead device never finishes its passes: their jobs already failed; let them go. */
    bool dead = gd__gpu_dev_dead(dev);
    cudaError_t e = dead ? cudaSuccess : cudaEventQuery(slot->ev[3]);
    if (e == cudaErrorNotReady)
      return;
    dev->small_head = slot->next_run;
    if (!dev->small_head)
      dev->small_tail = NULL;
    slot->next_run = NULL;
    if (dead) {
      small_finish(dev, &slot->job);
    } else if (e == cudaSuccess) {
      small_complete(dev, slot);
    } else {
      gd__gpu_job_cuda_error(dev, &slot->job, "a small job's copy or kernel", e);
      small_finish(dev, &slot->job);
    }
  }
}
