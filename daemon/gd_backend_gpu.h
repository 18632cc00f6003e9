/*
 * gd_backend_gpu.h - the GPU backend: one worker per CUDA device, each with
 * its own streams (copy in, compute, copy out), a device-memory pool under a
 * budget, and double-buffered pinned host staging. Built only when CUDA is
 * (GEMMD_HAVE_CUDA); the rest of the daemon sees it through gd_backend_ops.
 */
#ifndef GD_BACKEND_GPU_H
#define GD_BACKEND_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gd_backend.h"
#include "gp_error.h"

#define GD_GPU_MAX_DEVICES 64

/* The `gpu:` section of gemmd.yaml. */
typedef struct {
  bool devices_auto;                  /* devices: auto (every GPU found) */
  int devices[GD_GPU_MAX_DEVICES];    /* devices: [0, 1, ...] when not auto */
  size_t device_count;
  uint64_t staging_bytes;             /* size of each pinned staging buffer (default 64 MiB) */
  uint32_t staging_buffers;           /* per direction per device, >= 2 (default 2: double-buffered) */
  double memory_fraction;             /* of each device's free memory usable for jobs (default 0.9) */
  uint64_t memory_bytes;              /* absolute cap per device; 0 = use memory_fraction */
  char kernel[64];                    /* "auto", or a kernel name from gk_kernels() ("tiled16", "cublas", ...) */
} gd_gpu_config;

void gd_gpu_config_default(gd_gpu_config *cfg);

/* Number of usable CUDA devices (0 when there is no driver or no GPU). Never fails. */
int gd_gpu_count(void);

/* Starts one worker per configured device. Fails (GP_E_UNAVAILABLE with a reason) when no
 * configured device can be used. */
int gd_backend_gpu_create(const gd_gpu_config *cfg, gd_backend **out, gp_error *err);

#endif /* GD_BACKEND_GPU_H */
