/*
 * gc_cuda.c - CUDA memory of the caller's process as gemm operands: a device allocation
 * registered with the daemon by CUDA IPC handle (cuda_register), so that a gc_gemm whose a, b,
 * c or out lie inside it names it by reference (gc_gemm.c), as a shared-memory buffer's are.
 * The library never touches the device memory: it only compares addresses (CUDA's unified
 * address space keeps device and host pointers apart) and links no CUDA library.
 */
#include <stdlib.h>
#include <string.h>

#include "gc_internal.h"

int gc_cuda_register(gc_conn *conn, const void *ipc_handle, const char *pci_bus_id,
                     void *dev_ptr, size_t bytes, int64_t timeout_ms, uint64_t *region) {
  if (ipc_handle == NULL || pci_bus_id == NULL || dev_ptr == NULL || bytes == 0 ||
      strlen(pci_bus_id) == 0 || strlen(pci_bus_id) >= GP_CUDA_BUS_ID_MAX)
    return gc__conn_failf(conn, GC_E_INVALID_ARGUMENT,
                          "gc_cuda_register needs a handle, a PCI bus id (1..%d characters), "
                          "the device pointer and bytes > 0", GP_CUDA_BUS_ID_MAX - 1);
  int rc = gc__shm_link_ready(conn);
  if (rc != 0) return rc;
  gp_cuda_reg reg = {.bytes = bytes, .device = -1};
  memcpy(reg.handle, ipc_handle, GP_CUDA_IPC_HANDLE_BYTES);
  memcpy(reg.pci_bus_id, pci_bus_id, strlen(pci_bus_id) + 1);
  gc__shm *s = calloc(1, sizeof *s);
  if (s == NULL) return gc__conn_failf(conn, GC_E_RESOURCE_EXHAUSTED, "out of memory");
  msgpack_sbuffer packed;
  msgpack_sbuffer_init(&packed);
  rc = gc__call_cuda_register(conn, &reg, timeout_ms, &packed);
  int64_t id = -1;
  if (rc == 0 && (gc_map_int(packed.data, packed.size, "region", &id) != 0 || id < 0))
    rc = gc__conn_failf(conn, GC_E_INTERNAL, "cuda_register answered without a region id");
  msgpack_sbuffer_destroy(&packed);
  if (rc != 0) {
    free(s);
    return rc;
  }
  s->region = (uint64_t)id;
  s->base = dev_ptr;
  s->size = bytes;
  s->device = true;
  gc__shm_add(conn, s);
  if (region) *region = s->region;
  return 0;
}

int gc_cuda_unregister(gc_conn *conn, void *dev_ptr, int64_t timeout_ms) {
  const gc__shm *s = conn->shm;
  while (s != NULL && !(s->device && s->base == dev_ptr)) s = s->next;
  if (s == NULL)
    return gc__conn_failf(conn, GC_E_INVALID_ARGUMENT,
                          "not a pointer gc_cuda_register registered on this connection");
  return gc_shm_free(conn, dev_ptr, timeout_ms);
}
