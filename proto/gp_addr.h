/*
 * gp_addr.h - the address grammar shared by the daemon's listeners and the client's connect:
 *   unix:PATH            a Unix stream socket; PATH is 1..107 bytes (it must fit sun_path with
 *                        its NUL: a longer path is refused, never truncated)
 *   tcp:HOST:PORT        an IPv4 address or a host name (1..255 bytes, no ':')
 *   tcp:[V6]:PORT        an IPv6 literal in brackets (a zone, fe80::1%lo, is kept as written)
 * PORT is decimal, 1..65535; port 0 ("any free port") only where the caller listens
 * (GP_ADDR_LISTEN), since nothing can connect to it. Pure parsing: no I/O, no name lookup.
 */
#ifndef GP_ADDR_H
#define GP_ADDR_H

#include <stddef.h>
#include <stdint.h>

#include "gp_error.h"

#define GP_ADDR_TEXT_MAX 300 /* longest address text accepted, NUL included */
#define GP_ADDR_HOST_MAX 256 /* a DNS name is at most 253 bytes */
#define GP_ADDR_PATH_MAX 108 /* sizeof(((struct sockaddr_un *)0)->sun_path) on Linux */

typedef enum { GP_ADDR_UNIX = 0, GP_ADDR_TCP = 1 } gp_addr_kind;

/* What the address is for: it decides whether port 0 is allowed. */
typedef enum {
  GP_ADDR_CONNECT = 0, /* port 1..65535 */
  GP_ADDR_LISTEN = 1,  /* port 0..65535; 0 asks the kernel for a free port */
} gp_addr_use;

typedef struct {
  gp_addr_kind kind;
  char path[GP_ADDR_PATH_MAX]; /* UNIX: NUL-terminated, at most 107 bytes */
  char host[GP_ADDR_HOST_MAX]; /* TCP: without brackets, NUL-terminated */
  uint16_t port;               /* TCP */
  int ipv6_literal;            /* TCP: the host was written in brackets */
} gp_addr;

/* Parses text for use. 0 on success; otherwise GP_E_INVALID_ARGUMENT, with *out zeroed and err
 * filled with a one-line reason that quotes the text (err may be NULL). */
int gp_addr_parse(const char *text, gp_addr_use use, gp_addr *out, gp_error *err);

/* Writes addr back as text (unix:PATH, tcp:HOST:PORT, tcp:[V6]:PORT); gp_addr_parse reads it
 * back to the same address. Returns out; GP_ADDR_TEXT_MAX bytes always suffice. */
char *gp_addr_format(const gp_addr *addr, char *out, size_t out_size);

#endif /* GP_ADDR_H */
