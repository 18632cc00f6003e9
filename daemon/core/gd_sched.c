/*
 * gd_sched.c - admission, accounting and the life of every job (see gd_sched.h).
 *
 * A job is released in one place, release_if_done(), once nobody needs it any more: its waiter
 * let it go (finish, abandon, a failed submit) and, if the backend got it, the backend's final
 * event arrived and every chunk handed to the waiter came back.
 */
#include "gd_sched.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_completion.h"
#include "gd_list.h"
#include "gd_log.h"

#define GD_SCHED_MAX_DEVICES 64
#define GD_SCHED_MAX_PORTS 64

typedef struct sched_job {
  gd_job job; /* first: the backend and the waiter only see this */
  struct sched_job *prev, *next;
  bool submitted;      /* handed to the backend */
  bool final;          /* the backend's last event (last chunk or FAILED) reached the loop */
  bool delivering;     /* final with its waiter attached: counted off the shared queue */
  uint32_t chunks_out; /* chunks handed to the waiter and not yet given back */
  gd_stats *stats;     /* its loop's (the admitting port's), for the latencies at finish */
  double work;         /* flops, for the device load */
} sched_job;

/* One loop thread's way in: its jobs' completion queue and its room callback. */
struct gd_sched_port {
  gd_sched *s;
  gd_completion *queue;        /* events of the jobs admitted through this port */
  gd_stats *stats;             /* the loop's counters: its jobs' latencies */
  uv_async_t room_async;       /* tell_room from another thread */
  void (*room)(void *arg);
  void *room_arg;
  pthread_t thread;            /* the thread that runs the port's loop */
  atomic_bool want_room;       /* its loop has requests waiting for room */
  bool open;                   /* handles initialised and not yet closed */
};

struct gd_sched {
  /* Every loop thread calls in: one lock over the scheduler, the backend's ops (called only from
   * here) and the connections' shared counters (gd_sched_lock). Recursive, so that a callback
   * run under it (room, a waiter's) may call back in. */
  pthread_mutex_t mu;
  gd_backend *backend;
  gd_sched_limits limits;
  gd_stats *stats;
  gd_sched_port *ports[GD_SCHED_MAX_PORTS]; /* [0]: the port gd_sched_new opened */
  size_t nports;
  sched_job *jobs; /* every job admitted and not yet released */
  size_t job_count, running;
  uint64_t reserved;           /* jobs' and extra */
  uint64_t extra;              /* of it, outside jobs (gd_sched_reserve) */
  uint64_t starved_logged_us;  /* rate limit of the warning that holdings starve a request */
  size_t delivering_jobs;     /* final, reply going out to its client: not in job_count */
  uint64_t delivering_bytes;  /* their reserved bytes: not in reserved */
  uint64_t next_id;
  bool draining;
  double device_load[GD_SCHED_MAX_DEVICES];
  size_t ndevices;             /* the backend's, counted once: a backend's set never changes */
};

static sched_job *to_sched_job(gd_job *job) { return (sched_job *)job; }

/* ---- the one release ------------------------------------------------------ */

/* job_count or reserved went down, or the limits changed. Each port's loop hears it: at once
 * when it is this thread's, else through its async handle when requests wait there. */
static void tell_room(gd_sched *s) {
  pthread_t self = pthread_self();
  for (size_t i = 0; i < s->nports; i++) {
    gd_sched_port *p = s->ports[i];
    if (!p || !p->room || !p->open)
      continue;
    if (pthread_equal(p->thread, self))
      p->room(p->room_arg);
    else if (atomic_load(&p->want_room))
      uv_async_send(&p->room_async); /* thread-safe; coalesces */
  }
}

void gd_sched_lock(gd_sched *s) {
  int rc = pthread_mutex_lock(&s->mu);
  assert(rc == 0);
  (void)rc;
}

void gd_sched_unlock(gd_sched *s) {
  int rc = pthread_mutex_unlock(&s->mu);
  assert(rc == 0);
  (void)rc;
}

#define LOCKED(s, expr) \
  do { \
    gd_sched_lock(s); \
    expr; \
    gd_sched_unlock(s); \
  } while (0)

/* The job's references to regions it used in place (after the backend let go of the job). */
static void put_mapped(gd_sched *s, gd_job *job) {
  for (int i = 0; i <= GD_JOB_OUT; i++) {
    if (job->mapped[i])
      gd_sched_region_put(s, job->mapped[i]);
    job->mapped[i] = NULL;
  }
}

