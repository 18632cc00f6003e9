/*
 * gd_gpu_pieces.c - a large gemm whose A and C are in registered shared-memory regions, run in
 * row blocks so that its copies overlap its own kernels (worker thread).
 *
 * At once, such a job copies all of A and B in, computes, then copies all of C out: on an H100
 * an 8192^3 f32 gemm spent 24.1 ms in the kernel and 14.8 ms in copies that ran before and
 * after it, never beside it. Rows of op(A) and of C are contiguous when A is not transposed, and
 * a block of rows is a gemm of its own over the same B. So after B, block i's rows of A go in on
 * the copy-in stream while block i-1 computes, and block i-1's rows of C go straight into the
 * region on the copy-out stream while block i computes; only B, the first block's copy in and
 * the last block's copy out stay outside the kernels. Each block waits for its own copy in
 * only (one event per stream, recorded again for every block: a cudaStreamWaitEvent waits for
 * the record made before it, whatever is recorded after).
 *
 * The last block's rows of C leave through the job's usual direct chunk (gd_gpu_worker.c
 * issue_chunk), which then copies only what the blocks before it did not (work.out_early) and
 * reports the whole of C as one chunk, as an unblocked job does.
 */
#include <assert.h>

#include "gd_gpu_work.h"

/* A block has at least this many rows: smaller kernels fill an H100's 132 SMs poorly (a 2048 x
 * 8192 block of C is 1024 tiles of 128 x 128), and a job of fewer than twice as many rows
 * gains too little to pay for another launch. */
#define PIECE_MIN_ROWS 2048u
/* Block heights are a multiple of the largest tile height, so no block ends in a ragged tile
 * but the job's own last. */
#define PIECE_ROW_ALIGN 128u

uint32_t gd__gpu_pieces_of(const gd__gpu_dev *dev, const gd__gpu_job *job) {
  const gp_gemm_hdr *h = &job->hdr;
  uint32_t max = dev->be->cfg.shm_pieces;
  /* B, and a C sent through staging, are whole on the device before the first block; at RUN
   * a CUDA IPC job's mapped_in / mapped_out are device pointers, never blocked (host copies) */
  if (max < 2 || gd__gpu_job_has_ipc(job) || !job->mapped_in[GP_OPERAND_A] || !job->mapped_out ||
      gp_gemm_has_ld(h) /* its copies are 2D, whole */ || h->trans_a || h->batch != 1 ||
      h->broadcast_b || h->bias ||
      h->m < 2 * (uint64_t)PIECE_MIN_ROWS) /* a bias row lies at C's start: whole jobs only */
    return 1;
  uint64_t by_rows = h->m / PIECE_MIN_ROWS;
  return (uint32_t)(by_rows < max ? by_rows : max);
}

/* Rows of each block but the last (which takes the rest), for pieces blocks of m rows. */
static uint64_t block_rows(uint64_t m, uint32_t pieces) {
  uint64_t rows = (m + pieces - 1) / pieces;
  return (rows + PIECE_ROW_ALIGN - 1) / PIECE_ROW_ALIGN * PIECE_ROW_ALIGN;
}

/* Block i's rows of A (and of C when C comes from a region) onto the device, on s_in. */
static cudaError_t copy_block_in(gd__gpu_dev *dev, gd__gpu_job *job, uint64_t r0, uint64_t rows) {
  const gp_operand ops[2] = {GP_OPERAND_A, GP_OPERAND_C};
  cudaError_t e = cudaSuccess;
  uint64_t bytes = 0;
  for (int i = 0; i < 2 && e == cudaSuccess; i++) {
    gp_operand op = ops[i];
    if (!job->mapped_in[op])
      continue;
    uint64_t row_bytes = job->bytes[op] / job->hdr.m;
    e = gd__gpu_copy_from_region(dev, job, op, r0 * row_bytes, rows * row_bytes);
    bytes += rows * row_bytes;
  }
  if (e == cudaSuccess && bytes > 0)
    gd__gpu_count_direct_in(dev, bytes);
  return e;
}

