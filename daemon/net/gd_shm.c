/*
 * gd_shm.c - a connection's shared-memory regions and received descriptors (see gd_shm.h).
 */
#include "gd_shm.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gd_array.h"
#include "gd_log.h"

void gd_shm_attach(gd_shm *t, gd_shm_totals *totals, gd_sched *sched, uint32_t fd_cap) {
  memset(t, 0, sizeof *t);
  t->totals = totals;
  t->sched = sched;
  t->fd_cap = fd_cap < GD_SHM_FDS_MAX ? fd_cap : GD_SHM_FDS_MAX;
}

/* The connection lets go of region i: it is unmapped (and its budget bytes given back) once no
 * job uses it in place any more (gd_sched_region_put). */
static void unmap(gd_shm *t, uint32_t i) {
  gd_region *map = t->regions[i].map;
  uint64_t size = map->size;
  if (map->kind == GD_REGION_DEVICE) { /* its bytes are the client's device memory */
    assert(t->cuda_count > 0 && t->totals->cuda_regions > 0);
    t->cuda_count--;
    t->totals->cuda_regions--;
  } else {
    assert(t->bytes >= size && t->totals->bytes >= size && t->totals->regions > 0);
    t->bytes -= size;
    t->totals->bytes -= size;
    t->totals->regions--;
  }
  t->regions[i] = t->regions[--t->count];
  gd_netsched_region_put(t->sched, map);
}

void gd_shm_free(gd_shm *t) {
  while (t->count > 0)
    unmap(t, t->count - 1);
  while (t->fd_count > 0)
    gd_shm_drop_fd(t);
  free(t->regions);
  t->regions = NULL;
  t->cap = 0;
}

/* ---- descriptors ------------------------------------------------------------ */

static void on_taken_close(uv_handle_t *h) { free(h); }

/* Takes the next descriptor libuv holds for pipe into *fd, as our own (close-on-exec) one.
 * libuv hands received descriptors out only through uv_accept into a handle, so it goes into
 * a scratch pipe handle that is closed at once. Returns 1 (*fd ours), 0 (taken out of libuv
 * but lost: *fd is -1) or -1 (out of memory: still libuv's, which closes it with the
 * connection). */
static int take_one(uv_pipe_t *pipe, int *fd) {
  *fd = -1;
  uv_pipe_t *tmp = malloc(sizeof *tmp);
  if (!tmp)
    return -1;
  if (uv_pipe_init(pipe->loop, tmp, 0) != 0) {
    free(tmp);
    return -1;
  }
  uv_os_fd_t raw;
  if (uv_accept((uv_stream_t *)pipe, (uv_stream_t *)tmp) == 0 &&
      uv_fileno((uv_handle_t *)tmp, &raw) == 0)
    *fd = fcntl(raw, F_DUPFD_CLOEXEC, 3);
  uv_close((uv_handle_t *)tmp, on_taken_close); /* closes raw */
  return *fd >= 0 ? 1 : 0;
}

/* One more waiting descriptor for t's peer, within its share: true when counted. */
static bool peer_takes_fd(gd_shm *t) {
  if (!t->peers)
    return true;
  gd_peers_lock(t->peers); /* every loop's peers */
  bool ok = gd_peers_take_fd(t->peers, t->peer_key, t->peer_fd_cap);
  gd_peers_unlock(t->peers);
  return ok;
}

void gd_shm_take_fds(gd_shm *t, uv_pipe_t *pipe) {
  while (uv_pipe_pending_count(pipe) > 0) {
    int fd;
    int taken = take_one(pipe, &fd);
    if (taken < 0) {
      gd_warn("shm: out of memory taking a received descriptor");
      return; /* tried again after the next read */
    }
    if (taken == 0 || !t->totals || t->fd_count >= t->fd_cap || !peer_takes_fd(t)) {
      if (fd >= 0)
        close(fd);
      if (t->totals) {
        gd_netsched_lock(t->sched); /* every loop's total */
        t->totals->fds_dropped++;
        gd_netsched_unlock(t->sched);
      }
      continue;
    }
    t->fds[(t->fd_head + t->fd_count) % GD_SHM_FDS_MAX] = fd;
    t->fd_count++;
  }
}