static void release(gd_sched *s, sched_job *sj) {
  gd_job *job = &sj->job;
  assert(!job->waiter && sj->chunks_out == 0);
  assert(!sj->submitted || sj->final);
  assert(job->device >= 0 && job->device < GD_SCHED_MAX_DEVICES);
  if (s->backend)
    s->backend->ops->release(s->backend, job);
  put_mapped(s, job);
  /* After its final event nothing more of the job can be queued (the backend posts nothing
   * after it, and a queue delivers in order): the scan, O(events queued), is spared. */
  if (!sj->final)
    gd_completion_forget(job->queue, job);
  GD_LIST_UNLINK(s->jobs, sj);
  bool shared = !sj->delivering;
  if (sj->delivering) {
    assert(s->delivering_jobs > 0 && s->delivering_bytes >= job->reserved_bytes);
    s->delivering_jobs--;
    s->delivering_bytes -= job->reserved_bytes;
  } else {
    assert(s->job_count > 0 && s->reserved >= job->reserved_bytes);
    s->job_count--;
    s->reserved -= job->reserved_bytes;
  }
  s->device_load[job->device] -= sj->work;
  free(sj);
  if (shared)
    tell_room(s);
}

/* Releases sj when its waiter let it go and the backend is done with it. true when released. */
static bool release_if_done(gd_sched *s, sched_job *sj) {
  if (sj->job.waiter || sj->chunks_out > 0 || (sj->submitted && !sj->final))
    return false;
  release(s, sj);
  return true;
}

/* ---- events from the completion queue ------------------------------------ */

/* The backend is done and the reply waits only on its client's reading: from here the job is
 * the connection's to count (its write backlog), not the shared queue's, so a client that does
 * not read blocks only itself. */
static void move_to_delivery(gd_sched *s, sched_job *sj) {
  assert(!sj->delivering && s->job_count > 0 && s->reserved >= sj->job.reserved_bytes);
  sj->delivering = true;
  s->job_count--;
  s->reserved -= sj->job.reserved_bytes;
  s->delivering_jobs++;
  s->delivering_bytes += sj->job.reserved_bytes;
  tell_room(s);
}

static void mark_final(gd_sched *s, sched_job *sj) {
  assert(sj->submitted && !sj->final);
  assert(s->running > 0);
  sj->final = true;
  s->running--;
  if (sj->job.waiter)
    move_to_delivery(s, sj);
}

/* The waiter runs without the lock: the job is its loop's alone (only that loop's calls and
 * this queue's deliveries touch it), and the waiter copies chunks and encodes replies. */
static void deliver(gd_sched *s, const gd_backend_event *ev) {
  sched_job *sj = to_sched_job(ev->job);
  gd_job *job = ev->job;
  gd_sched_lock(s);
  if (ev->type == GD_EV_OUTPUT_CHUNK || ev->type == GD_EV_FAILED) {
    assert(sj->submitted && !sj->final); /* nothing after the final event */
    if (ev->type == GD_EV_FAILED || ev->last)
      mark_final(s, sj);
  }
  if (job->waiter) {
    if (ev->type == GD_EV_OUTPUT_CHUNK)
      sj->chunks_out++;
    gd_sched_unlock(s);
    job->waiter->on_event(job->waiter, job, ev);
    return;
  }
  /* The client is gone: consume what still comes, then let the job go. */
  if (ev->type == GD_EV_OUTPUT_CHUNK && s->backend->ops->output_consumed)
    s->backend->ops->output_consumed(s->backend, job, ev->data, ev->len);
  uint64_t id = job->id;
  if (release_if_done(s, sj))
    gd_debug("job %llu: client gone, dropped after it completed", (unsigned long long)id);
  gd_sched_unlock(s);
}

/* ---- set-up -------------------------------------------------------------- */

static size_t count_devices(gd_backend *b);

static void on_room_async(uv_async_t *handle) {
  gd_sched_port *p = handle->data;
  gd_sched_lock(p->s); /* room callbacks run under the lock, wherever they come from */
  if (p->room)
    p->room(p->room_arg);
  gd_sched_unlock(p->s);
}

