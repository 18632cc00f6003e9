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
  s->tcp = tcp;
  gd_session_lock_shared(s);
  s->authenticated = gd_auth_trusted_at_accept(s->d, tcp);
  gd_session_unlock_shared(s);
  assert(tcp || s->authenticated); /* a Unix socket's file mode is its guard */
}

void gd_auth_calls_begin(gd_session *s, const gp_event *ev) {
  gd_peers_lock(&s->d->peers); /* every loop counts failures */
  s->auth_throttled = !gd_auth_limit_allows(&s->d->auth_limit, s->conn.peer_key,
                                            s->nl->limits.auth_max_failures, gd_now_us());
  gd_peers_unlock(&s->d->peers);
  gd_session_lock_shared(s); /* SIGHUP may re-read the token */
  s->token_ok = !s->auth_throttled &&
                gd_auth_token_matches(&s->d->token, ev->token, ev->token_len);
  gd_session_unlock_shared(s);
}

/* The connection stops reading and closes once its replies are out (no line of its own: the
 * failed auths are logged counted). */
static void hang_up(gd_session *s) {
  s->hangup = true;
  s->quiet = true;
  s->eof = true;
  s->hooks->kick(&s->conn);
}

bool gd_auth_calls_end(gd_session *s) {
  assert(s->method == GP_METHOD_AUTH && !s->in_request);
  if (s->token_ok) {
    s->authenticated = true;
    return true;
  }
  gd_peers_lock(&s->d->peers); /* every loop's failures */
  uint64_t log_now = gd_auth_limit_failed(&s->d->auth_limit, s->conn.peer_key, gd_now_us());
  gd_peers_unlock(&s->d->peers);
  if (log_now > 0)
    gd_warn("auth: %llu failed attempt(s) from %s (one line a second per peer; "
            "auth.max_failures_per_second %u)", (unsigned long long)log_now, s->conn.peer_key,
            (unsigned)s->nl->limits.auth_max_failures);
  gd_session_error_quiet(s, GP_METHOD_AUTH, s->msgid, GP_E_UNAUTHENTICATED,
                         s->auth_throttled ? "too many failed auths from this peer: try again "
                                             "in a second" : "invalid token");
  if (s->tcp)
    hang_up(s);
  return false;
}
