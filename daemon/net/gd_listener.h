/*
 * gd_listener.h - the listening sockets: Unix (created with unix_socket_mode
 * from the start, under the matching umask; the group from the server's
 * unix_socket_gid, set on the file itself, never through a symlink; a stale
 * socket file is replaced only when nothing answers on it, a live one or any
 * other file is refused), TCP (only what the config or --listen names, IPv6 included),
 * and sockets handed over by systemd socket activation (LISTEN_FDS).
 *
 * Loop 0's thread only. Each accepted connection goes to gd_sessions_accept().
 */
#ifndef GD_LISTENER_H
#define GD_LISTENER_H

#include <stdbool.h>
#include <stddef.h>

#include "gp_addr.h"
#include "gd_server.h"
#include "gp_error.h"

typedef struct gd_listeners gd_listeners;

/* Opens a listener for each address and, when adopt_systemd, each socket from sd_listen_fds().
 * On any failure closes what it opened and returns a gp code (UNAVAILABLE) with err filled. At
 * least one listener is required. */
int gd_listeners_open(gd_server *d, const gp_addr *addrs, size_t count, bool adopt_systemd,
                      gd_listeners **out, gp_error *err);

/* Number of sockets handed over by systemd (0 when not socket-activated). Reads LISTEN_PID and
 * LISTEN_FDS without unsetting them. */
int gd_listeners_systemd_count(void);

/* Stops accepting: closes every listening handle and removes the socket files it created.
 * Frees the set once the close callbacks ran. */
void gd_listeners_close(gd_listeners *ls);

#endif /* GD_LISTENER_H */
