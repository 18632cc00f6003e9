/*
 * gd_timeouts.c - a connection's timeout policy (see gd_timeouts.h).
 */
#include "gd_timeouts.h"

static void consider(gd_timeout_kind *kind, uint64_t *due, gd_timeout_kind k, uint64_t since,
                     uint64_t ms) {
  uint64_t at = since + ms * 1000u;
  if (*kind == GD_TIMEOUT_NONE || at < *due) {
    *kind = k;
    *due = at;
  }
}

gd_timeout_kind gd_timeout_next(const gd_timeout_state *st, uint64_t *due) {
  gd_timeout_kind kind = GD_TIMEOUT_NONE;
  if (st->holding)
    consider(&kind, due, GD_TIMEOUT_HOLD, st->hold_since_us, st->hold_ms);
  if (st->writes > 0 && st->request_ms)
    consider(&kind, due, GD_TIMEOUT_STALLED, st->write_progress_us, st->request_ms);
  if (st->eof)
    return kind; /* nothing more can arrive; jobs in flight end by themselves */
  if (!st->at_boundary && !st->paused && st->request_ms)
    consider(&kind, due, GD_TIMEOUT_REQUEST, st->msg_started_us, st->request_ms);
  if (!st->at_boundary && !st->paused && st->min_rate && st->payload_bytes > 0 &&
      st->payload_bytes >= st->min_rate_bytes)
    consider(&kind, due, GD_TIMEOUT_SLOW, st->msg_started_us + st->rate_grace_ms * 1000u,
             st->msg_bytes * 1000u / st->min_rate);
  if (!st->at_boundary && !st->paused && st->holds_room && st->stall_ms) {
    uint64_t at = st->last_activity_us + st->stall_ms * 1000u;
    uint64_t again = st->now_us + st->stall_ms * 1000u;
    if (!st->others_waiting && at < again)
      at = again; /* nobody needs the room now: look again later */
    consider(&kind, due, GD_TIMEOUT_BLOCKING, at, 0);
  }
  if (st->at_boundary && st->in_flight == 0 && st->writes == 0 && st->idle_ms)
    consider(&kind, due, GD_TIMEOUT_IDLE, st->last_activity_us, st->idle_ms);
  return kind;
}

const char *gd_timeout_why(gd_timeout_kind kind) {
  switch (kind) {
  case GD_TIMEOUT_REQUEST: return "request did not finish arriving within timeouts.request_ms";
  case GD_TIMEOUT_IDLE: return "idle for timeouts.idle_ms";
  case GD_TIMEOUT_STALLED: return "client read nothing of its replies for timeouts.request_ms";
  case GD_TIMEOUT_SLOW:
    return "a large request arrived slower than timeouts.min_receive_rate";
  case GD_TIMEOUT_BLOCKING:
    return "request stopped arriving for timeouts.hold_stall_ms while others waited for the "
           "room it holds";
  case GD_TIMEOUT_NONE:
  case GD_TIMEOUT_HOLD: break;
  }
  return "timeout";
}