/* Block i's kernel on s_compute, after its copy in. */
static cudaError_t launch_block(gd__gpu_dev *dev, gd__gpu_job *job, uint8_t *ptr[3], uint64_t r0,
                                uint64_t rows, bool first, const char **what) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  *what = "cudaEventRecord";
  cudaError_t e = cudaEventRecord(work->ev_p_in, worker->s_in);
  if (e == cudaSuccess) {
    *what = "cudaStreamWaitEvent";
    e = cudaStreamWaitEvent(worker->s_compute, work->ev_p_in, 0);
  }
  if (e == cudaSuccess && first) {
    *what = "cudaEventRecord";
    e = cudaEventRecord(work->ev_c0, worker->s_compute);
  }
  if (e != cudaSuccess)
    return e;
  uint64_t a_row = job->bytes[GP_OPERAND_A] / job->hdr.m;
  /* a row of the work area from the header: a split's parent keeps the whole area for fewer
   * rows (gd_gpu_split.c changes hdr.m and c_bytes, not work_bytes) */
  uint64_t c_row = job->c_bytes / job->hdr.m;
  uint64_t work_row =
      job->work_bytes > 0 ? job->hdr.n * gp_dtype_size(gp_dtype_result(job->hdr.dtype)) : 0;
  gk_problem p;
  gd__gpu_job_problem(job, &p, ptr[GP_OPERAND_A] + r0 * a_row, ptr[GP_OPERAND_B],
                      ptr[GP_OPERAND_C] + r0 * c_row,
                      gd__gpu_mem_at(job, job->work_dev) + r0 * work_row);
  p.m = (int64_t)rows;
  *what = "gemm launch";
  return gd__gpu_launch(dev, worker->kctx, job, &p, worker->s_compute);
}

/* Block i's rows of C straight into the region on s_out, after its kernel. */
static cudaError_t copy_block_out(gd__gpu_dev *dev, gd__gpu_job *job, uint64_t r0, uint64_t rows,
                                  const char **what, bool *out_queued) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  uint64_t c_row = job->c_bytes / job->hdr.m;
  *what = "cudaEventRecord";
  cudaError_t e = cudaEventRecord(work->ev_p_c, worker->s_compute);
  if (e == cudaSuccess) {
    *what = "cudaStreamWaitEvent";
    e = cudaStreamWaitEvent(worker->s_out, work->ev_p_c, 0);
  }
  if (e == cudaSuccess) {
    *what = "copy out (shared memory)";
    e = cudaMemcpyAsync(job->mapped_out + r0 * c_row,
                        gd__gpu_mem_at(job, job->op_dev[GP_OPERAND_C] + r0 * c_row),
                        (size_t)(rows * c_row), cudaMemcpyDeviceToHost, worker->s_out);
    *out_queued = *out_queued || e == cudaSuccess;
  }
  if (e == cudaSuccess)
    work->out_early = (r0 + rows) * c_row;
  return e;
}

cudaError_t gd__gpu_pieces_launch(gd__gpu_dev *dev, gd__gpu_job *job, uint8_t *ptr[3],
                                  const char **what, bool *out_queued) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  gd__gpu_job_work *work = gd__gpu_work_half(job);
  assert(work->pieces > 1 && job->mapped_out && !job->hdr.trans_a);
  uint64_t m = job->hdr.m;
  uint64_t rows = block_rows(m, work->pieces);
  cudaError_t e = cudaSuccess;
  work->out_early = 0;
  *out_queued = false;
  for (uint64_t r0 = 0; r0 < m && e == cudaSuccess; r0 += rows) {
    uint64_t n = m - r0 < rows ? m - r0 : rows;
    *what = "copy in (shared memory)";
    e = copy_block_in(dev, job, r0, n);
    if (e == cudaSuccess)
      e = launch_block(dev, job, ptr, r0, n, r0 == 0, what);
    if (e == cudaSuccess && r0 + n < m)
      e = copy_block_out(dev, job, r0, n, what, out_queued);
  }
  if (e == cudaSuccess) {
    *what = "cudaEventRecord";
    e = cudaEventRecord(work->ev_in, worker->s_in); /* the end of every copy in: timings */
  }
  if (e == cudaSuccess)
    e = cudaEventRecord(work->ev_c1, worker->s_compute);
  if (e == cudaSuccess)
    gd__gpu_reg_count_pieced(dev->be);
  return e;
}
