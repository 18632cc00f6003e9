/*
 * The scheduler (gd_sched.h): admission arithmetic (queue.max_jobs, the memory
 * budget checked from the header, draining), deadlines, and the job life
 * against a fake backend: release exactly once, never while the backend still
 * holds the job, orphaned jobs dropped after their final event.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "gd_clock.h"
#include "gd_completion.h"
#include "gd_sched.h"

/* ---- a fake backend that records what the scheduler asks of it ------------ */

typedef struct {
  gd_backend base;
  int prepared, submitted, released, consumed;
  int refuse_prepare, refuse_submit;
  uint64_t extra_host_bytes;
  gd_job *last_job;
} fake_backend;

static int f_prepare(gd_backend *b, gd_job *job, gp_error *err) {
  fake_backend *f = (fake_backend *)b;
  if (f->refuse_prepare)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "fake: no room on the device");
  f->prepared++;
  f->last_job = job;
  return 0;
}
static int f_submit(gd_backend *b, gd_job *job, gp_error *err) {
  fake_backend *f = (fake_backend *)b;
  (void)job;
  if (f->refuse_submit)
    return gp_error_set(err, GP_E_INTERNAL, "fake: submit failed");
  f->submitted++;
  return 0;
}
static void f_consumed(gd_backend *b, gd_job *job, const void *chunk, size_t len) {
  (void)job, (void)chunk, (void)len;
  ((fake_backend *)b)->consumed++;
}
static void f_release(gd_backend *b, gd_job *job) {
  (void)job;
  ((fake_backend *)b)->released++;
}
static uint64_t f_host_bytes(gd_backend *b, const gd_job *job) {
  return job->operand_bytes[0] + job->operand_bytes[1] + job->operand_bytes[2] +
         ((fake_backend *)b)->extra_host_bytes;
}
static void f_destroy(gd_backend *b) { (void)b; }

static const gd_backend_ops fake_ops = {
    .name = "fake", .prepare = f_prepare, .submit = f_submit, .output_consumed = f_consumed,
    .release = f_release, .host_bytes = f_host_bytes, .destroy = f_destroy};

/* record the events a live connection would get */
static int hook_outputs, hook_failures;
static gp_error last_failure;
static void h_output(void) { hook_outputs++; }
static void h_failed(const gp_error *err) {
  hook_failures++;
  last_failure = *err;
}
static int hook_resumes;
static gd_job *abandon_on_resume; /* a resume hook that lets another job go (a session closing) */
static gd_sched *sched;
static void h_resume(void) {
  hook_resumes++;
  if (abandon_on_resume) {
    gd_job *other = abandon_on_resume;
    abandon_on_resume = NULL;
    gd_sched_abandon(sched, other);
  }
}
/* the waiter every job gets: a live connection's record of the call */
static void on_job_event(gd_job_waiter *w, gd_job *job, const gd_backend_event *ev) {
  (void)w, (void)job;
  switch (ev->type) {
  case GD_EV_OUTPUT_CHUNK: h_output(); break;
  case GD_EV_FAILED: h_failed(&ev->err); break;
  case GD_EV_INPUT_RESUME: h_resume(); break;
  }
}
static gd_job_waiter waiter = {on_job_event};

/* ---- fixture ------------------------------------------------------------------ */

static uv_loop_t loop;
static fake_backend fake;
static gd_stats stats;
/* The scheduler's async handle does not keep a loop alive (by design: see gd_sched_new); in the
 * daemon listeners and connections do. Here this one does. */
static uv_async_t keep_alive;

static void start(uint32_t max_jobs, uint64_t budget, bool with_backend) {
  memset(&fake, 0, sizeof fake);
  fake.base.ops = &fake_ops;
  hook_outputs = hook_failures = hook_resumes = 0;
  abandon_on_resume = NULL;
  gd_stats_init(&stats);
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  ck_assert_int_eq(uv_async_init(&loop, &keep_alive, NULL), 0);
  gd_sched_limits limits = {max_jobs, budget};
  ck_assert_int_eq(gd_sched_new(&loop, with_backend ? &fake.base : NULL, &limits, &stats, &sched, NULL), 0);
}

