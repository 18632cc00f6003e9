/*
 * gd_gpu_shm.c - shared-memory regions straight to and from the device: the registration cache
 * and the ops region_added, region_gone and locate's MAPPED places (gd_backend.h).
 *
 * A region a client registers is pinned for DMA once, with cudaHostRegister(Portable), so that
 * every device copies straight between the client's pages and its memory: no staging buffer,
 * no host copy. Registration is slow (the kernel pins every page), so it happens once per
 * region, on a worker (the loop makes no CUDA call), as soon as the region is registered; a
 * job that meets a region whose registration has not finished yet, or failed, or did not fit
 * shm.gpu_register_max_bytes, takes the staging path as before (the first refusal of each kind
 * is logged at info). The registration lives as long as the region: its last reference
 * (gd_region.h: the connection's and each job's that used it in place) sends UNREG to the same
 * worker, which unregisters, unmaps and frees the entry. Commands of one worker run in order,
 * so UNREG never overtakes its REG.
 *
 * The cache's state (each entry's state, the counts) is under the backend's reg_mu; an entry is
 * created and found by the loop (r->backend_data), and freed by the worker after UNREG.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gd_gpu_regions.h"
#include "gd_gpu_loop.h"
#include "gd_list.h"
#include "gd_log.h"

/* The first device in service: its worker (un)registers (Portable: for every device). */
static gd__gpu_dev *reg_device(gd__gpu_backend *be) {
  for (size_t i = 0; i < be->ndev; i++) {
    gd__gpu_dev *dev = &be->devs[i];
    pthread_mutex_lock(&dev->mu);
    bool ok = dev->in_service && !dev->dead && !dev->stopping;
    pthread_mutex_unlock(&dev->mu);
    if (ok)
      return dev;
  }
  return NULL;
}

/* ---- the loop ------------------------------------------------------------ */

void gd__gpu_op_region_added(gd_backend *b, gd_region *r) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  uint64_t max = be->cfg.shm_register_bytes;
  pthread_mutex_lock(&be->reg_mu);
  bool fits = be->reg_bytes <= max && r->size <= max - be->reg_bytes;
  bool tell = !fits && !be->reg_over_logged;
  if (!fits) {
    be->reg_refused++;
    be->reg_over_logged = true;
  }
  pthread_mutex_unlock(&be->reg_mu);
  if (tell)
    gd_info("gpu: a shared-memory region of %llu bytes is not registered for DMA: over "
            "shm.gpu_register_max_bytes (%llu); its operands take the staging path (logged once)",
            (unsigned long long)r->size, (unsigned long long)max);
  gd__gpu_dev *dev = fits ? reg_device(be) : NULL;
  gd__gpu_reg *g = dev ? calloc(1, sizeof *g) : NULL;
  if (!g)
    return; /* staging path */
  g->be = be;
  g->r = r;
  g->state = REG_PENDING;
  g->reg_cmd = (gd__gpu_cmd){.type = GD__CMD_REG};
  g->unreg_cmd = (gd__gpu_cmd){.type = GD__CMD_UNREG};
  pthread_mutex_lock(&be->reg_mu);
  g->counted = true;
  be->reg_bytes += r->size;
  be->reg_regions++;
  g->next = be->regs;
  if (be->regs)
    be->regs->prev = g;
  be->regs = g;
  pthread_mutex_unlock(&be->reg_mu);
  r->backend_data = g;
  g->dev = dev;
  pthread_mutex_lock(&dev->mu);
  gd__gpu_cmd_push(dev, &g->reg_cmd);
  pthread_mutex_unlock(&dev->mu);
}

void gd__gpu_op_region_gone(gd_backend *b, gd_region *r) {
  (void)b;
  gd__gpu_reg *g = r->backend_data;
  if (!g) {
    gd_region_unmap(r);
    return;
  }
  gd__gpu_dev *dev = g->dev;
  pthread_mutex_lock(&dev->mu);
  gd__gpu_cmd_push(dev, &g->unreg_cmd); /* after its REG: one worker, one FIFO */
  pthread_mutex_unlock(&dev->mu);
}

