/*
 * gd_gpu_device.c - finding the GPUs: the count, the configured list, what
 * each one is (for `info`), its memory budget, and which CUDA errors leave a
 * device unusable.
 */
#include <stdio.h>
#include <string.h>

#include "gd_gpu_shared.h"
#include "gd_log.h"

int gd_gpu_count(void) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    /* No driver, no device, a driver older than the runtime: all mean "no GPU here". */
    gd_debug("gpu: no CUDA device: %s", cudaGetErrorString(e));
    (void)cudaGetLastError(); /* not sticky; clear it for whoever asks next */
    return 0;
  }
  return count;
}

int gd__gpu_device_describe(int ordinal, gd_device_info *info, gp_error *err) {
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, ordinal);
  if (e != cudaSuccess)
    return gp_error_set(err, GP_E_UNAVAILABLE, "cuda:%d: cannot read its properties: %s", ordinal,
                        cudaGetErrorString(e));
  memset(info, 0, sizeof(*info));
  info->id = ordinal;
  snprintf(info->name, sizeof(info->name), "%.*s", (int)sizeof(info->name) - 1, prop.name);
  info->memory_bytes = prop.totalGlobalMem;
  info->sm_count = prop.multiProcessorCount;
  info->cc_major = prop.major;
  info->cc_minor = prop.minor;
  info->in_service = true;
  return 0;
}

double gd__gpu_device_speed(const gd_device_info *info) {
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, info->id) != cudaSuccess || khz <= 0) {
    (void)cudaGetLastError(); /* not sticky: the SMs alone then */
    khz = 1;
  }
  int sms = info->sm_count > 0 ? info->sm_count : 1;
  return (double)sms * (double)khz;
}

int gd__gpu_device_resolve(const gd_gpu_config *cfg, int *ordinals, size_t *count,
                           gp_error *err) {
  int found = 0;
  cudaError_t e = cudaGetDeviceCount(&found);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return gp_error_set(err, GP_E_UNAVAILABLE, "no CUDA device found: %s", cudaGetErrorString(e));
  }
  if (found <= 0)
    return gp_error_set(err, GP_E_UNAVAILABLE, "no CUDA device found: the driver lists none");
  *count = 0;
  if (cfg->devices_auto || cfg->device_count == 0) {
    for (int i = 0; i < found && i < GD_GPU_MAX_DEVICES; i++)
      ordinals[(*count)++] = i;
    return 0;
  }
  for (size_t i = 0; i < cfg->device_count && i < GD_GPU_MAX_DEVICES; i++) {
    int d = cfg->devices[i];
    if (d < 0 || d >= found)
      return gp_error_set(err, GP_E_UNAVAILABLE,
                          "gpu.devices: device %d does not exist (%d CUDA device%s found)", d,
                          found, found == 1 ? "" : "s");
    for (size_t j = 0; j < *count; j++)
      if (ordinals[j] == d)
        return gp_error_set(err, GP_E_INVALID_ARGUMENT, "gpu.devices: device %d listed twice", d);
    ordinals[(*count)++] = d;
  }
  return 0;
}

uint64_t gd__gpu_device_budget(const gd_gpu_config *cfg, uint64_t free_bytes) {
  uint64_t budget;
  if (cfg->memory_bytes > 0) {
    budget = cfg->memory_bytes;
  } else {
    double f = cfg->memory_fraction;
    if (!(f > 0.0) || f > 1.0)
      f = 0.9;
    budget = (uint64_t)((double)free_bytes * f);
  }
  /* Never more than is free now: the pool could not grow past it. */
  if (budget > free_bytes)
    budget = free_bytes;
  return budget;
}

bool gd__gpu_error_is_sticky(cudaError_t e) {
  switch (e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorLaunchTimeout:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorAssert:
  case cudaErrorECCUncorrectable:
  case cudaErrorUnknown:
  case cudaErrorContextIsDestroyed:
  case cudaErrorDevicesUnavailable:
  case cudaErrorSystemNotReady:
  case cudaErrorNvlinkUncorrectable:
  case cudaErrorCudartUnloading:
  case cudaErrorStartupFailure:
    return true;
  default:
    return false;
  }
}
