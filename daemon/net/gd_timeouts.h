/*
 * gd_timeouts.h - which of a connection's timeouts applies now, and when it falls due: a pure
 * function of the connection's state, so the policy reads (and tests) apart from the timer.
 *
 *   request: a message started arriving and has not finished within request_ms (not counting
 *            time reading was paused for the backend: waiting for memory is not a stalled
 *            client);
 *   idle:    nothing in flight and nothing read for idle_ms;
 *   stalled: replies queued and not one byte of them written for request_ms (a client that
 *            stopped reading would otherwise hold its jobs' memory for ever);
 *   hold:    a result chunk in shared staging not all out staging_hold_ms after it arrived
 *            (not a close: its rest is copied and the staging given back);
 *   slow:    a request whose payloads are min_rate_bytes or more arrives slower than
 *            min_rate bytes a second after a start of rate_grace_ms (same pause rule as
 *            request): a client trickling a large request holds its memory budget for long.
 *            Due when the bytes so far fall behind: started + grace + bytes / min_rate.
 *   blocking: a request that holds shared room (an admitted gemm, a put) and whose bytes
 *            stopped arriving for stall_ms while other requests wait in line for room: it
 *            may not sit on what others need. While nobody waits it is looked at again every
 *            stall_ms (others_waiting is read then).
 * 0 disables idle_ms and request_ms.
 */
#ifndef GD_TIMEOUTS_H
#define GD_TIMEOUTS_H

#include <stdbool.h>
#include <stdint.h>

typedef enum {
  GD_TIMEOUT_NONE, GD_TIMEOUT_REQUEST, GD_TIMEOUT_IDLE, GD_TIMEOUT_STALLED, GD_TIMEOUT_HOLD,
  GD_TIMEOUT_SLOW, GD_TIMEOUT_BLOCKING
} gd_timeout_kind;

typedef struct {
  bool at_boundary;          /* between messages */
  bool paused;               /* reading paused for the backend */
  bool eof;                  /* nothing more can arrive */
  bool holding;              /* a shared chunk is open since hold_since_us */
  uint32_t in_flight;        /* calls not answered */
  uint32_t writes;           /* writes queued */
  uint64_t msg_started_us, last_activity_us, write_progress_us, hold_since_us;
  uint64_t idle_ms, request_ms, hold_ms;
  uint64_t msg_bytes;        /* of the message being read: bytes read so far */
  uint64_t payload_bytes;    /* its payloads in all (a gemm's a + b + c); 0: not known */
  uint64_t min_rate;         /* bytes a second; 0 disables slow */
  uint64_t min_rate_bytes, rate_grace_ms;
  bool holds_room;           /* the message being read holds queue room (admitted) */
  bool others_waiting;       /* requests wait in line for room, daemon-wide */
  uint64_t stall_ms;         /* 0 disables blocking */
  uint64_t now_us;
} gd_timeout_state;

/* The earliest timeout that applies to st, with *due (monotonic us); NONE when none does. */
gd_timeout_kind gd_timeout_next(const gd_timeout_state *st, uint64_t *due);

/* Why a connection closes on kind (REQUEST, IDLE, STALLED, SLOW or BLOCKING), for the log. */
const char *gd_timeout_why(gd_timeout_kind kind);

#endif /* GD_TIMEOUTS_H */