static int pop_fd(gd_shm *t) {
  if (t->fd_count == 0)
    return -1;
  int fd = t->fds[t->fd_head];
  t->fd_head = (t->fd_head + 1) % GD_SHM_FDS_MAX;
  t->fd_count--;
  if (t->peers) {
    gd_peers_lock(t->peers);
    gd_peers_give_fd(t->peers, t->peer_key);
    gd_peers_unlock(t->peers);
  }
  return fd;
}

void gd_shm_drop_fd(gd_shm *t) {
  int fd = pop_fd(t);
  if (fd >= 0)
    close(fd);
}

/* ---- registering ------------------------------------------------------------ */

/* The descriptor can back a region of size bytes that the client cannot shrink. */
static int check_fd(int fd, uint64_t size, gp_error *err) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "shm_register: fstat: %s", strerror(errno));
  if (!S_ISREG(st.st_mode))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "shm_register: the descriptor is not a memfd (not a regular file)");
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "shm_register: the descriptor is not a sealable memfd: %s",
                        strerror(errno));
  if (!(seals & F_SEAL_SHRINK))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "shm_register: the memfd must be sealed with F_SEAL_SHRINK");
  if ((uint64_t)st.st_size < size)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "shm_register: the memfd holds %lld bytes, less than the %llu declared",
                        (long long)st.st_size, (unsigned long long)size);
  return 0;
}

/* used + more <= max, without overflow (max may have shrunk below used on SIGHUP). */
static bool fits(uint64_t used, uint64_t more, uint64_t max) {
  return used <= max && more <= max - used;
}

static int check_quota(const gd_shm *t, const gd_shm_limits *lim, uint64_t size,
                       gp_error *err) {
  if (t->count - t->cuda_count >= lim->max_regions_per_connection)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "shm_register: %u regions already registered "
                        "(shm.max_regions_per_connection)", (unsigned)(t->count - t->cuda_count));
  if (!fits(t->bytes, size, lim->max_bytes_per_connection))
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "shm_register: %llu more bytes are over shm.max_bytes_per_connection "
                        "(%llu, %llu registered)", (unsigned long long)size,
                        (unsigned long long)lim->max_bytes_per_connection,
                        (unsigned long long)t->bytes);
  if (!fits(t->totals->bytes, size, lim->max_bytes_total))
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "shm_register: %llu more bytes are over shm.max_bytes_total (%llu)",
                        (unsigned long long)size, (unsigned long long)lim->max_bytes_total);
  return 0;
}

int gd_shm_insert(gd_shm *t, gd_region *r, uint64_t *id) {
  if (t->count == t->cap) {
    gd_shm_region *grown = gd_array_grow(t->regions, &t->cap, sizeof *grown, 4);
    if (!grown)
      return -1;
    t->regions = grown;
  }
  *id = ++t->next_id;
  t->regions[t->count++] = (gd_shm_region){*id, r, 0, 0};
  return 0;
}

static int add_region(gd_shm *t, uint8_t *base, uint64_t size, uint64_t *id) {
  gd_region *map = gd_region_new(base, size);
  if (!map)
    return -1;
  if (gd_shm_insert(t, map, id) != 0) {
    free(map); /* the caller unmaps base */
    return -1;
  }
  t->bytes += size;
  t->totals->bytes += size;
  t->totals->regions++;
  t->totals->registered++;
  return 0;
}

static int map_region(gd_shm *t, int fd, uint64_t size, uint64_t *id, gp_error *err) {
  int rc = gd_netsched_reserve(t->sched, size, err);
  if (rc != 0)
    return rc;
  void *base = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED)
    rc = gp_error_set(err, errno == ENOMEM ? GP_E_RESOURCE_EXHAUSTED : GP_E_INVALID_ARGUMENT,
                      "shm_register: mmap: %s", strerror(errno));
  else if (add_region(t, base, size, id) != 0)
    rc = gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "shm_register: out of memory");
  if (rc != 0) {
    if (base != MAP_FAILED)
      munmap(base, (size_t)size);
    gd_netsched_unreserve(t->sched, size);
    return rc;
  }
  gd_netsched_region_added(t->sched, t->regions[t->count - 1].map);
  return 0;
}

