/*
 * gd_auth.c - see gd_auth.h.
 */
#include "gd_auth.h"

#include <assert.h>

bool gd_auth_trusted_at_accept(const gd_server *d, bool tcp) { return !tcp || d->token.len == 0; }

bool gd_auth_token_matches(const gd_auth_token *want, const uint8_t *got, size_t len) {
  assert(want->len <= GP_AUTH_TOKEN_MAX);
  if (want->len == 0)
    return true;
  /* Every byte of the configured token is visited whatever got holds, and the differences are
   * OR-ed, never branched on: the time tells nothing about the first wrong byte. */
  unsigned diff = len != want->len;
  for (size_t i = 0; i < want->len; i++) {
    uint8_t g = i < len ? got[i] : 0;
    diff |= (unsigned)(g ^ want->bytes[i]);
  }
  return diff == 0;
}
