/*
 * gd_completion.c - the completion queue (see gd_completion.h).
 *
 * Backend threads append under the lock and wake the loop; the loop swaps the whole array out
 * and delivers it without holding the lock, so posting never waits for the loop's work.
 */
#include "gd_completion.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gd_array.h"

struct gd_completion {
  pthread_mutex_t lock;
  gd_backend_event *events; /* under lock */
  size_t count, cap;
  uv_async_t async;
  gd_completion_deliver_cb deliver;
  gd_sched *to;
  /* The batch being delivered (swapped out of events): a delivery may release a job whose
   * event is further on in it. Loop thread only. */
  gd_backend_event *batch;
  size_t batch_count, batch_next;
};

int gd_completion_post(gd_completion *q, const gd_backend_event *ev) {
  assert(ev->job);
  if (ev->job->queue)
    q = ev->job->queue; /* the loop that admitted the job */
  if (!q)
    return GP_E_INTERNAL;
  int rc = 0;
  if (pthread_mutex_lock(&q->lock) != 0)
    return GP_E_INTERNAL;
  if (q->count == q->cap) {
    gd_backend_event *grown = gd_array_grow(q->events, &q->cap, sizeof *grown, 64);
    if (grown)
      q->events = grown;
    else
      rc = GP_E_RESOURCE_EXHAUSTED;
  }
  if (rc == 0)
    q->events[q->count++] = *ev;
  pthread_mutex_unlock(&q->lock);
  if (rc == 0)
    uv_async_send(&q->async); /* cannot fail on a live handle; it coalesces */
  return rc;
}

void gd_completion_forget(gd_completion *q, const gd_job *job) {
  for (size_t i = q->batch_next; i < q->batch_count; i++)
    if (q->batch[i].job == job)
      q->batch[i].job = NULL;
  if (pthread_mutex_lock(&q->lock) != 0)
    return;
  for (size_t i = 0; i < q->count; i++)
    if (q->events[i].job == job)
      q->events[i].job = NULL;
  pthread_mutex_unlock(&q->lock);
}

static void on_async(uv_async_t *handle) {
  gd_completion *q = handle->data;
  if (pthread_mutex_lock(&q->lock) != 0)
    return;
  gd_backend_event *events = q->events;
  size_t count = q->count;
  q->events = NULL;
  q->count = q->cap = 0;
  pthread_mutex_unlock(&q->lock);
  assert(!q->batch); /* uv_async callbacks do not nest */
  q->batch = events;
  q->batch_count = count;
  for (q->batch_next = 0; q->batch_next < count;) {
    gd_backend_event ev = events[q->batch_next++];
    if (ev.job) /* NULL: its job was released meanwhile (gd_completion_forget) */
      q->deliver(q->to, &ev);
  }
  q->batch = NULL;
  q->batch_count = q->batch_next = 0;
  free(events);
}

int gd_completion_new(uv_loop_t *loop, gd_completion_deliver_cb deliver, gd_sched *to,
                      gd_completion **out, gp_error *err) {
  gd_completion *q = calloc(1, sizeof *q);
  if (!q)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "completion queue: out of memory");
  q->deliver = deliver;
  q->to = to;
  int rc = pthread_mutex_init(&q->lock, NULL);
  if (rc != 0) {
    free(q);
    return gp_error_set(err, GP_E_INTERNAL, "completion queue: %s", strerror(rc));
  }
  rc = uv_async_init(loop, &q->async, on_async);
  if (rc != 0) {
    pthread_mutex_destroy(&q->lock);
    free(q);
    return gp_error_set(err, GP_E_INTERNAL, "completion queue: %s", uv_strerror(rc));
  }
  q->async.data = q;
  /* The queue alone must not keep the loop running: at shutdown uv_run returns once
   * connections, listeners and timers are closed, even with orphaned jobs still computing. */
  uv_unref((uv_handle_t *)&q->async);
  *out = q;
  return 0;
}

void gd_completion_close(gd_completion *q) {
  if (q && !uv_is_closing((uv_handle_t *)&q->async))
    uv_close((uv_handle_t *)&q->async, NULL);
}

void gd_completion_free(gd_completion *q) {
  if (!q)
    return;
  free(q->events);
  pthread_mutex_destroy(&q->lock);
  free(q);
}