static void stop(void) {
  uv_close((uv_handle_t *)&keep_alive, NULL);
  gd_sched_close(sched);
  ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
  gd_sched_free(sched);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}

/* f32 m x n x k: a, b and c are 4*m*k, 4*k*n and 4*m*n bytes */
static gp_gemm_hdr hdr_of(uint64_t m, uint64_t n, uint64_t k) {
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = m;
  h.n = n;
  h.k = k;
  h.dtype = GP_DTYPE_F32;
  return h;
}

static gd_admit admit(const gp_gemm_hdr *h, gd_job **job, gp_error *err) {
  gp_error_clear(err);
  return gd_sched_admit(sched, h, false, 7, NULL, &waiter, job, err);
}

/* ---- admission ------------------------------------------------------------------ */

START_TEST(operand_totals) {
  gp_gemm_hdr h = hdr_of(3, 5, 7);
  h.batch = 2;
  h.trans_a = true;
  uint64_t bytes[3], total;
  ck_assert(gd_sched_operand_total(&h, bytes, &total));
  ck_assert_uint_eq(bytes[0], 2 * 3 * 7 * 4);
  ck_assert_uint_eq(bytes[1], 2 * 7 * 5 * 4);
  ck_assert_uint_eq(bytes[2], 2 * 3 * 5 * 4);
  ck_assert_uint_eq(total, bytes[0] + bytes[1] + bytes[2]);
  h = hdr_of(UINT64_MAX / 4, UINT64_MAX / 4, 2); /* overflows: refused, not wrapped */
  ck_assert(!gd_sched_operand_total(&h, bytes, &total));
}
END_TEST

START_TEST(max_jobs_waits) {
  start(2, 1u << 30, false);
  gp_gemm_hdr h = hdr_of(4, 4, 4);
  gd_job *j1, *j2, *j3;
  gp_error err;
  ck_assert_int_eq(admit(&h, &j1, &err), GD_ADMITTED);
  ck_assert_int_eq(admit(&h, &j2, &err), GD_ADMITTED);
  ck_assert_uint_eq(gd_sched_jobs(sched), 2);
  ck_assert_int_eq(admit(&h, &j3, &err), GD_ADMIT_FULL); /* waits: it fits an idle daemon */
  ck_assert_ptr_nonnull(strstr(err.message, "queue.max_jobs"));
  gd_sched_abandon(sched, j1); /* never submitted: gone at once */
  ck_assert_uint_eq(gd_sched_jobs(sched), 1);
  ck_assert_int_eq(admit(&h, &j3, &err), GD_ADMITTED);
  /* a larger max_jobs applies to the next admission */
  gd_sched_limits more = {3, 1u << 30};
  gd_sched_set_limits(sched, &more);
  gd_job *j4;
  ck_assert_int_eq(admit(&h, &j4, &err), GD_ADMITTED);
  gd_sched_abandon(sched, j2);
  gd_sched_abandon(sched, j3);
  gd_sched_abandon(sched, j4);
  ck_assert_uint_eq(gd_sched_jobs(sched), 0);
  stop();
}
END_TEST

START_TEST(memory_budget_from_the_header) {
  /* 10x10x10 f32: 400 + 400 + 400 = 1200 bytes each */
  start(100, 3000, false);
  gp_gemm_hdr h = hdr_of(10, 10, 10);
  gd_job *j1, *j2, *j3;
  gp_error err;
  ck_assert_int_eq(admit(&h, &j1, &err), GD_ADMITTED);
  ck_assert_uint_eq(j1->reserved_bytes, 1200);
  ck_assert_int_eq(admit(&h, &j2, &err), GD_ADMITTED);
  ck_assert_uint_eq(gd_sched_reserved_bytes(sched), 2400);
  ck_assert_int_eq(admit(&h, &j3, &err), GD_ADMIT_FULL);
  ck_assert_ptr_nonnull(strstr(err.message, "600 of queue.memory_budget left"));
  ck_assert_uint_eq(gd_sched_reserved_bytes(sched), 2400); /* a refusal reserves nothing */
  ck_assert_int_eq(gd_sched_submit(sched, j1, &err), 0);
  gd_sched_finish(sched, j1, true);
  ck_assert_uint_eq(gd_sched_reserved_bytes(sched), 1200);
  ck_assert_int_eq(admit(&h, &j3, &err), GD_ADMITTED);
  /* bigger than the whole budget: says so */
  gp_gemm_hdr big = hdr_of(100, 100, 100);
  gd_job *j4;
  ck_assert_int_eq(admit(&big, &j4, &err), GD_ADMIT_REFUSED);
  ck_assert_int_eq(err.code, GP_E_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(err.message, "more than queue.memory_budget"));
  gd_sched_abandon(sched, j2);
  gd_sched_abandon(sched, j3);
  ck_assert_uint_eq(gd_sched_reserved_bytes(sched), 0);
  ck_assert_uint_eq(stats.hist[GD_HIST_TOTAL].count, 1);
  stop();
}
END_TEST

