/*
 * gd_auth_limit.c - failed auths counted per peer (see gd_auth_limit.h).
 */
#include "gd_auth_limit.h"

#include <stdio.h>
#include <string.h>

#define SECOND_US 1000000u

static gd_auth_limit_slot *find(gd_auth_limit *l, const char *key) {
  for (size_t i = 0; i < GD_AUTH_LIMIT_SLOTS; i++)
    if (strcmp(l->slots[i].key, key) == 0)
      return &l->slots[i];
  return NULL;
}

/* key's slot, or the least recently used one made key's. */
static gd_auth_limit_slot *slot_of(gd_auth_limit *l, const char *key) {
  gd_auth_limit_slot *s = find(l, key);
  if (s)
    return s;
  s = &l->slots[0];
  for (size_t i = 1; i < GD_AUTH_LIMIT_SLOTS; i++)
    if (l->slots[i].second_us < s->second_us)
      s = &l->slots[i];
  memset(s, 0, sizeof *s);
  snprintf(s->key, sizeof s->key, "%s", key);
  return s;
}

bool gd_auth_limit_allows(gd_auth_limit *l, const char *key, uint32_t max, uint64_t now_us) {
  gd_auth_limit_slot *s = find(l, key);
  return max == 0 || !s || now_us - s->second_us >= SECOND_US || s->failures < max;
}

uint64_t gd_auth_limit_failed(gd_auth_limit *l, const char *key, uint64_t now_us) {
  gd_auth_limit_slot *s = slot_of(l, key);
  if (now_us - s->second_us >= SECOND_US) {
    s->second_us = now_us;
    s->failures = 0;
  }
  s->failures++;
  s->unlogged++;
  if (s->logged_us && now_us - s->logged_us < SECOND_US)
    return 0;
  uint64_t n = s->unlogged;
  s->unlogged = 0;
  s->logged_us = now_us;
  return n;
}
