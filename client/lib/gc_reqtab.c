/*
 * gc_reqtab.c - the requests of one connection by msgid: an open-addressing
 * hash table with linear probing and backward-shift deletion (no tombstones,
 * so lookups stay short however many requests come and go).
 */
#include <stdlib.h>

#include "gc_internal.h"

#define MIN_CAPACITY 64

static size_t slot_of(uint32_t msgid, size_t capacity) {
  /* msgids are sequential; a multiplicative hash spreads them anyway */
  return (size_t)((msgid * 2654435761u) & (uint32_t)(capacity - 1));
}

void gc__reqtab_init(gc__reqtab *t) {
  t->slots = NULL;
  t->capacity = 0;
  t->count = 0;
}

void gc__reqtab_free(gc__reqtab *t) {
  free(t->slots);
  gc__reqtab_init(t);
}

static void insert(gc__request **slots, size_t capacity, gc__request *r) {
  size_t i = slot_of(r->msgid, capacity);
  while (slots[i] != NULL) i = (i + 1) & (capacity - 1);
  slots[i] = r;
}

static int grow(gc__reqtab *t) {
  size_t capacity = t->capacity ? t->capacity * 2 : MIN_CAPACITY;
  if (capacity > ((size_t)1 << 30)) return GC_E_RESOURCE_EXHAUSTED;
  gc__request **slots = calloc(capacity, sizeof *slots);
  if (slots == NULL) return GC_E_RESOURCE_EXHAUSTED;
  for (size_t i = 0; i < t->capacity; i++)
    if (t->slots[i] != NULL) insert(slots, capacity, t->slots[i]);
  free(t->slots);
  t->slots = slots;
  t->capacity = capacity;
  return 0;
}

int gc__reqtab_put(gc__reqtab *t, gc__request *r) {
  /* keep the load at most 1/2 */
  if ((t->count + 1) * 2 > t->capacity) {
    int rc = grow(t);
    if (rc != 0) return rc;
  }
  insert(t->slots, t->capacity, r);
  t->count++;
  return 0;
}

static size_t find(const gc__reqtab *t, uint32_t msgid) {
  if (t->capacity == 0) return SIZE_MAX;
  for (size_t i = slot_of(msgid, t->capacity);; i = (i + 1) & (t->capacity - 1)) {
    if (t->slots[i] == NULL) return SIZE_MAX;
    if (t->slots[i]->msgid == msgid) return i;
  }
}

gc__request *gc__reqtab_get(const gc__reqtab *t, uint32_t msgid) {
  size_t i = find(t, msgid);
  return i == SIZE_MAX ? NULL : t->slots[i];
}

gc__request *gc__reqtab_del(gc__reqtab *t, uint32_t msgid) {
  size_t i = find(t, msgid);
  if (i == SIZE_MAX) return NULL;
  gc__request *r = t->slots[i];
  size_t mask = t->capacity - 1;
  /* Backward shift: move later members of the probe run into the hole when their home slot
   * does not lie (cyclically) between the hole and where they sit. */
  size_t hole = i;
  for (size_t j = (i + 1) & mask; t->slots[j] != NULL; j = (j + 1) & mask) {
    size_t home = slot_of(t->slots[j]->msgid, t->capacity);
    bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!stays) {
      t->slots[hole] = t->slots[j];
      hole = j;
    }
  }
  t->slots[hole] = NULL;
  t->count--;
  return r;
}

void gc__reqtab_each(const gc__reqtab *t, void (*fn)(gc__request *r, void *arg), void *arg) {
  for (size_t i = 0; i < t->capacity; i++)
    if (t->slots[i] != NULL) fn(t->slots[i], arg);
}
