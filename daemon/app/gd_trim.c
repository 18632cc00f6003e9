/*
 * gd_trim.c - see gd_trim.h.
 */
#include "gd_trim.h"

#include <malloc.h>
#include <stdbool.h>
#include <stdlib.h>

#include "gd_clock.h"
#include "gd_daemon.h"
#include "gd_log.h"

struct gd_trim {
  uv_timer_t timer;
  struct gd_daemon *d;
  bool idle_before;    /* the last look found no job in flight */
  uint64_t seen;       /* what had happened at the last trim */
};

/* A number that moves whenever the daemon did something that may have grown the heap. */
static uint64_t activity(struct gd_daemon *d) {
  gd_sched_lock(d->sched);
  uint64_t n = gd_sched_admitted(d->sched) + d->srv.resident.put_total + d->srv.shm.registered +
               d->srv.stats->connections_total;
  gd_sched_unlock(d->sched);
  return n;
}

static void on_tick(uv_timer_t *timer) {
  gd_trim *t = timer->data;
  struct gd_daemon *d = t->d;
  bool idle = gd_sched_jobs(d->sched) + gd_sched_delivering(d->sched) == 0;
  uint64_t now = activity(d);
  if (idle && t->idle_before && now != t->seen) {
    uint64_t start = gd_now_us();
    int released = malloc_trim(0);
    t->seen = now;
    gd_debug("idle: malloc_trim %s memory in %llu us", released ? "returned" : "found no",
             (unsigned long long)(gd_now_us() - start));
  }
  t->idle_before = idle;
}

/* The one message of a failed start. */
static int start_failed(gp_error *err, int code, const char *reason) {
  return gp_error_set(err, code, "queue.trim_idle_ms: no idle trim: %s", reason);
}

int gd_trim_start(uv_loop_t *loop, struct gd_daemon *d, uint64_t every_ms, gd_trim **out,
                  gp_error *err) {
  *out = NULL;
  if (every_ms == 0)
    return 0;
  gd_trim *t = calloc(1, sizeof *t);
  if (!t)
    return start_failed(err, GP_E_RESOURCE_EXHAUSTED, "not enough memory");
  int rc = uv_timer_init(loop, &t->timer);
  if (rc != 0) {
    free(t);
    return start_failed(err, GP_E_INTERNAL, uv_strerror(rc));
  }
  t->d = d;
  t->timer.data = t;
  t->seen = activity(d);
  uv_unref((uv_handle_t *)&t->timer); /* it alone does not keep gemmd running */
  rc = uv_timer_start(&t->timer, on_tick, every_ms, every_ms);
  if (rc != 0) {
    gd_trim_close(t);
    return start_failed(err, GP_E_INTERNAL, uv_strerror(rc));
  }
  *out = t;
  return 0;
}

static void on_closed(uv_handle_t *h) { free(h->data); }

void gd_trim_close(gd_trim *t) {
  if (t)
    uv_close((uv_handle_t *)&t->timer, on_closed);
}
