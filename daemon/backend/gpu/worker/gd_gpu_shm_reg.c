/*
 * gd_gpu_shm_reg.c - shared-memory regions straight to and from the device, on the worker:
 * REG (cudaHostRegister, Portable) and UNREG (cudaHostUnregister, then the mapping and the entry
 * go), and the counts of bytes copied straight between regions and devices. The cache and the
 * ops are the loop's (loop/gd_gpu_shm.c); the entry is gd_gpu_regions.h's.
 */
#include <stddef.h>
#include <stdlib.h>

#include "gd_gpu_regions.h"
#include "gd_gpu_work.h"
#include "gd_list.h"
#include "gd_log.h"

static gd__gpu_reg *reg_of(gd__gpu_cmd *cmd) {
  size_t at = cmd->type == GD__CMD_REG ? offsetof(gd__gpu_reg, reg_cmd)
                                       : offsetof(gd__gpu_reg, unreg_cmd);
  return (gd__gpu_reg *)((char *)cmd - at);
}

/* Under reg_mu: the entry's bytes leave the budget. */
static void uncount(gd__gpu_reg *g) {
  if (!g->counted)
    return;
  g->counted = false;
  g->be->reg_bytes -= g->r->size;
  g->be->reg_regions--;
}

void gd__gpu_reg_handle(gd__gpu_dev *dev, gd__gpu_cmd *cmd) {
  GD__GPU_ON_WORKER(dev);
  (void)dev;
  if (cmd->type == GD__CMD_REG) {
    gd__gpu_reg *g = reg_of(cmd);
    cudaError_t e = cudaHostRegister(g->r->base, (size_t)g->r->size, cudaHostRegisterPortable);
    gd__gpu_backend *be = g->be;
    pthread_mutex_lock(&be->reg_mu);
    g->state = e == cudaSuccess ? REG_OK : REG_FAILED;
    if (e == cudaSuccess) {
      be->pinned_regions++;
      be->pinned_bytes += g->r->size;
    }
    bool tell = e != cudaSuccess && !be->reg_fail_logged;
    if (e != cudaSuccess) {
      uncount(g);
      be->reg_failures++;
      be->reg_fail_logged = true;
    }
    pthread_mutex_unlock(&be->reg_mu);
    if (e != cudaSuccess)
      (void)cudaGetLastError();
    if (tell)
      gd_info("gpu: cudaHostRegister of a shared-memory region of %llu bytes failed (%s); its "
              "operands take the staging path (logged once)", (unsigned long long)g->r->size,
              cudaGetErrorString(e));
    return;
  }
  gd__gpu_reg *g = reg_of(cmd);
  gd__gpu_backend *be = g->be;
  pthread_mutex_lock(&be->reg_mu);
  bool was = g->state == REG_OK;
  pthread_mutex_unlock(&be->reg_mu);
  if (was && !gd__gpu_dev_dead(dev)) {
    cudaError_t e = cudaHostUnregister(g->r->base);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      gd_warn("gpu: cudaHostUnregister of a shared-memory region failed: %s",
              cudaGetErrorString(e));
    }
  }
  pthread_mutex_lock(&be->reg_mu);
  uncount(g);
  if (was) {
    be->pinned_regions--;
    be->pinned_bytes -= g->r->size;
  }
  GD_LIST_UNLINK(be->regs, g);
  pthread_mutex_unlock(&be->reg_mu);
  gd_region_unmap(g->r); /* unregistered first: CUDA must not keep pages of a gone mapping */
  free(g);
}

void gd__gpu_count_direct_in(gd__gpu_dev *dev, uint64_t bytes) {
  pthread_mutex_lock(&dev->mu);
  dev->bytes_h2d += bytes;
  pthread_mutex_unlock(&dev->mu);
  gd__gpu_reg_count_direct(dev->be, bytes, 0);
}

void gd__gpu_reg_count_pieced(gd__gpu_backend *be) {
  pthread_mutex_lock(&be->reg_mu);
  be->pieced_jobs++;
  pthread_mutex_unlock(&be->reg_mu);
}

void gd__gpu_reg_count_direct(gd__gpu_backend *be, uint64_t in, uint64_t out) {
  pthread_mutex_lock(&be->reg_mu);
  be->direct_in_bytes += in;
  be->direct_out_bytes += out;
  pthread_mutex_unlock(&be->reg_mu);
}
