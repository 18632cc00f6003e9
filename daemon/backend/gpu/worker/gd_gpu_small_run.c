/*
 * gd_gpu_small_run.c - the small-job lane on the device's worker thread (slots: gd_gpu_small.c).
 *
 * SMALL_RUN takes its job and, in the manner of a dynamic batcher, every other SMALL_RUN of the
 * same shape (dtype, m, n, k, transposes, precision, alpha, beta) already waiting in the
 * device's command queue, up to gpu.max_batch_jobs. By default nothing is held back to grow a
 * batch; with gpu.max_queue_delay_us a batch not full waits (one at a time, as
 * dev->work.forming) for more of its shape until that long after its first job's submit, and
 * a small job of another shape sends it on its way. While gpu.small_passes batches are queued
 * on the stream, a new batch waits the same way (as dev->work.forming) until one of them
 * finishes: under load the jobs that come during a pass form the next one, so a batch's fixed
 * cost (three copies, a launch, four events, ~20 us of stream time) is shared by many jobs
 * instead of paid by each. The
 * batch's whole pass is queued at once on the lane's stream: its a, b and c (when beta reads
 * it) copied into the batch area as one batched problem (each operand's matrices back to back,
 * as a client's batch would be), one launch, C copied back into each slot, with the leader
 * slot's four pooled events between them (timings; the last one marks the pass done). A batch
 * of one is the slot copied in one piece (the area then has the slot's own layout).
 *
 * No host func is queued: a host func holds back all later work of its stream until CUDA's
 * callback thread has run it, which serialised small jobs. Instead the worker polls the last
 * event of the oldest batch in flight (cudaEventQuery) between commands and at least every
 * gpu.small_poll_us while any is in flight; the stream runs the passes in order, and one batch
 * area serves them all, since a pass's copy in runs only after the previous pass's copy out.
 *
 * A job that may not start (deadline passed, client gone) leaves its batch before it is formed;
 * a batched launch that fails without a sticky error is retried job by job, so a failure fails
 * its own job alone.
 */
#include <assert.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_gpu_work.h"

/* The worker is done with the slot's job: no device work of it remains queued or running. */
static void small_finish(gd__gpu_dev *dev, gd__gpu_job *job) {
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  pthread_mutex_lock(&dev->mu);
  assert(!job->finished);
  job->finished = true;
  if (!job->failed && work->started)
    dev->jobs_done++;
  dev->small_jobs++;
  gd__gpu_job_retire(job);
  gd__gpu_job_unref(job); /* the worker's reference */
  pthread_mutex_unlock(&dev->mu);
}

static void finish_batch(gd__gpu_dev *dev, gd__gpu_slot *lead) {
  for (gd__gpu_slot *s = lead, *next; s; s = next) {
    next = s->batch_next;
    s->batch_next = NULL;
    small_finish(dev, &s->job);
  }
}

/* ---- forming a batch ------------------------------------------------------ */

static bool same_shape(const gp_gemm_hdr *a, const gp_gemm_hdr *b) {
  return a->dtype == b->dtype && a->m == b->m && a->n == b->n && a->k == b->k &&
         a->trans_a == b->trans_a && a->trans_b == b->trans_b &&
         a->precision == b->precision && gp_gemm_alpha(a) == gp_gemm_alpha(b) &&
         a->beta == b->beta && a->bias == b->bias && a->activation == b->activation &&
         gp_gemm_out_dtype(a) == gp_gemm_out_dtype(b) && a->alpha_im == b->alpha_im &&
         a->beta_im == b->beta_im && a->conj_a == b->conj_a && a->conj_b == b->conj_b &&
         memcmp(a->ld, b->ld, sizeof a->ld) == 0;
}

/* Under mu: takes up to room queued SMALL_RUNs of lead's shape out of the command FIFO (their
 * order among other commands does not matter: a small job depends on no other command),
 * chaining their slots after *tail. Returns how many. It stops at the room's end: the loops
 * wait on mu while it walks, and with hundreds of jobs queued (32 connections x 32 in flight) a
 * walk to the FIFO's end on every turn of the worker was that wait. */