int gd_sched_port_open(gd_sched *s, uv_loop_t *loop, gd_stats *stats, gd_sched_port **out,
                       gp_error *err) {
  gd_sched_lock(s);
  size_t slot = s->nports;
  if (slot < GD_SCHED_MAX_PORTS)
    s->ports[s->nports++] = NULL; /* taken; filled below */
  gd_sched_unlock(s);
  if (slot == GD_SCHED_MAX_PORTS)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "scheduler: more than %d loops",
                        GD_SCHED_MAX_PORTS);
  gd_sched_port *p = calloc(1, sizeof *p);
  int rc = p ? gd_completion_new(loop, deliver, s, &p->queue, err)
             : gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "scheduler: out of memory");
  if (rc == 0 && (rc = uv_async_init(loop, &p->room_async, on_room_async)) != 0) {
    gd_completion_close(p->queue); /* its memory is lost: libuv may still touch it */
    rc = gp_error_set(err, GP_E_INTERNAL, "scheduler: %s", uv_strerror(rc));
  }
  if (rc != 0) {
    free(p);
    return rc; /* the slot stays NULL: every walk skips it */
  }
  p->s = s;
  p->stats = stats;
  p->thread = pthread_self();
  atomic_init(&p->want_room, false);
  p->room_async.data = p;
  uv_unref((uv_handle_t *)&p->room_async);
  p->open = true;
  LOCKED(s, s->ports[slot] = p);
  *out = p;
  return 0;
}

void gd_sched_port_on_room(gd_sched_port *p, void (*room)(void *arg), void *arg) {
  LOCKED(p->s, p->room = room; p->room_arg = arg);
}

void gd_sched_port_want_room(gd_sched_port *p, bool want) { atomic_store(&p->want_room, want); }

void gd_sched_port_close(gd_sched_port *p) {
  if (!p || !p->open)
    return;
  LOCKED(p->s, p->open = false);
  gd_completion_close(p->queue);
  uv_close((uv_handle_t *)&p->room_async, NULL); /* the port is freed with the scheduler */
}

gd_sched_port *gd_sched_default_port(gd_sched *s) { return s->ports[0]; }

int gd_sched_new(uv_loop_t *loop, gd_backend *backend, const gd_sched_limits *limits,
                 gd_stats *stats, gd_sched **out, gp_error *err) {
  gd_sched *s = calloc(1, sizeof *s);
  if (!s)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "scheduler: out of memory");
  pthread_mutexattr_t attr;
  int rc = pthread_mutexattr_init(&attr);
  if (rc == 0) {
    rc = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    if (rc == 0)
      rc = pthread_mutex_init(&s->mu, &attr);
    pthread_mutexattr_destroy(&attr);
  }
  if (rc != 0) {
    free(s);
    return gp_error_set(err, GP_E_INTERNAL, "scheduler: mutex: %s", strerror(rc));
  }
  s->backend = backend;
  s->limits = *limits;
  s->stats = stats;
  s->next_id = 1;
  s->ndevices = count_devices(backend);
  gd_sched_port *first;
  rc = gd_sched_port_open(s, loop, stats, &first, err);
  if (rc != 0) {
    pthread_mutex_destroy(&s->mu);
    free(s);
    return rc;
  }
  if (backend)
    backend->sink = first->queue; /* jobs admitted with no port of their own */
  *out = s;
  return 0;
}

void gd_sched_set_limits(gd_sched *s, const gd_sched_limits *limits) {
  gd_sched_lock(s);
  s->limits = *limits;
  tell_room(s); /* larger limits may admit a waiting request */
  gd_sched_unlock(s);
}

void gd_sched_on_room(gd_sched *s, void (*room)(void *arg), void *arg) {
  gd_sched_port_on_room(s->ports[0], room, arg);
}

gd_sched_limits gd_sched_get_limits(const gd_sched *s) {
  gd_sched *m = (gd_sched *)s; /* the lock is not part of the value */
  gd_sched_limits limits;
  LOCKED(m, limits = s->limits);
  return limits;
}

void gd_sched_set_draining(gd_sched *s) {
  gd_sched_lock(s);
  s->draining = true;
  tell_room(s); /* whoever waits for room gets UNAVAILABLE now */
  gd_sched_unlock(s);
}

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
  uint64_t result;
  if (hdr->bias) { /* c is the bias row: the result C is memory of its own */
    if (!gp_gemm_result_bytes(hdr, &result) || result > UINT64_MAX - sum)
      return false;
    sum += result;
  }
  *total = sum;
  return true;
}

static size_t count_devices(gd_backend *b) {
  if (!b || !b->ops->devices)
    return 0;
  gd_device_info devs[GD_SCHED_MAX_DEVICES];
  return b->ops->devices(b, devs, GD_SCHED_MAX_DEVICES);
}

/* The in-service device with the least outstanding work; the least loaded of prefer (a bit per
 * device, 0: none) instead while it is in service and at most `work` busier. With one device
 * there is nothing to pick: devices() is not asked on every admission (the CPU backend's
 * formats its name). */
