/*
 * gd_auth_setup.h - the auth section of gemmd.yaml put to work: reading auth.token_file, and
 * refusing a TCP listener that anyone on the network could use without a token.
 *
 * The token file must be a regular file that neither its group nor others may read, holding
 * 1..GP_AUTH_TOKEN_MAX bytes after one trailing newline is stripped. Which TCP addresses are
 * exposed: gd_auth_exposed_host (net/gd_auth.h), which also checks the sockets systemd hands
 * over (gd_server.exposed_tcp_ok).
 *
 * Start-up, --check-config and SIGHUP; loop 0's thread only.
 */
#ifndef GD_AUTH_SETUP_H
#define GD_AUTH_SETUP_H

#include <stdbool.h>
#include <stddef.h>

#include "gd_config.h"
#include "gd_server.h"

/* Reads cfg's token file into *out (len 0 when none is configured). 0, or a gp code with the
 * reason, naming the file, in err. */
int gd_auth_load_token(const gd_config *cfg, gd_auth_token *out, gp_error *err);

/* Whether a listen address is reachable from other machines (see the top). */
bool gd_auth_exposed(const gp_addr *addr);

/* The first listen address of cfg that is exposed, or NULL. */
const char *gd_auth_first_exposed(const gd_config *cfg);

/* What the auth section lets happen: 0 when gemmd may start with it; a gp code with the reason
 * in err (the token file is unusable, or an exposed TCP address has no token and
 * auth.allow_unauthenticated_tcp is not set). With *token non-NULL the token is read into it. */
int gd_auth_check(const gd_config *cfg, gd_auth_token *token, gp_error *err);

/* SIGHUP: a reload that would leave a TCP listener other machines can reach (exposed_held:
 * gd_server.exposed_tcp_held, whatever opened it, systemd included) without a token is
 * refused unless auth.allow_unauthenticated_tcp: 0, or a gp code with the reason in err. */
int gd_auth_check_held(const gd_config *cfg, const gd_auth_token *token, bool exposed_held,
                       gp_error *err);

#endif /* GD_AUTH_SETUP_H */