/* Whether r is registered now (a job may copy straight from or to it). A DEVICE region's
 * backend_data is a CUDA IPC entry (gd_gpu_ipc.c), never a registration. An operand with a
 * leading dimension is copied from where it lies even when its region is not registered (yet,
 * or ever): only the 2D copy takes its rows and leaves the bytes between them alone; from
 * pageable pages it is slower, never wrong. */
static bool registered(gd__gpu_backend *be, const gd_region *r) {
  const gd__gpu_reg *g = r->backend_data;
  if (!g || r->kind != GD_REGION_HOST)
    return false;
  pthread_mutex_lock(&be->reg_mu);
  bool ok = g->state == REG_OK;
  pthread_mutex_unlock(&be->reg_mu);
  return ok;
}

bool gd__gpu_op_output_mapped(gd_backend *b, gd_job *job, gd_region *r, uint8_t *ptr) {
  gd__gpu_job *gj = gd__gpu_job_of(job);
  /* a small job's C leaves with its slot in one copy already */
  if (!gj || gj->slot ||
      (gj->hdr.ld[GP_OPERAND_C] == 0 && !registered((gd__gpu_backend *)b, r)))
    return false;
  pthread_mutex_lock(&gj->dev->mu);
  gd__gpu_direct_out_set(gj, ptr);
  pthread_mutex_unlock(&gj->dev->mu);
  return true;
}

bool gd__gpu_op_input_mapped(gd_backend *b, gd_job *job, gp_operand operand, gd_region *r,
                             const uint8_t *ptr) {
  gd__gpu_job *gj = gd__gpu_job_of(job);
  if (!gj || gj->slot || operand > GP_OPERAND_C ||
      (gj->hdr.ld[operand] == 0 && !registered((gd__gpu_backend *)b, r)))
    return false;
  pthread_mutex_lock(&gj->dev->mu);
  gd__gpu_input_elsewhere(gj, operand);
  gj->mapped_in[operand] = ptr; /* copied at RUN, before the kernel */
  pthread_mutex_unlock(&gj->dev->mu);
  return true;
}

/* ---- start and stop ------------------------------------------------------ */

int gd__gpu_reg_init(gd__gpu_backend *be, gp_error *err) {
  int rc = pthread_mutex_init(&be->reg_mu, NULL);
  return rc == 0 ? 0 : gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "gpu: its region lock: %s",
                                    strerror(rc));
}

void gd__gpu_reg_destroy(gd__gpu_backend *be) {
  /* The workers are gone; regions still referenced (by jobs the scheduler frees itself) are
   * unmapped by the scheduler: only the entries go here. */
  gd__gpu_reg *g = be->regs;
  while (g) {
    gd__gpu_reg *next = g->next;
    g->r->backend_data = NULL;
    free(g);
    g = next;
  }
  be->regs = NULL;
  pthread_mutex_destroy(&be->reg_mu);
}

void gd__gpu_reg_stats(gd__gpu_backend *be, uint64_t v[GD__GPU_REG_STATS]) {
  pthread_mutex_lock(&be->reg_mu);
  v[0] = be->pinned_regions;
  v[1] = be->pinned_bytes;
  v[2] = be->reg_failures;
  v[3] = be->reg_refused;
  v[4] = be->direct_in_bytes;
  v[5] = be->direct_out_bytes;
  v[6] = be->pieced_jobs;
  v[7] = be->split_jobs;
  pthread_mutex_unlock(&be->reg_mu);
}

void gd__gpu_reg_count_split(gd__gpu_backend *be) {
  pthread_mutex_lock(&be->reg_mu);
  be->split_jobs++;
  pthread_mutex_unlock(&be->reg_mu);
}

uint64_t gd__gpu_op_shm_pinned_bytes(gd_backend *b) {
  uint64_t v[GD__GPU_REG_STATS];
  gd__gpu_reg_stats((gd__gpu_backend *)b, v);
  return v[1];
}