static int pick_device(gd_sched *s, uint64_t prefer, double work) {
  if (s->ndevices <= 1 || !s->backend->ops->devices)
    return 0;
  gd_device_info devs[GD_SCHED_MAX_DEVICES];
  size_t n = s->backend->ops->devices(s->backend, devs, GD_SCHED_MAX_DEVICES);
  if (n > GD_SCHED_MAX_DEVICES)
    n = GD_SCHED_MAX_DEVICES;
  int best = 0, near = -1; /* the least loaded of all, and of the preferred */
  bool found = false;
  for (size_t i = 0; i < n; i++) {
    if (!devs[i].in_service)
      continue;
    if (!found || s->device_load[i] < s->device_load[best]) {
      best = (int)i;
      found = true;
    }
    if (((prefer >> i) & 1) && (near < 0 || s->device_load[i] < s->device_load[near]))
      near = (int)i;
  }
  if (near >= 0 && s->device_load[near] - s->device_load[best] <= work)
    return near;
  return best;
}

static uint64_t deadline_of(const gp_gemm_hdr *hdr, uint64_t now_us) {
  if (!hdr->has_timeout)
    return 0;
  uint64_t limit_ms = (UINT64_MAX - now_us) / 1000u;
  uint64_t ms = hdr->timeout_ms < limit_ms ? hdr->timeout_ms : limit_ms;
  return now_us + ms * 1000u;
}

static bool within(uint64_t used, uint64_t host, uint64_t limit) {
  return limit == 0 || used == 0 || (host <= limit && used <= limit - host);
}

/* The requester's own share first: over it, it waits for its own jobs, outside the line for
 * shared room (which it would otherwise block). */
static gd_admit check_share(const gd_sched_share *share, uint64_t host, gp_error *err) {
  if (!share)
    return GD_ADMITTED;
  if (!within(share->conn_used, host, share->conn_limit)) {
    gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "the connection holds %llu bytes of "
                 "queue.memory_budget, its share is %llu", (unsigned long long)share->conn_used,
                 (unsigned long long)share->conn_limit);
    return GD_ADMIT_OVER_SHARE;
  }
  if (!within(share->peer_used, host, share->peer_limit)) {
    gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "the peer holds %llu bytes of "
                 "queue.memory_budget, its share is %llu", (unsigned long long)share->peer_used,
                 (unsigned long long)share->peer_limit);
    return GD_ADMIT_OVER_SHARE;
  }
  return GD_ADMITTED;
}

/* A request that can never fit is refused; one that fits an idle daemon waits (GD_ADMIT_FULL). */
/* What queue.memory_budget has left (0 when a smaller budget from a reload is over-full). */
static uint64_t budget_left(const gd_sched *s) {
  return s->reserved < s->limits.memory_budget ? s->limits.memory_budget - s->reserved : 0;
}

static gd_admit check_budget(gd_sched *s, uint64_t host, const gd_sched_share *share,
                        gp_error *err) {
  const uint64_t budget = s->limits.memory_budget;
  /* the requester's own holdings matter only where the request would not fit beside them all */
  const bool fits_beside_all = s->extra < budget && host <= budget - s->extra;
  uint64_t own = s->extra > 0 && !fits_beside_all && share && share->peer_holds
                     ? share->peer_holds(share->peer_holds_arg)
                     : 0;
  uint64_t others = s->extra > own ? s->extra - own : 0;
  uint64_t left = budget_left(s);
  if (host > s->limits.memory_budget) {
    gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                 "request needs %llu bytes of host memory, more than queue.memory_budget "
                 "(%llu)", (unsigned long long)host, (unsigned long long)s->limits.memory_budget);
    return GD_ADMIT_REFUSED;
  }
  if (others > 0 &&
      (others >= s->limits.memory_budget || host > s->limits.memory_budget - others)) {
    /* it could wait for ever: what holds the room is not jobs, which end by themselves */
    gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                 "request needs %llu bytes of host memory; %llu of queue.memory_budget (%llu) "
                 "are held by other peers' resident operands and shared-memory regions",
                 (unsigned long long)host, (unsigned long long)others,
                 (unsigned long long)s->limits.memory_budget);
    uint64_t now = gd_now_us();
    if (now - s->starved_logged_us >= 1000000u) {
      s->starved_logged_us = now;
      gd_warn("queue.memory_budget: %s (refused; logged at most once a second)", err->message);
    }
    return GD_ADMIT_REFUSED;
  }
  if (s->job_count >= s->limits.max_jobs) {
    gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "queue full: %zu jobs in flight (queue.max_jobs "
                 "= %u)", s->job_count, (unsigned)s->limits.max_jobs);
    return GD_ADMIT_FULL;
  }
  if (host > left) {
    gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "request needs %llu bytes of host memory, %llu "
                 "of queue.memory_budget left", (unsigned long long)host,
                 (unsigned long long)left);
    return GD_ADMIT_FULL;
  }
  return GD_ADMITTED;
}

