/*
 * gc_addrlist.c - an address list ("unix:/run/gemmd/gemmd.sock,tcp:10.0.0.2:7453") parsed
 * into gp_addr entries, and the round robin that spreads a process's connections over it.
 */
#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gc_internal.h"

static bool is_space(char c) { return c == ' ' || c == '\t'; }

/* Parses text[0..len) (one item of the list) into *out. */
static int parse_item(const char *text, size_t len, gp_addr *out, gc_error *err) {
  while (len > 0 && is_space(text[0])) text++, len--;
  while (len > 0 && is_space(text[len - 1])) len--;
  char item[GP_ADDR_TEXT_MAX];
  if (len >= sizeof item)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "address \"%.40s...\" is too long", text);
  memcpy(item, text, len);
  item[len] = '\0';
  gp_error why;
  if (gp_addr_parse(item, GP_ADDR_CONNECT, out, &why) != 0)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "%s", why.message);
  return 0;
}

int gc__addrlist_parse(const char *text, gp_addr **out, size_t *count, gc_error *err) {
  size_t items = 1;
  for (const char *p = text; *p != '\0'; p++) items += *p == ',';
  if (items > GC__ADDRS_MAX)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "%zu addresses in the list; at most %d",
                         items, GC__ADDRS_MAX);
  gp_addr *addrs = calloc(items, sizeof *addrs);
  if (addrs == NULL) return gc__error_set(err, GC_E_RESOURCE_EXHAUSTED, "out of memory");
  const char *start = text;
  for (size_t i = 0; i < items; i++) {
    const char *end = strchr(start, ',');
    size_t len = end != NULL ? (size_t)(end - start) : strlen(start);
    int rc = parse_item(start, len, &addrs[i], err);
    if (rc != 0) {
      free(addrs);
      return rc;
    }
    start += len + 1;
  }
  *out = addrs;
  *count = items;
  return 0;
}

size_t gc__addrlist_first(size_t count) {
  static atomic_size_t next_connection;
  assert(count > 0);
  return atomic_fetch_add(&next_connection, 1) % count;
}
