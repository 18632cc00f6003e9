/*
 * fake_cuda_ipc.c - fake_cuda.c's device memory that another process can open: cudaMalloc,
 * cudaFree, cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle,
 * cudaDeviceGetPCIBusId, the driver's cuMemGetAddressRange through
 * cudaGetDriverEntryPointByVersion, and the client's cudaMemcpy / cudaDeviceSynchronize.
 *
 * Each cudaMalloc is a memfd mapped MAP_SHARED; its IPC handle carries a magic, the owner's pid
 * and the descriptor, and opening it maps /proc/PID/fd/N (the same user may). As CUDA's, a
 * handle names the whole allocation, whatever pointer inside it made it, and opens at the
 * allocation's base. A handle without the magic, or whose process or descriptor is gone, is
 * refused as CUDA refuses a bad handle.
 */
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAKE_DEVICE_ALLOC_MAX (256ull << 20)
static const char FAKE_IPC_MAGIC[8] = "FAKEIPC1";

typedef struct devalloc {
  uint8_t *p;
  size_t n;
  int fd;               /* ours (cudaMalloc), or -1 (opened from another process) */
  struct devalloc *next;
} devalloc;

static pthread_mutex_t d_mu = PTHREAD_MUTEX_INITIALIZER;
static devalloc *d_allocs;

typedef struct {
  char magic[8];
  int32_t pid, fd;
} fake_handle;
_Static_assert(sizeof(fake_handle) <= sizeof(cudaIpcMemHandle_t), "fits a handle");

static void remember(uint8_t *p, size_t n, int fd) {
  devalloc *a = malloc(sizeof *a);
  if (!a)
    abort();
  *a = (devalloc){p, n, fd, NULL};
  pthread_mutex_lock(&d_mu);
  a->next = d_allocs;
  d_allocs = a;
  pthread_mutex_unlock(&d_mu);
}

/* Under d_mu: the allocation holding p (exact: its start only), or NULL. */
static devalloc *find(const void *p, bool exact) {
  for (devalloc *a = d_allocs; a; a = a->next)
    if (exact ? a->p == p : ((const uint8_t *)p >= a->p && (const uint8_t *)p < a->p + a->n))
      return a;
  return NULL;
}

/* Unmaps and forgets the allocation at p made the way `ours` says; false when there is none. */
static bool forget(void *p, bool ours) {
  pthread_mutex_lock(&d_mu);
  devalloc **at = &d_allocs;
  while (*at && !((*at)->p == p && ((*at)->fd >= 0) == ours))
    at = &(*at)->next;
  devalloc *a = *at;
  if (a)
    *at = a->next;
  pthread_mutex_unlock(&d_mu);
  if (!a)
    return false;
  munmap(a->p, a->n);
  if (a->fd >= 0)
    close(a->fd);
  free(a);
  return true;
}

/* The test client's synchronous copies (device memory is host memory here). CUDA lets a
 * cudaMemcpy from pageable host memory to the device return once the bytes are staged, before
 * they land in device memory (the runtime's "API synchronization behavior"); they land in
 * stream order, before the process's next copy runs, and by cudaDeviceSynchronize. Here they
 * land exactly that late: a client that hands device memory to another process (gemmd, by
 * IPC) without synchronising first then fails every time, as it may on a GPU now and then. */
typedef struct staged {
  uint8_t *dst;
  size_t n;
  struct staged *next;
  uint8_t bytes[];
} staged;

static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static staged *s_head, **s_tail = &s_head;

/* Every staged copy lands, in the order they were made. */
static void land_staged(void) {
  pthread_mutex_lock(&s_mu);
  staged *c = s_head;
  s_head = NULL;
  s_tail = &s_head;
  pthread_mutex_unlock(&s_mu);
  while (c) {
    staged *next = c->next;
    memcpy(c->dst, c->bytes, c->n);
    free(c);
    c = next;
  }
}

