/*
 * gd_gpu_work.h - the GPU backend's worker half (daemon/backend/gpu/worker/): what each device's
 * worker thread runs, and the only code that calls CUDA on a device's context. It hears from
 * the loop only through the command queue (gd_gpu_shared.h). A file here includes this header
 * and gd_gpu_shared.h, never gd_gpu_loop.h.
 */
#ifndef GD_GPU_WORK_H
#define GD_GPU_WORK_H

#include <sched.h>

#include "gd_gpu_shared.h"

/* The worker half of job: its fields only its device's worker touches (asserted in Debug
 * builds). */
static inline gd__gpu_job_work *gd__gpu_work_half(gd__gpu_job *job) {
  GD__GPU_ON_WORKER(job->dev);
  return &job->work;
}
static inline const gd__gpu_job_work *gd__gpu_work_half_c(const gd__gpu_job *job) {
  GD__GPU_ON_WORKER(job->dev);
  return &job->work;
}

/* The worker half of dev: its CUDA objects and lists, only its worker touches (asserted in
 * Debug builds). */
static inline gd__gpu_dev_work *gd__gpu_worker_of(gd__gpu_dev *dev) {
  GD__GPU_ON_WORKER(dev);
  return &dev->work;
}
static inline const gd__gpu_dev_work *gd__gpu_worker_of_c(const gd__gpu_dev *dev) {
  GD__GPU_ON_WORKER(dev);
  return &dev->work;
}

/* ---- gd_gpu_numa.c (worker thread at start) ---- */
/* Binds the calling thread to the CPUs next to the device (sysfs local_cpulist of its PCI
 * function), so that its pinned staging is allocated on that NUMA node. Best effort: logs why
 * when it cannot, and never fails the start. */
void gd__gpu_numa_bind(int ordinal);
/* Parses a sysfs CPU list ("0-15,32-47\n") into set. false on a malformed list. */
bool gd__gpu_cpulist_parse(const char *text, cpu_set_t *set);

/* ---- gd_gpu_ipc_open.c (worker thread at its exit) ---- */
/* Forgets the IPC handles still open on dev: the process ends, and CUDA closes them with the
 * device's context. */
void gd__gpu_ipc_maps_free(gd__gpu_dev *dev);

/* ---- gd_gpu_staging.c (worker thread at start / destroy) ---- */
int gd__gpu_staging_create(gd__gpu_dev *dev, gp_error *err);
void gd__gpu_staging_destroy(gd__gpu_dev *dev);

/* ---- gd_gpu_mem.c (worker thread) ---- */
/* Creates the device's memory pool (empty: it grows on demand). */
int gd__gpu_mem_create(gd__gpu_dev *dev, gp_error *err);
void gd__gpu_mem_destroy(gd__gpu_dev *dev);
/* GD__CMD_ALLOC: takes job->dptr from the pool, or fails the job (RESOURCE_EXHAUSTED). */
void gd__gpu_mem_alloc(gd__gpu_dev *dev, gd__gpu_job *job);
/* Frees job->dptr in stream order (copy-in stream); no-op without one. */
void gd__gpu_mem_release(gd__gpu_dev *dev, gd__gpu_job *job);
/* The device address of pool offset pool_off inside job's block. */
uint8_t *gd__gpu_mem_at(const gd__gpu_job *job, uint64_t pool_off);
/* Under mu, the device idle: true when a trim is pending; *wait_ms until it is due (0: now). */
bool gd__gpu_mem_trim_due(const gd__gpu_dev *dev, uint64_t now_us, uint64_t *wait_ms);
/* Without mu: gives the pool's unused memory back down to gpu.memory_keep_bytes. */
void gd__gpu_mem_trim(gd__gpu_dev *dev);
/* Under mu: the device has work now (the idle time before a trim starts again). */
void gd__gpu_mem_note_work(gd__gpu_dev *dev, uint64_t now_us);

/* ---- gd_gpu_worker.c: what the worker does with one command (worker thread only) ---- */
void gd__gpu_worker_handle(gd__gpu_dev *dev, gd__gpu_cmd *cmd);

/* ---- gd_gpu_run.c: what every run shares (worker thread) ---- */
/* A CUDA call for job failed: the job gets INTERNAL; a sticky error kills the device. */
void gd__gpu_job_cuda_error(gd__gpu_dev *dev, gd__gpu_job *job, const char *what, cudaError_t e);
/* A job's timing events (worker): made at RUN, freed when the worker lets go of it. */
cudaError_t gd__gpu_job_events_make(gd__gpu_job *job);
void gd__gpu_job_events_free(gd__gpu_job *job);
/* Whether job may start now (no lock held; a passed deadline fails it); fills its result's
 * shape and queue time either way. */
bool gd__gpu_run_admit(gd__gpu_dev *dev, gd__gpu_job *job, bool have_mem, uint64_t now_us);
/* The job's problem on the device, its operands at a, b and c, and its work area at work
 * (used only with the output cast, when job->work_bytes > 0). */
void gd__gpu_job_problem(const gd__gpu_job *job, gk_problem *p, uint8_t *a, uint8_t *b,
                         uint8_t *c, uint8_t *work);
/* Worker: len bytes of operand op from `from` on, straight from its registered region or, for a
 * CUDA IPC operand (ipc_in), the client's device memory (mapped_in) into the job's device
 * block, on s_in; the first such copy records ev_d0. */
cudaError_t gd__gpu_copy_from_region(gd__gpu_dev *dev, gd__gpu_job *job, gp_operand op,
                                     uint64_t from, uint64_t len);
/* Worker: len bytes of C from the device (src) to dst, on stream: a plain copy, or with ldc and
 * dst the result's place (mapped_out, one chunk) its rows where they lie. */
