/*
 * gd_gpu_ipc.c - CUDA memory of a client's process (protocol: cuda_register): the ops
 * device_region_open and locate's DEVICE places (gd_backend.h), and the worker commands
 * that open and close the IPC handle.
 *
 * The client names its device by PCI bus id; the loop finds the device with that address
 * (read at start: the loop makes no CUDA call) and queues IPC_OPEN on its worker, which opens
 * the handle (cudaIpcOpenMemHandle, LazyEnablePeerAccess) once for the region's life (shared
 * with any other region naming the same handle on that device: a process opens a handle once) and
 * checks, through the driver's cuMemGetAddressRange, that the client's allocation holds the
 * bytes it declared: a kernel must never read past it. A job naming the region was admitted
 * on that device (gd_job.device_fixed), so its RUN comes after IPC_OPEN in the same FIFO: at
 * RUN the worker finds the pointer there (or why there is none, and fails the job with
 * INVALID_ARGUMENT). The operands are copied device to device into the job's block and C is
 * copied back device to device into the client's memory (the kernels take their operands in
 * the job's pool block; no byte crosses the host). The region's last reference queues
 * IPC_CLOSE on the same worker, after every job that used it finished.
 *
 * ptr and why are the worker's; the list and the counts are under the backend's reg_mu.
 */
#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_gpu_regions.h"
#include "gd_gpu_loop.h"
#include "gd_list.h"
#include "gd_log.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == GP_CUDA_IPC_HANDLE_BYTES,
               "the protocol's handle is CUDA's");

void gd__gpu_ipc_describe(gd__gpu_dev *dev) {
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, dev->ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    gd_warn("gpu: cuda:%d: no PCI address: cuda_register cannot name it", dev->ordinal);
    return;
  }
  dev->pci[0] = (unsigned)prop.pciDomainID;
  dev->pci[1] = (unsigned)prop.pciBusID;
  dev->pci[2] = (unsigned)prop.pciDeviceID;
  dev->pci_known = true;
}

/* "dddd:bb:dd.f" or "bb:dd.f" (hex, any case, as cudaDeviceGetPCIBusId writes it). */
static bool parse_bus_id(const char *s, unsigned pci[3]) {
  unsigned a, b, c, f;
  int used = 0;
  if (sscanf(s, "%x:%x:%x.%x%n", &a, &b, &c, &f, &used) == 4 && s[used] == '\0') {
    pci[0] = a, pci[1] = b, pci[2] = c;
    return true;
  }
  used = 0;
  if (sscanf(s, "%x:%x.%x%n", &b, &c, &f, &used) == 3 && s[used] == '\0') {
    pci[0] = 0, pci[1] = b, pci[2] = c;
    return true;
  }
  return false;
}

static gd__gpu_dev *device_at(gd__gpu_backend *be, const unsigned pci[3]) {
  for (size_t i = 0; i < be->ndev; i++) {
    gd__gpu_dev *dev = &be->devs[i];
    if (dev->pci_known && memcmp(dev->pci, pci, sizeof dev->pci) == 0)
      return dev;
  }
  return NULL;
}

/* ---- the loop ------------------------------------------------------------ */

