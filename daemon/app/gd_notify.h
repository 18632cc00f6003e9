/*
 * gd_notify.h - systemd's notify protocol: READY=1 once listeners are up,
 * STATUS= lines, RELOADING=1 around SIGHUP, STOPPING=1 at shutdown, and
 * WATCHDOG=1 from a timer at half of WATCHDOG_USEC. Every call is a no-op
 * when NOTIFY_SOCKET is not set. Loop 0's thread only.
 */
#ifndef GD_NOTIFY_H
#define GD_NOTIFY_H

#include <uv.h>

#include "gp_error.h"

typedef struct gd_notify gd_notify;

/* Starts the watchdog timer when systemd asked for one. 0, or a gp code with err filled
 * ("watchdog timer: <libuv's reason>"). */
int gd_notify_start(uv_loop_t *loop, gd_notify **out, gp_error *err);
void gd_notify_ready(const char *status);
void gd_notify_status(const char *status);
void gd_notify_reloading(void);
void gd_notify_stopping(const char *status);
/* Stops the watchdog and frees (after its close callback). */
void gd_notify_close(gd_notify *n);

#endif /* GD_NOTIFY_H */
