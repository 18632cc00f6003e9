/*
 * gc_shm.c - shared-memory buffers: a memfd sealed against shrinking, mapped here and
 * registered with the daemon (shm_register, the descriptor passed on the request's first
 * byte), so that gemm operands and results inside it go by reference (gc_gemm.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gc_internal.h"

bool gc__shm_find(const gc_conn *conn, const void *ptr, uint64_t len, uint64_t *region,
                  uint64_t *offset) {
  const uint8_t *p = ptr;
  if (p == NULL || len == 0 || conn->broken) return false;
  for (const gc__shm *s = conn->shm; s != NULL; s = s->next) {
    if (s->link_serial != conn->link_serial) continue; /* its socket is gone: sent as bytes */
    if (p < s->base || p >= s->base + s->size) continue;
    uint64_t off = (uint64_t)(p - s->base);
    if (len > s->size - off) return false; /* starts inside, runs past the end: sent as bytes */
    *region = s->region;
    *offset = off;
    return true;
  }
  return false;
}

int gc__shm_link_ready(gc_conn *conn) {
  if (conn->broken && conn->fd < 0 && conn->send_head == NULL && conn->wire_count == 0) {
    int rc = gc__link_open(conn); /* after an idle close: the region needs a socket now */
    if (rc != 0) return gc__conn_fail(conn, &conn->broken_error);
  }
  return 0;
}

void gc__shm_add(gc_conn *conn, gc__shm *s) {
  s->link_serial = conn->link_serial;
  s->next = conn->shm;
  conn->shm = s;
}

/* A new memfd of size bytes, sealed against shrinking and mapped: the descriptor, or a negative
 * code with the connection's error set. */
static int make_memfd(gc_conn *conn, size_t size, uint8_t **base) {
  int fd = memfd_create("gemmclient", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return gc__conn_failf(conn, GC_E_RESOURCE_EXHAUSTED, "memfd_create: %s",
                                    strerror(errno));
  const char *what = "ftruncate";
  if (ftruncate(fd, (off_t)size) == 0) {
    what = "F_ADD_SEALS";
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0) {
      what = "mmap";
      void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        *base = p;
        return fd;
      }
    }
  }
  int saved = errno;
  close(fd);
  return gc__conn_failf(conn, GC_E_RESOURCE_EXHAUSTED, "shared memory: %s: %s", what,
                        strerror(saved));
}

/* Descriptors pass only over a Unix socket (sendmsg on TCP would fail and break conn). */
bool gc__shm_is_unix(const gc_conn *conn) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  return conn->fd >= 0 && getsockname(conn->fd, (struct sockaddr *)&ss, &len) == 0 &&
         ss.ss_family == AF_UNIX;
}

int gc_shm_alloc(gc_conn *conn, size_t bytes, int64_t timeout_ms, void **ptr) {
  if (ptr == NULL || bytes == 0)
    return gc__conn_failf(conn, GC_E_INVALID_ARGUMENT, "gc_shm_alloc needs bytes > 0 and ptr");
  *ptr = NULL;
  int ready = gc__shm_link_ready(conn);
  if (ready != 0) return ready;
  if (conn->broken) return gc__conn_fail(conn, &conn->broken_error);
  if (!gc__shm_is_unix(conn))
    return gc__conn_failf(conn, GC_E_INVALID_ARGUMENT,
                          "shared memory needs a Unix socket connection");
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (bytes > SIZE_MAX - page)
    return gc__conn_failf(conn, GC_E_INVALID_ARGUMENT, "%zu bytes are too many", bytes);
  size_t size = (bytes + page - 1) / page * page;
  gc__shm *s = calloc(1, sizeof *s);
  if (s == NULL) return gc__conn_failf(conn, GC_E_RESOURCE_EXHAUSTED, "out of memory");
  int fd = make_memfd(conn, size, &s->base);
  if (fd < 0) {
    free(s);
    return fd;
  }
  msgpack_sbuffer packed;
  msgpack_sbuffer_init(&packed);
  int rc = gc__call(conn, GP_METHOD_SHM_REGISTER, true, size, fd, timeout_ms, &packed);
  close(fd); /* sent (or the request failed): the mapping keeps the memory */
  int64_t region = -1;
  if (rc == 0 && (gc_map_int(packed.data, packed.size, "region", &region) != 0 || region < 0))
    rc = gc__conn_failf(conn, GC_E_INTERNAL, "shm_register answered without a region id");
  msgpack_sbuffer_destroy(&packed);
  if (rc != 0) {
    munmap(s->base, size);
    free(s);
    return rc;
  }
  s->region = (uint64_t)region;
  s->size = size;
  gc__shm_add(conn, s);
  *ptr = s->base;
  return 0;
}

int gc_shm_free(gc_conn *conn, void *ptr, int64_t timeout_ms) {
  gc__shm **link = &conn->shm;
  while (*link != NULL && (*link)->base != ptr) link = &(*link)->next;
  gc__shm *s = *link;
  if (s == NULL)
    return gc__conn_failf(conn, GC_E_INVALID_ARGUMENT,
                          "not a buffer gc_shm_alloc returned on this connection");
  int rc = 0;
  if (s->link_serial == conn->link_serial && !conn->broken) { /* else it went with its socket */
    rc = gc__call(conn, GP_METHOD_SHM_UNREGISTER, true, s->region, -1, timeout_ms, NULL);
    if (rc != 0 && !conn->broken) return rc; /* still registered: keep it mapped */
  }
  *link = s->next;
  if (!s->device)
    munmap(s->base, s->size);
  free(s);
  return rc;
}