int gd__gpu_op_device_region_open(gd_backend *b, gd_region *r, const char *pci_bus_id,
                                  gp_error *err) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  unsigned pci[3];
  if (!parse_bus_id(pci_bus_id, pci))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "cuda_register: pci_bus_id \"%s\" is not a PCI address (dddd:bb:dd.f)",
                        pci_bus_id);
  gd__gpu_dev *dev = device_at(be, pci);
  if (!dev)
    return gp_error_set(err, GP_E_NOT_FOUND,
                        "cuda_register: no device of this daemon has PCI bus id %s (gpu.devices)",
                        pci_bus_id);
  pthread_mutex_lock(&dev->mu);
  bool ok = dev->in_service && !dev->dead && !dev->stopping;
  pthread_mutex_unlock(&dev->mu);
  if (!ok)
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda_register: cuda:%d is out of service",
                        dev->ordinal);
  gd__gpu_ipc *g = calloc(1, sizeof *g);
  if (!g)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "cuda_register: out of memory");
  g->be = be;
  g->r = r;
  g->dev = dev;
  g->open_cmd = (gd__gpu_cmd){.type = GD__CMD_IPC_OPEN};
  g->close_cmd = (gd__gpu_cmd){.type = GD__CMD_IPC_CLOSE};
  pthread_mutex_lock(&be->reg_mu);
  g->next = be->ipcs;
  if (be->ipcs)
    be->ipcs->prev = g;
  be->ipcs = g;
  pthread_mutex_unlock(&be->reg_mu);
  r->backend_data = g;
  r->device = (int)(dev - be->devs);
  pthread_mutex_lock(&dev->mu);
  gd__gpu_cmd_push(dev, &g->open_cmd);
  pthread_mutex_unlock(&dev->mu);
  return 0;
}

void gd__gpu_ipc_gone(gd_region *r) {
  gd__gpu_ipc *g = r->backend_data;
  if (!g) {
    gd_region_unmap(r);
    return;
  }
  pthread_mutex_lock(&g->dev->mu);
  gd__gpu_cmd_push(g->dev, &g->close_cmd); /* after its OPEN and every job's RUN: one FIFO */
  pthread_mutex_unlock(&g->dev->mu);
}

/* The entry of r when job (a pool job, not a small-job slot) runs on r's device. */
static gd__gpu_ipc *usable(gd__gpu_job *gj, const gd_region *r) {
  gd__gpu_ipc *g = r->backend_data;
  return gj && !gj->slot && g && g->dev == gj->dev ? g : NULL;
}

bool gd__gpu_op_input_device(gd_backend *b, gd_job *job, gp_operand operand, gd_region *r,
                             uint64_t offset) {
  (void)b;
  gd__gpu_job *gj = gd__gpu_job_of(job);
  gd__gpu_ipc *g = usable(gj, r);
  if (!g || operand > GP_OPERAND_C)
    return false;
  pthread_mutex_lock(&gj->dev->mu);
  gd__gpu_input_elsewhere(gj, operand);
  gj->ipc_in[operand] = g;
  gj->ipc_in_off[operand] = offset;
  pthread_mutex_unlock(&gj->dev->mu);
  return true;
}

bool gd__gpu_op_output_device(gd_backend *b, gd_job *job, gd_region *r, uint64_t offset) {
  (void)b;
  gd__gpu_job *gj = gd__gpu_job_of(job);
  gd__gpu_ipc *g = usable(gj, r);
  if (!g)
    return false;
  pthread_mutex_lock(&gj->dev->mu);
  gj->ipc_out = g;
  gj->ipc_out_off = offset;
  pthread_mutex_unlock(&gj->dev->mu);
  return true;
}

/* ---- the worker ---------------------------------------------------------- */

void gd__gpu_ipc_destroy(gd__gpu_backend *be) {
  /* The workers are gone; regions still referenced are freed by the scheduler. */
  gd__gpu_ipc *g = be->ipcs;
  while (g) {
    gd__gpu_ipc *next = g->next;
    g->r->backend_data = NULL;
    free(g);
    g = next;
  }
  be->ipcs = NULL; /* each worker forgot its open handles as it ended (gd__gpu_ipc_maps_free) */
}

void gd__gpu_ipc_stats(gd__gpu_backend *be, uint64_t v[GD__GPU_IPC_STATS]) {
  pthread_mutex_lock(&be->reg_mu);
  v[0] = be->ipc_open;
  v[1] = be->ipc_opened;
  v[2] = be->ipc_failures;
  v[3] = be->ipc_in_bytes;
  v[4] = be->ipc_out_bytes;
  pthread_mutex_unlock(&be->reg_mu);
}
