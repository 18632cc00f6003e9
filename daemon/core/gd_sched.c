/*
 * gd_sched.c - admission, accounting and the completion queue (see gd_sched.h).
 */
#include "gd_sched.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_list.h"
#include "gd_log.h"

#define GD_SCHED_MAX_DEVICES 64

typedef struct sched_job {
  gd_job job; /* first: the backend and the session only see this */
  struct sched_job *prev, *next;
  bool submitted;      /* handed to the backend */
  bool final;          /* the backend's last event (last chunk or FAILED) reached the loop */
  uint32_t chunks_out; /* chunks given to the session and not yet sent */
  double work;         /* flops, for the device load */
} sched_job;

/* The completion queue: backend threads append under the lock and wake the loop; the loop swaps
 * the whole array out and handles it without holding the lock. */
struct gd_backend_sink {
  pthread_mutex_t lock;
  gd_backend_event *events;
  size_t count, cap;
  uv_async_t async;
  gd_sched *sched;
};

struct gd_sched {
  uv_loop_t *loop;
  gd_backend *backend;
  gd_sched_limits limits;
  gd_sched_hooks hooks;
  gd_stats *stats;
  struct gd_backend_sink sink;
  bool sink_ready;
  /* The batch on_async is handling (swapped out of the sink): a hook may release a job whose
   * event is further on in it. */
  gd_backend_event *batch;
  size_t batch_count, batch_next;
  sched_job *jobs; /* every job admitted and not yet freed */
  size_t job_count, running;
  uint64_t reserved;
  uint64_t next_id;
  bool draining;
  double device_load[GD_SCHED_MAX_DEVICES];
};

static sched_job *to_sched_job(gd_job *job) { return (sched_job *)job; }

/* ---- the completion queue ------------------------------------------------ */

int gd_backend_post(gd_backend *b, const gd_backend_event *ev) {
  struct gd_backend_sink *sink = b->sink;
  if (!sink)
    return -EINVAL;
  int rc = 0;
  if (pthread_mutex_lock(&sink->lock) != 0)
    return -EINVAL;
  if (sink->count == sink->cap) {
    size_t cap = sink->cap ? sink->cap * 2 : 64;
    gd_backend_event *grown = realloc(sink->events, cap * sizeof *grown);
    if (grown) {
      sink->events = grown;
      sink->cap = cap;
    } else {
      rc = -ENOMEM;
    }
  }
  if (rc == 0)
    sink->events[sink->count++] = *ev;
  pthread_mutex_unlock(&sink->lock);
  if (rc == 0)
    uv_async_send(&sink->async); /* cannot fail on a live handle; it coalesces */
  return rc;
}

/* A job is about to be freed: events for it may still be queued (an INPUT_RESUME posted before
 * a job that was never submitted was abandoned) or later in the batch being handled. Clear
 * their job so that handle_event skips them instead of reading freed memory. */
static void drop_events_of(gd_sched *s, const gd_job *job) {
  for (size_t i = s->batch_next; i < s->batch_count; i++)
    if (s->batch[i].job == job)
      s->batch[i].job = NULL;
  if (!s->sink_ready || pthread_mutex_lock(&s->sink.lock) != 0)
    return;
  for (size_t i = 0; i < s->sink.count; i++)
    if (s->sink.events[i].job == job)
      s->sink.events[i].job = NULL;
  pthread_mutex_unlock(&s->sink.lock);
}

static void release_and_free(gd_sched *s, sched_job *sj) {
  gd_job *job = &sj->job;
  if (s->backend)
    s->backend->ops->release(s->backend, job);
  drop_events_of(s, job);
  GD_LIST_UNLINK(s->jobs, sj);
  s->job_count--;
  s->reserved -= job->reserved_bytes;
  if (job->device >= 0 && job->device < GD_SCHED_MAX_DEVICES)
    s->device_load[job->device] -= sj->work;
  if (sj->submitted && !sj->final)
    s->running--; /* only at shutdown: the backend was destroyed under it */
  free(sj);
}

/* A job whose client is gone goes once the backend is done with it and its chunks are back. */
static void maybe_release_orphan(gd_sched *s, sched_job *sj) {
  if (!sj->job.session && sj->final && sj->chunks_out == 0) {
    gd_debug("job %llu: client gone, dropped after it completed",
             (unsigned long long)sj->job.id);
    release_and_free(s, sj);
  }
}

static void mark_final(gd_sched *s, sched_job *sj) {
  if (!sj->final) {
    sj->final = true;
    s->running--;
  }
}

static void handle_event(gd_sched *s, const gd_backend_event *ev) {
  if (!ev->job)
    return; /* its job was released meanwhile (drop_events_of) */
  sched_job *sj = to_sched_job(ev->job);
  gd_job *job = ev->job;
  switch (ev->type) {
  case GD_EV_INPUT_RESUME:
    if (job->session)
      s->hooks.resume(job->session, job);
    return;
  case GD_EV_OUTPUT_CHUNK:
    if (ev->last)
      mark_final(s, sj);
    if (job->session) {
      sj->chunks_out++;
      s->hooks.output(job->session, job, ev);
    } else {
      if (s->backend->ops->output_consumed)
        s->backend->ops->output_consumed(s->backend, job, ev->data, ev->len);
      maybe_release_orphan(s, sj);
    }
    return;
  case GD_EV_FAILED:
    mark_final(s, sj);
    if (job->session)
      s->hooks.failed(job->session, job, &ev->err);
    else
      maybe_release_orphan(s, sj);
    return;
  }
}