START_TEST(reservations_outside_jobs_share_the_budget) {
  /* shared-memory regions: 1000 of 3000 reserved, then a 1200-byte job fits once, not twice */
  start(100, 3000, false);
  gp_error err;
  ck_assert_int_eq(gd_sched_reserve(sched, 1000, &err), 0);
  ck_assert_int_eq(gd_sched_reserve(sched, 2001, &err), GP_E_RESOURCE_EXHAUSTED);
  ck_assert_ptr_nonnull(strstr(err.message, "2000 of queue.memory_budget left"));
  gp_gemm_hdr h = hdr_of(10, 10, 10);
  gd_job *j1, *j2;
  ck_assert_int_eq(admit(&h, &j1, &err), GD_ADMITTED);
  ck_assert_int_eq(admit(&h, &j2, &err), GD_ADMIT_FULL); /* waits for room, not refused */
  ck_assert_uint_eq(gd_sched_reserved_bytes(sched), 2200);
  gd_sched_unreserve(sched, 1000);
  ck_assert_int_eq(admit(&h, &j2, &err), GD_ADMITTED);
  gd_sched_abandon(sched, j1);
  gd_sched_abandon(sched, j2);
  ck_assert_uint_eq(gd_sched_reserved_bytes(sched), 0);
  stop();
}
END_TEST

/* The requester's own holdings outside jobs (peer_holds): asked for only where the request
 * would not fit beside every byte held outside jobs; beside other peers' holdings it is
 * refused, beside its own it waits. */
static int holds_asked;
static uint64_t holds_answer;
static uint64_t holds_of(const void *arg) {
  ck_assert_ptr_eq(arg, &holds_answer);
  holds_asked++;
  return holds_answer;
}

START_TEST(own_holdings_asked_only_where_they_decide) {
  start(100, 3000, false);
  gp_gemm_hdr h = hdr_of(10, 10, 10); /* 1200 bytes */
  gd_sched_share share = {.peer_holds = holds_of, .peer_holds_arg = &holds_answer};
  gd_job *job;
  gp_error err;
  gp_error_clear(&err);
  /* nothing held outside jobs: never asked */
  ck_assert_int_eq(gd_sched_admit(sched, &h, false, 1, &share, &waiter, &job, &err), GD_ADMITTED);
  gd_sched_abandon(sched, job);
  ck_assert_int_eq(holds_asked, 0);
  /* 1000 held: 1200 fits beside all of it, still not asked */
  ck_assert_int_eq(gd_sched_reserve(sched, 1000, &err), 0);
  ck_assert_int_eq(gd_sched_admit(sched, &h, false, 1, &share, &waiter, &job, &err), GD_ADMITTED);
  gd_sched_abandon(sched, job);
  ck_assert_int_eq(holds_asked, 0);
  /* 2000 held: 1200 does not fit beside it. Another peer's: refused at once, naming them */
  ck_assert_int_eq(gd_sched_reserve(sched, 1000, &err), 0);
  holds_answer = 0;
  ck_assert_int_eq(gd_sched_admit(sched, &h, false, 1, &share, &waiter, &job, &err),
                   GD_ADMIT_REFUSED);
  ck_assert_ptr_nonnull(strstr(err.message, "resident operands and shared-memory regions"));
  ck_assert_int_eq(holds_asked, 1);
  /* its own: it may free them, so it waits for room */
  holds_answer = 2000;
  gp_error_clear(&err);
  ck_assert_int_eq(gd_sched_admit(sched, &h, false, 1, &share, &waiter, &job, &err),
                   GD_ADMIT_FULL);
  ck_assert_int_eq(holds_asked, 2);
  gd_sched_unreserve(sched, 2000);
  ck_assert_uint_eq(gd_sched_reserved_bytes(sched), 0);
  stop();
}
END_TEST

