/*
 * gd_gpu_loop.h - the GPU backend's loop half (daemon/backend/gpu/loop/): what the loop threads
 * run, behind the ops table. It makes no CUDA call but reading device properties at start; it
 * reaches a worker only through the command queue (gd_gpu_shared.h). A file here includes this
 * header and gd_gpu_shared.h, never gd_gpu_work.h.
 */
#ifndef GD_GPU_LOOP_H
#define GD_GPU_LOOP_H

#include "gd_gpu_shared.h"

/* The loop half of job: its fields only the loop thread that feeds the job touches (asserted
 * in Debug builds: never the job's device's worker). */
static inline gd__gpu_job_loop *gd__gpu_loop_half(gd__gpu_job *job) {
  GD__GPU_OFF_WORKER(job->dev);
  return &job->loop;
}

/* ---- gd_gpu_input.c (loop thread) ---- */
/* Under mu: the job's current input buffer goes to the worker (or back to the free set when
 * empty or the job failed). */
void gd__gpu_flush(gd__gpu_job *job);
/* Under mu: operand reaches the device without input() (from a region, in place): the bytes
 * already staged of another operand go on their way, and this one's count as received. */
void gd__gpu_input_elsewhere(gd__gpu_job *job, gp_operand operand);
/* Payload bytes the job receives: a and b, and c when sent. */
uint64_t gd__gpu_job_input_total(const gd__gpu_job *job);
/* The ops input_window and input (gd_backend.h); they take mu themselves. */
bool gd__gpu_op_input_window(gd_backend *b, gd_job *job, gp_operand operand, uint64_t offset,
                             void **ptr, size_t *len);
int gd__gpu_op_input(gd_backend *b, gd_job *job, gp_operand operand, uint64_t offset,
                     const void *data, size_t len, bool *pause, gp_error *err);

/* ---- gd_gpu_shm.c: shared-memory regions in place (loop ops; the worker's side is
 * worker/gd_gpu_shm_reg.c) ---- */
#define GD__GPU_REG_STATS 8
/* 0, or the error (the lock could not be made). */
int gd__gpu_reg_init(gd__gpu_backend *be, gp_error *err);
/* After every worker stopped: forgets the entries still held (the scheduler unmaps). */
void gd__gpu_reg_destroy(gd__gpu_backend *be);
void gd__gpu_op_region_added(gd_backend *b, gd_region *r);
void gd__gpu_op_region_gone(gd_backend *b, gd_region *r);
bool gd__gpu_op_output_mapped(gd_backend *b, gd_job *job, gd_region *r, uint8_t *ptr);
bool gd__gpu_op_input_mapped(gd_backend *b, gd_job *job, gp_operand operand, gd_region *r,
                             const uint8_t *ptr);
uint64_t gd__gpu_op_shm_pinned_bytes(gd_backend *b);
/* Loop: a job was split across devices. */
void gd__gpu_reg_count_split(gd__gpu_backend *be);
/* regions, bytes, failures, refused, direct in bytes, direct out bytes, pieced jobs, split
 * jobs */
void gd__gpu_reg_stats(gd__gpu_backend *be, uint64_t v[GD__GPU_REG_STATS]);

/* ---- gd_gpu_ipc.c: CUDA IPC regions (loop ops; the worker's side is worker/gd_gpu_ipc_open.c) ---- */
#define GD__GPU_IPC_STATS 5
/* At start (no lock): dev's PCI address, for finding it by bus id. */
void gd__gpu_ipc_describe(gd__gpu_dev *dev);
int gd__gpu_op_device_region_open(gd_backend *b, gd_region *r, const char *pci_bus_id,
                                  gp_error *err);
bool gd__gpu_op_input_device(gd_backend *b, gd_job *job, gp_operand operand, gd_region *r,
                             uint64_t offset);
bool gd__gpu_op_output_device(gd_backend *b, gd_job *job, gd_region *r, uint64_t offset);
/* Loop: the region's last reference went: its worker closes it. */
void gd__gpu_ipc_gone(gd_region *r);
/* After every worker stopped: forgets the entries still held. */
void gd__gpu_ipc_destroy(gd__gpu_backend *be);
/* open now, opened since start, failures, in bytes, out bytes */
void gd__gpu_ipc_stats(gd__gpu_backend *be, uint64_t v[GD__GPU_IPC_STATS]);

/* ---- gd_gpu_resident.c: resident operands noted in a job (the device copies:
 * worker/gd_gpu_replica.c) ---- */
/* locate, a RESIDENT place: a large job takes operand op from the device's copy of res. */
bool gd__gpu_op_input_resident(gd_backend *b, gd_job *job, gp_operand op, gd_resident_buf *res);
/* The resident_freed op: wakes every worker holding copies to sweep. */
void gd__gpu_op_resident_freed(gd_backend *b);

/* ---- gd_gpu_small.c: the small-job lane's slots, taken and given back (the lane's start and
 * runs: worker/gd_gpu_small_lane.c, worker/gd_gpu_small_run.c) ---- */
/* Loop: a free slot on the least-loaded device in service (the scheduler's pick, owner->device,
 * first) for owner's job already sized in tmp; its embedded job is a copy of tmp, owned by owner
 * and placed on that device. NULL when the job is not small or no slot is free (the job then
 * takes the staging path). */
gd__gpu_job *gd__gpu_small_take(gd__gpu_backend *be, const gd__gpu_job *tmp, gd_job *owner);
/* Loop ops for a job in a slot (they take mu themselves). */
bool gd__gpu_small_window(gd__gpu_job *gj, gp_operand operand, uint64_t offset, void **ptr,
                          size_t *len);
int gd__gpu_small_input(gd__gpu_job *gj, gp_operand operand, uint64_t offset, const void *data,
                        size_t len);
void gd__gpu_small_consumed(gd__gpu_job *gj, const void *chunk);
void gd__gpu_small_release(gd__gpu_job *gj);

/* ---- gd_gpu_split.c: one job across the idle devices by rows of C, at submit (its end:
 * worker/gd_gpu_split_end.c) ---- */
/* A job split in parts: the parent (the scheduler's job) computes the first rows on its device,
 * one child per other device the next rows there, straight between the client's regions and
 * each device. The parent's final event (its whole C as one chunk, or FAILED) waits until every
 * child's device work is over, so the regions outlive every copy. */
/* Pure: the first row of each of parts parts of m rows (cut[0] = 0, cut[parts] = m), in
 * proportion to speed[i] (<= 0 counts as 1), cut at multiples of 128 rows when every part has
 * at least 256; every part keeps at least one row (m >= parts). */
void gd__gpu_split_plan(uint64_t m, const double *speed, uint32_t parts, uint64_t *cut);
/* Loop, at submit, before RUN: splits gj when gpu.split_min_rows allows it, its operands and
 * result are all in registered regions and other devices are idle with room for the children
 * (at most gpu.split_max_parts parts in all). */
void gd__gpu_split_try(gd__gpu_backend *be, gd__gpu_job *gj);

/* ---- gd_gpu_info.c (loop thread; each takes the devices' mu itself) ---- */
void gd__gpu_op_pack_info(gd_backend *b, msgpack_packer *pk);
void gd__gpu_op_pack_stats(gd_backend *b, msgpack_packer *pk);
size_t gd__gpu_op_devices(gd_backend *b, gd_device_info *out, size_t max);
size_t gd__gpu_op_busy(gd_backend *b);
size_t gd__gpu_op_kernels(gd_backend *b, const char **names, size_t max);

#endif /* GD_GPU_LOOP_H */
