/*
 * gd_clock.h - the daemon's one clock: monotonic microseconds. Thread-safe.
 */
#ifndef GD_CLOCK_H
#define GD_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t gd_now_us(void) {
  struct timespec ts;
  /* CLOCK_MONOTONIC cannot fail on Linux with a valid pointer; 0 would only skew timings. */
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

#endif /* GD_CLOCK_H */
