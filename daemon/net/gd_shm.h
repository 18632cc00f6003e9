/*
 * gd_shm.h - a connection's shared-memory regions (protocol: shm_register, shm_unregister, and
 * gemm operands or results given as {"region": id, "offset": N}).
 *
 * A Unix-socket client passes a memfd with SCM_RIGHTS on the sendmsg that carries the first byte
 * of its shm_register request. The transport takes every received descriptor off libuv as soon
 * as the bytes it came with were read (gd_shm_take_fds) and keeps them in a small FIFO; each
 * shm_register request consumes the oldest one, whatever its outcome, so that descriptors and
 * requests stay paired. A descriptor over the FIFO's cap (GD_SHM_FDS_MAX, and no more than
 * shm.max_regions_per_connection) is closed at once.
 *
 * Registering checks the descriptor (a regular file sealed against shrinking, at least as long
 * as declared: a client cannot truncate it under the daemon's mapping and make it fault), the
 * quotas and queue.memory_budget (pages of a region the daemon touches are charged to the
 * daemon), then maps it MAP_SHARED once, closes the descriptor and shows the region to the
 * backend (gd_sched_region_added: the GPU registers it for DMA). Every (offset, length) a
 * request names is checked against the mapping without overflow. All regions go with their
 * connection; the mapping itself (gd_region.h) stays until the last job that reads or writes it
 * in place is released, and its bytes stay counted against queue.memory_budget until then.
 * The connection's loop thread only; the totals under the shared lock
 * (gd_server.h).
 */
#ifndef GD_SHM_H
#define GD_SHM_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "gd_region.h"
#include "gd_peers.h"
#include "gd_netsched.h"
#include "gp_error.h"

/* Descriptors that may wait for their shm_register, at most (and at most
 * shm.max_regions_per_connection). */
#define GD_SHM_FDS_MAX 64

/* The config keys (shm.*). */
typedef struct {
  bool enabled;                        /* Unix-socket connections may register regions */
  uint32_t max_regions_per_connection;
  uint64_t max_bytes_per_connection;
  uint64_t max_bytes_total;            /* over every connection */
  uint32_t max_fds_per_peer;           /* received descriptors waiting, over a peer's conns */
  /* cuda_ipc.*: CUDA memory of a client's process (cuda_register), in the same table */
  bool cuda_enabled;
  uint32_t cuda_max_regions_per_connection;
} gd_shm_limits;

/* Daemon-wide figures (stats). */
typedef struct {
  uint64_t regions, bytes;             /* registered now */
  uint64_t registered;                 /* since start */
  uint64_t fds_dropped;                /* received and closed unused (over the cap, TCP...) */
  uint64_t cuda_regions;               /* CUDA IPC regions registered now (not in regions) */
  uint64_t cuda_registered;            /* since start */
} gd_shm_totals;

typedef struct {
  uint64_t id;
  gd_region *map;                      /* the mapping; jobs using it in place hold references */
  uint64_t dev, ino;                   /* HOST: the memfd's: one memfd is one region */
} gd_shm_region;

typedef struct {
  gd_shm_totals *totals;               /* NULL: shared memory off for this connection */
  gd_sched *sched;                     /* regions count against queue.memory_budget */
  gd_shm_region *regions;              /* count of them, in a block of cap */
  uint32_t count;                      /* both kinds */
  uint32_t cuda_count;                 /* of them, DEVICE (cuda_register) */
  size_t cap;
  uint64_t bytes;                      /* of HOST regions */
  uint64_t next_id;
  int fds[GD_SHM_FDS_MAX];             /* the FIFO of received descriptors */
  uint32_t fd_head, fd_count, fd_cap;
  /* Its peer's share of waiting descriptors (shm.max_fds_per_peer), counted in peers under
   * their own lock (gd_peers_lock); peers NULL: no share (set after gd_shm_attach). */
  gd_peers *peers;
  const char *peer_key;
  uint32_t peer_fd_cap;
} gd_shm;

/* Turns shared memory on for a connection (before it reads): descriptors are then received,
 * at most fd_cap (and GD_SHM_FDS_MAX) waiting at a time. */
void gd_shm_attach(gd_shm *t, gd_shm_totals *totals, gd_sched *sched, uint32_t fd_cap);
/* Unmaps every region and closes every queued descriptor. */
void gd_shm_free(gd_shm *t);

/* Takes every descriptor libuv received on pipe into the FIFO; those over its cap are closed.
 * Call after each read. */
void gd_shm_take_fds(gd_shm *t, uv_pipe_t *pipe);

/* Pops the oldest descriptor and closes it (a shm_register that was rejected). */
void gd_shm_drop_fd(gd_shm *t);

/* shm_register [size]: pops the oldest descriptor, checks it and the quotas, maps it. 0 with
 * *id, or a GP_E_* code with err. */
int gd_shm_register(gd_shm *t, const gd_shm_limits *lim, uint64_t size, uint64_t *id,
                    gp_error *err);
/* Enters region r (the caller's reference becomes the table's) under a new *id; -1 when out
 * of memory (r is still the caller's). The caller counts it in the totals. */
int gd_shm_insert(gd_shm *t, gd_region *r, uint64_t *id);

/* shm_unregister [id]: unmaps it (or, a DEVICE region, lets the backend close it). 0, or NOT_FOUND. The caller checks it is not in use. */
int gd_shm_unregister(gd_shm *t, uint64_t id, gp_error *err);

/* The bytes [offset, offset + len) of region id, for operand what ("a", "out"): 0 with *ptr
 * (NULL for a DEVICE region: the loop never touches its bytes), NOT_FOUND for an unknown
 * region, INVALID_ARGUMENT for a range past its end. */
int gd_shm_range(const gd_shm *t, uint64_t id, uint64_t offset, uint64_t len, const char *what,
                 uint8_t **ptr, gp_error *err);

/* Region id of this connection, or NULL. */
gd_region *gd_shm_find(const gd_shm *t, uint64_t id);

/* Whether [a_off, a_off + a_len) and [b_off, b_off + b_len) overlap (both already checked
 * against one region, so the sums do not overflow). */
bool gd_shm_overlap(uint64_t a_off, uint64_t a_len, uint64_t b_off, uint64_t b_len);

#endif /* GD_SHM_H */