START_TEST(backend_host_bytes_and_prepare) {
  start(100, 5000, true);
  gp_gemm_hdr h = hdr_of(10, 10, 10);
  gd_job *j1, *j2;
  gp_error err;
  fake.extra_host_bytes = 1000; /* scratch: 2200 per job */
  ck_assert_int_eq(admit(&h, &j1, &err), GD_ADMITTED);
  ck_assert_uint_eq(j1->reserved_bytes, 2200);
  ck_assert_int_eq(admit(&h, &j2, &err), GD_ADMITTED);
  gd_job *j3;
  ck_assert_int_eq(admit(&h, &j3, &err), GD_ADMIT_FULL);
  ck_assert_int_eq(fake.prepared, 2); /* refused before prepare */
  gd_sched_abandon(sched, j2);
  fake.refuse_prepare = 1;
  ck_assert_int_eq(admit(&h, &j3, &err), GD_ADMIT_REFUSED);
  ck_assert_int_eq(err.code, GP_E_RESOURCE_EXHAUSTED);
  ck_assert_str_eq(err.message, "fake: no room on the device");
  ck_assert_uint_eq(gd_sched_jobs(sched), 1);
  ck_assert_uint_eq(gd_sched_reserved_bytes(sched), 2200);
  ck_assert_int_eq(fake.released, 1); /* j2 only: a failed prepare is not released */
  fake.refuse_prepare = 0;
  fake.refuse_submit = 1;
  ck_assert_int_eq(gd_sched_submit(sched, j1, &err), GP_E_INTERNAL);
  ck_assert_int_eq(fake.released, 2); /* a failed submit is */
  ck_assert_uint_eq(gd_sched_jobs(sched), 0);
  stop();
}
END_TEST

START_TEST(draining_refuses) {
  start(10, 1u << 20, false);
  gp_gemm_hdr h = hdr_of(2, 2, 2);
  gd_job *job;
  gp_error err;
  gd_sched_set_draining(sched);
  ck_assert_int_eq(admit(&h, &job, &err), GD_ADMIT_REFUSED);
  ck_assert_int_eq(err.code, GP_E_UNAVAILABLE);
  ck_assert_uint_eq(gd_sched_jobs(sched), 0);
  stop();
}
END_TEST

START_TEST(deadline_from_timeout_ms) {
  start(10, 1u << 20, false);
  gp_gemm_hdr h = hdr_of(2, 2, 2);
  gd_job *j1, *j2, *j3;
  gp_error err;
  ck_assert_int_eq(admit(&h, &j1, &err), GD_ADMITTED);
  ck_assert_uint_eq(j1->deadline_us, 0);
  h.has_timeout = true;
  h.timeout_ms = 250;
  ck_assert_int_eq(admit(&h, &j2, &err), GD_ADMITTED);
  ck_assert_uint_eq(j2->deadline_us, j2->admitted_us + 250000);
  h.timeout_ms = UINT64_MAX; /* saturates instead of wrapping into the past */
  ck_assert_int_eq(admit(&h, &j3, &err), GD_ADMITTED);
  ck_assert_uint_ge(j3->deadline_us, j3->admitted_us);
  gd_sched_abandon(sched, j1);
  gd_sched_abandon(sched, j2);
  gd_sched_abandon(sched, j3);
  stop();
}
END_TEST

/* Admits a 2x2x2 f32 job (asserting that it is admitted) and, when `submit`, submits it
 * (asserting that too): the job-life tests' common first steps. */
static gd_job *admit_small(bool submit) {
  gp_gemm_hdr h = hdr_of(2, 2, 2);
  gd_job *job;
  gp_error err;
  ck_assert_int_eq(admit(&h, &job, &err), GD_ADMITTED);
  if (submit)
    ck_assert_int_eq(gd_sched_submit(sched, job, &err), 0);
  return job;
}

