/*
 * gd_backend_gpu.h - the GPU backend: one worker per CUDA device, each with
 * its own streams (copy in, compute, copy out), a device-memory pool under a
 * budget, and double-buffered pinned host staging. Built only when CUDA is
 * (GEMMD_HAVE_CUDA); the rest of the daemon sees it through gd_backend_ops.
 *
 * What it promises the scheduler (beyond gd_backend.h):
 *   - prepare() refuses with RESOURCE_EXHAUSTED only a job that can never fit
 *     a device's budget (a + b + c, each rounded to 256 bytes), and with
 *     UNAVAILABLE when no device is in service. A job that fits later waits:
 *     input_window() then lends nothing and input() pauses the session until
 *     memory is assigned (FIFO per device). The job goes to the device already
 *     serving its session, else the scheduler's pick (job->device) when it
 *     fits, else the least loaded; job->device is set to the one chosen.
 *   - input() may set *pause; GD_EV_INPUT_RESUME follows when a staging buffer
 *     (or the job's memory) is free. No RESUME is posted after submit().
 *   - results come as GD_EV_OUTPUT_CHUNKs of at most gpu.staging_bytes, in
 *     order, pointing into pinned memory that stays valid until
 *     output_consumed(); job->result is filled before the first one.
 *   - every CUDA error fails its job with INTERNAL ("cuda:N: what: reason");
 *     a sticky one (illegal address, launch failure, ECC, ...) also takes the
 *     device out of service (one error log line): its jobs fail with
 *     UNAVAILABLE, the other devices keep serving.
 *   - the ops never block and make no CUDA call: see gd_gpu_shared.h for
 *     the threads (one worker per device makes every CUDA call).
 */
#ifndef GD_BACKEND_GPU_H
#define GD_BACKEND_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gd_backend.h"
#include "gp_error.h"

#define GD_GPU_MAX_DEVICES 64

/* The `gpu:` section of gemmd.yaml. */
typedef struct {
  bool devices_auto;                  /* devices: auto (every GPU found) */
  int devices[GD_GPU_MAX_DEVICES];    /* devices: [0, 1, ...] when not auto */
  size_t device_count;
  uint64_t staging_bytes;             /* size of each pinned staging buffer (default 64 MiB) */
  uint32_t staging_buffers;           /* per direction per device, >= 2 (default 2: double-buffered) */
  double memory_fraction;             /* cap: of each device's memory free at start (default 0.9) */
  uint64_t memory_bytes;              /* absolute cap per device; 0 = use memory_fraction */
  uint64_t memory_idle_ms;            /* a device idle this long gives its pool back (default
                                       * 30000; 0 = keep what was reserved) */
  uint64_t memory_keep_bytes;         /* reserved bytes kept when it does (default 0) */
  uint64_t kernel_pool_bytes;         /* each kernel context's stream-ordered pool (17's K-major
                                       * copies) keeps this much mapped between gemms (default
                                       * 64 MiB) */
  uint64_t staging_hold_ms;           /* a result chunk waits this long for a slow client before
                                       * it is copied off staging (default 20; the session's) */
  char kernel[64];                    /* "auto", or a kernel name from gk_kernels() ("tiled16", "cublas", ...) */
  uint64_t small_job_bytes;           /* a job whose a, b and c (each rounded to 256 bytes) fit
                                       * this many bytes takes the small-job lane (default 1 MiB;
                                       * 0 = off: every job takes the staging path) */
  uint32_t small_slots;               /* pinned slots of small_job_bytes per device (default
                                       * 256) */
  uint64_t small_poll_us;             /* the worker looks at the small jobs in flight at least
                                       * this often (default 20; 0 = spin) */
  uint32_t max_batch_jobs;            /* small jobs of one shape already queued on a device run as
                                       * one batched launch of at most this many (default 32;
                                       * 1 = one launch per job) */
  uint64_t resident_bytes;            /* device copies of resident operands (protocol put) one
                                       * device keeps, on top of its job budget (default 4 GiB;
                                       * 0 = none: copied into each job) */
  uint64_t max_queue_delay_us;        /* a small batch not yet full may wait this long after its
                                       * first job's submit for more of its shape (default 0: only
                                       * what already waits is batched) */
  uint32_t small_passes;              /* small batches queued on a device's lane stream at once;
                                       * jobs that come meanwhile wait to form the next, larger
                                       * batch (default 2; 0 = no limit) */
  uint64_t shm_register_bytes;        /* shm.gpu_register_max_bytes: shared-memory regions pinned
                                       * for DMA at once, at most (default 4 GiB; 0 = none: every
                                       * region operand goes through staging) */
  uint32_t shm_pieces;                /* a gemm whose A and C are in registered regions, of at
                                       * least 2 x 2048 rows, runs in up to this many row blocks
                                       * whose copies overlap the others' kernels (default 4;
                                       * 1 = at once) */
  uint64_t split_min_rows;            /* a gemm whose operands and result are all in registered
                                       * regions, of at least twice this many rows, is split by
                                       * rows of C across the idle devices (default 4096;
                                       * 0: never) */
  uint32_t split_max_parts;           /* a split gemm runs on at most this many devices, its own
                                       * included (default 8; 1: never split; at most 64) */
} gd_gpu_config;

void gd_gpu_config_default(gd_gpu_config *cfg);

/* Number of usable CUDA devices (0 when there is no driver or no GPU; one debug log line says
 * why). Never fails, never prints otherwise. Any thread. */
int gd_gpu_count(void);

/* Checks cfg (staging_buffers 2..64, staging_bytes 4 KiB..1 GiB, memory_fraction in (0, 1],
 * kernel "auto" or a name from gk_kernels(): GP_E_INVALID_ARGUMENT naming the key), then starts
 * one worker per configured device: each makes its device current, creates the kernels'
 * context and streams, an empty memory pool capped at its budget (memory_bytes, or
 * memory_fraction of the memory free at start; it grows as jobs need memory and gives it back
 * after memory_idle_ms idle, see gd_gpu_mem.c) and pins its staging. A device that fails is
 * left out with a warning. Returns 0 and *out, or GP_E_UNAVAILABLE with "no CUDA device found:
 * <reason>" / "no usable CUDA device: <reason>" when none can be used. Call before the loop
 * runs (it waits for the workers' start-up); the caller owns *out (ops->destroy). */
int gd_backend_gpu_create(const gd_gpu_config *cfg, gd_backend **out, gp_error *err);

#endif /* GD_BACKEND_GPU_H */
