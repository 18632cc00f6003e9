/*
 * gp_addr.c - see gp_addr.h. Hand-written: the grammar is three prefixes, and getaddrinfo
 * (which the callers run afterwards) neither splits HOST from PORT nor knows unix:.
 */
#include "gp_addr.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define FORMS "unix:PATH, tcp:HOST:PORT or tcp:[V6]:PORT"

/* The reason, after the text it is about: "\"TEXT\": reason". */
__attribute__((format(printf, 3, 4))) static int fail(gp_error *err, const char *text,
                                                      const char *fmt, ...) {
  char reason[GP_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  return gp_error_set(err, GP_E_INVALID_ARGUMENT, "\"%.160s\": %s", text, reason);
}

/* Decimal digits only (no sign, no spaces), at most 5 of them, within the use's range. */
static int parse_port(const char *text, const char *s, gp_addr_use use, uint16_t *port,
                      gp_error *err) {
  unsigned lowest = use == GP_ADDR_LISTEN ? 0 : 1;
  size_t len = strlen(s);
  if (len == 0 || len > 5 || strspn(s, "0123456789") != len)
    return fail(err, text, "port \"%s\" is not a number %u..65535", s, lowest);
  unsigned long v = 0;
  for (const char *p = s; *p; p++)
    v = v * 10 + (unsigned long)(*p - '0');
  if (v < lowest || v > 65535)
    return fail(err, text, "port %lu is out of range %u..65535%s", v, lowest,
                v == 0 ? " (port 0 only for a listener)" : "");
  *port = (uint16_t)v;
  return 0;
}

static int parse_unix(const char *text, gp_addr *out, gp_error *err) {
  const char *path = text + strlen("unix:");
  size_t len = strlen(path);
  if (len == 0)
    return fail(err, text, "empty socket path");
  if (len >= GP_ADDR_PATH_MAX)
    return fail(err, text, "socket path is %zu bytes; a Unix socket path holds at most %d",
                len, GP_ADDR_PATH_MAX - 1);
  out->kind = GP_ADDR_UNIX;
  memcpy(out->path, path, len + 1);
  return 0;
}

static int parse_tcp(const char *text, gp_addr_use use, gp_addr *out, gp_error *err) {
  const char *rest = text + strlen("tcp:");
  const char *host = rest, *host_end, *port;
  if (*rest == '[') {
    host = rest + 1;
    host_end = strchr(host, ']');
    if (!host_end || host_end[1] != ':')
      return fail(err, text, "expected tcp:[V6]:PORT");
    port = host_end + 2;
    out->ipv6_literal = 1;
  } else {
    host_end = strrchr(rest, ':');
    if (!host_end)
      return fail(err, text, "expected tcp:HOST:PORT");
    if (memchr(rest, ':', (size_t)(host_end - rest)))
      return fail(err, text, "an IPv6 address goes in brackets: tcp:[V6]:PORT");
    port = host_end + 1;
  }
  size_t host_len = (size_t)(host_end - host);
  if (host_len == 0)
    return fail(err, text, "empty host");
  if (host_len >= GP_ADDR_HOST_MAX)
    return fail(err, text, "host longer than %d bytes", GP_ADDR_HOST_MAX - 1);
  int rc = parse_port(text, port, use, &out->port, err);
  if (rc != 0)
    return rc;
  out->kind = GP_ADDR_TCP;
  memcpy(out->host, host, host_len);
  out->host[host_len] = '\0';
  return 0;
}

int gp_addr_parse(const char *text, gp_addr_use use, gp_addr *out, gp_error *err) {
  assert(out != NULL);
  assert(use == GP_ADDR_CONNECT || use == GP_ADDR_LISTEN);
  memset(out, 0, sizeof *out);
  int rc;
  if (text == NULL || text[0] == '\0')
    rc = fail(err, "", "empty address; an address is " FORMS);
  else if (strlen(text) >= GP_ADDR_TEXT_MAX)
    rc = fail(err, text, "address longer than %d bytes", GP_ADDR_TEXT_MAX - 1);
  else if (strncmp(text, "unix:", 5) == 0)
    rc = parse_unix(text, out, err);
  else if (strncmp(text, "tcp:", 4) == 0)
    rc = parse_tcp(text, use, out, err);
  else
    rc = fail(err, text, "an address starts with unix: or tcp: (" FORMS ")");
  if (rc != 0)
    memset(out, 0, sizeof *out);
  return rc;
}

char *gp_addr_format(const gp_addr *addr, char *out, size_t out_size) {
  assert(addr != NULL && out != NULL && out_size > 0);
  if (addr->kind == GP_ADDR_UNIX)
    snprintf(out, out_size, "unix:%s", addr->path);
  else if (addr->ipv6_literal)
    snprintf(out, out_size, "tcp:[%s]:%u", addr->host, (unsigned)addr->port);
  else
    snprintf(out, out_size, "tcp:%s:%u", addr->host, (unsigned)addr->port);
  return out;
}