/* ---- the job life across threads ------------------------------------------------ */

typedef struct {
  gd_backend *b;
  gd_backend_event ev;
} post_arg;

static void *post_thread(void *arg) {
  post_arg *p = arg;
  ck_assert_int_eq(gd_completion_post(p->b->sink, &p->ev), 0);
  return NULL;
}

/* Posts from another thread, as a backend worker does; the loop has not delivered it yet. */
static void post_queued(gd_job *job, gd_backend_event_type type, bool last) {
  post_arg p;
  memset(&p, 0, sizeof p);
  p.b = &fake.base;
  p.ev.type = type;
  p.ev.job = job;
  p.ev.last = last;
  p.ev.data = "xyz";
  p.ev.len = 3;
  if (type == GD_EV_FAILED)
    gp_error_set(&p.ev.err, GP_E_DEADLINE_EXCEEDED, "fake: too late");
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, post_thread, &p), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
}

static void post_from_thread(gd_job *job, gd_backend_event_type type, bool last) {
  post_queued(job, type, last);
  uv_run(&loop, UV_RUN_NOWAIT); /* the async callback delivers it */
}

START_TEST(live_job_events_reach_the_session) {
  start(10, 1u << 20, true);
  gd_job *job = admit_small(true);
  ck_assert_uint_eq(gd_sched_running(sched), 1);
  post_from_thread(job, GD_EV_OUTPUT_CHUNK, false);
  post_from_thread(job, GD_EV_OUTPUT_CHUNK, true);
  ck_assert_int_eq(hook_outputs, 2);
  ck_assert_uint_eq(gd_sched_running(sched), 0);
  gd_sched_chunk_done(sched, job, "xyz", 3);
  gd_sched_chunk_done(sched, job, "xyz", 3);
  ck_assert_int_eq(fake.consumed, 2);
  ck_assert_int_eq(fake.released, 0);
  gd_sched_finish(sched, job, true);
  ck_assert_int_eq(fake.released, 1);
  ck_assert_uint_eq(gd_sched_jobs(sched), 0);
  /* a failure goes to the session's failed hook */
  job = admit_small(true);
  post_from_thread(job, GD_EV_FAILED, false);
  ck_assert_int_eq(hook_failures, 1);
  ck_assert_int_eq(last_failure.code, GP_E_DEADLINE_EXCEEDED);
  gd_sched_finish(sched, job, false);
  ck_assert_int_eq(fake.released, 2);
  stop();
}
END_TEST

/* A connection's and a peer's share of the budget (issue 17): over it the request waits for
 * its own (GD_ADMIT_OVER_SHARE), never refused; holding nothing, anything up to the budget. */
START_TEST(memory_shares) {
  start(100, 10000, false);
  gp_gemm_hdr h = hdr_of(10, 10, 10); /* 1200 bytes */
  gd_job *job;
  gp_error err;
  gd_sched_share share = {.conn_used = 0, .conn_limit = 1000, .peer_used = 0, .peer_limit = 0};
  gp_error_clear(&err);
  /* holding nothing: over the share is fine */
  ck_assert_int_eq(gd_sched_admit(sched, &h, false, 1, &share, &waiter, &job, &err),
                   GD_ADMITTED);
  gd_sched_abandon(sched, job);
  share.conn_used = 1; /* holding something: 1 + 1200 is over 1000 */
  ck_assert_int_eq(gd_sched_admit(sched, &h, false, 1, &share, &waiter, &job, &err),
                   GD_ADMIT_OVER_SHARE);
  ck_assert_ptr_nonnull(strstr(err.message, "connection holds 1 bytes"));
  share.conn_limit = 1201;
  ck_assert_int_eq(gd_sched_admit(sched, &h, false, 1, &share, &waiter, &job, &err),
                   GD_ADMITTED);
  gd_sched_abandon(sched, job);
  share.peer_used = 9000; /* the peer's share now */
  share.peer_limit = 10000;
  ck_assert_int_eq(gd_sched_admit(sched, &h, false, 1, &share, &waiter, &job, &err),
                   GD_ADMIT_OVER_SHARE);
  ck_assert_ptr_nonnull(strstr(err.message, "peer holds 9000 bytes"));
  /* never fits the budget: refused, whatever the share says */
  gp_gemm_hdr big = hdr_of(100, 100, 100);
  ck_assert_int_eq(gd_sched_admit(sched, &big, false, 1, &share, &waiter, &job, &err),
                   GD_ADMIT_REFUSED);
  ck_assert_int_eq(err.code, GP_E_RESOURCE_EXHAUSTED);
  ck_assert_uint_eq(gd_sched_jobs(sched), 0);
  ck_assert_uint_eq(gd_sched_reserved_bytes(sched), 0);
  stop();
}
END_TEST

