/*
 * gd_gpu_shm.c - shared-memory regions straight to and from the device: the registration cache
 * and the ops region_added, region_gone, input_mapped and output_mapped (gd_backend.h).
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

#include "gd_gpu_internal.h"
#include "gd_list.h"
#include "gd_log.h"

typedef enum { REG_PENDING, REG_OK, REG_FAILED } reg_state;

struct gd__gpu_reg {
  gd__gpu_cmd reg_cmd;   /* GD__CMD_REG: first member, so the node is the entry */
  gd__gpu_cmd unreg_cmd; /* GD__CMD_UNREG */
  gd__gpu_backend *be;
  gd_region *r;
  gd__gpu_dev *dev;      /* whose worker (un)registers it */
  reg_state state;       /* reg_mu */
  bool counted;          /* reg_mu: its bytes are in be->reg_bytes */
  gd__gpu_reg *prev, *next; /* reg_mu: the backend's entries */
};

static gd__gpu_reg *reg_of(gd__gpu_cmd *cmd) {
  size_t at = cmd->type == GD__CMD_REG ? offsetof(gd__gpu_reg, reg_cmd)
                                       : offsetof(gd__gpu_reg, unreg_cmd);
  return (gd__gpu_reg *)((char *)cmd - at);
}

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

/* Under reg_mu: the entry's bytes leave the budget. */
static void uncount(gd__gpu_reg *g) {
  if (!g->counted)
    return;
  g->counted = false;
  g->be->reg_bytes -= g->r->size;
  g->be->reg_regions--;
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

void gd__gpu_direct_out_set(gd__gpu_job *gj, uint8_t *ptr) {
  gd__gpu_buf *buf = &gj->direct_out;
  gj->mapped_out = ptr;
  buf->dev = gj->dev;
  buf->is_out = true;
  buf->host = ptr;
  buf->cap = (size_t)gj->c_bytes;
  buf->state = GD__BUF_FREE;
  buf->done = (gd__gpu_cmd){.type = GD__CMD_OUT_DONE, .buf = buf};
  buf->cmd = (gd__gpu_cmd){.buf = buf};
}

bool gd__gpu_op_input_mapped(gd_backend *b, gd_job *job, gp_operand operand, gd_region *r,
                             const uint8_t *ptr) {
  gd__gpu_job *gj = gd__gpu_job_of(job);
  if (!gj || gj->slot || operand > GP_OPERAND_C ||
      (gj->hdr.ld[operand] == 0 && !registered((gd__gpu_backend *)b, r)))
    return false;
  gd__gpu_dev *dev = gj->dev;
  pthread_mutex_lock(&dev->mu);
  if (gj->loop.cur)
    gd__gpu_flush(gj); /* the other operand's bytes go on their way */
  gj->mapped_in[operand] = ptr; /* copied at RUN, before the kernel */
  gj->loop.received += gj->bytes[operand];
  pthread_mutex_unlock(&dev->mu);
  return true;
}

/* ---- the worker ---------------------------------------------------------- */

void gd__gpu_reg_handle(gd__gpu_dev *dev, gd__gpu_cmd *cmd) {
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

/* ---- start and stop ------------------------------------------------------ */

int gd__gpu_reg_init(gd__gpu_backend *be) {
  return pthread_mutex_init(&be->reg_mu, NULL) == 0 ? 0 : -1;
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

void gd__gpu_count_direct_in(gd__gpu_dev *dev, uint64_t bytes) {
  pthread_mutex_lock(&dev->mu);
  dev->bytes_h2d += bytes;
  pthread_mutex_unlock(&dev->mu);
  gd__gpu_reg_count_direct(dev->be, bytes, 0);
}

void gd__gpu_reg_count_split(gd__gpu_backend *be) {
  pthread_mutex_lock(&be->reg_mu);
  be->split_jobs++;
  pthread_mutex_unlock(&be->reg_mu);
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

uint64_t gd__gpu_op_shm_pinned_bytes(gd_backend *b) {
  uint64_t v[GD__GPU_REG_STATS];
  gd__gpu_reg_stats((gd__gpu_backend *)b, v);
  return v[1];
}
