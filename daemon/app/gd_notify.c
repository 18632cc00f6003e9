/*
 * gd_notify.c - see gd_notify.h.
 */
#include "gd_notify.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "gd_log.h"

struct gd_notify {
  uv_timer_t timer;
  bool timer_on;
};

static void notify_send(const char *state) {
  int rc = sd_notify(0, state);
  if (rc < 0)
    gd_warn("sd_notify(%s): %s", state, strerror(-rc));
}

static void send_with_status(const char *state, const char *status) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s\nSTATUS=%s", state, status);
  notify_send(msg);
}

void gd_notify_ready(const char *status) { send_with_status("READY=1", status); }
void gd_notify_status(const char *status) {
  char msg[512];
  snprintf(msg, sizeof msg, "STATUS=%s", status);
  notify_send(msg);
}
void gd_notify_reloading(void) { notify_send("RELOADING=1"); }
void gd_notify_stopping(const char *status) { send_with_status("STOPPING=1", status); }

static void on_watchdog(uv_timer_t *timer) {
  (void)timer;
  notify_send("WATCHDOG=1");
}

int gd_notify_start(uv_loop_t *loop, gd_notify **out, gp_error *err) {
  gd_notify *n = calloc(1, sizeof *n);
  if (!n)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "watchdog timer: not enough memory");
  uint64_t usec = 0;
  int rc = sd_watchdog_enabled(0, &usec);
  if (rc < 0)
    gd_warn("WATCHDOG_USEC: %s; no watchdog", strerror(-rc));
  if (rc > 0 && usec > 0) {
    uint64_t every_ms = usec / 2000u; /* half the interval, as sd_watchdog_enabled(3) advises */
    if (every_ms == 0)
      every_ms = 1;
    rc = uv_timer_init(loop, &n->timer);
    if (rc != 0) {
      free(n);
      return gp_error_set(err, GP_E_INTERNAL, "watchdog timer: %s", uv_strerror(rc));
    }
    n->timer.data = n;
    n->timer_on = true;
    rc = uv_timer_start(&n->timer, on_watchdog, every_ms, every_ms);
    if (rc != 0) {
      gd_notify_close(n);
      return gp_error_set(err, GP_E_INTERNAL, "watchdog timer: %s", uv_strerror(rc));
    }
    gd_info("systemd watchdog: pinging every %llu ms", (unsigned long long)every_ms);
  }
  *out = n;
  return 0;
}

static void on_closed(uv_handle_t *handle) { free(handle->data); }

void gd_notify_close(gd_notify *n) {
  if (!n)
    return;
  if (n->timer_on)
    uv_close((uv_handle_t *)&n->timer, on_closed);
  else
    free(n);
}