static int rooms;
static void on_room(void *arg) {
  ck_assert_ptr_eq(arg, &fake);
  rooms++;
}

/* A job whose result is complete and waits only on its client's reading stops taking shared
 * room: a client that never reads must not lock others out of queue.max_jobs or the budget. */
START_TEST(delivering_job_leaves_the_shared_queue) {
  start(1, 1200, true); /* one 2x2x2 f32 job (48 bytes) fills max_jobs */
  rooms = 0;
  gd_sched_on_room(sched, on_room, &fake);
  gd_job *job = admit_small(true);
  gd_job *other;
  gp_gemm_hdr h = hdr_of(2, 2, 2);
  gp_error err;
  ck_assert_int_eq(admit(&h, &other, &err), GD_ADMIT_FULL);
  post_from_thread(job, GD_EV_OUTPUT_CHUNK, true); /* final; its chunk not written yet */
  ck_assert_int_eq(rooms, 1);
  ck_assert_uint_eq(gd_sched_jobs(sched), 0);
  ck_assert_uint_eq(gd_sched_reserved_bytes(sched), 0);
  ck_assert_uint_eq(gd_sched_delivering(sched), 1);
  ck_assert_uint_eq(gd_sched_delivering_bytes(sched), 48);
  ck_assert_int_eq(admit(&h, &other, &err), GD_ADMITTED);
  gd_sched_chunk_done(sched, job, "xyz", 3);
  gd_sched_finish(sched, job, true);
  ck_assert_uint_eq(gd_sched_delivering(sched), 0);
  ck_assert_uint_eq(gd_sched_delivering_bytes(sched), 0);
  ck_assert_int_eq(rooms, 1); /* a delivering job's release frees no shared room */
  gd_sched_abandon(sched, other);
  ck_assert_int_eq(rooms, 2);
  ck_assert_uint_eq(gd_sched_jobs(sched), 0);
  stop();
}
END_TEST

START_TEST(orphan_released_after_its_final_event) {
  start(10, 1u << 20, true);
  gd_job *job = admit_small(true);
  gd_sched_abandon(sched, job); /* the client vanished while it runs */
  ck_assert_int_eq(fake.released, 0); /* still the backend's */
  ck_assert_uint_eq(gd_sched_jobs(sched), 1);
  post_from_thread(job, GD_EV_OUTPUT_CHUNK, false);
  ck_assert_int_eq(hook_outputs, 0); /* never to the session */
  ck_assert_int_eq(fake.consumed, 1);
  ck_assert_int_eq(fake.released, 0);
  post_from_thread(job, GD_EV_OUTPUT_CHUNK, true);
  ck_assert_int_eq(fake.consumed, 2);
  ck_assert_int_eq(fake.released, 1);
  ck_assert_uint_eq(gd_sched_jobs(sched), 0);
  ck_assert_uint_eq(gd_sched_reserved_bytes(sched), 0);
  stop();
}
END_TEST

START_TEST(orphan_with_a_chunk_still_being_written) {
  start(10, 1u << 20, true);
  gd_job *job = admit_small(true);
  post_from_thread(job, GD_EV_OUTPUT_CHUNK, true); /* handed to the session's write */
  ck_assert_int_eq(hook_outputs, 1);
  gd_sched_abandon(sched, job); /* the connection closes with that write pending */
  ck_assert_int_eq(fake.released, 0);
  gd_sched_chunk_done(sched, job, "xyz", 3); /* the cancelled write comes back */
  ck_assert_int_eq(fake.released, 1);
  ck_assert_uint_eq(gd_sched_jobs(sched), 0);
  stop();
}
END_TEST