cudaError_t gd__gpu_copy_out(gd__gpu_job *job, uint8_t *dst, const uint8_t *src, size_t len,
                             enum cudaMemcpyKind kind, cudaStream_t stream);
/* Launches the job's kernel with kctx on stream and names the device and kernel in its
 * result. */
cudaError_t gd__gpu_launch(gd__gpu_dev *dev, gk_gpu_ctx *kctx, gd__gpu_job *job,
                           const gk_problem *p, cudaStream_t stream);

/* ---- gd_gpu_replica.c: resident operands' device copies ---- */
/* Worker, at RUN before the inputs' event: where each operand of job lies for its kernel (its
 * block, or a resident operand's device copy, made now if new and room allows; else its bytes
 * copied into the block), all on the copy-in stream. A CUDA error of a copy is returned. */
cudaError_t gd__gpu_resident_place(gd__gpu_dev *dev, gd__gpu_job *job, uint8_t *ptr[3]);
/* Worker: frees the device copies of freed buffers (all of them: at shutdown). */
void gd__gpu_resident_sweep(gd__gpu_dev *dev, bool all);

/* ---- gd_gpu_small_lane.c: the small-job lane's slots, memory, events and stream ---- */
/* Creates the slots, their memory, events and stream when gpu.small_job_bytes is on and
 * *budget can spare them (taking their device bytes off *budget); else leaves the lane off. */
int gd__gpu_small_create(gd__gpu_dev *dev, uint64_t *budget, gp_error *err);
/* Frees the lane's CUDA objects and memory (the slots array goes at the device's teardown). */
void gd__gpu_small_destroy(gd__gpu_dev *dev);

/* ---- gd_gpu_small_run.c: the small lane on the worker ---- */
/* GD__CMD_SMALL_RUN: copy in, kernel, copy out on the small stream, all queued at once. */
void gd__gpu_small_run(gd__gpu_dev *dev, gd__gpu_slot *slot);
/* Finishes the slots whose pass completed (polled with their last event), in stream order. */
void gd__gpu_small_poll(gd__gpu_dev *dev);
/* A batch waiting for more jobs (gpu.max_queue_delay_us): takes the newly queued jobs of its
 * shape and sends it when full, due, or the daemon stops. Returns the microseconds until it is
 * due (0: none waits). */
uint64_t gd__gpu_small_forming(gd__gpu_dev *dev);

/* ---- gd_gpu_shm_reg.c: regions registered for DMA ---- */
/* Worker: GD__CMD_REG or GD__CMD_UNREG. */
void gd__gpu_reg_handle(gd__gpu_dev *dev, gd__gpu_cmd *cmd);
/* Worker: bytes copied straight from (in) or into (out) a region. */
void gd__gpu_reg_count_direct(gd__gpu_backend *be, uint64_t in, uint64_t out);
/* Worker: bytes queued straight from regions onto dev (its h2d count and the stats). */
void gd__gpu_count_direct_in(gd__gpu_dev *dev, uint64_t bytes);
/* Worker: a job ran in row blocks. */
void gd__gpu_reg_count_pieced(gd__gpu_backend *be);

/* ---- gd_gpu_pieces.c: a job in and out of regions in row blocks (worker) ---- */
/* Row blocks job runs in: 1 (at once) unless its A and C are in registered regions and it is
 * large enough (gpu.shm_pieces). Fixed at RUN, before any copy is queued. */
uint32_t gd__gpu_pieces_of(const gd__gpu_dev *dev, const gd__gpu_job *job);
/* Queues a job of job->work.pieces > 1 blocks whose B (and C when sent by staging) is placed:
 * each block's rows of A (and C) copied in on s_in, its kernel on s_compute, and, but for the
 * last, its rows of C copied straight into the region on s_out, each waiting only for its own
 * block; records ev_c0 / ev_c1 around the kernels. ptr: the operands' device addresses. On
 * failure returns the error with *what naming the call; *out_queued tells whether a copy into
 * the region may still run. */
cudaError_t gd__gpu_pieces_launch(gd__gpu_dev *dev, gd__gpu_job *job, uint8_t *ptr[3],
                                  const char **what, bool *out_queued);

/* ---- gd_gpu_split_end.c: a split's end on the parent's worker ---- */
/* Under the parent's mu: whether the child's end was taken in. */
bool gd__gpu_split_settled(const gd__gpu_job *parent);
/* Parent's worker, GD__CMD_SPLIT_DONE, under mu: takes the child's end in; posts what waited
 * (FAILED, or the held chunk as the whole C). Returns the held buffer when it must be freed. */
gd__gpu_buf *gd__gpu_split_handle(gd__gpu_dev *dev, gd__gpu_split *split);
/* Under the parent's mu: posts buf (the parent's direct chunk) as the whole job's C. */
bool gd__gpu_split_post_whole(gd__gpu_job *parent, gd__gpu_buf *buf);

/* ---- gd_gpu_ipc_open.c: CUDA IPC handles opened and closed ---- */
/* Worker: GD__CMD_IPC_OPEN or GD__CMD_IPC_CLOSE. */
void gd__gpu_ipc_handle(gd__gpu_dev *dev, gd__gpu_cmd *cmd);
/* Worker, at RUN: the job's CUDA IPC operands and result as device pointers; false when one
 * could not be opened (the job failed: INVALID_ARGUMENT). */
bool gd__gpu_ipc_resolve(gd__gpu_dev *dev, gd__gpu_job *job);
/* Worker: bytes copied from (in) or into (out) CUDA IPC regions. */
void gd__gpu_ipc_count(gd__gpu_backend *be, uint64_t in, uint64_t out);

#endif /* GD_GPU_WORK_H */
