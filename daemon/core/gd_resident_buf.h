/*
 * gd_resident_buf.h - the bytes of a resident operand (protocol put), shared between the
 * connection that holds the handle (net/gd_resident.c, the loop) and a backend that keeps its
 * own copy of them (the GPU's per-device cache, on its worker threads).
 *
 * Reference counted with atomics: the connection's table holds one reference until free or its
 * end, and sets `freed` then; a backend holds one while it may still read data (a job that
 * names it, a device copy made from it) and drops its device copy once it sees `freed`. The
 * last reference frees the bytes, on whichever thread that is.
 */
#ifndef GD_RESIDENT_BUF_H
#define GD_RESIDENT_BUF_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct gd_resident_buf {
  uint64_t id;          /* the handle (unique over the daemon's life) */
  uint64_t bytes;
  uint8_t *data;        /* bytes long; written only before the handle is given out */
  atomic_int refs;
  atomic_bool freed;    /* its handle was freed (or its connection closed) */
  atomic_uint_least64_t devices; /* bit d: a backend holds a copy on device d now (the GPU's
                                  * workers set and clear it; the scheduler's hint) */
} gd_resident_buf;

/* A buffer of bytes with one reference, or NULL when out of memory. */
static inline gd_resident_buf *gd_resident_buf_new(uint64_t bytes) {
  gd_resident_buf *b = malloc(sizeof *b);
  if (!b)
    return NULL;
  b->data = malloc(bytes ? (size_t)bytes : 1);
  if (!b->data) {
    free(b);
    return NULL;
  }
  b->id = 0;
  b->bytes = bytes;
  atomic_init(&b->refs, 1);
  atomic_init(&b->freed, false);
  atomic_init(&b->devices, 0);
  return b;
}

static inline void gd_resident_buf_ref(gd_resident_buf *b) {
  atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

static inline void gd_resident_buf_unref(gd_resident_buf *b) {
  if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
    return;
  free(b->data);
  free(b);
}

static inline bool gd_resident_buf_freed(gd_resident_buf *b) {
  return atomic_load_explicit(&b->freed, memory_order_acquire);
}

/* Devices holding a copy of b now (a bit each, device d as 1 << d; d < 64). */
static inline uint64_t gd_resident_buf_devices(gd_resident_buf *b) {
  return (uint64_t)atomic_load_explicit(&b->devices, memory_order_relaxed);
}

static inline void gd_resident_buf_mark(gd_resident_buf *b, int device, bool held) {
  if (device < 0 || device >= 64)
    return;
  uint64_t bit = 1ull << device;
  if (held)
    atomic_fetch_or_explicit(&b->devices, bit, memory_order_relaxed);
  else
    atomic_fetch_and_explicit(&b->devices, ~bit, memory_order_relaxed);
}

#endif /* GD_RESIDENT_BUF_H */
