/*
 * gd_array.h - growing an array that doubles when full (the completion queue, the peer table,
 * a connection's shared-memory regions).
 */
#ifndef GD_ARRAY_H
#define GD_ARRAY_H

#include <stdint.h>
#include <stdlib.h>

/* items (of *cap elements of elem bytes) grown to twice *cap, or to first when empty: the new
 * pointer with *cap updated, or NULL when out of memory or past SIZE_MAX (items and *cap are
 * then unchanged, still the caller's). */
static inline void *gd_array_grow(void *items, size_t *cap, size_t elem, size_t first) {
  size_t want = *cap ? *cap * 2 : first;
  if (want < *cap || want > SIZE_MAX / elem)
    return NULL;
  void *grown = realloc(items, want * elem);
  if (grown)
    *cap = want;
  return grown;
}

#endif /* GD_ARRAY_H */
