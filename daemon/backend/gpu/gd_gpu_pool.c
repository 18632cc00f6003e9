/*
 * gd_gpu_pool.c - first-fit sub-allocation of a device's memory pool (offsets only).
 */
#include "gd_gpu_pool.h"

#include <stdlib.h>
#include <string.h>

bool gd__gpu_pool_round(uint64_t len, uint64_t *out) {
  if (len == 0)
    len = 1;
  if (len > UINT64_MAX - (GD_GPU_POOL_ALIGN - 1))
    return false;
  *out = (len + GD_GPU_POOL_ALIGN - 1) & ~(uint64_t)(GD_GPU_POOL_ALIGN - 1);
  return true;
}

/* Makes room for `want` free extents. The free list holds at most live + 1 extents (every gap
 * lies before, between or after the live pieces), so keeping cap >= live + 2 before each
 * alloc means free() never has to grow it. */
static bool reserve_extents(gd__gpu_pool *pool, size_t want) {
  if (pool->cap >= want)
    return true;
  size_t cap = pool->cap ? pool->cap : 16;
  while (cap < want)
    cap *= 2;
  gd__gpu_extent *grown = realloc(pool->free_ext, cap * sizeof(*grown));
  if (!grown)
    return false;
  pool->free_ext = grown;
  pool->cap = cap;
  return true;
}

int gd__gpu_pool_init(gd__gpu_pool *pool, uint64_t size, gp_error *err) {
  memset(pool, 0, sizeof(*pool));
  pool->size = size & ~(uint64_t)(GD_GPU_POOL_ALIGN - 1);
  if (!reserve_extents(pool, 16))
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of host memory");
  if (pool->size > 0) {
    pool->free_ext[0] = (gd__gpu_extent){0, pool->size};
    pool->nfree = 1;
  }
  return 0;
}

void gd__gpu_pool_fini(gd__gpu_pool *pool) {
  free(pool->free_ext);
  memset(pool, 0, sizeof(*pool));
}

bool gd__gpu_pool_fits_ever(const gd__gpu_pool *pool, uint64_t len) {
  uint64_t rounded;
  return gd__gpu_pool_round(len, &rounded) && rounded <= pool->size;
}

bool gd__gpu_pool_alloc(gd__gpu_pool *pool, uint64_t len, uint64_t *off) {
  uint64_t rounded;
  if (!gd__gpu_pool_round(len, &rounded) || rounded > pool->size - pool->in_use)
    return false;
  if (!reserve_extents(pool, pool->live + 3))
    return false;
  for (size_t i = 0; i < pool->nfree; i++) {
    gd__gpu_extent *e = &pool->free_ext[i];
    if (e->len < rounded)
      continue;
    *off = e->off;
    e->off += rounded;
    e->len -= rounded;
    if (e->len == 0) {
      memmove(e, e + 1, (pool->nfree - i - 1) * sizeof(*e));
      pool->nfree--;
    }
    pool->in_use += rounded;
    pool->live++;
    return true;
  }
  return false;
}

void gd__gpu_pool_free(gd__gpu_pool *pool, uint64_t off, uint64_t len) {
  uint64_t rounded;
  if (!gd__gpu_pool_round(len, &rounded))
    return;
  size_t i = 0; /* first free extent after the piece */
  while (i < pool->nfree && pool->free_ext[i].off < off)
    i++;
  bool join_prev = i > 0 && pool->free_ext[i - 1].off + pool->free_ext[i - 1].len == off;
  bool join_next = i < pool->nfree && off + rounded == pool->free_ext[i].off;
  if (join_prev && join_next) {
    pool->free_ext[i - 1].len += rounded + pool->free_ext[i].len;
    memmove(&pool->free_ext[i], &pool->free_ext[i + 1],
            (pool->nfree - i - 1) * sizeof(gd__gpu_extent));
    pool->nfree--;
  } else if (join_prev) {
    pool->free_ext[i - 1].len += rounded;
  } else if (join_next) {
    pool->free_ext[i].off = off;
    pool->free_ext[i].len += rounded;
  } else {
    memmove(&pool->free_ext[i + 1], &pool->free_ext[i],
            (pool->nfree - i) * sizeof(gd__gpu_extent));
    pool->free_ext[i] = (gd__gpu_extent){off, rounded};
    pool->nfree++;
  }
  pool->in_use -= rounded;
  pool->live--;
}
