/*
 * gd_gpu_ipc_open.c - CUDA memory of a client's process on the worker of its device: the commands
 * IPC_OPEN and IPC_CLOSE (cudaIpcOpenMemHandle once per handle and device, its size checked;
 * cudaIpcCloseMemHandle at the last user), a job's IPC operands turned into device pointers at
 * RUN, and the bytes counted. The ops are the loop's (loop/gd_gpu_ipc.c); the entries are
 * gd_gpu_regions.h's.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_gpu_regions.h"
#include "gd_gpu_work.h"
#include "gd_list.h"
#include "gd_log.h"

static gd__gpu_ipc *ipc_of(gd__gpu_cmd *cmd) {
  size_t at = cmd->type == GD__CMD_IPC_OPEN ? offsetof(gd__gpu_ipc, open_cmd)
                                            : offsetof(gd__gpu_ipc, close_cmd);
  return (gd__gpu_ipc *)((char *)cmd - at);
}

/* cuMemGetAddressRange (driver API, reached through the runtime: gemmd links no libcuda). */
typedef int (*address_range_fn)(unsigned long long *base, size_t *size, unsigned long long ptr);

static address_range_fn address_range(void) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                       &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !fn) {
    (void)cudaGetLastError();
    return NULL;
  }
  address_range_fn f;
  memcpy(&f, &fn, sizeof f);
  return f;
}

/* The allocation at p holds the region's bytes from p on; else why, in g->why. */
static bool size_ok(gd__gpu_ipc *g, uint8_t *p) {
  address_range_fn range = address_range();
  unsigned long long base = 0;
  size_t size = 0;
  if (!range || range(&base, &size, (unsigned long long)(uintptr_t)p) != 0) {
    snprintf(g->why, sizeof g->why, "the allocation's size cannot be checked "
             "(cuMemGetAddressRange)");
    return false;
  }
  uint64_t from = (uint64_t)(uintptr_t)p - base;
  if (from > size || g->r->size > size - from) {
    snprintf(g->why, sizeof g->why, "bytes (%llu) is more than the allocation holds (%llu)",
             (unsigned long long)g->r->size, (unsigned long long)(size - from));
    return false;
  }
  return true;
}

/* Worker: the handle of g open on dev (shared when it is already), or NULL with g->why. */
static struct gd__gpu_ipc_map *map_take(gd__gpu_dev *dev, gd__gpu_ipc *g) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  for (struct gd__gpu_ipc_map *m = worker->ipc_maps; m; m = m->next) {
    if (memcmp(m->handle, g->r->ipc_handle, sizeof m->handle) == 0) {
      m->users++;
      return m;
    }
  }
  cudaIpcMemHandle_t h;
  memcpy(&h, g->r->ipc_handle, sizeof h);
  void *p = NULL;
  cudaError_t e = gd__gpu_dev_dead(dev) ? cudaErrorDevicesUnavailable
                                        : cudaIpcOpenMemHandle(&p, h,
                                                               cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    /* A client's bad handle is its own failure: never taken as a device fault, whatever
     * code the driver gives it (the device's next real call would show a real one). */
    snprintf(g->why, sizeof g->why, "cudaIpcOpenMemHandle: %s", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return NULL;
  }
  struct gd__gpu_ipc_map *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(g->why, sizeof g->why, "out of memory");
    if (cudaIpcCloseMemHandle(p) != cudaSuccess)
      (void)cudaGetLastError();
    return NULL;
  }
  memcpy(m->handle, g->r->ipc_handle, sizeof m->handle);
  m->ptr = p;
  m->users = 1;
  m->next = worker->ipc_maps;
  worker->ipc_maps = m;
  return m;
}

