/*
 * gd_peers.c - connections counted per peer (see gd_peers.h).
 */
#include "gd_peers.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_array.h"

int gd_peers_init(gd_peers *p) {
  if (p->mu_ready)
    return 0;
  if (pthread_mutex_init(&p->mu, NULL) != 0)
    return -1;
  p->mu_ready = true;
  return 0;
}

void gd_peers_lock(gd_peers *p) {
  int rc = pthread_mutex_lock(&p->mu);
  assert(rc == 0); /* a normal mutex, not held here: cannot fail */
  (void)rc;
}

void gd_peers_unlock(gd_peers *p) {
  int rc = pthread_mutex_unlock(&p->mu);
  assert(rc == 0);
  (void)rc;
}

static gd_peer_count *find(const gd_peers *p, const char *key) {
  for (size_t i = 0; i < p->n; i++)
    if (strcmp(p->items[i].key, key) == 0)
      return &p->items[i];
  return NULL;
}

int gd_peers_add(gd_peers *p, const char *key) {
  gd_peer_count *item = find(p, key);
  if (item) {
    item->count++;
    return 0;
  }
  if (p->n == p->cap) {
    gd_peer_count *items = gd_array_grow(p->items, &p->cap, sizeof *items, 16);
    if (!items)
      return -1;
    p->items = items;
  }
  item = &p->items[p->n++];
  memset(item, 0, sizeof *item);
  snprintf(item->key, sizeof item->key, "%s", key);
  item->count = 1;
  return 0;
}

void gd_peers_remove(gd_peers *p, const char *key) {
  gd_peer_count *item = find(p, key);
  assert(item && item->count > 0);
  if (!item)
    return;
  if (--item->count == 0)
    *item = p->items[--p->n]; /* order does not matter */
}

uint32_t gd_peers_count(const gd_peers *p, const char *key) {
  const gd_peer_count *item = find(p, key);
  return item ? item->count : 0;
}

void gd_peers_charge(gd_peers *p, const char *key, uint64_t bytes) {
  gd_peer_count *item = find(p, key);
  assert(item);
  if (item)
    item->reserved += bytes;
}

void gd_peers_uncharge(gd_peers *p, const char *key, uint64_t bytes) {
  gd_peer_count *item = find(p, key);
  if (!item)
    return;
  assert(item->reserved >= bytes);
  item->reserved -= bytes;
}

uint64_t gd_peers_reserved(const gd_peers *p, const char *key) {
  const gd_peer_count *item = find(p, key);
  return item ? item->reserved : 0;
}

bool gd_peers_take_fd(gd_peers *p, const char *key, uint32_t cap) {
  gd_peer_count *item = find(p, key);
  if (!item || item->fds >= cap)
    return false;
  item->fds++;
  return true;
}

void gd_peers_give_fd(gd_peers *p, const char *key) {
  gd_peer_count *item = find(p, key);
  if (item && item->fds > 0)
    item->fds--;
}

const gd_peer_count *gd_peers_greediest(const gd_peers *p) {
  const gd_peer_count *best = NULL;
  for (size_t i = 0; i < p->n; i++)
    if (!best || p->items[i].count > best->count)
      best = &p->items[i];
  return best;
}

void gd_peers_free(gd_peers *p) {
  free(p->items);
  p->items = NULL;
  p->n = p->cap = 0;
  if (p->mu_ready)
    pthread_mutex_destroy(&p->mu);
  p->mu_ready = false;
}
