/*
 * gd_cuda_ipc.c - CUDA IPC regions as the protocol layer uses them (see gd_cuda_ipc.h).
 */
#include "gd_cuda_ipc.h"

#include "gd_log.h"

static int check_request(const gd_shm *t, const gd_shm_limits *lim, const gp_cuda_reg *reg,
                         gp_error *err) {
  if (!t->totals)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "cuda_register needs a Unix socket connection (and shm.enabled)");
  if (!lim->cuda_enabled)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "cuda_register: cuda_ipc.enabled is false");
  if (reg->bytes == 0)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "cuda_register: bytes must be >= 1");
  if (t->cuda_count >= lim->cuda_max_regions_per_connection)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "cuda_register: %u regions already registered "
                        "(cuda_ipc.max_regions_per_connection)", (unsigned)t->cuda_count);
  return 0;
}

int gd_cuda_ipc_register(gd_shm *t, const gd_shm_limits *lim, const gp_cuda_reg *reg,
                         uint64_t *id, gp_error *err) {
  int rc = check_request(t, lim, reg, err);
  if (rc != 0)
    return rc;
  gd_region *r = gd_region_new_device(reg->bytes, reg->handle);
  if (!r)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "cuda_register: out of memory");
  rc = gd_netsched_device_region_open(t->sched, r, reg->pci_bus_id, err);
  if (rc != 0) {
    gd_region_unmap(r); /* never shown to the backend: only freed */
    return rc;
  }
  if (gd_shm_insert(t, r, id) != 0) {
    gd_netsched_region_put(t->sched, r); /* the backend closes what it opened */
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "cuda_register: out of memory");
  }
  t->cuda_count++;
  t->totals->cuda_regions++;
  t->totals->cuda_registered++;
  gd_debug("cuda_register: region %llu: %llu bytes on device %d (bus id %s, client ordinal "
           "%lld)", (unsigned long long)*id, (unsigned long long)reg->bytes, r->device,
           reg->pci_bus_id, (long long)reg->device);
  return 0;
}

int gd_cuda_ipc_fixed_device(const gd_shm *t, const gp_gemm_hdr *hdr) {
  const gd_region *r = hdr->has_out ? gd_shm_find(t, hdr->out_region) : NULL;
  return r && r->kind == GD_REGION_DEVICE ? r->device + 1 : 0;
}

int gd_cuda_ipc_ref(gd_sched *sched, gd_job *job, gp_operand operand, gd_region *r,
                    uint64_t region, uint64_t offset, gp_error *err) {
  const char *what = gp_operand_name(operand);
  if (!job->device_fixed)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "%s: region %llu is CUDA device memory: the request's \"out\" must then "
                        "be a CUDA IPC region on the same device too", what,
                        (unsigned long long)region);
  if (job->device != r->device)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "%s: region %llu is on another device than the request's \"out\"", what,
                        (unsigned long long)region);
  if (!gd_netsched_input_device(sched, job, operand, r, offset))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "%s: region %llu: the backend cannot read this CUDA memory", what,
                        (unsigned long long)region);
  return 0;
}

void gd_cuda_ipc_out(gd_sched *sched, gd_job *job, gd_region *r, uint64_t offset) {
  /* The job was admitted on r's device (gd_cuda_ipc_fixed_device), where the backend always
   * takes it; if it ever did not, the result's chunks find no host memory to land in and the
   * connection fails the call as INTERNAL (gd_shm_calls_output). */
  if (!gd_netsched_output_device(sched, job, r, offset))
    gd_warn("cuda_ipc: job %llu: the backend refused to write its result into CUDA memory",
            (unsigned long long)job->id);
}