cudaError_t cudaMalloc(void **p, size_t n) {
  *p = NULL;
  if (n == 0 || n > FAKE_DEVICE_ALLOC_MAX)
    return cudaErrorMemoryAllocation;
  int fd = memfd_create("fake-cuda-device", MFD_CLOEXEC);
  if (fd < 0)
    return cudaErrorMemoryAllocation;
  void *m = MAP_FAILED;
  if (ftruncate(fd, (off_t)n) == 0)
    m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    close(fd);
    return cudaErrorMemoryAllocation;
  }
  memset(m, 0xA5, n); /* garbage, like fresh device memory */
  remember(m, n, fd);
  *p = m;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  land_staged(); /* implicitly synchronising, as CUDA's */
  return p == NULL || forget(p, true) ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *p) {
  pthread_mutex_lock(&d_mu);
  devalloc *a = find(p, false);
  fake_handle h = {.pid = (int32_t)getpid(), .fd = a ? a->fd : -1};
  pthread_mutex_unlock(&d_mu);
  if (!a || a->fd < 0)
    return cudaErrorInvalidValue;
  memcpy(h.magic, FAKE_IPC_MAGIC, sizeof h.magic);
  memset(handle, 0, sizeof *handle);
  memcpy(handle, &h, sizeof h);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t handle, unsigned int flags) {
  (void)flags;
  *p = NULL;
  fake_handle h;
  memcpy(&h, &handle, sizeof h);
  if (memcmp(h.magic, FAKE_IPC_MAGIC, sizeof h.magic) != 0)
    return cudaErrorInvalidResourceHandle;
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return cudaErrorInvalidResourceHandle;
  struct stat st;
  void *m = MAP_FAILED;
  if (fstat(fd, &st) == 0 && st.st_size > 0)
    m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED)
    return cudaErrorMapBufferObjectFailed;
  remember(m, (size_t)st.st_size, -1);
  *p = m; /* the allocation's base */
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void *p) {
  pthread_mutex_lock(&d_mu);
  devalloc *a = find(p, false);
  void *base = a && a->fd < 0 ? a->p : NULL;
  pthread_mutex_unlock(&d_mu);
  return base && forget(base, false) ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device) {
  if (device < 0 || len < 13)
    return cudaErrorInvalidValue;
  snprintf(id, (size_t)len, "0000:%02X:00.0", 0x10 + device); /* fake_cuda.c's pciBusID */
  return cudaSuccess;
}

/* The driver's cuMemGetAddressRange: 0 (CUDA_SUCCESS) or 1 (CUDA_ERROR_INVALID_VALUE). */
static int fake_address_range(unsigned long long *base, size_t *size, unsigned long long ptr) {
  pthread_mutex_lock(&d_mu);
  devalloc *a = find((const void *)(uintptr_t)ptr, false);
  if (a) {
    *base = (unsigned long long)(uintptr_t)a->p;
    *size = a->n;
  }
  pthread_mutex_unlock(&d_mu);
  return a ? 0 : 1;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
                                             unsigned int version, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status) {
  (void)version;
  (void)flags;
  int (*f)(unsigned long long *, size_t *, unsigned long long) = fake_address_range;
  bool known = strcmp(symbol, "cuMemGetAddressRange") == 0;
  if (known)
    memcpy(fn, &f, sizeof f);
  else
    *fn = NULL;
  if (status)
    *status = known ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  land_staged(); /* one stream: earlier copies first */
  if (kind != cudaMemcpyHostToDevice) {
    memmove(dst, src, n);
    return cudaSuccess;
  }
  staged *c = malloc(sizeof *c + n);
  if (!c)
    return cudaErrorMemoryAllocation;
  *c = (staged){.dst = dst, .n = n};
  memcpy(c->bytes, src, n);
  pthread_mutex_lock(&s_mu);
  *s_tail = c;
  s_tail = &c->next;
  pthread_mutex_unlock(&s_mu);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  land_staged();
  return cudaSuccess;
}
