/*
 * gd_auth_calls.c - the auth method on a connection (see gd_auth_calls.h; the policy is
 * gd_auth.c, the failures per peer gd_auth_limit.c).
 */
#include "gd_auth_calls.h"

#include <assert.h>

#include "gd_auth.h"
#include "gd_clock.h"
#include "gd_log.h"
#include "gd_netloop.h"

void gd_auth_calls_start(gd_session *s, bool tcp) {
  gd_session_auth *au = gd_session_auth_of(s);
  au->tcp = tcp;
  gd_session_lock_shared(s);
  au->authenticated = gd_auth_trusted_at_accept(gd_session_server(s), tcp);
  gd_session_unlock_shared(s);
  assert(tcp || au->authenticated); /* a Unix socket's file mode is its guard */
}

void gd_auth_calls_begin(gd_session *s, const gp_event *ev) {
  gd_session_auth *au = gd_session_auth_of(s);
  gd_server *d = gd_session_server(s);
  gd_peers_lock(&d->peers); /* every loop counts failures */
  au->throttled = !gd_auth_limit_allows(&d->auth_limit, gd_conn_peer_key(gd_session_conn(s)),
                                        gd_session_loop(s)->limits.auth_max_failures,
                                        gd_now_us());
  gd_peers_unlock(&d->peers);
  gd_session_lock_shared(s); /* SIGHUP may re-read the token */
  au->token_ok = !au->throttled &&
                gd_auth_token_matches(&d->token, ev->token, ev->token_len);
  gd_session_unlock_shared(s);
}

/* The connection stops reading and closes once its replies are out (no line of its own: the
 * failed auths are logged counted). */
static void hang_up(gd_session *s) {
  gd_session_msg *m = gd_session_msg_of(s);
  m->hangup = true;
  m->quiet = true;
  m->eof = true;
  gd_session_hooks_of(s)->kick(gd_session_conn(s));
}

bool gd_auth_calls_end(gd_session *s) {
  gd_session_msg *m = gd_session_msg_of(s);
  gd_conn *c = gd_session_conn(s);
  gd_session_auth *au = gd_session_auth_of(s);
  gd_server *d = gd_session_server(s);
  assert(m->method == GP_METHOD_AUTH && !m->in_request);
  if (au->token_ok) {
    au->authenticated = true;
    return true;
  }
  gd_peers_lock(&d->peers); /* every loop's failures */
  uint64_t log_now = gd_auth_limit_failed(&d->auth_limit, gd_conn_peer_key(c), gd_now_us());
  gd_peers_unlock(&d->peers);
  if (log_now > 0)
    gd_warn("auth: %llu failed attempt(s) from %s (one line a second per peer; "
            "auth.max_failures_per_second %u)", (unsigned long long)log_now, gd_conn_peer_key(c),
            (unsigned)gd_session_loop(s)->limits.auth_max_failures);
  gd_session_error_quiet(s, GP_METHOD_AUTH, m->msgid, GP_E_UNAUTHENTICATED,
                         au->throttled ? "too many failed auths from this peer: try again "
                                             "in a second" : "invalid token");
  if (au->tcp)
    hang_up(s);
  return false;
}