START_TEST(event_queued_for_a_job_released_before_submit) {
  /* The backend posted INPUT_RESUME; before the loop drained it, the client vanished mid-payload
   * and the job was released and freed. The queued event must not reach the freed job (ASan). */
  start(10, 1u << 20, true);
  gd_job *job = admit_small(false);
  post_queued(job, GD_EV_INPUT_RESUME, false);
  gd_sched_abandon(sched, job);
  ck_assert_int_eq(fake.released, 1);
  uv_run(&loop, UV_RUN_NOWAIT);
  ck_assert_int_eq(hook_resumes, 0);
  ck_assert_uint_eq(gd_sched_jobs(sched), 0);
  stop();
}
END_TEST

START_TEST(event_in_the_same_batch_for_a_job_released_by_a_hook) {
  /* Two events drained in one wake-up; handling the first releases the second's job (its
   * session closes). The second must be dropped, not delivered to freed memory. */
  start(10, 1u << 20, true);
  gd_job *first = admit_small(false);
  gd_job *second = admit_small(false);
  post_queued(first, GD_EV_INPUT_RESUME, false);
  post_queued(second, GD_EV_INPUT_RESUME, false);
  abandon_on_resume = second;
  uv_run(&loop, UV_RUN_NOWAIT);
  ck_assert_int_eq(hook_resumes, 1);
  ck_assert_int_eq(fake.released, 1);
  ck_assert_uint_eq(gd_sched_jobs(sched), 1);
  gd_sched_abandon(sched, first);
  ck_assert_int_eq(fake.released, 2);
  stop();
}
END_TEST

#ifndef NDEBUG
START_TEST(chunk_given_back_twice_aborts) {
  /* the accounting is asserted, not clamped: a second give-back of one chunk is a bug */
  start(10, 1u << 20, true);
  gd_job *job = admit_small(true);
  post_from_thread(job, GD_EV_OUTPUT_CHUNK, false);
  gd_sched_chunk_done(sched, job, "xyz", 3);
  gd_sched_chunk_done(sched, job, "xyz", 3);
}
END_TEST

START_TEST(finish_with_a_chunk_out_aborts) {
  start(10, 1u << 20, true);
  gd_job *job = admit_small(true);
  post_from_thread(job, GD_EV_OUTPUT_CHUNK, true);
  gd_sched_finish(sched, job, true);
}
END_TEST
#endif

START_TEST(shutdown_frees_what_is_left) {
  /* the backend was destroyed under running jobs: gd_sched_free frees them, no release */
  start(10, 1u << 20, true);
  gd_job *job = admit_small(true);
  gd_sched_abandon(sched, job);
  stop();
  ck_assert_int_eq(fake.released, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_sched");
  TCase *tc = tcase_create("sched");
  tcase_add_test(tc, operand_totals);
  tcase_add_test(tc, max_jobs_waits);
  tcase_add_test(tc, delivering_job_leaves_the_shared_queue);
  tcase_add_test(tc, memory_shares);
  tcase_add_test(tc, memory_budget_from_the_header);
  tcase_add_test(tc, reservations_outside_jobs_share_the_budget);
  tcase_add_test(tc, own_holdings_asked_only_where_they_decide);
  tcase_add_test(tc, backend_host_bytes_and_prepare);
  tcase_add_test(tc, draining_refuses);
  tcase_add_test(tc, deadline_from_timeout_ms);
  tcase_add_test(tc, live_job_events_reach_the_session);
  tcase_add_test(tc, orphan_released_after_its_final_event);
  tcase_add_test(tc, orphan_with_a_chunk_still_being_written);
  tcase_add_test(tc, event_queued_for_a_job_released_before_submit);
  tcase_add_test(tc, event_in_the_same_batch_for_a_job_released_by_a_hook);
  tcase_add_test(tc, shutdown_frees_what_is_left);
#ifndef NDEBUG
  tcase_add_test_raise_signal(tc, chunk_given_back_twice_aborts, SIGABRT);
  tcase_add_test_raise_signal(tc, finish_with_a_chunk_out_aborts, SIGABRT);
#endif
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