static uint32_t take_same_shape(gd__gpu_dev *dev, gd__gpu_slot *lead, gd__gpu_slot **tail,
                                uint32_t room) {
  uint32_t taken = 0;
  gd__gpu_cmd **pp = &dev->q_head, *kept = NULL; /* kept: the last command left in */
  while (*pp && taken < room) {
    gd__gpu_cmd *cmd = *pp;
    if (cmd->type == GD__CMD_SMALL_RUN && same_shape(&cmd->job->hdr, &lead->job.hdr)) {
      *pp = cmd->next;
      if (dev->q_tail == cmd)
        dev->q_tail = kept;
      cmd->next = NULL;
      (*tail)->batch_next = cmd->job->slot;
      *tail = cmd->job->slot;
      taken++;
      continue;
    }
    kept = cmd;
    pp = &cmd->next;
  }
  assert(!dev->q_head == !dev->q_tail);
  return taken;
}

/* The jobs of lead's batch that may start; the others are finished here. NULL when none. */
static gd__gpu_slot *admit_batch(gd__gpu_dev *dev, gd__gpu_slot *lead) {
  uint64_t now = gd_now_us();
  gd__gpu_slot *first = NULL, **link = &first;
  for (gd__gpu_slot *s = lead, *next; s; s = next) {
    next = s->batch_next;
    s->batch_next = NULL;
    if (!gd__gpu_run_admit(dev, &s->job, true, now)) {
      small_finish(dev, &s->job);
      continue;
    }
    *link = s;
    link = &s->batch_next;
  }
  return first;
}

/* Lays the batch's operands out in the area: each operand's matrices back to back (a batch of
 * one: the slot's own layout). Returns the jobs in it. */
static uint32_t lay_out(gd__gpu_slot *lead) {
  uint64_t at[4] = {0, 0, 0, 0}; /* a, b, c, and the output cast's work areas */
  uint32_t n = 0;
  for (gd__gpu_slot *s = lead; s; s = s->batch_next, n++) {
    for (int op = 0; op < 3; op++) {
      s->dev_off[op] = at[op];
      at[op] += op == GP_OPERAND_C ? s->job.c_bytes : s->job.bytes[op];
    }
    s->work_off = at[3];
    at[3] += s->job.work_bytes;
  }
  uint64_t base_b = 0, base_c = 0, base_w = 0;
  (void)gd__gpu_pool_round(at[GP_OPERAND_A], &base_b); /* bounded by the area: no overflow */
  (void)gd__gpu_pool_round(at[GP_OPERAND_B], &base_c);
  (void)gd__gpu_pool_round(at[GP_OPERAND_C], &base_w);
  base_c += base_b;
  base_w += base_c;
  for (gd__gpu_slot *s = lead; s; s = s->batch_next) {
    s->dev_off[GP_OPERAND_B] += base_b;
    s->dev_off[GP_OPERAND_C] += base_c;
    s->work_off += base_w;
  }
  uint64_t end = base_w + at[3];
  assert(end <= (uint64_t)n * lead->job.dev->slot_bytes); /* each job's rounded sum fits a slot */
  (void)end;
  lead->batch_n = n;
  return n;
}

/* ---- queueing the pass ---------------------------------------------------- */

/* Copies one operand of every job between the slots and the area, a run of adjacent slots (of
 * jobs of one size) in one pitched copy. */
static cudaError_t copy_operand(gd__gpu_dev *dev, gd__gpu_slot *lead, int op, bool in) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  size_t pitch = dev->slot_bytes;
  for (gd__gpu_slot *s = lead; s;) {
    /* C's area holds the result; c as sent (a bias row: shorter) lands at its start */
    size_t area_pitch = (size_t)(op == GP_OPERAND_C ? s->job.c_bytes : s->job.bytes[op]);
    size_t width = op == GP_OPERAND_C && in ? (size_t)s->job.bytes[op] : area_pitch;
    size_t rows = 1;
    gd__gpu_slot *end = s->batch_next;
    while (end && end->host == s->host + rows * pitch && end->job.hdr.batch == s->job.hdr.batch) {
      rows++;
      end = end->batch_next;
    }
    uint8_t *host = s->host + s->off[op], *area = worker->small_area + s->dev_off[op];
    cudaError_t e =
        in ? cudaMemcpy2DAsync(area, area_pitch, host, pitch, width, rows,
                               cudaMemcpyHostToDevice, worker->s_small)
           : cudaMemcpy2DAsync(host, pitch, area, area_pitch, width, rows,
                               cudaMemcpyDeviceToHost, worker->s_small);
    if (e != cudaSuccess)
      return e;
    s = end;
  }
  return cudaSuccess;
}

