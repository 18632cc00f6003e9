/*
 * gd_gpu_regions.h - the GPU backend's entries for a client's regions, which both halves hold
 * (under the backend's reg_mu): a shared-memory region registered for DMA (made by the loop in
 * loop/gd_gpu_shm.c, registered, unregistered and freed by a worker in worker/gd_gpu_shm_reg.c)
 * and a CUDA IPC region (made by the loop in loop/gd_gpu_ipc.c, opened, closed and freed by its
 * device's worker in worker/gd_gpu_ipc_open.c). Each entry embeds the commands that carry it.
 */
#ifndef GD_GPU_REGIONS_H
#define GD_GPU_REGIONS_H

#include "gd_gpu_shared.h"
#include "gp_types.h"

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

/* One handle open on a device, shared by every region that names the same handle there (a
 * process opens a handle once: two connections of one client may register one allocation). */
struct gd__gpu_ipc_map {
  uint8_t handle[GP_CUDA_IPC_HANDLE_BYTES];
  uint8_t *ptr;
  uint32_t users;
  struct gd__gpu_ipc_map *next;
};

struct gd__gpu_ipc {
  gd__gpu_cmd open_cmd;  /* GD__CMD_IPC_OPEN */
  gd__gpu_cmd close_cmd; /* GD__CMD_IPC_CLOSE */
  gd__gpu_backend *be;
  gd_region *r;
  gd__gpu_dev *dev;      /* where it is opened and used */
  uint8_t *ptr;          /* worker: the client's memory, NULL until opened or when it failed */
  struct gd__gpu_ipc_map *map; /* worker: the open handle it uses (with ptr) */
  char why[192];         /* worker: why it could not be opened */
  gd__gpu_ipc *prev, *next; /* reg_mu: the backend's entries */
};

#endif /* GD_GPU_REGIONS_H */
