/*
 * gd_gpu_info.c - what the GPU backend tells about itself on the loop thread: the info and
 * stats maps, the device list, how busy it is, its kernels. Reads device state under mu.
 */
#include <stdio.h>
#include <string.h>

#include "gd_gpu_loop.h"

static void pack_str(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s, n);
}

static void pack_kv_u64(msgpack_packer *pk, const char *key, uint64_t v) {
  pack_str(pk, key);
  msgpack_pack_uint64(pk, v);
}

/* One device's map in info.devices: info as read under mu, with its memory figures (pool_bytes:
 * the cap; pool_reserved: taken from the driver now; pool_in_use: held by jobs now). */
static void pack_device_info(msgpack_packer *pk, const gd_device_info *info) {
  char cc[16];
  snprintf(cc, sizeof(cc), "%d.%d", info->cc_major, info->cc_minor);
  msgpack_pack_map(pk, 10);
  pack_str(pk, "id");
  msgpack_pack_int(pk, info->id);
  pack_str(pk, "device");
  char name[32];
  snprintf(name, sizeof(name), "cuda:%d", info->id);
  pack_str(pk, name);
  pack_str(pk, "name");
  pack_str(pk, info->name);
  pack_kv_u64(pk, "memory", info->memory_bytes);
  pack_kv_u64(pk, "pool_bytes", info->memory_limit);
  pack_kv_u64(pk, "pool_reserved", info->memory_reserved);
  pack_kv_u64(pk, "pool_in_use", info->memory_in_use);
  pack_str(pk, "sms");
  msgpack_pack_int(pk, info->sm_count);
  pack_str(pk, "compute_capability");
  pack_str(pk, cc);
  pack_str(pk, "in_service");
  if (info->in_service)
    msgpack_pack_true(pk);
  else
    msgpack_pack_false(pk);
}

/* Device i's info with its live figures, read under its mu. */
static bool device_at(gd__gpu_backend *be, size_t i, gd_device_info *out) {
  if (i >= be->ndev)
    return false;
  gd__gpu_dev *dev = &be->devs[i];
  pthread_mutex_lock(&dev->mu);
  *out = dev->info;
  out->busy_us = dev->busy_us;
  out->memory_limit = dev->pool.size;
  out->memory_reserved = dev->mem_reserved;
  out->memory_in_use = dev->pool.in_use;
  memcpy(out->batches, dev->small_batches, sizeof out->batches);
  out->split_parts = dev->split_parts;
  out->resident_replicas = dev->res_replicas;
  out->resident_bytes = dev->res_bytes;
  out->resident_evictions = dev->res_evictions;
  pthread_mutex_unlock(&dev->mu);
  return true;
}

void gd__gpu_op_pack_info(gd_backend *b, msgpack_packer *pk) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  msgpack_pack_map(pk, 6);
  pack_str(pk, "backend");
  pack_str(pk, "gpu");
  pack_str(pk, "devices");
  msgpack_pack_array(pk, be->ndev);
  for (size_t i = 0; i < be->ndev; i++) {
    gd_device_info info;
    if (device_at(be, i, &info))
      pack_device_info(pk, &info);
  }
  size_t nk = 0;
  const gk_kernel *const *kernels = gk_kernels(&nk);
  pack_str(pk, "kernels");
  msgpack_pack_array(pk, nk);
  for (size_t i = 0; i < nk; i++) {
    msgpack_pack_map(pk, 2);
    pack_str(pk, "name");
    pack_str(pk, kernels[i]->name);
    pack_str(pk, "description");
    pack_str(pk, kernels[i]->description ? kernels[i]->description : "");
  }
  pack_str(pk, "kernel");
  pack_str(pk, be->cfg.kernel);
  pack_kv_u64(pk, "staging_bytes", be->cfg.staging_bytes);
  pack_kv_u64(pk, "staging_buffers", be->cfg.staging_buffers);
}

/* The small lane's batches by size: {"1": n, "2-3": n, ..., "32+": n}. */
static void pack_batches(msgpack_packer *pk, const uint64_t *batches) {
  pack_str(pk, "small_batches");
  msgpack_pack_map(pk, GD__GPU_BATCH_BUCKETS);
  for (int i = 0; i < GD__GPU_BATCH_BUCKETS; i++)
    pack_kv_u64(pk, gd_batch_bucket_name(i), batches[i]);
}