static cudaError_t copy_in(gd__gpu_dev *dev, gd__gpu_slot *lead) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  if (lead->batch_n == 1)
    return cudaMemcpyAsync(worker->small_area, lead->host, (size_t)lead->in_len,
                           cudaMemcpyHostToDevice, worker->s_small);
  cudaError_t e = copy_operand(dev, lead, GP_OPERAND_A, true);
  if (e == cudaSuccess)
    e = copy_operand(dev, lead, GP_OPERAND_B, true);
  if (e == cudaSuccess && lead->job.hdr.beta != 0.0) /* beta 0: c is never read */
    e = copy_operand(dev, lead, GP_OPERAND_C, true);
  return e;
}

static cudaError_t copy_out(gd__gpu_dev *dev, gd__gpu_slot *lead) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  if (lead->batch_n == 1)
    return cudaMemcpyAsync(lead->host + lead->off[GP_OPERAND_C],
                           worker->small_area + lead->dev_off[GP_OPERAND_C],
                           (size_t)lead->job.c_bytes, cudaMemcpyDeviceToHost, worker->s_small);
  return copy_operand(dev, lead, GP_OPERAND_C, false);
}

static cudaError_t launch_one(gd__gpu_dev *dev, gd__gpu_slot *s, int64_t batch) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gk_problem p;
  uint8_t *area = worker->small_area;
  gd__gpu_job_problem(&s->job, &p, area + s->dev_off[GP_OPERAND_A],
                      area + s->dev_off[GP_OPERAND_B], area + s->dev_off[GP_OPERAND_C],
                      area + s->work_off);
  p.batch = batch;
  if (p.bias) /* each job (batch 1 with a bias) brought its own row, at its entry's C */
    p.bias_stride = p.m * p.n;
  return gd__gpu_launch(dev, worker->kctx_small, &s->job, &p, worker->s_small);
}

/* One launch for the batch; if it fails without a sticky error, one per job, each failure
 * failing its own job (which still rides the pass: its C is not posted). */
static cudaError_t launch(gd__gpu_dev *dev, gd__gpu_slot *lead) {
  int64_t total = 0;
  for (gd__gpu_slot *s = lead; s; s = s->batch_next)
    total += (int64_t)s->job.hdr.batch;
  cudaError_t e = launch_one(dev, lead, total);
  if (e == cudaSuccess || lead->batch_n == 1 || gd__gpu_error_is_sticky(e)) {
    for (gd__gpu_slot *s = lead->batch_next; s && e == cudaSuccess; s = s->batch_next)
      memcpy(gd__gpu_work_half(&s->job)->result.kernel,
             gd__gpu_work_half(&lead->job)->result.kernel,
             sizeof(s->job.work.result.kernel)); /* the kernel that ran it (device: admit) */
    return e;
  }
  (void)cudaGetLastError();
  for (gd__gpu_slot *s = lead; s; s = s->batch_next) {
    e = launch_one(dev, s, (int64_t)s->job.hdr.batch);
    if (gd__gpu_error_is_sticky(e))
      return e;
    if (e != cudaSuccess)
      gd__gpu_job_cuda_error(dev, &s->job, "gemm launch", e);
  }
  return cudaSuccess;
}

