/*
 * gd_region.c - a shared-memory mapping with references (see gd_region.h).
 */
#include "gd_region.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "gd_log.h"

gd_region *gd_region_new(uint8_t *base, uint64_t size) {
  static atomic_uint_fast64_t next_uid = 1;
  gd_region *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  r->uid = atomic_fetch_add(&next_uid, 1);
  r->base = base;
  r->size = size;
  r->refs = 1;
  return r;
}

gd_region *gd_region_new_device(uint64_t size, const uint8_t handle[GP_CUDA_IPC_HANDLE_BYTES]) {
  gd_region *r = gd_region_new(NULL, size);
  if (!r)
    return NULL;
  r->kind = GD_REGION_DEVICE;
  r->device = -1;
  memcpy(r->ipc_handle, handle, GP_CUDA_IPC_HANDLE_BYTES);
  return r;
}

void gd_region_unmap(gd_region *r) {
  if (!r)
    return;
  if (r->kind == GD_REGION_HOST && munmap(r->base, (size_t)r->size) != 0)
    gd_warn("shm: munmap of a region of %llu bytes failed: %s", (unsigned long long)r->size,
            strerror(errno));
  free(r);
}
