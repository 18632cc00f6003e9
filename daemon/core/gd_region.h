/*
 * gd_region.h - a client's shared-memory region as the daemon maps it (protocol: shm_register),
 * shared between the connection that registered it and the jobs that read or write it in place.
 *
 * The mapping lives as long as anyone holds a reference: the connection holds one from
 * shm_register until shm_unregister or its close (net/gd_shm.c), and a job whose backend took
 * an operand or its result straight from or into the mapping holds one until its release
 * (gd_sched.c). So a client that unregisters a region, or hangs up, while a job still reads or
 * writes it can make no backend touch unmapped memory. The last reference goes through
 * gd_sched_region_put (gd_sched.h), which lets the backend drop what it keeps for the region
 * (GPU: its DMA registration) before the pages are unmapped.
 *
 * refs and backend_data are the loop thread's; base and size never change; gd_region_unmap
 * may run on any thread (the GPU backend unmaps after unregistering on its worker).
 */
#ifndef GD_REGION_H
#define GD_REGION_H

#include <stdint.h>

#include "gp_types.h"

/* HOST: a mapping of the client's memfd (shm_register). DEVICE: CUDA memory of the client's
 * process that the backend opens by IPC handle (cuda_register): base is NULL, the loop never
 * touches its bytes, and only a backend that took the operand in place may use it. */
typedef enum { GD_REGION_HOST = 0, GD_REGION_DEVICE } gd_region_kind;

typedef struct gd_region {
  uint64_t uid;          /* daemon-wide, never reused (logs, the backend's cache) */
  gd_region_kind kind;
  uint8_t *base;         /* HOST: MAP_SHARED, size bytes, read and write; DEVICE: NULL */
  uint64_t size;
  int device;            /* DEVICE: the backend's device index (devices()) it lives on */
  uint8_t ipc_handle[GP_CUDA_IPC_HANDLE_BYTES]; /* DEVICE: cudaIpcMemHandle_t, as sent */
  uint32_t refs;
  void *backend_data;    /* what the backend keeps for it (GPU: its registration), or NULL */
} gd_region;

/* A region for a mapping just made, with one reference (the caller's); NULL when out of
 * memory (the caller still owns the mapping). */
gd_region *gd_region_new(uint8_t *base, uint64_t size);

/* A DEVICE region of size bytes (no mapping), with one reference; NULL when out of memory. */
gd_region *gd_region_new_device(uint64_t size, const uint8_t handle[GP_CUDA_IPC_HANDLE_BYTES]);

/* Unmaps (HOST) and frees r: only once nobody references it and no backend uses it. Any thread. */
void gd_region_unmap(gd_region *r);

#endif /* GD_REGION_H */
