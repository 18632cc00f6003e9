/*
 * gd_gpu_pool.h - the sub-allocator of one device's memory pool.
 *
 * The GPU backend counts every job's device bytes against each device's
 * budget here before the worker takes them from the device's CUDA memory pool
 * (gd_gpu_mem.c), so a request that does not fit is seen by counting, never by
 * an out-of-memory error in the middle of a job (the pool's growth can fail
 * only when the job's block is taken, before any copy). This file is pure host
 * bookkeeping over offsets (no CUDA): first fit over a sorted list of free
 * extents, coalesced on free, every piece aligned to GD_GPU_POOL_ALIGN bytes.
 * A job's offsets locate its operands inside its own device block.
 *
 * Not thread-safe: the caller holds the device's lock.
 */
#ifndef GD_GPU_POOL_H
#define GD_GPU_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_error.h"

/* CUDA's allocation alignment (cudaMalloc and memory pools); every kernel's vector loads are
 * satisfied by it. */
#define GD_GPU_POOL_ALIGN 256u

typedef struct {
  uint64_t off, len;
} gd__gpu_extent;

typedef struct {
  uint64_t size;            /* bytes managed (a multiple of GD_GPU_POOL_ALIGN) */
  uint64_t in_use;          /* bytes handed out, rounded up */
  size_t live;              /* pieces handed out */
  gd__gpu_extent *free_ext; /* sorted by off, never adjacent (coalesced) */
  size_t nfree, cap;
} gd__gpu_pool;

/* Rounds len up to the pool's alignment; false on overflow. */
bool gd__gpu_pool_round(uint64_t len, uint64_t *out);

/* A pool of size bytes (rounded down to the alignment). 0, or the error (no host memory). */
int gd__gpu_pool_init(gd__gpu_pool *pool, uint64_t size, gp_error *err);
void gd__gpu_pool_fini(gd__gpu_pool *pool);

/* True when a piece of len bytes could ever be handed out (the pool empty). */
bool gd__gpu_pool_fits_ever(const gd__gpu_pool *pool, uint64_t len);

/* Hands out len bytes (rounded up) at *off. False when no free extent is large enough now (or
 * when growing the bookkeeping failed: the caller then waits, as if memory were short). */
bool gd__gpu_pool_alloc(gd__gpu_pool *pool, uint64_t len, uint64_t *off);

/* Returns a piece handed out by gd__gpu_pool_alloc with the same len. Never fails: alloc keeps
 * room for one more free extent than there can be. */
void gd__gpu_pool_free(gd__gpu_pool *pool, uint64_t off, uint64_t len);

#endif /* GD_GPU_POOL_H */
