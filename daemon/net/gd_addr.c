/*
 * gd_addr.c - see gd_addr.h.
 */
#include "gd_addr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *why, size_t why_size, const char *msg, const char *text) {
  if (why && why_size)
    snprintf(why, why_size, "%s: \"%.200s\"", msg, text);
  return -1;
}

static int parse_port(const char *s, uint16_t *port) {
  if (*s == '\0' || strlen(s) > 5)
    return -1;
  unsigned long v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9')
      return -1;
    v = v * 10 + (unsigned long)(*p - '0');
  }
  if (v > 65535)
    return -1;
  *port = (uint16_t)v;
  return 0;
}

static int parse_unix(const char *text, const char *path, gd_addr *out, char *why,
                      size_t why_size) {
  size_t len = strlen(path);
  if (len == 0)
    return fail(why, why_size, "empty unix socket path", text);
  if (len >= GD_ADDR_PATH_MAX)
    return fail(why, why_size, "unix socket path longer than 107 bytes", text);
  out->kind = GD_ADDR_UNIX;
  memcpy(out->path, path, len + 1);
  return 0;
}

static int parse_tcp(const char *text, const char *rest, gd_addr *out, char *why,
                     size_t why_size) {
  const char *host = rest, *host_end, *port;
  if (*rest == '[') {
    host = rest + 1;
    host_end = strchr(host, ']');
    if (!host_end || host_end[1] != ':')
      return fail(why, why_size, "expected tcp:[V6]:PORT", text);
    port = host_end + 2;
    out->ipv6_literal = 1;
  } else {
    host_end = strrchr(rest, ':');
    if (!host_end)
      return fail(why, why_size, "expected tcp:HOST:PORT", text);
    if (memchr(rest, ':', (size_t)(host_end - rest)))
      return fail(why, why_size, "an IPv6 host needs brackets: tcp:[V6]:PORT", text);
    port = host_end + 1;
  }
  size_t host_len = (size_t)(host_end - host);
  if (host_len == 0)
    return fail(why, why_size, "empty host", text);
  if (host_len >= GD_ADDR_HOST_MAX)
    return fail(why, why_size, "host name too long", text);
  if (parse_port(port, &out->port) != 0)
    return fail(why, why_size, "port must be a number 0..65535", text);
  out->kind = GD_ADDR_TCP;
  memcpy(out->host, host, host_len);
  out->host[host_len] = '\0';
  return 0;
}

int gd_addr_parse(const char *text, gd_addr *out, char *why, size_t why_size) {
  memset(out, 0, sizeof *out);
  if (!text)
    return fail(why, why_size, "no address", "");
  if (strlen(text) >= GD_ADDR_TEXT_MAX)
    return fail(why, why_size, "address too long", text);
  if (strncmp(text, "unix:", 5) == 0)
    return parse_unix(text, text + 5, out, why, why_size);
  if (strncmp(text, "tcp:", 4) == 0)
    return parse_tcp(text, text + 4, out, why, why_size);
  return fail(why, why_size, "address must start with unix: or tcp:", text);
}

char *gd_addr_format(const gd_addr *addr, char *out, size_t out_size) {
  if (addr->kind == GD_ADDR_UNIX)
    snprintf(out, out_size, "unix:%s", addr->path);
  else if (addr->ipv6_literal)
    snprintf(out, out_size, "tcp:[%s]:%u", addr->host, (unsigned)addr->port);
  else
    snprintf(out, out_size, "tcp:%s:%u", addr->host, (unsigned)addr->port);
  return out;
}
