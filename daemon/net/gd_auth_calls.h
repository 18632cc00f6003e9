/*
 * gd_auth_calls.h - the auth method on a connection: which connections must authenticate
 * (gd_auth.h's policy, at accept), the token an auth request carries checked at its header
 * (unless its peer failed too often: gd_auth_limit.h), and its answer at its message end: on
 * TCP a wrong token closes the connection once its reply is out (a client guessing tokens gets
 * one guess per connection).
 *
 * The thread of the connection's loop only (gd_netloop.h).
 */
#ifndef GD_AUTH_CALLS_H
#define GD_AUTH_CALLS_H

#include <stdbool.h>

#include "gd_session.h"
#include "gp_decode.h"

/* What a request before authentication is told. */
#define GD_AUTH_NOT_YET "authenticate first"

/* A new connection (tcp: accepted on a TCP listener): authenticated or not yet. */
void gd_auth_calls_start(gd_session *s, bool tcp);

/* An auth request's header (ev): its token checked now. */
void gd_auth_calls_begin(gd_session *s, const gp_event *ev);

/* The end of an auth request: true when the token matched (the connection is authenticated;
 * the caller answers), else it was answered UNAUTHENTICATED (and, on TCP, hangs up). */
bool gd_auth_calls_end(gd_session *s);

#endif /* GD_AUTH_CALLS_H */