static void on_async(uv_async_t *handle) {
  gd_sched *s = handle->data;
  struct gd_backend_sink *sink = &s->sink;
  /* Swap the queue out so that backend threads can keep posting while we work. */
  if (pthread_mutex_lock(&sink->lock) != 0)
    return;
  gd_backend_event *events = sink->events;
  size_t count = sink->count;
  sink->events = NULL;
  sink->count = sink->cap = 0;
  pthread_mutex_unlock(&sink->lock);
  s->batch = events;
  s->batch_count = count;
  for (s->batch_next = 0; s->batch_next < count;) {
    gd_backend_event ev = events[s->batch_next++];
    handle_event(s, &ev);
  }
  s->batch = NULL;
  s->batch_count = s->batch_next = 0;
  free(events);
}

/* ---- set-up -------------------------------------------------------------- */

int gd_sched_new(uv_loop_t *loop, gd_backend *backend, const gd_sched_limits *limits,
                 const gd_sched_hooks *hooks, gd_stats *stats, gd_sched **out) {
  gd_sched *s = calloc(1, sizeof *s);
  if (!s)
    return UV_ENOMEM;
  s->loop = loop;
  s->backend = backend;
  s->limits = *limits;
  if (hooks)
    s->hooks = *hooks;
  s->stats = stats;
  s->next_id = 1;
  s->sink.sched = s;
  if (pthread_mutex_init(&s->sink.lock, NULL) != 0) {
    free(s);
    return UV_ENOMEM;
  }
  int rc = uv_async_init(loop, &s->sink.async, on_async);
  if (rc != 0) {
    pthread_mutex_destroy(&s->sink.lock);
    free(s);
    return rc;
  }
  s->sink.async.data = s;
  /* The completion queue alone must not keep the loop running: at shutdown uv_run returns once
   * connections, listeners and timers are closed, even with orphaned jobs still computing. */
  uv_unref((uv_handle_t *)&s->sink.async);
  s->sink_ready = true;
  if (backend)
    backend->sink = &s->sink;
  *out = s;
  return 0;
}

void gd_sched_set_limits(gd_sched *s, const gd_sched_limits *limits) { s->limits = *limits; }

void gd_sched_set_draining(gd_sched *s) { s->draining = true; }

/* ---- admission ----------------------------------------------------------- */

bool gd_sched_operand_total(const gp_gemm_hdr *hdr, uint64_t operand_bytes[3], uint64_t *total) {
  uint64_t sum = 0;
  for (int op = GP_OPERAND_A; op <= GP_OPERAND_C; op++) {
    if (!gp_gemm_operand_bytes(hdr, (gp_operand)op, &operand_bytes[op]))
      return false;
    if (operand_bytes[op] > UINT64_MAX - sum)
      return false;
    sum += operand_bytes[op];
  }
  *total = sum;
  return true;
}

/* The in-service device with the least outstanding work. */
static int pick_device(gd_sched *s) {
  if (!s->backend || !s->backend->ops->devices)
    return 0;
  gd_device_info devs[GD_SCHED_MAX_DEVICES];
  size_t n = s->backend->ops->devices(s->backend, devs, GD_SCHED_MAX_DEVICES);
  if (n > GD_SCHED_MAX_DEVICES)
    n = GD_SCHED_MAX_DEVICES;
  int best = 0;
  bool found = false;
  for (size_t i = 0; i < n; i++) {
    if (!devs[i].in_service)
      continue;
    if (!found || s->device_load[i] < s->device_load[best]) {
      best = (int)i;
      found = true;
    }
  }
  return best;
}

static uint64_t deadline_of(const gp_gemm_hdr *hdr, uint64_t now_us) {
  if (!hdr->has_timeout)
    return 0;
  uint64_t limit_ms = (UINT64_MAX - now_us) / 1000u;
  uint64_t ms = hdr->timeout_ms < limit_ms ? hdr->timeout_ms : limit_ms;
  return now_us + ms * 1000u;
}

static int check_room(gd_sched *s, gp_error *err) {
  if (s->draining)
    return gp_error_set(err, GP_E_UNAVAILABLE, "gemmd is shutting down");
  if (s->job_count >= s->limits.max_jobs)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "queue full: %zu jobs in flight (queue.max_jobs = %u)", s->job_count,
                        (unsigned)s->limits.max_jobs);
  return 0;
}

