/*
 * gd_auth.c - see gd_auth.h.
 */
#include "gd_auth.h"

#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <strings.h>

bool gd_auth_trusted_at_accept(const gd_server *d, bool tcp) { return !tcp || d->token.len == 0; }

bool gd_auth_token_matches(const gd_auth_token *want, const uint8_t *got, size_t len) {
  assert(want->len <= GP_AUTH_TOKEN_MAX);
  if (want->len == 0)
    return true;
  /* Every byte of the configured token is visited whatever got holds, and the differences are
   * OR-ed, never branched on: the time tells nothing about the first wrong byte. */
  unsigned diff = len != want->len;
  for (size_t i = 0; i < want->len; i++) {
    uint8_t g = i < len ? got[i] : 0;
    diff |= (unsigned)(g ^ want->bytes[i]);
  }
  return diff == 0;
}

static bool loopback_v4(const struct in_addr *a) { return (ntohl(a->s_addr) >> 24) == 127; }

static bool loopback_v6(const struct in6_addr *a) {
  return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

bool gd_auth_exposed_host(const char *host) {
  struct in_addr v4;
  struct in6_addr v6;
  if (strcasecmp(host, "localhost") == 0)
    return false;
  if (inet_pton(AF_INET, host, &v4) == 1)
    return !loopback_v4(&v4);
  if (inet_pton(AF_INET6, host, &v6) == 1)
    return !loopback_v6(&v6);
  return true; /* a host name (or a zoned literal) */
}

bool gd_auth_exposed_sockaddr(const struct sockaddr_storage *ss) {
  if (ss->ss_family == AF_INET)
    return !loopback_v4(&((const struct sockaddr_in *)ss)->sin_addr);
  if (ss->ss_family == AF_INET6)
    return !loopback_v6(&((const struct sockaddr_in6 *)ss)->sin6_addr);
  return false; /* not IP: a Unix socket */
}