/* Worker: g lets go of its open handle; the last user closes it. */
static void map_put(gd__gpu_dev *dev, struct gd__gpu_ipc_map *m) {
  assert(m->users > 0);
  if (--m->users > 0)
    return;
  struct gd__gpu_ipc_map **at = &gd__gpu_worker_of(dev)->ipc_maps;
  while (*at != m)
    at = &(*at)->next;
  *at = m->next;
  if (!gd__gpu_dev_dead(dev) && cudaIpcCloseMemHandle(m->ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    gd_warn("gpu: cuda:%d: cudaIpcCloseMemHandle failed", dev->ordinal);
  }
  free(m);
}

static void ipc_open(gd__gpu_dev *dev, gd__gpu_ipc *g) {
  struct gd__gpu_ipc_map *m = map_take(dev, g);
  bool ok = m && size_ok(g, m->ptr);
  if (m && !ok)
    map_put(dev, m);
  g->map = ok ? m : NULL;
  g->ptr = ok ? m->ptr : NULL;
  gd__gpu_backend *be = g->be;
  pthread_mutex_lock(&be->reg_mu);
  if (ok) {
    be->ipc_open++;
    be->ipc_opened++;
  } else {
    be->ipc_failures++;
  }
  pthread_mutex_unlock(&be->reg_mu);
  if (!ok)
    gd_info("gpu: cuda:%d: a CUDA IPC region of %llu bytes cannot be used: %s", dev->ordinal,
            (unsigned long long)g->r->size, g->why);
}

static void ipc_close(gd__gpu_dev *dev, gd__gpu_ipc *g) {
  if (g->map)
    map_put(dev, g->map);
  gd__gpu_backend *be = g->be;
  pthread_mutex_lock(&be->reg_mu);
  if (g->ptr)
    be->ipc_open--;
  GD_LIST_UNLINK(be->ipcs, g);
  pthread_mutex_unlock(&be->reg_mu);
  gd_region_unmap(g->r); /* a DEVICE region: only freed */
  free(g);
}

void gd__gpu_ipc_handle(gd__gpu_dev *dev, gd__gpu_cmd *cmd) {
  GD__GPU_ON_WORKER(dev);
  if (cmd->type == GD__CMD_IPC_OPEN)
    ipc_open(dev, ipc_of(cmd));
  else
    ipc_close(dev, ipc_of(cmd));
}

/* Under mu: the job fails because g could not be opened. */
static bool refuse(gd__gpu_job *job, const char *what, const gd__gpu_ipc *g) {
  gd__gpu_fail(job, GP_E_INVALID_ARGUMENT, "%s: its CUDA IPC region cannot be used: %s", what,
               g->why);
  return false;
}

bool gd__gpu_ipc_resolve(gd__gpu_dev *dev, gd__gpu_job *job) {
  GD__GPU_ON_WORKER(dev);
  bool ok = true;
  pthread_mutex_lock(&dev->mu);
  for (int op = 0; op < 3 && ok; op++) {
    const gd__gpu_ipc *g = job->ipc_in[op];
    if (!g)
      continue;
    if (!g->ptr)
      ok = refuse(job, gp_operand_name((gp_operand)op), g);
    else
      job->mapped_in[op] = g->ptr + job->ipc_in_off[op];
  }
  if (ok && job->ipc_out) {
    if (!job->ipc_out->ptr)
      ok = refuse(job, "out", job->ipc_out);
    else
      gd__gpu_direct_out_set(job, job->ipc_out->ptr + job->ipc_out_off);
  }
  pthread_mutex_unlock(&dev->mu);
  return ok;
}

void gd__gpu_ipc_count(gd__gpu_backend *be, uint64_t in, uint64_t out) {
  pthread_mutex_lock(&be->reg_mu);
  be->ipc_in_bytes += in;
  be->ipc_out_bytes += out;
  pthread_mutex_unlock(&be->reg_mu);
}

void gd__gpu_ipc_maps_free(gd__gpu_dev *dev) {
  gd__gpu_dev_work *worker = gd__gpu_worker_of(dev);
  while (worker->ipc_maps) {
    struct gd__gpu_ipc_map *m = worker->ipc_maps;
    worker->ipc_maps = m->next;
    free(m);
  }
}
