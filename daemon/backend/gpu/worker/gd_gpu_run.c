/*
 * gd_gpu_run.c - what every job's run on the worker thread shares, whichever lane it takes
 * (staging: gd_gpu_worker.c; small slots: gd_gpu_small_run.c): turning a CUDA error into the
 * job's failure, the checks before it starts, its problem for the kernels and the launch.
 */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "gd_gpu_work.h"
#include "gd_problem.h"

void gd__gpu_job_cuda_error(gd__gpu_dev *dev, gd__gpu_job *job, const char *what, cudaError_t e) {
  if (gd__gpu_error_is_sticky(e)) {
    gd__gpu_dev_kill(dev, what, e);
    return;
  }
  (void)cudaGetLastError(); /* a non-sticky error: clear it so the next call starts clean */
  pthread_mutex_lock(&dev->mu);
  if (job)
    gd__gpu_fail(job, GP_E_INTERNAL, "cuda:%d: %s: %s", dev->ordinal, what, cudaGetErrorString(e));
  pthread_mutex_unlock(&dev->mu);
}

bool gd__gpu_run_admit(gd__gpu_dev *dev, gd__gpu_job *job, bool have_mem, uint64_t now_us) {
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  pthread_mutex_lock(&dev->mu);
  bool skip = dev->dead || job->failed || !job->owner || dev->stopping || !have_mem;
  if (!skip && job->deadline_us != 0 && now_us > job->deadline_us) {
    gd__gpu_fail(job, GP_E_DEADLINE_EXCEEDED, "not started within timeout_ms (%llu ms)",
                 (unsigned long long)job->hdr.timeout_ms);
    skip = true;
  }
  pthread_mutex_unlock(&dev->mu);
  snprintf(work->result.device, sizeof(work->result.device), "cuda:%d", dev->ordinal);
  work->result.m = job->hdr.m;
  work->result.n = job->hdr.n;
  work->result.batch = job->hdr.batch;
  work->result.dtype = gp_gemm_out_dtype(&job->hdr); /* the result's */
  work->result.queue_us = now_us > job->admitted_us ? now_us - job->admitted_us : 0;
  return !skip;
}

void gd__gpu_job_problem(const gd__gpu_job *job, gk_problem *p, uint8_t *a, uint8_t *b,
                         uint8_t *c, uint8_t *work) {
  gd_problem_from_hdr(&job->hdr, p);
  /* the device copies are packed: the copies in and out (gd__gpu_copy_from_region,
   * gd__gpu_copy_out) apply the leading dimensions */
  p->lda = p->ldb = p->ldc = 0;
  p->a = a;
  p->b = b;
  p->c = c;
  p->bias = job->hdr.bias ? c : NULL; /* the bias row was copied to C's start, for every entry */
  if (job->work_bytes > 0) { /* C (and the bias) in the out dtype; the product in work */
    p->cast = true;
    p->out_dtype = gd_problem_dtype(gp_gemm_out_dtype(&job->hdr));
    p->work = work;
  }
}

cudaError_t gd__gpu_launch(gd__gpu_dev *dev, gk_gpu_ctx *kctx, gd__gpu_job *job,
                           const gk_problem *p, cudaStream_t stream) {
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  const gk_kernel *used = NULL;
  cudaError_t e = gk_gpu_gemm(kctx, p, dev->be->cfg.kernel, stream, &used);
  snprintf(work->result.device, sizeof(work->result.device), "cuda:%d", dev->ordinal);
  snprintf(work->result.kernel, sizeof(work->result.kernel), "%s", used ? used->name : "?");
  return e;
}

/* An operand stored with a leading dimension (PROTOCOL.md, "Leading dimensions") as rows of
 * *width bytes, *pitch apart where it lies: the batch's entries are consecutive blocks of rows,
 * so the whole operand is one 2D copy. Only f32, f64, c64 and c128 take ld (no out dtype, no
 * bias), so every operand has the gemm's element size. */
