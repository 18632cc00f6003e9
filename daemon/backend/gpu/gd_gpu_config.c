/*
 * gd_gpu_config.c - the defaults of the `gpu:` section of gemmd.yaml. Needs no CUDA and is
 * built in every configuration, so the same gemmd.yaml parses and validates with or without
 * the GPU backend.
 */
#include <stdio.h>
#include <string.h>

#include "gd_backend_gpu.h"

void gd_gpu_config_default(gd_gpu_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->devices_auto = true;
  cfg->staging_bytes = 64ull * 1024 * 1024;
  cfg->staging_buffers = 2;
  cfg->memory_fraction = 0.9;
  cfg->memory_bytes = 0;
  cfg->staging_hold_ms = 20;
  cfg->memory_idle_ms = 30000;
  cfg->memory_keep_bytes = 0;
  cfg->kernel_pool_bytes = 64ull * 1024 * 1024; /* GK_POOL_KEEP_BYTES: one 8192^2 int8 operand */
  cfg->small_job_bytes = 1024 * 1024;
  cfg->resident_bytes = 4ull << 30;
  cfg->small_slots = 1024; /* 32 connections x 32 in flight (RESULTS.md): 1 GiB pinned */
  cfg->small_poll_us = 20;
  cfg->max_batch_jobs = 32;
  cfg->max_queue_delay_us = 0;
  cfg->small_passes = 2;
  cfg->shm_pieces = 4;
  cfg->split_max_parts = 8;
  cfg->split_min_rows = 4096; /* 8192^3 f32 1.59x, 16384^3 1.81x on two H200s (RESULTS.md) */
  cfg->shm_register_bytes = 4ull * 1024 * 1024 * 1024;
  snprintf(cfg->kernel, sizeof cfg->kernel, "auto");
}
