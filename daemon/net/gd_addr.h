/*
 * gd_addr.h - listen addresses as DESIGN.md writes them:
 *   unix:PATH            a Unix stream socket (PATH must fit sockaddr_un: no truncation)
 *   tcp:HOST:PORT        IPv4 address or host name, port 0..65535
 *   tcp:[V6]:PORT        IPv6 literal in brackets
 * Pure parsing; no I/O.
 */
#ifndef GD_ADDR_H
#define GD_ADDR_H

#include <stddef.h>
#include <stdint.h>

#define GD_ADDR_TEXT_MAX 300 /* longest address text accepted, NUL included */
#define GD_ADDR_HOST_MAX 256
#define GD_ADDR_PATH_MAX 108 /* sizeof(((struct sockaddr_un *)0)->sun_path) on Linux */

typedef enum { GD_ADDR_UNIX = 0, GD_ADDR_TCP = 1 } gd_addr_kind;

typedef struct {
  gd_addr_kind kind;
  char path[GD_ADDR_PATH_MAX]; /* UNIX: NUL-terminated, at most 107 bytes */
  char host[GD_ADDR_HOST_MAX]; /* TCP: without brackets */
  uint16_t port;               /* TCP */
  int ipv6_literal;            /* TCP: the host was written in brackets */
} gd_addr;

/* Parses text. 0 on success; -1 with a reason in why (why_size bytes) otherwise. */
int gd_addr_parse(const char *text, gd_addr *out, char *why, size_t why_size);

/* Writes the address back as text (unix:PATH, tcp:HOST:PORT, tcp:[V6]:PORT). Returns out. */
char *gd_addr_format(const gd_addr *addr, char *out, size_t out_size);

#endif /* GD_ADDR_H */
