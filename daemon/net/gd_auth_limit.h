/*
 * gd_auth_limit.h - failed auths counted per peer (auth.max_failures_per_second): a peer that
 * failed that many times within the current second gets its next tokens refused without a
 * look until the second is over, and failures are logged as one counted line per peer a
 * second, not a line each. The slots outlive connections (a guesser opens one per guess); the
 * least recently used one is taken for a new peer.
 *
 * Under the peers lock (gd_peers.h, gd_server.h): every loop counts here.
 */
#ifndef GD_AUTH_LIMIT_H
#define GD_AUTH_LIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "gd_peers.h"

#define GD_AUTH_LIMIT_SLOTS 64

typedef struct {
  char key[GD_PEER_KEY_MAX]; /* "" : free */
  uint64_t second_us;        /* start of the second counted */
  uint32_t failures;         /* in it */
  uint64_t unlogged;         /* failures not yet in a log line */
  uint64_t logged_us;
} gd_auth_limit_slot;

typedef struct {
  gd_auth_limit_slot slots[GD_AUTH_LIMIT_SLOTS];
} gd_auth_limit;

/* Whether key may have a token checked now (max failures a second; 0: no limit). */
bool gd_auth_limit_allows(gd_auth_limit *l, const char *key, uint32_t max, uint64_t now_us);

/* A failed auth of key. Returns the failures to log now in one line (0: not yet: at most one
 * line a second per peer; those left over go into its next line). */
uint64_t gd_auth_limit_failed(gd_auth_limit *l, const char *key, uint64_t now_us);

#endif /* GD_AUTH_LIMIT_H */
