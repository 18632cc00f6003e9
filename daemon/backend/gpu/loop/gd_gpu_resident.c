/*
 * gd_gpu_resident.c - resident operands (protocol put) on the GPU: a job that names one takes
 * it from a copy in device memory, a replica made once per device when a job there first needs
 * it and kept until the handle is freed (its connection's end included) or room is needed for
 * another, instead of the bytes coming through staging with every gemm.
 *
 * The loop (locate, a RESIDENT place) only notes the buffer in the job and holds a reference.
 * The worker (at RUN, worker/gd_gpu_replica.c) looks the buffer up in the device's cache, a list
 * only it touches: found, the
 * kernel reads the copy; not found, it allocates a copy from the device's memory pool on the
 * copy-in stream and copies the host bytes there (pageable: CUDA stages them before the call
 * returns). Each device's copies are bounded by gpu.resident_bytes: past it, the copies least
 * recently used by a job are evicted (none the current job reads) when that makes room; else
 * (or with no device memory) the bytes are copied into the job's own block, as staging would
 * have (always for C, which the kernel overwrites with the result). A copy let go of (evicted,
 * or its buffer freed: at the worker's next command or idle pass) is freed in order on the
 * compute stream, after every kernel already queued that reads it.
 *
 * Where the copies are shows in the buffer's device bits (gd_resident_buf_mark): the scheduler
 * sends a connection's next job to the least loaded device holding its operands while that is
 * not more than one job busier than the least loaded of all (core/gd_sched.c); else the job
 * goes there and a replica is made there. A pipelining client so ends with a replica on every
 * device it keeps busy, and each request's operand crosses the host bus only once per device.
 */
#include <stdlib.h>

#include "gd_gpu_loop.h"

bool gd__gpu_op_input_resident(gd_backend *b, gd_job *job, gp_operand op, gd_resident_buf *res) {
  (void)b;
  gd__gpu_job *gj = gd__gpu_job_of(job);
  /* a small job's operands travel side by side in its slot: it takes the bytes as sent */
  if (!gj || gj->slot || op > GP_OPERAND_C || gj->res[op] || res->bytes != gj->bytes[op])
    return false;
  gd__gpu_dev *dev = gj->dev;
  pthread_mutex_lock(&dev->mu);
  gd_resident_buf_ref(res);
  gj->res[op] = res;
  /* counted as landed: nothing of it comes through input() */
  gd__gpu_loop_half(gj)->received += res->bytes;
  pthread_mutex_unlock(&dev->mu);
  return true;
}

void gd__gpu_op_resident_freed(gd_backend *b) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  for (size_t i = 0; i < be->ndev; i++) {
    gd__gpu_dev *dev = &be->devs[i];
    pthread_mutex_lock(&dev->mu);
    if (dev->res_bytes > 0) {
      dev->res_sweep = true;
      pthread_cond_signal(&dev->cv);
    }
    pthread_mutex_unlock(&dev->mu);
  }
}
