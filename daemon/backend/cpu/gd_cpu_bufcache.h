/*
 * gd_cpu_bufcache.h - operand buffers of finished CPU jobs kept for the next ones
 * (cpu.buffer_cache_bytes).
 *
 * glibc serves a request of a few MiB with a fresh mmap each time (its mmap threshold follows the
 * largest block freed, and a block of the same size is not below it), so every page of a, b and c
 * was faulted in and zeroed again on every request: at 1024^3 f32 3,000 faults a request, 35% of
 * the daemon's CPU time. Buffers of at least GD_CPU_BUFCACHE_MIN bytes are kept here instead, up to
 * the configured total, and a request takes the smallest one that fits and is at most twice its
 * size. Under the scheduler's lock (prepare and release run there, on any loop thread).
 */
#ifndef GD_CPU_BUFCACHE_H
#define GD_CPU_BUFCACHE_H

#include <stddef.h>
#include <stdint.h>

/* Smaller buffers come from malloc's own bins and are not kept. */
#define GD_CPU_BUFCACHE_MIN ((size_t)64 * 1024)
/* Blocks kept at most (the oldest goes first). */
#define GD_CPU_BUFCACHE_BLOCKS 64

typedef struct {
  void *ptr;
  size_t cap;
} gd_cpu_block;

typedef struct {
  uint64_t limit;        /* bytes kept at most; 0 keeps nothing */
  uint64_t bytes;        /* kept now */
  uint64_t hits, misses; /* takes of GD_CPU_BUFCACHE_MIN or more served from here, or not */
  size_t n;
  gd_cpu_block blocks[GD_CPU_BUFCACHE_BLOCKS]; /* oldest first */
} gd_cpu_bufcache;

void gd_cpu_bufcache_init(gd_cpu_bufcache *c, uint64_t limit);

/* A buffer of at least len bytes (*cap: its size, to give back), or NULL when out of memory. */
void *gd_cpu_bufcache_take(gd_cpu_bufcache *c, size_t len, size_t *cap);

/* Keeps ptr (cap bytes, from take; NULL is ignored) for a later take, or frees it. */
void gd_cpu_bufcache_give(gd_cpu_bufcache *c, void *ptr, size_t cap);

/* Frees every kept buffer. */
void gd_cpu_bufcache_free(gd_cpu_bufcache *c);

#endif /* GD_CPU_BUFCACHE_H */