/* Queues the pass; the name of the call that failed in *what otherwise. */
static cudaError_t queue_pass(gd__gpu_dev *dev, gd__gpu_slot *lead, const char **what,
                              bool *queued) {
  cudaStream_t s = gd__gpu_worker_of(dev)->s_small;
  *what = "cudaEventRecord";
  cudaError_t e = cudaEventRecord(lead->ev[0], s);
  if (e == cudaSuccess) {
    *what = "copy in";
    e = copy_in(dev, lead);
    *queued = e == cudaSuccess;
  }
  if (e == cudaSuccess) {
    *what = "cudaEventRecord";
    e = cudaEventRecord(lead->ev[1], s);
  }
  if (e == cudaSuccess) {
    *what = "gemm launch";
    e = launch(dev, lead);
  }
  if (e == cudaSuccess) {
    *what = "cudaEventRecord";
    e = cudaEventRecord(lead->ev[2], s);
  }
  if (e == cudaSuccess) {
    *what = "copy out";
    e = copy_out(dev, lead);
  }
  if (e == cudaSuccess) {
    *what = "cudaEventRecord";
    e = cudaEventRecord(lead->ev[3], s);
  }
  return e;
}

static void count_batch(gd__gpu_dev *dev, uint32_t n) {
  int bucket = 0;
  while (bucket + 1 < GD__GPU_BATCH_BUCKETS && n >= (2u << bucket))
    bucket++;
  pthread_mutex_lock(&dev->mu);
  dev->small_batches[bucket]++;
  pthread_mutex_unlock(&dev->mu);
}

/* Sends the batch led by slot: admission, layout, the pass queued and put in flight. */
static void send_batch(gd__gpu_dev *dev, gd__gpu_slot *slot) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_slot *lead = admit_batch(dev, slot);
  if (!lead)
    return;
  count_batch(dev, lay_out(lead));
  const char *what = NULL;
  bool queued = false;
  cudaError_t e = queue_pass(dev, lead, &what, &queued);
  if (e == cudaSuccess) {
    for (gd__gpu_slot *s = lead; s; s = s->batch_next)
      gd__gpu_work_half(&s->job)->started = true;
    worker->small_inflight++;
    lead->next_run = NULL;
    if (worker->small_tail)
      worker->small_tail->next_run = lead;
    else
      worker->small_head = lead;
    worker->small_tail = lead;
    return;
  }
  for (gd__gpu_slot *s = lead; s; s = s->batch_next)
    gd__gpu_job_cuda_error(dev, &s->job, what, e);
  /* The slots must not be reused while a queued copy may still touch them. */
  if (queued && !gd__gpu_dev_dead(dev))
    (void)cudaStreamSynchronize(worker->s_small);
  finish_batch(dev, lead);
}

/* ---- waiting for more (gpu.max_queue_delay_us, gpu.small_passes) ---------- */

/* gpu.small_passes batches are queued on the lane: a new one waits. */
static bool lane_full(const gd__gpu_dev *dev) {
  uint32_t cap = dev->be->cfg.small_passes;
  return cap > 0 && gd__gpu_worker_of_c(dev)->small_inflight >= cap;
}

static void send_forming(gd__gpu_dev *dev) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_slot *lead = worker->forming;
  worker->forming = worker->forming_tail = NULL;
  worker->forming_n = 0;
  send_batch(dev, lead);
}

uint64_t gd__gpu_small_forming(gd__gpu_dev *dev) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  GD__GPU_ON_WORKER(dev);
  if (!worker->forming)
    return 0;
  uint32_t max = dev->be->cfg.max_batch_jobs;
  pthread_mutex_lock(&dev->mu);
  worker->forming_n +=
      take_same_shape(dev, worker->forming, &worker->forming_tail, max - worker->forming_n);
  bool stop = dev->stopping || dev->dead;
  pthread_mutex_unlock(&dev->mu);
  uint64_t due = worker->forming->job.submit_us + dev->be->cfg.max_queue_delay_us;
  uint64_t now = gd_now_us();
  if (stop || worker->forming_n >= max || (now >= due && !lane_full(dev))) {
    send_forming(dev);
    return 0;
  }
  return now < due ? due - now : 0; /* 0: due, waiting for the lane (polled) */
}