static int check_budget(gd_sched *s, uint64_t host, gp_error *err) {
  uint64_t left = s->reserved < s->limits.memory_budget ? s->limits.memory_budget - s->reserved : 0;
  if (host > s->limits.memory_budget)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "request needs %llu bytes of host memory, more than queue.memory_budget "
                        "(%llu)", (unsigned long long)host,
                        (unsigned long long)s->limits.memory_budget);
  if (host > left)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "request needs %llu bytes of host memory, %llu of queue.memory_budget "
                        "left; retry later", (unsigned long long)host, (unsigned long long)left);
  return 0;
}

int gd_sched_admit(gd_sched *s, const gp_gemm_hdr *hdr, bool has_c, uint32_t msgid,
                   void *session, gd_job **out, gp_error *err) {
  int rc = check_room(s, err);
  if (rc != 0)
    return rc;
  uint64_t total;
  sched_job *sj = calloc(1, sizeof *sj);
  if (!sj)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory admitting the request");
  gd_job *job = &sj->job;
  if (!gd_sched_operand_total(hdr, job->operand_bytes, &total)) {
    free(sj);
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "operand sizes overflow");
  }
  job->msgid = msgid;
  job->hdr = *hdr;
  job->has_c = has_c;
  job->admitted_us = gd_now_us();
  job->deadline_us = deadline_of(hdr, job->admitted_us);
  job->backend = s->backend;
  job->session = session;
  job->device = pick_device(s);
  uint64_t host = total;
  if (s->backend && s->backend->ops->host_bytes)
    host = s->backend->ops->host_bytes(s->backend, job);
  rc = check_budget(s, host, err);
  if (rc != 0) {
    free(sj);
    return rc;
  }
  job->reserved_bytes = host;
  job->id = s->next_id++;
  if (s->backend) {
    gp_error_clear(err);
    rc = s->backend->ops->prepare(s->backend, job, err);
    if (rc != 0) {
      if (err && err->code == GP_OK)
        gp_error_set(err, rc, "backend refused the request");
      free(sj);
      return rc;
    }
  }
  sj->work = gp_gemm_flops(hdr);
  if (job->device < 0 || job->device >= GD_SCHED_MAX_DEVICES)
    job->device = 0;
  s->device_load[job->device] += sj->work;
  sj->next = s->jobs;
  if (s->jobs)
    s->jobs->prev = sj;
  s->jobs = sj;
  s->job_count++;
  s->reserved += host;
  *out = job;
  return 0;
}

int gd_sched_submit(gd_sched *s, gd_job *job, gp_error *err) {
  sched_job *sj = to_sched_job(job);
  if (!s->backend) {
    job->submitted_us = gd_now_us();
    sj->submitted = true;
    s->running++;
    return 0;
  }
  gp_error_clear(err);
  job->submitted_us = gd_now_us();
  int rc = s->backend->ops->submit(s->backend, job, err);
  if (rc != 0) {
    if (err && err->code == GP_OK)
      gp_error_set(err, rc, "backend could not queue the request");
    release_and_free(s, sj);
    return rc;
  }
  sj->submitted = true;
  s->running++;
  return 0;
}

void gd_sched_abandon(gd_sched *s, gd_job *job) {
  sched_job *sj = to_sched_job(job);
  if (!sj->submitted) {
    release_and_free(s, sj);
    return;
  }
  job->session = NULL;
  job->session_data = NULL;
  maybe_release_orphan(s, sj);
}

void gd_sched_chunk_sent(gd_sched *s, gd_job *job, const void *chunk, size_t len) {
  sched_job *sj = to_sched_job(job);
  if (sj->chunks_out > 0)
    sj->chunks_out--;
  if (s->backend && s->backend->ops->output_consumed)
    s->backend->ops->output_consumed(s->backend, job, chunk, len);
  maybe_release_orphan(s, sj);
}

void gd_sched_finish(gd_sched *s, gd_job *job, bool ok) {
  if (s->stats) {
    uint64_t total = gd_now_us() - job->admitted_us;
    gd_hist_add(&s->stats->hist[GD_HIST_TOTAL], total);
    if (ok) {
      gd_hist_add(&s->stats->hist[GD_HIST_QUEUED], job->result.queue_us);
      gd_hist_add(&s->stats->hist[GD_HIST_COMPUTE], job->result.compute_us);
    }
  }
  release_and_free(s, to_sched_job(job));
}

size_t gd_sched_jobs(const gd_sched *s) { return s->job_count; }
size_t gd_sched_running(const gd_sched *s) { return s->running; }
uint64_t gd_sched_reserved_bytes(const gd_sched *s) { return s->reserved; }

/* ---- teardown ------------------------------------------------------------ */

void gd_sched_close(gd_sched *s) {
  if (s->sink_ready && !uv_is_closing((uv_handle_t *)&s->sink.async))
    uv_close((uv_handle_t *)&s->sink.async, NULL);
}

void gd_sched_free(gd_sched *s) {
  if (!s)
    return;
  /* The backend is gone: its destroy() freed what it held; free our side only. */
  sched_job *sj = s->jobs;
  while (sj) {
    sched_job *next = sj->next;
    free(sj);
    sj = next;
  }
  free(s->sink.events);
  pthread_mutex_destroy(&s->sink.lock);
  free(s);
}
