/*
 * gd_cpu_bufcache.c - see gd_cpu_bufcache.h.
 */
#include "gd_cpu_bufcache.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void gd_cpu_bufcache_init(gd_cpu_bufcache *c, uint64_t limit) {
  memset(c, 0, sizeof *c);
  c->limit = limit;
}

/* Takes block i out, keeping the others in age order. */
static gd_cpu_block remove_at(gd_cpu_bufcache *c, size_t i) {
  assert(i < c->n);
  gd_cpu_block b = c->blocks[i];
  memmove(&c->blocks[i], &c->blocks[i + 1], (c->n - i - 1) * sizeof c->blocks[0]);
  c->n--;
  assert(c->bytes >= b.cap);
  c->bytes -= b.cap;
  return b;
}

void *gd_cpu_bufcache_take(gd_cpu_bufcache *c, size_t len, size_t *cap) {
  *cap = len;
  if (len < GD_CPU_BUFCACHE_MIN)
    return malloc(len);
  size_t best = c->n;
  for (size_t i = 0; i < c->n; i++) {
    size_t have = c->blocks[i].cap;
    if (have >= len && have / 2 <= len && (best == c->n || have < c->blocks[best].cap))
      best = i;
  }
  if (best == c->n) {
    c->misses++;
    return malloc(len);
  }
  c->hits++;
  gd_cpu_block b = remove_at(c, best);
  *cap = b.cap;
  return b.ptr;
}

void gd_cpu_bufcache_give(gd_cpu_bufcache *c, void *ptr, size_t cap) {
  if (!ptr)
    return;
  if (cap < GD_CPU_BUFCACHE_MIN || cap > c->limit) {
    free(ptr);
    return;
  }
  while (c->n > 0 && (c->n == GD_CPU_BUFCACHE_BLOCKS || c->bytes + cap > c->limit))
    free(remove_at(c, 0).ptr);
  c->blocks[c->n++] = (gd_cpu_block){ptr, cap};
  c->bytes += cap;
}

void gd_cpu_bufcache_free(gd_cpu_bufcache *c) {
  while (c->n > 0)
    free(remove_at(c, c->n - 1).ptr);
}