/* Everything a registration must pass before the mapping, in the order a client would want
 * to hear of it. */
static int check_request(const gd_shm *t, const gd_shm_limits *lim, uint64_t size, int fd,
                         gp_error *err) {
  if (!t->totals || !lim->enabled)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "shared memory needs a Unix socket connection (and shm.enabled)");
  if (size == 0 || size > SIZE_MAX)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "size: must be 1..%zu, got %llu",
                        (size_t)SIZE_MAX, (unsigned long long)size);
  int rc = check_quota(t, lim, size, err);
  if (rc != 0)
    return rc;
  if (fd < 0)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "shm_register: no file descriptor came with the request (send a memfd "
                        "with SCM_RIGHTS on the request's first byte)");
  return check_fd(fd, size, err);
}

/* One memfd registered twice would be two regions over the same pages, which the checks of
 * overlapping operands and results (gd_shm_calls_ref) cannot see: refused. */
static int check_not_registered(const gd_shm *t, int fd, struct stat *st, gp_error *err) {
  if (fstat(fd, st) != 0)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "shm_register: fstat: %s", strerror(errno));
  for (uint32_t i = 0; i < t->count; i++)
    if (t->regions[i].map->kind == GD_REGION_HOST && t->regions[i].dev == (uint64_t)st->st_dev &&
        t->regions[i].ino == (uint64_t)st->st_ino)
      return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                          "shm_register: this memfd is registered already, as region %llu",
                          (unsigned long long)t->regions[i].id);
  return 0;
}

int gd_shm_register(gd_shm *t, const gd_shm_limits *lim, uint64_t size, uint64_t *id,
                    gp_error *err) {
  int fd = pop_fd(t); /* consumed whatever happens: keeps requests and descriptors paired */
  struct stat st;
  int rc = check_request(t, lim, size, fd, err);
  if (rc == 0)
    rc = check_not_registered(t, fd, &st, err);
  if (rc == 0)
    rc = map_region(t, fd, size, id, err);
  if (rc == 0) {
    t->regions[t->count - 1].dev = (uint64_t)st.st_dev;
    t->regions[t->count - 1].ino = (uint64_t)st.st_ino;
  }
  if (fd >= 0)
    close(fd); /* the mapping keeps the memory */
  return rc;
}

int gd_shm_unregister(gd_shm *t, uint64_t id, gp_error *err) {
  for (uint32_t i = 0; i < t->count; i++) {
    if (t->regions[i].id == id) {
      unmap(t, i);
      return 0;
    }
  }
  return gp_error_set(err, GP_E_NOT_FOUND, "region %llu is not registered on this connection",
                       (unsigned long long)id);
}

/* ---- ranges ------------------------------------------------------------------ */

int gd_shm_range(const gd_shm *t, uint64_t id, uint64_t offset, uint64_t len, const char *what,
                 uint8_t **ptr, gp_error *err) {
  const gd_region *r = gd_shm_find(t, id);
  if (r) {
    if (offset > r->size || len > r->size - offset)
      return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                           "%s: %llu bytes at offset %llu do not fit region %llu of %llu bytes",
                           what, (unsigned long long)len, (unsigned long long)offset,
                           (unsigned long long)id, (unsigned long long)r->size);
    *ptr = r->kind == GD_REGION_HOST ? r->base + offset : NULL;
    return 0;
  }
  return gp_error_set(err, GP_E_NOT_FOUND, "%s: region %llu is not registered on this "
                       "connection", what, (unsigned long long)id);
}

gd_region *gd_shm_find(const gd_shm *t, uint64_t id) {
  for (uint32_t i = 0; i < t->count; i++)
    if (t->regions[i].id == id)
      return t->regions[i].map;
  return NULL;
}

bool gd_shm_overlap(uint64_t a_off, uint64_t a_len, uint64_t b_off, uint64_t b_len) {
  return a_off < b_off + b_len && b_off < a_off + a_len;
}