static gd_admit admit_unlocked(gd_sched *s, const gp_gemm_hdr *hdr, bool has_c, uint32_t msgid,
                   const gd_sched_share *share, gd_job_waiter *waiter,
                   gd_job **out, gp_error *err) {
  assert(waiter && waiter->on_event);
  if (s->draining) {
    gp_error_set(err, GP_E_UNAVAILABLE, "gemmd is shutting down");
    return GD_ADMIT_REFUSED;
  }
  uint64_t total;
  sched_job *sj = calloc(1, sizeof *sj);
  if (!sj) {
    gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory admitting the request");
    return GD_ADMIT_REFUSED;
  }
  gd_job *job = &sj->job;
  if (!gd_sched_operand_total(hdr, job->operand_bytes, &total) ||
      !gp_gemm_result_bytes(hdr, &job->result_bytes)) {
    free(sj);
    gp_error_set(err, GP_E_INVALID_ARGUMENT, "operand sizes overflow");
    return GD_ADMIT_REFUSED;
  }
  job->msgid = msgid;
  job->hdr = *hdr;
  job->has_c = has_c;
  job->admitted_us = gd_now_us();
  job->deadline_us = deadline_of(hdr, job->admitted_us);
  job->backend = s->backend;
  job->waiter = waiter;
  gd_sched_port *port = share && share->port ? share->port : s->ports[0];
  job->queue = port->queue;
  sj->stats = port->stats;
  job->device_fixed = share && share->fixed_device > 0;
  job->device = job->device_fixed ? share->fixed_device - 1
                                  : pick_device(s, share ? share->prefer_devices : 0,
                                                gp_gemm_flops(hdr));
  uint64_t host = total;
  if (s->backend && s->backend->ops->host_bytes)
    host = s->backend->ops->host_bytes(s->backend, job);
  gd_admit room = check_budget(s, host, share, err);
  if (room == GD_ADMITTED || room == GD_ADMIT_FULL) {
    gd_admit own = check_share(share, host, err);
    room = own != GD_ADMITTED ? own : room;
  }
  if (room != GD_ADMITTED) {
    free(sj);
    return room;
  }
  job->reserved_bytes = host;
  job->id = s->next_id++;
  if (s->backend) {
    gp_error_clear(err);
    int rc = s->backend->ops->prepare(s->backend, job, err);
    if (rc != 0) {
      if (err && err->code == GP_OK)
        gp_error_set(err, rc, "backend refused the request");
      free(sj);
      return GD_ADMIT_REFUSED;
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
  return GD_ADMITTED;
}

static bool input_window_unlocked(gd_sched *s, gd_job *job, gp_operand operand, uint64_t offset,
                           void **ptr, size_t *len) {
  assert(!to_sched_job(job)->submitted && job->waiter);
  if (!s->backend || !s->backend->ops->input_window)
    return false;
  return s->backend->ops->input_window(s->backend, job, operand, offset, ptr, len);
}

/* The backend's locate op (gd_backend.h): false when it has none. */
static bool backend_locate(gd_sched *s, gd_job *job, const gd_where *where) {
  return s->backend && s->backend->ops->locate && s->backend->ops->locate(s->backend, job, where);
}

static bool input_resident_unlocked(gd_sched *s, gd_job *job, gp_operand operand,
                             gd_resident_buf *res) {
  assert(!to_sched_job(job)->submitted && job->waiter);
  assert(res->bytes == job->operand_bytes[operand]);
  gd_where where = {.kind = GD_WHERE_RESIDENT, .operand = operand, .res = res};
  return backend_locate(s, job, &where);
}

static void resident_freed_unlocked(gd_sched *s) {
  if (s->backend && s->backend->ops->resident_freed)
    s->backend->ops->resident_freed(s->backend);
}

static int input_unlocked(gd_sched *s, gd_job *job, gp_operand operand, uint64_t offset,
                   const void *data, size_t len, bool *pause, gp_error *err) {
  assert(!to_sched_job(job)->submitted && job->waiter);
  if (!s->backend)
    return 0;
  gp_error_clear(err);
  int rc = s->backend->ops->input(s->backend, job, operand, offset, data, len, pause, err);
  if (rc != 0 && err && err->code == GP_OK)
    gp_error_set(err, rc, "backend refused the payload");
  return rc;
}

static int submit_unlocked(gd_sched *s, gd_job *job, gp_error *err) {
  sched_job *sj = to_sched_job(job);
  assert(!sj->submitted && job->waiter);
  job->submitted_us = gd_now_us();
  if (!s->backend)
    return 0; /* admission tests: nothing runs it, nothing will come back */
  gp_error_clear(err);
  int rc = s->backend->ops->submit(s->backend, job, err);
  if (rc != 0) {
    if (err && err->code == GP_OK)
      gp_error_set(err, rc, "backend could not queue the request");
    job->waiter = NULL;
    release_if_done(s, sj); /* never ran: released now */
    return rc;
  }
  sj->submitted = true;
  s->running++;
  return 0;
}

bool gd_sched_chunks_in_job_memory(const gd_sched *s, const gd_job *job) {
  (void)job;
  return s->backend && s->backend->ops->output_in_job_memory;
}

static void chunk_done_unlocked(gd_sched *s, gd_job *job, const void *chunk, size_t len) {
  sched_job *sj = to_sched_job(job);
  assert(sj->chunks_out > 0); /* each chunk comes back exactly once */
  sj->chunks_out--;
  if (s->backend && s->backend->ops->output_consumed)
    s->backend->ops->output_consumed(s->backend, job, chunk, len);
  if (job->waiter)
    return; /* finish or abandon releases it */
  LOCKED(s, release_if_done(s, sj));
}

static void abandon_unlocked(gd_sched *s, gd_job *job) {
  assert(job->waiter);
  job->waiter = NULL;
  release_if_done(s, to_sched_job(job));
}

static void finish_unlocked(gd_sched *s, gd_job *job, bool ok) {
  sched_job *sj = to_sched_job(job);
  assert(job->waiter && sj->chunks_out == 0);
  assert(!sj->submitted || sj->final);
  if (sj->stats) {
    uint64_t total = gd_now_us() - job->admitted_us;
    gd_hist_add(&sj->stats->hist[GD_HIST_TOTAL], total);
    if (ok) {
      gd_hist_add(&sj->stats->hist[GD_HIST_QUEUED], job->result.queue_us);
      gd_hist_add(&sj->stats->hist[GD_HIST_COMPUTE], job->result.compute_us);
    }
  }
  job->waiter = NULL;
  bool released = release_if_done(s, sj);
  assert(released);
  (void)released;
}

/* The counts the getters below return, read together under the lock (which is not part of the
 * scheduler's value: hence the cast). */
typedef struct {
  size_t jobs, running, delivering;
  uint64_t delivering_bytes, reserved, next_id;
} sched_counts;

static sched_counts read_counts(const gd_sched *cs) {
  gd_sched *s = (gd_sched *)cs;
  gd_sched_lock(s);
  sched_counts c = {s->job_count, s->running, s->delivering_jobs, s->delivering_bytes,
                    s->reserved, s->next_id};
  gd_sched_unlock(s);
  return c;
}

size_t gd_sched_jobs(const gd_sched *s) { return read_counts(s).jobs; }
size_t gd_sched_running(const gd_sched *s) { return read_counts(s).running; }
size_t gd_sched_delivering(const gd_sched *s) { return read_counts(s).delivering; }
uint64_t gd_sched_delivering_bytes(const gd_sched *s) { return read_counts(s).delivering_bytes; }
uint64_t gd_sched_reserved_bytes(const gd_sched *s) { return read_counts(s).reserved; }

uint64_t gd_sched_admitted(const gd_sched *s) { return read_counts(s).next_id - 1; }

static int reserve_unlocked(gd_sched *s, uint64_t bytes, gp_error *err) {
  /* A registration does not wait for room as a gemm does: it fits now or is refused. */
  uint64_t left = budget_left(s);
  if (bytes > left)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "%llu bytes asked, %llu of "
                        "queue.memory_budget left", (unsigned long long)bytes,
                        (unsigned long long)left);
  s->reserved += bytes;
  s->extra += bytes;
  return 0;
}

static void unreserve_unlocked(gd_sched *s, uint64_t bytes) {
  assert(s->extra >= bytes && s->reserved >= bytes);
  s->extra -= bytes;
  s->reserved -= bytes;
  tell_room(s);
}

/* ---- shared-memory regions ----------------------------------------------- */

static void region_added_unlocked(gd_sched *s, gd_region *r) {
  assert(r->refs > 0);
  if (s->backend && s->backend->ops->region_added)
    s->backend->ops->region_added(s->backend, r);
}

static void region_put_unlocked(gd_sched *s, gd_region *r) {
  assert(r->refs > 0);
  if (--r->refs > 0)
    return;
  if (r->kind == GD_REGION_HOST) /* device memory is the client's: nothing was reserved */
    gd_sched_unreserve(s, r->size); /* reserved by whoever mapped it (gd_sched_reserve) */
  if (s->backend && s->backend->ops->region_gone)
    s->backend->ops->region_gone(s->backend, r); /* it unmaps r when done with it */
  else
    gd_region_unmap(r);
}

static bool output_mapped_unlocked(gd_sched *s, gd_job *job, gd_region *r, uint8_t *ptr) {
  assert(!to_sched_job(job)->submitted && !job->mapped[GD_JOB_OUT]);
  assert(ptr >= r->base && (uint64_t)(ptr - r->base) <= r->size &&
         job->result_bytes <= r->size - (uint64_t)(ptr - r->base));
  if (!s->backend || !s->backend->ops->locate)
    return false;
  job->mapped_out = ptr; /* set first: the backend may look at it */
  gd_where where = {.kind = GD_WHERE_MAPPED, .out = true, .r = r, .ptr = ptr};
  if (!backend_locate(s, job, &where)) {
    job->mapped_out = NULL;
    return false;
  }
  r->refs++;
  job->mapped[GD_JOB_OUT] = r;
  return true;
}

static bool input_mapped_unlocked(gd_sched *s, gd_job *job, gp_operand operand, gd_region *r,
                           const uint8_t *ptr) {
  assert(!to_sched_job(job)->submitted && job->waiter && operand <= GP_OPERAND_C);
  assert(ptr >= r->base && (uint64_t)(ptr - r->base) <= r->size &&
         job->operand_bytes[operand] <= r->size - (uint64_t)(ptr - r->base));
  gd_where where = {.kind = GD_WHERE_MAPPED, .operand = operand, .r = r, .ptr = (uint8_t *)ptr};
  if (job->mapped[operand] || !backend_locate(s, job, &where))
    return false;
  r->refs++;
  job->mapped[operand] = r;
  return true;
}

/* ---- CUDA IPC regions ---------------------------------------------------- */

static int device_region_open_unlocked(gd_sched *s, gd_region *r, const char *pci_bus_id,
                                gp_error *err) {
  assert(r->kind == GD_REGION_DEVICE && r->refs == 1);
  if (!s->backend || !s->backend->ops->device_region_open)
    return gp_error_set(err, GP_E_UNIMPLEMENTED,
                        "cuda_register: the %s backend cannot use CUDA memory (it needs gemmd's "
                        "GPU backend)", s->backend ? s->backend->ops->name : "missing");
  return s->backend->ops->device_region_open(s->backend, r, pci_bus_id, err);
}

/* The job's reference to DEVICE region r for slot (an operand or GD_JOB_OUT). */
static void hold_device(gd_job *job, int slot, gd_region *r, uint64_t offset) {
  r->refs++;
  job->mapped[slot] = r;
  job->mapped_offset[slot] = offset;
}

static bool input_device_unlocked(gd_sched *s, gd_job *job, gp_operand operand, gd_region *r,
                           uint64_t offset) {
  assert(!to_sched_job(job)->submitted && job->waiter && operand <= GP_OPERAND_C);
  assert(r->kind == GD_REGION_DEVICE && offset <= r->size &&
         job->operand_bytes[operand] <= r->size - offset);
  gd_where where = {.kind = GD_WHERE_DEVICE, .operand = operand, .r = r, .offset = offset};
  if (job->mapped[operand] || !backend_locate(s, job, &where))
    return false;
  hold_device(job, operand, r, offset);
  return true;
}

static bool output_device_unlocked(gd_sched *s, gd_job *job, gd_region *r, uint64_t offset) {
  assert(!to_sched_job(job)->submitted && !job->mapped[GD_JOB_OUT]);
  assert(r->kind == GD_REGION_DEVICE && offset <= r->size &&
         job->result_bytes <= r->size - offset);
  gd_where where = {.kind = GD_WHERE_DEVICE, .out = true, .r = r, .offset = offset};
  if (!backend_locate(s, job, &where))
    return false;
  hold_device(job, GD_JOB_OUT, r, offset);
  return true;
}

/* ---- the locked entry points ------------------------------------------------ */

gd_admit gd_sched_admit(gd_sched *s, const gp_gemm_hdr *hdr, bool has_c, uint32_t msgid,
                        const gd_sched_share *share, gd_job_waiter *waiter,
                        gd_job **out, gp_error *err) {
  gd_admit result;
  LOCKED(s, result = admit_unlocked(s, hdr, has_c, msgid, share, waiter, out, err));
  return result;
}

/* The payload's way in takes no lock: it touches the job (its loop's alone) and the backend,
 * whose input ops guard what jobs share themselves (gd_backend.h). */
bool gd_sched_input_window(gd_sched *s, gd_job *job, gp_operand operand, uint64_t offset,
                           void **ptr, size_t *len) {
  return input_window_unlocked(s, job, operand, offset, ptr, len);
}

bool gd_sched_input_resident(gd_sched *s, gd_job *job, gp_operand operand,
                             gd_resident_buf *res) {
  bool result;
  LOCKED(s, result = input_resident_unlocked(s, job, operand, res));
  return result;
}

void gd_sched_resident_freed(gd_sched *s) {
  LOCKED(s, resident_freed_unlocked(s));
}

/* Bytes that arrived elsewhere (behind a header in the read buffer, a region, a resident
 * operand) are copied into the job's window outside the lock when the window takes them all:
 * the window is the job's alone, and other loops need not wait on the copy. The backend then
 * sees them landed in place, as after a read straight into the window. */
int gd_sched_input(gd_sched *s, gd_job *job, gp_operand operand, uint64_t offset,
                   const void *data, size_t len, bool *pause, gp_error *err) {
  void *window;
  size_t room;
  if (len > 0 && gd_sched_input_window(s, job, operand, offset, &window, &room) && room >= len &&
      window != data) {
    memcpy(window, data, len);
    data = window;
  }
  return input_unlocked(s, job, operand, offset, data, len, pause, err);
}

int gd_sched_submit(gd_sched *s, gd_job *job, gp_error *err) {
  int result;
  LOCKED(s, result = submit_unlocked(s, job, err));
  return result;
}

/* While the waiter holds the job nothing is released here: the lock is taken only when it let
 * go (the client vanished while the chunk was out). output_consumed guards itself. */
void gd_sched_chunk_done(gd_sched *s, gd_job *job, const void *chunk, size_t len) {
  chunk_done_unlocked(s, job, chunk, len);
}

void gd_sched_abandon(gd_sched *s, gd_job *job) {
  LOCKED(s, abandon_unlocked(s, job));
}

void gd_sched_finish(gd_sched *s, gd_job *job, bool ok) {
  LOCKED(s, finish_unlocked(s, job, ok));
}

int gd_sched_reserve(gd_sched *s, uint64_t bytes, gp_error *err) {
  int result;
  LOCKED(s, result = reserve_unlocked(s, bytes, err));
  return result;
}

void gd_sched_unreserve(gd_sched *s, uint64_t bytes) {
  LOCKED(s, unreserve_unlocked(s, bytes));
}

void gd_sched_region_added(gd_sched *s, gd_region *r) {
  LOCKED(s, region_added_unlocked(s, r));
}


bool gd_sched_output_mapped(gd_sched *s, gd_job *job, gd_region *r, uint8_t *ptr) {
  bool result;
  LOCKED(s, result = output_mapped_unlocked(s, job, r, ptr));
  return result;
}

bool gd_sched_input_mapped(gd_sched *s, gd_job *job, gp_operand operand, gd_region *r,
                           const uint8_t *ptr) {
  bool result;
  LOCKED(s, result = input_mapped_unlocked(s, job, operand, r, ptr));
  return result;
}

int gd_sched_device_region_open(gd_sched *s, gd_region *r, const char *pci_bus_id,
                                gp_error *err) {
  int result;
  LOCKED(s, result = device_region_open_unlocked(s, r, pci_bus_id, err));
  return result;
}

bool gd_sched_input_device(gd_sched *s, gd_job *job, gp_operand operand, gd_region *r,
                           uint64_t offset) {
  bool result;
  LOCKED(s, result = input_device_unlocked(s, job, operand, r, offset));
  return result;
}

bool gd_sched_output_device(gd_sched *s, gd_job *job, gd_region *r, uint64_t offset) {
  bool result;
  LOCKED(s, result = output_device_unlocked(s, job, r, offset));
  return result;
}

void gd_sched_region_put(gd_sched *s, gd_region *r) { LOCKED(s, region_put_unlocked(s, r)); }

/* ---- teardown ------------------------------------------------------------ */

void gd_sched_close(gd_sched *s) { gd_sched_port_close(s->ports[0]); }

void gd_sched_free(gd_sched *s) {
  if (!s)
    return;
  /* The backend is gone: its destroy() freed what it held; free our side only. */
  sched_job *sj = s->jobs;
  s->backend = NULL; /* regions the jobs still hold are unmapped here */
  while (sj) {
    sched_job *next = sj->next;
    put_mapped(s, &sj->job);
    free(sj);
    sj = next;
  }
  for (size_t i = 0; i < s->nports; i++) {
    if (s->ports[i])
      gd_completion_free(s->ports[i]->queue);
    free(s->ports[i]);
  }
  pthread_mutex_destroy(&s->mu);
  free(s);
}