void gd__gpu_op_pack_stats(gd_backend *b, msgpack_packer *pk) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  static const char *const reg_keys[GD__GPU_REG_STATS] = {
      "shm_registered_regions", "shm_registered_bytes", "shm_register_failures",
      "shm_register_refused",   "shm_direct_in_bytes",  "shm_direct_out_bytes",
      "shm_pieced_jobs",        "shm_split_jobs"};
  static const char *const ipc_keys[GD__GPU_IPC_STATS] = {
      "cuda_ipc_open", "cuda_ipc_opened_total", "cuda_ipc_open_failures", "cuda_ipc_in_bytes",
      "cuda_ipc_out_bytes"};
  uint64_t reg[GD__GPU_REG_STATS], ipc[GD__GPU_IPC_STATS];
  gd__gpu_reg_stats(be, reg);
  gd__gpu_ipc_stats(be, ipc);
  msgpack_pack_map(pk, 1 + GD__GPU_REG_STATS + GD__GPU_IPC_STATS);
  for (size_t k = 0; k < GD__GPU_REG_STATS; k++)
    pack_kv_u64(pk, reg_keys[k], reg[k]);
  for (size_t k = 0; k < GD__GPU_IPC_STATS; k++)
    pack_kv_u64(pk, ipc_keys[k], ipc[k]);
  pack_str(pk, "devices");
  msgpack_pack_array(pk, be->ndev);
  for (size_t i = 0; i < be->ndev; i++) {
    gd__gpu_dev *dev = &be->devs[i];
    pthread_mutex_lock(&dev->mu);
    uint64_t v[] = {dev->busy_us,   dev->jobs_done,    dev->jobs_failed,  dev->bytes_h2d,
                    dev->bytes_d2h, dev->pool.in_use,  dev->pool.size,    dev->mem_reserved,
                    dev->active,    dev->small_jobs,   dev->res_uploads,  dev->res_bytes,
                    dev->res_replicas, dev->res_evictions, dev->split_parts,
                    dev->split_rows};
    bool in_service = dev->in_service;
    uint64_t batches[GD__GPU_BATCH_BUCKETS];
    memcpy(batches, dev->small_batches, sizeof batches);
    pthread_mutex_unlock(&dev->mu);
    static const char *const keys[] = {"busy_us",     "jobs",       "jobs_failed",
                                       "bytes_h2d",   "bytes_d2h",  "pool_in_use",
                                       "pool_bytes",  "pool_reserved", "active",
                                       "small_jobs",  "resident_uploads", "resident_bytes",
                                       "resident_replicas", "resident_evictions", "split_parts",
                                       "split_rows"};
    msgpack_pack_map(pk, 3 + sizeof(keys) / sizeof(keys[0]));
    pack_str(pk, "id");
    msgpack_pack_int(pk, dev->ordinal);
    pack_str(pk, "in_service");
    if (in_service)
      msgpack_pack_true(pk);
    else
      msgpack_pack_false(pk);
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
      pack_kv_u64(pk, keys[k], v[k]);
    pack_batches(pk, batches);
  }
}

size_t gd__gpu_op_devices(gd_backend *b, gd_device_info *out, size_t max) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  size_t n = 0;
  while (n < max && device_at(be, n, &out[n]))
    n++;
  return n;
}

size_t gd__gpu_op_busy(gd_backend *b) {
  gd__gpu_backend *be = (gd__gpu_backend *)b;
  size_t n = 0;
  for (size_t i = 0; i < be->ndev; i++) {
    pthread_mutex_lock(&be->devs[i].mu);
    n += be->devs[i].active;
    pthread_mutex_unlock(&be->devs[i].mu);
  }
  return n;
}

size_t gd__gpu_op_kernels(gd_backend *b, const char **names, size_t max) {
  (void)b;
  size_t n = 0;
  const gk_kernel *const *kernels = gk_kernels(&n);
  for (size_t i = 0; i < n && i < max; i++)
    names[i] = kernels[i]->name;
  return n;
}