void gd__gpu_small_run(gd__gpu_dev *dev, gd__gpu_slot *slot) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  GD__GPU_ON_WORKER(dev);
  assert(slot->in_use && worker->s_small);
  uint32_t max = dev->be->cfg.max_batch_jobs;
  if (worker->forming) { /* a waiting batch: this job joins it, or sends it on its way */
    if (worker->forming_n < max && same_shape(&worker->forming->job.hdr, &slot->job.hdr)) {
      slot->batch_next = NULL;
      worker->forming_tail->batch_next = slot;
      worker->forming_tail = slot;
      worker->forming_n++;
      (void)gd__gpu_small_forming(dev);
      return;
    }
    send_forming(dev);
  }
  gd__gpu_slot *tail = slot;
  slot->batch_next = NULL;
  uint32_t n = 1;
  pthread_mutex_lock(&dev->mu);
  if (max > 1)
    n += take_same_shape(dev, slot, &tail, max - 1);
  pthread_mutex_unlock(&dev->mu);
  if ((dev->be->cfg.max_queue_delay_us > 0 || lane_full(dev)) && n < max) {
    worker->forming = slot;
    worker->forming_tail = tail;
    worker->forming_n = n;
    (void)gd__gpu_small_forming(dev); /* already due: sent now */
    return;
  }
  send_batch(dev, slot);
}

/* ---- completion ----------------------------------------------------------- */

static float elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0.0f;
  if (cudaEventElapsedTime(&ms, from, to) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0.0f;
  }
  return ms;
}

/* Under mu: C goes to the loop (when anyone still wants it) straight from the slot. */
static void post_result(gd__gpu_dev *dev, gd__gpu_slot *slot) {
  gd__gpu_job *job = &slot->job;
  dev->bytes_h2d += slot->in_len;
  dev->bytes_d2h += job->c_bytes;
  if (job->failed || !job->owner || dev->stopping)
    return;
  job->owner->result = gd__gpu_work_half(job)->result;
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

/* The batch's pass is done: every job's C is in its slot. */
static void batch_complete(gd__gpu_dev *dev, gd__gpu_slot *lead) {
  gp_gemm_result_hdr t = gd__gpu_work_half(&lead->job)->result;
  t.transfer_in_us = (uint64_t)(elapsed_ms(lead->ev[0], lead->ev[1]) * 1000.0f);
  t.compute_us = (uint64_t)(elapsed_ms(lead->ev[1], lead->ev[2]) * 1000.0f);
  t.transfer_out_us = (uint64_t)(elapsed_ms(lead->ev[2], lead->ev[3]) * 1000.0f);
  pthread_mutex_lock(&dev->mu);
  dev->busy_us += t.compute_us;
  for (gd__gpu_slot *s = lead; s; s = s->batch_next) {
    gp_gemm_result_hdr *r = &gd__gpu_work_half(&s->job)->result;
    r->transfer_in_us = t.transfer_in_us; /* the batch's: one pass served them all */
    r->compute_us = t.compute_us;
    r->transfer_out_us = t.transfer_out_us;
    post_result(dev, s);
  }
  pthread_mutex_unlock(&dev->mu);
  finish_batch(dev, lead);
}

void gd__gpu_small_poll(gd__gpu_dev *dev) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  GD__GPU_ON_WORKER(dev);
  while (worker->small_head) {
    gd__gpu_slot *lead = worker->small_head;
    /* A dead device never finishes its passes: their jobs already failed; let them go. */
    bool dead = gd__gpu_dev_dead(dev);
    cudaError_t e = dead ? cudaSuccess : cudaEventQuery(lead->ev[3]);
    if (e == cudaErrorNotReady)
      return;
    worker->small_head = lead->next_run;
    if (!worker->small_head)
      worker->small_tail = NULL;
    lead->next_run = NULL;
    assert(worker->small_inflight > 0);
    worker->small_inflight--;
    if (dead) {
      finish_batch(dev, lead);
    } else if (e == cudaSuccess) {
      batch_complete(dev, lead);
    } else {
      for (gd__gpu_slot *s = lead; s; s = s->batch_next)
        gd__gpu_job_cuda_error(dev, &s->job, "a small job's copy or kernel", e);
      finish_batch(dev, lead);
    }
  }
}