static void ld_rows(const gp_gemm_hdr *hdr, gp_operand op, size_t *width, size_t *pitch,
                    size_t *height) {
  uint64_t rows, cols;
  gp_gemm_operand_shape(hdr, op, &rows, &cols);
  assert(hdr->ld[op] >= cols && !hdr->bias && !hdr->has_out_dtype);
  size_t size = gp_dtype_size(hdr->dtype);
  *width = (size_t)(cols * size);
  *pitch = (size_t)(hdr->ld[op] * size);
  *height = (size_t)(rows * gp_gemm_operand_batch(hdr, op));
}

cudaError_t gd__gpu_copy_from_region(gd__gpu_dev *dev, gd__gpu_job *job, gp_operand op,
                                     uint64_t from, uint64_t len) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  cudaError_t e = cudaSuccess;
  if (!work->direct_in)
    e = cudaEventRecord(work->ev_d0, worker->s_in); /* the start of its direct copies: timings */
  work->direct_in = true;
  enum cudaMemcpyKind kind = job->ipc_in[op] ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  uint8_t *dst = gd__gpu_mem_at(job, job->op_dev[op] + from);
  if (e == cudaSuccess && job->hdr.ld[op] != 0) { /* strided where it lies: packed on the device */
    assert(from == 0 && len == job->bytes[op]); /* never in row blocks (gd__gpu_pieces_of) */
    size_t width, pitch, height;
    ld_rows(&job->hdr, op, &width, &pitch, &height);
    return cudaMemcpy2DAsync(dst, width, job->mapped_in[op], pitch, width, height, kind,
                             worker->s_in);
  }
  if (e == cudaSuccess)
    e = cudaMemcpyAsync(dst, job->mapped_in[op] + from, (size_t)len, kind, worker->s_in);
  return e;
}

cudaError_t gd__gpu_copy_out(gd__gpu_job *job, uint8_t *dst, const uint8_t *src, size_t len,
                             enum cudaMemcpyKind kind, cudaStream_t stream) {
  if (job->hdr.ld[GP_OPERAND_C] != 0 && dst == job->mapped_out) { /* the rows where they lie */
    size_t width, pitch, height;
    ld_rows(&job->hdr, GP_OPERAND_C, &width, &pitch, &height);
    assert(len == job->c_bytes); /* one chunk, never in row blocks */
    return cudaMemcpy2DAsync(dst, pitch, src, width, width, height, kind, stream);
  }
  return cudaMemcpyAsync(dst, src, len, kind, stream);
}

/* The job's events, in one list for making and freeing. */
static size_t job_event_slots(gd__gpu_job *job, cudaEvent_t *slots[8]) {
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  slots[0] = &work->ev_in;
  slots[1] = &work->ev_c0;
  slots[2] = &work->ev_c1;
  slots[3] = &work->ev_d0;
  slots[4] = &work->ev_o0;
  slots[5] = &work->ev_o1;
  slots[6] = &work->ev_p_in;
  slots[7] = &work->ev_p_c;
  return 8;
}

cudaError_t gd__gpu_job_events_make(gd__gpu_job *job) {
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  cudaEvent_t *slots[8];
  size_t n = job_event_slots(job, slots);
  for (size_t i = 0; i < n; i++) {
    cudaError_t e = cudaEventCreate(slots[i]);
    if (e != cudaSuccess) {
      while (i-- > 0)
        (void)cudaEventDestroy(*slots[i]);
      return e;
    }
  }
  work->events_made = true;
  return cudaSuccess;
}

void gd__gpu_job_events_free(gd__gpu_job *job) {
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  if (!work->events_made)
    return;
  cudaEvent_t *slots[8];
  size_t n = job_event_slots(job, slots);
  for (size_t i = 0; i < n; i++)
    (void)cudaEventDestroy(*slots[i]);
  work->events_made = false;
}
