/*
 * gd_ops_guard.c - see gd_ops_guard.h.
 */
#include "gd_ops_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_log.h"

#define GUARD_KEY_MAX INET6_ADDRSTRLEN

typedef struct {
  bool used;
  bool closed;       /* shut down by the guard, not yet gone: counts for nothing */
  int fd;
  uint64_t since_us; /* its start, or its last answer */
  char key[GUARD_KEY_MAX];
} guard_entry;

struct gd_ops_guard {
  gd_ops_guard_limits lim;
  guard_entry *items;
  size_t cap;
  uint64_t refused, closed;   /* since the last log line */
  uint64_t logged_us;
};

gd_ops_guard *gd_ops_guard_new(const gd_ops_guard_limits *lim) {
  gd_ops_guard *g = calloc(1, sizeof *g);
  if (!g)
    return NULL;
  g->lim = *lim;
  g->cap = 2 * (size_t)lim->max_connections + 16;
  g->items = calloc(g->cap, sizeof *g->items);
  if (!g->items) {
    free(g);
    return NULL;
  }
  return g;
}

void gd_ops_guard_free(gd_ops_guard *g) {
  if (!g)
    return;
  free(g->items);
  free(g);
}

unsigned gd_ops_guard_mhd_limit(const gd_ops_guard *g) { return (unsigned)g->cap; }

static void key_of(const struct sockaddr *addr, char *key) {
  key[0] = '\0';
  if (addr->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)addr)->sin_addr, key, GUARD_KEY_MAX);
  else if (addr->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)addr)->sin6_addr, key, GUARD_KEY_MAX);
}

/* Open connections (not closed by the guard), and those of key. */
static size_t count(const gd_ops_guard *g, const char *key, size_t *of_key) {
  size_t n = 0;
  *of_key = 0;
  for (size_t i = 0; i < g->cap; i++) {
    const guard_entry *e = &g->items[i];
    if (!e->used || e->closed)
      continue;
    n++;
    if (strcmp(e->key, key) == 0)
      (*of_key)++;
  }
  return n;
}

/* Shuts down every connection past its time: libmicrohttpd then sees it end and closes it. */
static void close_overdue(gd_ops_guard *g, uint64_t now) {
  uint64_t limit = g->lim.request_timeout_ms * 1000u;
  for (size_t i = 0; i < g->cap; i++) {
    guard_entry *e = &g->items[i];
    if (e->used && !e->closed && now - e->since_us >= limit) {
      shutdown(e->fd, SHUT_RDWR);
      e->closed = true;
      g->closed++;
    }
  }
}

static void log_now_and_then(gd_ops_guard *g, const char *key, uint64_t now) {
  if (now - g->logged_us < 1000000u || (g->refused == 0 && g->closed == 0))
    return;
  g->logged_us = now;
  gd_warn("metrics: refused %llu connection(s) (metrics.max_connections %u, "
          "metrics.max_connections_per_client %u; the last from %s) and closed %llu that sent "
          "no whole request within metrics.request_timeout_ms (%llu)",
          (unsigned long long)g->refused, (unsigned)g->lim.max_connections,
          (unsigned)g->lim.max_per_client, key, (unsigned long long)g->closed,
          (unsigned long long)g->lim.request_timeout_ms);
  g->refused = g->closed = 0;
}

enum MHD_Result gd_ops_guard_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
  gd_ops_guard *g = cls;
  (void)addrlen;
  char key[GUARD_KEY_MAX];
  key_of(addr, key);
  uint64_t now = gd_now_us();
  size_t mine, open = count(g, key, &mine);
  if (open >= g->lim.max_connections || mine >= g->lim.max_per_client) {
    close_overdue(g, now);
    open = count(g, key, &mine);
  }
  bool ok = open < g->lim.max_connections && mine < g->lim.max_per_client;
  if (!ok)
    g->refused++;
  log_now_and_then(g, key, now);
  return ok ? MHD_YES : MHD_NO;
}

static guard_entry *free_entry(gd_ops_guard *g) {
  for (size_t i = 0; i < g->cap; i++)
    if (!g->items[i].used)
      return &g->items[i];
  return NULL;
}

void gd_ops_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                         enum MHD_ConnectionNotificationCode code) {
  gd_ops_guard *g = cls;
  if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    guard_entry *e = *socket_context;
    if (e)
      memset(e, 0, sizeof *e);
    *socket_context = NULL;
    return;
  }
  const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn,
                                                               MHD_CONNECTION_INFO_CONNECTION_FD);
  const union MHD_ConnectionInfo *addr =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  guard_entry *e = fd && addr ? free_entry(g) : NULL;
  *socket_context = e; /* NULL: not watched (cannot happen within the limit given to MHD) */
  if (!e)
    return;
  e->used = true;
  e->fd = fd->connect_fd;
  e->since_us = gd_now_us();
  key_of(addr->client_addr, e->key);
}

void gd_ops_guard_answered(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  guard_entry *e = info ? info->socket_context : NULL;
  if (e)
    e->since_us = gd_now_us();
}
