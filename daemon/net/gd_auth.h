/*
 * gd_auth.h - the `auth` method's policy: which connections must authenticate, and the token
 * comparison. A TCP connection accepted while a token is configured answers nothing but `auth`
 * until it sent the right token; a Unix connection is trusted (the socket file's mode guards
 * it). A connection's loop thread; the token under the shared lock.
 */
#ifndef GD_AUTH_H
#define GD_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/socket.h>

#include "gd_server.h"

/* Whether a new connection starts authenticated: Unix ones always, TCP ones when no token is
 * configured. */
bool gd_auth_trusted_at_accept(const gd_server *d, bool tcp);

/* Whether got (len bytes; only the first GP_AUTH_TOKEN_MAX are looked at) is the configured
 * token, in time that does not depend on where they differ. With no token configured any token
 * is accepted: there is nothing to check it against, and a client that always sends one must
 * still work. */
bool gd_auth_token_matches(const gd_auth_token *want, const uint8_t *got, size_t len);

/* Whether a TCP listener on host (an address literal without brackets, or a name) can be
 * reached from other machines: anything but 127.0.0.0/8, ::1, ::ffff:127.x.y.z and the name
 * localhost. Other names count as reachable: what they resolve to is not known here. */
bool gd_auth_exposed_host(const char *host);

/* The same for a bound socket's address (a socket systemd handed over). */
bool gd_auth_exposed_sockaddr(const struct sockaddr_storage *ss);

#endif /* GD_AUTH_H */
