/*
 * test_gpu_backend_fake.c - the GPU backend's host logic, driven the way the daemon's scheduler
 * and sessions drive it, over fake_cuda.c (no GPU needed): staging windows and copies, pause and
 * resume, spills, chunked output, jobs waiting for pool memory, RESOURCE_EXHAUSTED, device
 * memory taken on demand up to the cap and given back after idle, a failing
 * launch (INTERNAL), a sticky fault (the device leaves service, the other keeps serving),
 * clients vanishing before submit, and destroy with work outstanding. Results are checked
 * against a float64 reference with poisoned outputs. The test is the loop thread: it owns
 * gd_completion_post()'s queue and waits on it with a deadline, so a lost event is a failure, not
 * a hang.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gd_backend_gpu.h"
#include "gd_completion.h"
#include "gd_gpu_loop.h" /* gd__gpu_split_plan, the backend's state */
#include "gd_gpu_work.h" /* gd__gpu_cpulist_parse */
#include "gp_half.h"
#include "gd_gpu_pool.h"
#include "gd_log.h"

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                             \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

/* ---- gd_completion_post: the loop's queue ---- */

typedef struct evnode {
  gd_backend_event ev;
  struct evnode *next;
} evnode;
static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cv = PTHREAD_COND_INITIALIZER;
static evnode *q_head, **q_tail = &q_head;

int gd_completion_post(gd_completion *q, const gd_backend_event *ev) {
  (void)q;
  evnode *n = malloc(sizeof(*n));
  if (!n)
    return -12;
  n->ev = *ev;
  n->next = NULL;
  pthread_mutex_lock(&q_mu);
  *q_tail = n;
  q_tail = &n->next;
  pthread_cond_signal(&q_cv);
  pthread_mutex_unlock(&q_mu);
  return 0;
}

/* Next event, waiting up to ms; false on timeout. */
static bool next_event(gd_backend_event *ev, int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&q_mu);
  while (!q_head)
    if (pthread_cond_timedwait(&q_cv, &q_mu, &ts) != 0 && !q_head) {
      pthread_mutex_unlock(&q_mu);
      return false;
    }
  evnode *n = q_head;
  q_head = n->next;
  if (!q_head)
    q_tail = &q_head;
  pthread_mutex_unlock(&q_mu);
  *ev = n->ev;
  free(n);
  return true;
}

/* ---- a client's job ---- */

typedef enum { T_FEED, T_WAIT, T_DONE } tphase;

typedef struct {
  gd_job job;
  uint8_t *op[3];      /* a, b, c as sent */
  uint8_t *out;        /* C as received */
  uint64_t fed[3];
  int cur_op;
  bool paused, prepared, failed, vanish;
  bool hold;                   /* keep its result chunks unconsumed until the others are done */
  gd_backend_event held[64];
  int nheld;
  int fail_code;
  tphase phase;
  uint64_t received;
} tjob;

static double urand(void) { return (double)rand() / RAND_MAX * 2.0 - 1.0; }

static void tjob_init(tjob *t, uint64_t id, int m, int n, int k, gp_dtype dt, bool ta, bool tb,
                      double alpha, double beta, int batch) {
  memset(t, 0, sizeof(*t));
  gp_gemm_hdr_init(&t->job.hdr);
  gp_gemm_hdr *h = &t->job.hdr;
  h->m = (uint64_t)m;
  h->n = (uint64_t)n;
  h->k = (uint64_t)k;
  h->dtype = dt;
  h->trans_a = ta;
  h->trans_b = tb;
  h->alpha = alpha;
  h->beta = beta;
  h->batch = (uint64_t)batch;
  t->job.id = id;
  t->job.msgid = (uint32_t)id;
  t->job.has_c = beta != 0.0;
  t->job.device = (int)(id % 3) - 1; /* the scheduler's pick: 0, 1, or none */
  t->job.admitted_us = 1;
  size_t es = gp_dtype_size(dt);
  for (int o = 0; o < 3; o++) {
    uint64_t bytes = 0;
    gp_gemm_operand_bytes(h, (gp_operand)o, &bytes);
    t->job.operand_bytes[o] = bytes;
    t->op[o] = malloc(bytes ? bytes : 1);
    for (uint64_t i = 0; i < bytes / es; i++) {
      if (dt == GP_DTYPE_F64)
        ((double *)t->op[o])[i] = urand();
      else
        ((float *)t->op[o])[i] = (float)urand();
    }
  }
  t->out = malloc(t->job.operand_bytes[2]);
  memset(t->out, 0xff, t->job.operand_bytes[2]); /* NaN: an unwritten element shows */
  t->cur_op = 0;
}

static void tjob_free(tjob *t) {
  for (int o = 0; o < 3; o++)
    free(t->op[o]);
  free(t->out);
}

static double elem(gp_dtype dt, const uint8_t *p, uint64_t i) {
  switch (dt) {
  case GP_DTYPE_F64: return ((const double *)p)[i];
  case GP_DTYPE_F16: return gp_f16_to_f32(((const uint16_t *)p)[i]);
  case GP_DTYPE_BF16: return gp_bf16_to_f32(((const uint16_t *)p)[i]);
  default: return ((const float *)p)[i];
  }
}

/* t's result cast to out (f16 / bf16): c (when sent) and the result in out. */
static void tjob_cast(tjob *t, gp_dtype out) {
  gp_gemm_hdr *h = &t->job.hdr;
  h->has_out_dtype = true;
  h->out_dtype = out;
  uint64_t bytes = 0;
  gp_gemm_operand_bytes(h, GP_OPERAND_C, &bytes);
  t->job.operand_bytes[2] = bytes;
  free(t->op[2]);
  free(t->out);
  t->op[2] = malloc(bytes);
  t->out = malloc(bytes);
  for (uint64_t i = 0; i < bytes / 2; i++)
    ((uint16_t *)t->op[2])[i] = out == GP_DTYPE_F16 ? gp_f32_to_f16((float)urand())
                                                      : gp_f32_to_bf16((float)urand());
  memset(t->out, 0xff, bytes);
}

static void tjob_verify(const tjob *t, const char *what) {
  const gp_gemm_hdr *h = &t->job.hdr;
  int64_t m = (int64_t)h->m, n = (int64_t)h->n, k = (int64_t)h->k;
  const gp_dtype out = gp_gemm_out_dtype(h);
  double tol = h->dtype == GP_DTYPE_F64 ? 1e-12 : 1e-5;
  double out_tol = out == GP_DTYPE_F16 ? 0x1p-11 : out == GP_DTYPE_BF16 ? 0x1p-8 : 0;
  int bad = 0;
  for (int64_t b = 0; b < (int64_t)h->batch; b++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double acc = 0, mag = 0;
        for (int64_t l = 0; l < k; l++) {
          int64_t ia = h->trans_a ? l * m + i : i * k + l;
          int64_t ib = h->trans_b ? j * k + l : l * n + j;
          double x = elem(h->dtype, t->op[0], (uint64_t)(b * m * k + ia)) *
                     elem(h->dtype, t->op[1], (uint64_t)(b * k * n + ib));
          acc += x;
          mag += fabs(x);
        }
        uint64_t ic = (uint64_t)(b * m * n + i * n + j);
        double ref = h->alpha * acc, scale = fabs(h->alpha) * mag;
        if (h->beta != 0.0) {
          ref += h->beta * elem(out, t->op[2], ic);
          scale += fabs(h->beta * elem(out, t->op[2], ic));
        }
        double got = elem(out, t->out, ic);
        if (!(fabs(got - ref) <= tol * (scale + 1e-30) * sqrt((double)k + 1) +
                                     out_tol * fabs(ref) * 1.01 + 0x1p-24))
          bad++;
      }
  CHECK(bad == 0, "%s: job %llu (%llux%llux%llu): %d elements wrong", what,
        (unsigned long long)t->job.id, (unsigned long long)h->m, (unsigned long long)h->n,
        (unsigned long long)h->k, bad);
}

/* ---- the loop ---- */

static tjob *find(tjob *jobs, int count, gd_job *job) {
  for (int i = 0; i < count; i++)
    if (&jobs[i].job == job)
      return &jobs[i];
  return NULL;
}

/* Feeds one piece of t's payload, as a session reading the socket would. */
static void feed_piece(gd_backend *be, tjob *t, size_t max_piece) {
  while (t->cur_op < 3 &&
         (t->fed[t->cur_op] == t->job.operand_bytes[t->cur_op] || (t->cur_op == 2 && !t->job.has_c)))
    t->cur_op++;
  if (t->cur_op == 3) {
    gp_error err;
    gp_error_clear(&err);
    int rc = be->ops->submit(be, &t->job, &err);
    CHECK(rc == 0, "submit: %s", err.message);
    t->phase = T_WAIT;
    return;
  }
  int o = t->cur_op;
  uint64_t left = t->job.operand_bytes[o] - t->fed[o];
  size_t piece = 1 + (size_t)rand() % max_piece;
  if (piece > left)
    piece = (size_t)left;
  const uint8_t *src = t->op[o] + t->fed[o];
  const void *data = src;
  void *win = NULL;
  size_t win_len = 0;
  if (rand() % 2 &&
      be->ops->input_window(be, &t->job, (gp_operand)o, t->fed[o], &win, &win_len)) {
    CHECK(win_len > 0 && win_len <= left, "window of %zu bytes with %llu left", win_len,
          (unsigned long long)left);
    if (piece > win_len)
      piece = win_len;
    memcpy(win, src, piece); /* the socket read lands in the window */
    data = win;
  }
  bool pause = false;
  gp_error err;
  gp_error_clear(&err);
  int rc = be->ops->input(be, &t->job, (gp_operand)o, t->fed[o], data, piece, &pause, &err);
  CHECK(rc == 0, "input: %s", err.message);
  t->fed[o] += piece;
  if (pause)
    t->paused = true;
}

static void handle(gd_backend *be, tjob *jobs, int count, const gd_backend_event *ev) {
  tjob *t = find(jobs, count, ev->job);
  CHECK(t != NULL, "event for an unknown job");
  if (!t)
    return;
  /* A client that left mid-payload may still meet the resume posted before it left (the
   * scheduler drops such events itself once the waiter is gone); nothing else may follow. */
  if (t->vanish && t->phase == T_DONE && ev->type == GD_EV_INPUT_RESUME)
    return;
  CHECK(t->phase != T_DONE, "event type %d after the job's final event", (int)ev->type);
  switch (ev->type) {
  case GD_EV_INPUT_RESUME:
    t->paused = false;
    break;
  case GD_EV_OUTPUT_CHUNK:
    if (t->hold && t->nheld < 64) {
      t->held[t->nheld++] = *ev;
      break;
    }
    CHECK(ev->offset + ev->len <= t->job.operand_bytes[2], "chunk past C");
    CHECK(ev->offset == t->received, "chunk at %llu, expected %llu",
          (unsigned long long)ev->offset, (unsigned long long)t->received);
    memcpy(t->out + ev->offset, ev->data, ev->len);
    t->received += ev->len;
    be->ops->output_consumed(be, &t->job, ev->data, ev->len);
    if (ev->last) {
      CHECK(t->received == t->job.operand_bytes[2], "last chunk early");
      CHECK(strncmp(t->job.result.device, "cuda:", 5) == 0, "device %s", t->job.result.device);
      CHECK(strcmp(t->job.result.kernel, "fake") == 0, "kernel %s", t->job.result.kernel);
      t->phase = T_DONE;
      be->ops->release(be, &t->job);
    }
    break;
  case GD_EV_FAILED:
    t->failed = true;
    t->fail_code = ev->err.code;
    t->phase = T_DONE;
    be->ops->release(be, &t->job);
    break;
  }
}

/* Runs jobs to completion, interleaving their payloads in random pieces. */
/* Once every job but the held ones is done, the held chunks are consumed. */
static void unhold(gd_backend *be, tjob *jobs, int count) {
  for (int i = 0; i < count; i++)
    if (jobs[i].phase != T_DONE && !jobs[i].hold)
      return;
  for (int i = 0; i < count; i++) {
    tjob *t = &jobs[i];
    if (!t->hold)
      continue;
    t->hold = false;
    for (int h = 0; h < t->nheld; h++)
      handle(be, jobs, count, &t->held[h]);
    t->nheld = 0;
  }
}

static void run_jobs(gd_backend *be, tjob *jobs, int count, size_t max_piece) {
  for (int i = 0; i < count; i++) {
    if (jobs[i].prepared)
      continue;
    gp_error err;
    gp_error_clear(&err);
    int rc = be->ops->prepare(be, &jobs[i].job, &err);
    if (rc != 0) {
      jobs[i].failed = true;
      jobs[i].fail_code = rc;
      jobs[i].phase = T_DONE;
    }
  }
  for (;;) {
    bool progress = false, all_done = true;
    for (int i = 0; i < count; i++) {
      tjob *t = &jobs[i];
      if (t->phase != T_DONE)
        all_done = false;
      if (t->phase == T_FEED && t->vanish && t->fed[0] > 0) {
        be->ops->release(be, &t->job); /* the client left mid-payload */
        t->phase = T_DONE;
        t->failed = true;
        progress = true;
      } else if (t->phase == T_FEED && !t->paused) {
        feed_piece(be, t, max_piece);
        progress = true;
      }
    }
    if (all_done)
      break;
    unhold(be, jobs, count);
    gd_backend_event ev;
    bool got = next_event(&ev, progress ? 0 : 10000);
    if (!got && !progress) {
      CHECK(false, "no event for 10 s: a lost completion or resume");
      return;
    }
    while (got) {
      handle(be, jobs, count, &ev);
      got = next_event(&ev, 0);
    }
  }
}

/* The small-job lane of the backends made here (gpu.small_job_bytes, gpu.small_slots). */
static uint64_t g_small_bytes;
static uint32_t g_small_slots = 8;
static uint64_t g_queue_delay_us; /* gpu.max_queue_delay_us */

static gd_backend *make(uint64_t staging, uint64_t memory_bytes) {
  gd_gpu_config cfg;
  gd_gpu_config_default(&cfg);
  cfg.staging_bytes = staging;
  cfg.memory_bytes = memory_bytes;
  cfg.small_job_bytes = g_small_bytes;
  cfg.small_slots = g_small_slots;
  cfg.max_queue_delay_us = g_queue_delay_us;
  gd_backend *be = NULL;
  gp_error err;
  gp_error_clear(&err);
  int rc = gd_backend_gpu_create(&cfg, &be, &err);
  CHECK(rc == 0 && be, "create: %s", err.message);
  return be;
}

/* ---- scenarios ---- */

static void random_jobs(tjob *jobs, int count, int max_dim, uint64_t first_id) {
  for (int i = 0; i < count; i++) {
    int m = 1 + rand() % max_dim, n = 1 + rand() % max_dim, k = 1 + rand() % max_dim;
    double beta = i % 3 == 0 ? 0.5 : 0.0;
    tjob_init(&jobs[i], first_id + (uint64_t)i, m, n, k, i % 2 ? GP_DTYPE_F64 : GP_DTYPE_F32,
              i & 2, i & 4, 1.5, beta, i % 5 == 0 ? 2 : 1);
  }
}

/* Jobs that took the small-job lane, over every device. */
static uint64_t small_jobs(gd_backend *be) {
  gd__gpu_backend *gb = (gd__gpu_backend *)be;
  uint64_t n = 0;
  for (size_t i = 0; i < gb->ndev; i++) {
    pthread_mutex_lock(&gb->devs[i].mu);
    n += gb->devs[i].small_jobs;
    pthread_mutex_unlock(&gb->devs[i].mu);
  }
  return n;
}

static void scenario_many(uint64_t staging, int count, int max_dim, size_t piece) {
  gd_backend *be = make(staging, 0);
  if (!be)
    return;
  tjob *jobs = calloc((size_t)count, sizeof(tjob));
  random_jobs(jobs, count, max_dim, 1);
  run_jobs(be, jobs, count, piece);
  bool devs[2] = {false, false};
  for (int i = 0; i < count; i++) {
    CHECK(!jobs[i].failed, "job %d failed (%d)", i, jobs[i].fail_code);
    if (!jobs[i].failed) {
      tjob_verify(&jobs[i], "many");
      devs[jobs[i].job.result.device[5] == '1'] = true;
    }
    tjob_free(&jobs[i]);
  }
  CHECK(devs[0] && devs[1], "both fake devices should have served");
  uint64_t small = small_jobs(be);
  if (g_small_bytes == 0)
    CHECK(small == 0, "lane off, yet %llu small jobs", (unsigned long long)small);
  else
    CHECK(small > 0 && small < (uint64_t)count, "lane on: %llu of %d jobs small (some fit, "
          "some do not)", (unsigned long long)small, count);
  free(jobs);
  be->ops->destroy(be);
}

/* Small jobs never wait behind a large job's result: the large job's chunks stay unconsumed
 * (both output staging buffers posted, its output stalled) until every small job is done. On
 * the staging path the small jobs queue behind it in the output FIFO and never finish. */
static void scenario_small_beside_large(void) {
  gd_backend *be = make(4096, 0);
  if (!be)
    return;
  enum { NSMALL = 8 };
  tjob jobs[1 + NSMALL];
  tjob_init(&jobs[0], 700, 64, 64, 64, GP_DTYPE_F64, false, true, 1.0, 0.5, 1); /* 8 chunks */
  jobs[0].job.device = 0;
  jobs[0].hold = true;
  gp_error err;
  gp_error_clear(&err);
  CHECK(be->ops->prepare(be, &jobs[0].job, &err) == 0, "prepare large: %s", err.message);
  jobs[0].prepared = true;
  for (int r = 0; r < 100000 && jobs[0].phase == T_FEED; r++) {
    if (!jobs[0].paused)
      feed_piece(be, &jobs[0], 4096);
    gd_backend_event ev;
    while (next_event(&ev, jobs[0].paused ? 1000 : 0))
      handle(be, jobs, 1, &ev);
  }
  for (int waited = 0; jobs[0].nheld < 2 && waited < 100; waited++) {
    gd_backend_event ev;
    if (next_event(&ev, 100))
      handle(be, jobs, 1, &ev);
  }
  CHECK(jobs[0].nheld == 2, "the large job holds %d chunks, not both buffers", jobs[0].nheld);
  for (int i = 1; i <= NSMALL; i++) {
    tjob_init(&jobs[i], 700 + (uint64_t)i, 5 + i * 3, 17 - i, 2 * i + 1,
              i % 2 ? GP_DTYPE_F32 : GP_DTYPE_F64, i & 1, i & 2, 0.5 * i, i % 3 ? 0.0 : -1.0, 1);
    jobs[i].job.device = 0;
  }
  run_jobs(be, jobs, 1 + NSMALL, 300);
  for (int i = 0; i <= NSMALL; i++) {
    CHECK(!jobs[i].failed, "beside large: job %d failed (%d)", i, jobs[i].fail_code);
    if (!jobs[i].failed)
      tjob_verify(&jobs[i], "beside large");
    tjob_free(&jobs[i]);
  }
  CHECK(small_jobs(be) == NSMALL, "%llu small jobs", (unsigned long long)small_jobs(be));
  be->ops->destroy(be);
}

/* A sticky fault in the middle of small jobs queued on one device: the faulting job fails, the
 * others of that device are either right or failed (none hangs, none is wrong), the device
 * leaves service and the other serves on. */
static void scenario_small_fault(void) {
  gd_backend *be = make(65536, 0);
  if (!be)
    return;
  enum { N = 8 };
  tjob jobs[N];
  random_jobs(jobs, N, 30, 800);
  for (int i = 0; i < N; i++)
    jobs[i].job.device = 0;
  jobs[4].job.hdr.alpha = 666.0;
  run_jobs(be, jobs, N, 100000);
  CHECK(jobs[4].failed, "the faulting small job did not fail");
  for (int i = 0; i < N; i++) {
    if (!jobs[i].failed)
      tjob_verify(&jobs[i], "small fault");
    tjob_free(&jobs[i]);
  }
  gd_device_info info[2];
  size_t n = be->ops->devices(be, info, 2);
  CHECK(n == 2 && !info[0].in_service && info[1].in_service, "cuda:0 out, cuda:1 in service");
  random_jobs(jobs, N, 30, 900);
  run_jobs(be, jobs, N, 100000);
  for (int i = 0; i < N; i++) {
    CHECK(!jobs[i].failed, "after the fault, small job %d failed (%d)", i, jobs[i].fail_code);
    if (!jobs[i].failed)
      tjob_verify(&jobs[i], "small after fault");
    tjob_free(&jobs[i]);
  }
  be->ops->destroy(be);
}

static void scenario_memory(void) {
  /* 1 MiB pools: a 3 x 512 KiB job can never fit; 96 x 96 x 96 f64 (3 x 72 KiB) jobs wait. */
  gd_backend *be = make(8192, 1 << 20);
  if (!be)
    return;
  tjob big;
  tjob_init(&big, 100, 256, 256, 256, GP_DTYPE_F64, false, false, 1.0, 0.0, 1);
  gp_error err;
  gp_error_clear(&err);
  int rc = be->ops->prepare(be, &big.job, &err);
  CHECK(rc == GP_E_RESOURCE_EXHAUSTED, "a job over the budget: rc %d (%s)", rc, err.message);
  tjob_free(&big);
  int count = 12;
  tjob jobs[12];
  for (int i = 0; i < count; i++)
    tjob_init(&jobs[i], 200 + (uint64_t)i, 96, 96, 96, GP_DTYPE_F64, i & 1, false, 1.0,
              i % 2 ? 0.25 : 0.0, 1);
  jobs[3].vanish = true; /* one client leaves mid-payload while others wait for memory */
  run_jobs(be, jobs, count, 20000);
  for (int i = 0; i < count; i++) {
    if (i != 3) {
      CHECK(!jobs[i].failed, "memory job %d failed (%d)", i, jobs[i].fail_code);
      if (!jobs[i].failed)
        tjob_verify(&jobs[i], "memory");
    }
    tjob_free(&jobs[i]);
  }
  be->ops->destroy(be);
}

static void scenario_faults(void) {
  gd_backend *be = make(65536, 0);
  if (!be)
    return;
  tjob jobs[6];
  random_jobs(jobs, 6, 40, 300);
  jobs[1].job.hdr.alpha = 777.0; /* launch error: INTERNAL for that job only */
  jobs[2].job.deadline_us = 2;   /* long past when it starts: DEADLINE_EXCEEDED */
  run_jobs(be, jobs, 6, 5000);
  for (int i = 0; i < 6; i++) {
    if (i == 1) {
      CHECK(jobs[i].failed && jobs[i].fail_code == GP_E_INTERNAL, "launch error: %d",
            jobs[i].fail_code);
    } else if (i == 2) {
      CHECK(jobs[i].failed && jobs[i].fail_code == GP_E_DEADLINE_EXCEEDED, "deadline: %d",
            jobs[i].fail_code);
    } else {
      CHECK(!jobs[i].failed, "job %d failed (%d)", i, jobs[i].fail_code);
      tjob_verify(&jobs[i], "faults");
    }
    tjob_free(&jobs[i]);
  }
  /* A sticky fault: that device leaves service, its job fails, the other device serves on. */
  tjob bad;
  tjob_init(&bad, 400, 20, 20, 20, GP_DTYPE_F32, false, false, 666.0, 0.0, 1);
  run_jobs(be, &bad, 1, 5000);
  CHECK(bad.failed, "a faulting kernel did not fail its job");
  tjob_free(&bad);
  gd_device_info info[4];
  size_t n = be->ops->devices(be, info, 4);
  CHECK(n == 2 && (info[0].in_service != info[1].in_service), "one device out of service");
  tjob after[4];
  random_jobs(after, 4, 50, 500);
  run_jobs(be, after, 4, 3000);
  for (int i = 0; i < 4; i++) {
    CHECK(!after[i].failed, "after the fault, job %d failed (%d)", i, after[i].fail_code);
    if (!after[i].failed)
      tjob_verify(&after[i], "after fault");
    tjob_free(&after[i]);
  }
  be->ops->destroy(be);
}

static void scenario_destroy_busy(void) {
  gd_backend *be = make(4096, 0);
  if (!be)
    return;
  tjob jobs[4];
  random_jobs(jobs, 4, 60, 600);
  for (int i = 0; i < 4; i++) {
    gp_error err;
    CHECK(be->ops->prepare(be, &jobs[i].job, &err) == 0, "prepare");
  }
  for (int r = 0; r < 20; r++)
    for (int i = 0; i < 4; i++)
      if (jobs[i].phase == T_FEED)
        feed_piece(be, &jobs[i], 3000);
  be->ops->destroy(be); /* shutdown with jobs in every state: no leak, no hang */
  gd_backend_event ev;
  while (next_event(&ev, 0)) {
  }
  for (int i = 0; i < 4; i++)
    tjob_free(&jobs[i]);
}

/* ---- device memory on demand (gd_gpu_mem.c) ---- */

/* fake_cuda.c's hooks: memory another process holds; what a device's pools reserve. */
void fake_cuda_hold(int device, size_t bytes);
size_t fake_cuda_reserved(int device);
void fake_cuda_revive(void);
void fake_cuda_stall(int device, bool on);
int fake_cuda_stalled(int device);

#define MIB (1ull << 20)

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Polls devices() until every device's reserved and in-use bytes are at most the given ones;
 * false after ms. */
static bool wait_memory(gd_backend *be, uint64_t reserved, uint64_t in_use, int ms) {
  for (int waited = 0;; waited += 20) {
    gd_device_info info[2];
    size_t n = be->ops->devices(be, info, 2);
    bool ok = n == 2;
    for (size_t i = 0; i < n; i++)
      ok = ok && info[i].memory_reserved <= reserved && info[i].memory_in_use <= in_use;
    if (ok)
      return true;
    if (waited >= ms)
      return false;
    sleep_ms(20);
  }
}

static gd_backend *make_pool(uint64_t cap, uint64_t idle_ms, uint64_t keep) {
  gd_gpu_config cfg;
  gd_gpu_config_default(&cfg);
  cfg.staging_bytes = 65536;
  cfg.memory_bytes = cap;
  cfg.memory_idle_ms = idle_ms;
  cfg.memory_keep_bytes = keep;
  gd_backend *be = NULL;
  gp_error err;
  gp_error_clear(&err);
  CHECK(gd_backend_gpu_create(&cfg, &be, &err) == 0 && be, "create: %s", err.message);
  return be;
}

/* 256 x 256 x 256 f64 jobs hold 1.5 MiB of device memory each. info (may be NULL) gets the
 * devices as the last job finished, before the (slow) check of the results. */
static void run_f64_jobs(gd_backend *be, int count, uint64_t first_id, const char *what,
                         gd_device_info *info) {
  tjob *jobs = calloc((size_t)count, sizeof(tjob));
  for (int i = 0; i < count; i++)
    tjob_init(&jobs[i], first_id + (uint64_t)i, 256, 256, 256, GP_DTYPE_F64, i & 1, false, 1.0,
              i % 3 ? 0.0 : -0.5, 1);
  run_jobs(be, jobs, count, 50000);
  if (info)
    CHECK(be->ops->devices(be, info, 2) == 2, "two devices");
  for (int i = 0; i < count; i++) {
    CHECK(!jobs[i].failed, "%s: job %d failed (%d): it should have waited for memory", what, i,
          jobs[i].fail_code);
    if (!jobs[i].failed)
      tjob_verify(&jobs[i], what);
    tjob_free(&jobs[i]);
  }
  free(jobs);
}

static void scenario_memory_on_demand(void) {
  /* Cap 4 MiB per device: two 1.5 MiB jobs at once, the others wait (not fail). */
  const uint64_t cap = 4 * MIB;
  gd_backend *be = make_pool(cap, 1000, 0);
  if (!be)
    return;
  gd_device_info info[2];
  CHECK(be->ops->devices(be, info, 2) == 2, "two devices");
  for (int d = 0; d < 2; d++) {
    CHECK(info[d].memory_reserved == 0 && fake_cuda_reserved(d) == 0,
          "cuda:%d holds %llu bytes before any job: nothing is taken at start", d,
          (unsigned long long)info[d].memory_reserved);
    CHECK(info[d].memory_limit == cap, "cuda:%d cap %llu", d,
          (unsigned long long)info[d].memory_limit);
  }
  run_f64_jobs(be, 12, 700, "grow", info);
  /* grown, within the cap (the driver reserves in 2 MiB steps) */
  uint64_t grown = 0;
  for (int d = 0; d < 2; d++) {
    CHECK(info[d].memory_reserved <= cap && info[d].memory_in_use <= info[d].memory_reserved,
          "cuda:%d reserved %llu, in use %llu, cap %llu", d,
          (unsigned long long)info[d].memory_reserved, (unsigned long long)info[d].memory_in_use,
          (unsigned long long)cap);
    grown += info[d].memory_reserved;
  }
  CHECK(grown >= 2 * MIB, "the pools did not grow: %llu bytes", (unsigned long long)grown);
  /* idle for memory_idle_ms: every byte goes back to the driver */
  CHECK(wait_memory(be, 0, 0, 5000), "the pools were not trimmed after 1 s idle");
  for (int d = 0; d < 2; d++)
    CHECK(fake_cuda_reserved(d) == 0, "cuda:%d still holds %zu bytes at the driver", d,
          fake_cuda_reserved(d));
  /* and grow again */
  run_f64_jobs(be, 4, 720, "grow after trim", NULL);
  /* another process took the memory: the job fails with RESOURCE_EXHAUSTED, no hang */
  CHECK(wait_memory(be, 0, 0, 5000), "not trimmed before the hold");
  fake_cuda_hold(0, (256 * MIB) - MIB);
  fake_cuda_hold(1, (256 * MIB) - MIB);
  tjob starved;
  tjob_init(&starved, 730, 256, 256, 256, GP_DTYPE_F64, false, false, 1.0, 0.0, 1);
  run_jobs(be, &starved, 1, 50000);
  CHECK(starved.failed && starved.fail_code == GP_E_RESOURCE_EXHAUSTED,
        "no memory at the driver: failed %d code %d", starved.failed, starved.fail_code);
  tjob_free(&starved);
  fake_cuda_hold(0, 0);
  fake_cuda_hold(1, 0);
  run_f64_jobs(be, 2, 740, "after the hold", NULL);
  be->ops->destroy(be);
  for (int d = 0; d < 2; d++)
    CHECK(fake_cuda_reserved(d) == 0, "cuda:%d: %zu bytes left after destroy", d,
          fake_cuda_reserved(d));

  /* memory_keep_bytes stays reserved through a trim; memory_idle_ms 0 never trims */
  be = make_pool(8 * MIB, 300, 3 * MIB);
  if (be) {
    run_f64_jobs(be, 8, 800, "keep", NULL);
    CHECK(wait_memory(be, 3 * MIB, 0, 5000), "not trimmed down to memory_keep_bytes");
    be->ops->devices(be, info, 2);
    CHECK(info[0].memory_reserved + info[1].memory_reserved >= 3 * MIB,
          "trimmed below memory_keep_bytes: %llu + %llu",
          (unsigned long long)info[0].memory_reserved, (unsigned long long)info[1].memory_reserved);
    be->ops->destroy(be);
  }
  be = make_pool(8 * MIB, 0, 0);
  if (be) {
    run_f64_jobs(be, 4, 900, "no trim", NULL);
    sleep_ms(400);
    be->ops->devices(be, info, 2);
    CHECK(info[0].memory_reserved + info[1].memory_reserved > 0,
          "memory_idle_ms 0 gave the memory back");
    be->ops->destroy(be);
  }
}

/* The pool's sub-allocator alone: random sizes in and out, no two live pieces overlap, every
 * piece aligned, and everything coalesces back into one free extent. */
static void scenario_pool(void) {
  enum { LIVE = 64 };
  gd__gpu_pool pool;
  CHECK(gd__gpu_pool_init(&pool, (64u << 20) + 100, NULL) == 0, "pool init");
  CHECK(pool.size == 64u << 20, "size rounded down to the alignment");
  CHECK(!gd__gpu_pool_fits_ever(&pool, (64u << 20) + 1), "over the pool never fits");
  uint64_t off[LIVE], len[LIVE];
  bool live[LIVE] = {false};
  for (int round = 0; round < 20000; round++) {
    int i = rand() % LIVE;
    if (live[i]) {
      gd__gpu_pool_free(&pool, off[i], len[i]);
      live[i] = false;
      continue;
    }
    len[i] = 1 + (uint64_t)rand() % (3u << 20);
    if (!gd__gpu_pool_alloc(&pool, len[i], &off[i]))
      continue;
    live[i] = true;
    CHECK(off[i] % GD_GPU_POOL_ALIGN == 0 && off[i] + len[i] <= pool.size, "piece in bounds");
    for (int j = 0; j < LIVE; j++)
      if (j != i && live[j])
        CHECK(off[i] + len[i] <= off[j] || off[j] + len[j] <= off[i], "pieces %d and %d overlap",
              i, j);
  }
  for (int i = 0; i < LIVE; i++)
    if (live[i])
      gd__gpu_pool_free(&pool, off[i], len[i]);
  CHECK(pool.in_use == 0 && pool.live == 0 && pool.nfree == 1 && pool.free_ext[0].len == pool.size,
        "all freed: %llu in use, %zu extents", (unsigned long long)pool.in_use, pool.nfree);
  uint64_t whole;
  CHECK(gd__gpu_pool_alloc(&pool, pool.size, &whole) && whole == 0, "the whole pool again");
  gd__gpu_pool_fini(&pool);
}

/* The sysfs CPU lists the worker binds to (gd_gpu_numa.c). */
static void scenario_cpulist(void) {
  cpu_set_t set;
  CHECK(gd__gpu_cpulist_parse("0-3,8,10-11\n", &set) && CPU_COUNT(&set) == 7 &&
            CPU_ISSET(0, &set) && CPU_ISSET(3, &set) && !CPU_ISSET(4, &set) &&
            CPU_ISSET(8, &set) && !CPU_ISSET(9, &set) && CPU_ISSET(11, &set),
        "ranges and singles");
  CHECK(gd__gpu_cpulist_parse("5", &set) && CPU_COUNT(&set) == 1 && CPU_ISSET(5, &set),
        "one CPU, no newline");
  const char *bad[] = {"", "\n", "3-1", "1,", ",1", "1-", "a", "1 2", "0-99999999", "1\n2"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECK(!gd__gpu_cpulist_parse(bad[i], &set), "malformed list %zu refused", i);
}

/* A split job's rows by device speed (gd_gpu_split.c): in proportion, at multiples of 128 rows
 * when every part has 256, every part at least one row, the cuts rising to m. */
static void scenario_split_plan(void) {
  uint64_t cut[9];
  const double two_one_one[] = {2, 1, 1}, even[] = {1, 1, 1, 1}, slow_last[] = {1, 1, 1, 0};
  gd__gpu_split_plan(6144, two_one_one, 3, cut);
  CHECK(cut[0] == 0 && cut[1] == 3072 && cut[2] == 4608 && cut[3] == 6144,
        "2:1:1 of 6144: %llu %llu", (unsigned long long)cut[1], (unsigned long long)cut[2]);
  gd__gpu_split_plan(1000, even, 4, cut); /* 250 a part: no alignment */
  CHECK(cut[1] == 250 && cut[2] == 500 && cut[3] == 750 && cut[4] == 1000, "even 1000: %llu",
        (unsigned long long)cut[1]);
  gd__gpu_split_plan(4099, even, 4, cut); /* 1024 a part: cut at 128s, the rest last */
  for (int i = 1; i < 4; i++)
    CHECK(cut[i] % 128 == 0 && cut[i] > cut[i - 1], "4099: cut %d at %llu", i,
          (unsigned long long)cut[i]);
  CHECK(cut[4] == 4099 && cut[4] - cut[3] >= 1000, "4099: last part %llu",
        (unsigned long long)(cut[4] - cut[3]));
  gd__gpu_split_plan(5, even, 4, cut); /* fewer rows than would round: a row each at least */
  for (int i = 1; i <= 4; i++)
    CHECK(cut[i] > cut[i - 1], "5 rows: part %d empty", i);
  gd__gpu_split_plan(3000, slow_last, 4, cut); /* a speed of 0 counts as 1 */
  CHECK(cut[4] - cut[3] > 0 && cut[4] == 3000, "speed 0");
}

/* A backend as make(staging, 0) with `slots` small-job slots. */
static gd_backend *make_with_slots(uint64_t staging, uint32_t slots) {
  uint32_t saved = g_small_slots;
  g_small_slots = slots;
  gd_backend *be = make(staging, 0);
  g_small_slots = saved;
  return be;
}

/* Prepares every job on device 0. */
static void prepare_on_first(gd_backend *be, tjob *jobs, int count) {
  for (int i = 0; i < count; i++) {
    gp_error err;
    gp_error_clear(&err);
    jobs[i].job.device = 0;
    CHECK(be->ops->prepare(be, &jobs[i].job, &err) == 0, "prepare %d: %s", i, err.message);
    jobs[i].prepared = true;
  }
}

/* The small jobs of one shape waiting on a device run as one batched launch; batches split by
 * shape; a job whose deadline passed leaves its batch alone; adjacent slots copy as one. The
 * worker is held in its first job's pass (a stalled fake device) while the others queue. */
static void scenario_small_batches(void) {
  gd_backend *be = make_with_slots(65536, 32);
  if (!be)
    return;
  enum { N = 18 };
  tjob jobs[N];
  tjob_init(&jobs[0], 1000, 7, 5, 3, GP_DTYPE_F32, false, false, 1.0, 0.0, 1);
  for (int i = 1; i < 14; i++) { /* three shapes, interleaved: they must split */
    int sh = i % 3;
    tjob_init(&jobs[i], 1000 + (uint64_t)i, 9 + sh * 4, 13 - sh, 6 + sh, sh == 2 ? GP_DTYPE_F64
              : GP_DTYPE_F32, sh == 1, sh == 2, 0.5 + sh, sh == 1 ? 0.5 : 0.0,
              sh == 0 ? 1 + (i / 3) % 2 : 1); /* X: batch 1 and 2 mixed */
  }
  jobs[13].job.deadline_us = 2; /* an X job past its deadline: it alone fails */
  for (int i = 14; i < N; i++)   /* in a row: adjacent slots */
    tjob_init(&jobs[i], 1000 + (uint64_t)i, 11, 3, 17, GP_DTYPE_F64, true, true, -2.0, -1.0, 1);
  prepare_on_first(be, jobs, N);
  fake_cuda_stall(0, true);
  while (jobs[0].phase == T_FEED)
    feed_piece(be, &jobs[0], 1 << 20);
  for (int waited = 0; fake_cuda_stalled(0) == 0 && waited < 5000; waited++)
    sleep_ms(1);
  CHECK(fake_cuda_stalled(0) == 1, "the worker is not held in the first pass");
  for (int i = 1; i < N; i++)
    while (jobs[i].phase == T_FEED)
      feed_piece(be, &jobs[i], 1 << 20);
  fake_cuda_stall(0, false);
  run_jobs(be, jobs, N, 1 << 20);
  for (int i = 0; i < N; i++) {
    if (i == 13) {
      CHECK(jobs[i].failed && jobs[i].fail_code == GP_E_DEADLINE_EXCEEDED, "deadline in a "
            "batch: %d", jobs[i].fail_code);
    } else {
      CHECK(!jobs[i].failed, "batched job %d failed (%d)", i, jobs[i].fail_code);
      if (!jobs[i].failed)
        tjob_verify(&jobs[i], "batches");
    }
    tjob_free(&jobs[i]);
  }
  gd__gpu_dev *dev = &((gd__gpu_backend *)be)->devs[0];
  pthread_mutex_lock(&dev->mu);
  uint64_t one = dev->small_batches[0], four = dev->small_batches[2], jobs_n = dev->small_jobs;
  uint64_t all = 0;
  for (int b = 0; b < GD__GPU_BATCH_BUCKETS; b++)
    all += dev->small_batches[b];
  pthread_mutex_unlock(&dev->mu);
  CHECK(jobs_n == N, "%llu small jobs", (unsigned long long)jobs_n);
  CHECK(one == 1 && four == 4 && all == 5, "batches: %llu of 1, %llu of 4-7, %llu in all "
        "(want 1, 4 and 5: one per shape)", (unsigned long long)one, (unsigned long long)four,
        (unsigned long long)all);
  be->ops->destroy(be);
}

/* The output cast through every path: f32 / f64 jobs returning f16 / bf16, small ones batched in
 * the small lane (two shapes, one with beta), large ones through staging in many chunks. */
static void scenario_cast(void) {
  gd_backend *be = make_with_slots(4096, 32);
  if (!be)
    return;
  enum { N = 10 };
  tjob jobs[N];
  for (int i = 0; i < N; i++) {
    bool large = i >= 8, f64 = i % 2 == 1;
    tjob_init(&jobs[i], 3000 + (uint64_t)i, large ? 70 : 9, large ? 90 : 7, large ? 33 : 5,
              f64 ? GP_DTYPE_F64 : GP_DTYPE_F32, i == 9, i % 4 == 1, -0.5, i % 3 ? 0.0 : 0.75,
              1 + i % 2);
    tjob_cast(&jobs[i], i % 4 < 2 ? GP_DTYPE_BF16 : GP_DTYPE_F16);
  }
  prepare_on_first(be, jobs, N);
  run_jobs(be, jobs, N, 3000);
  for (int i = 0; i < N; i++) {
    CHECK(!jobs[i].failed, "cast job %d failed (%d)", i, jobs[i].fail_code);
    if (!jobs[i].failed)
      tjob_verify(&jobs[i], "cast");
    tjob_free(&jobs[i]);
  }
  be->ops->destroy(be);
}

/* gpu.max_queue_delay_us (2 s): a batch not full waits for more of its shape and leaves when due;
 * a job of another shape sends a waiting batch on its way and waits in its place. */
static void scenario_small_delay(void) {
  g_queue_delay_us = 2000000;
  gd_backend *be = make(65536, 0);
  g_queue_delay_us = 0;
  if (!be)
    return;
  enum { N = 6 };
  tjob jobs[N];
  for (int i = 0; i < N; i++) {
    tjob_init(&jobs[i], 1100 + (uint64_t)i, i < 3 ? 10 : 9 + i, 9, 8, GP_DTYPE_F32, false, true,
              1.0, 0.0, 1);
    jobs[i].job.device = 0;
  }
  run_jobs(be, jobs, 3, 1 << 20); /* three of one shape: one batch, sent when due */
  run_jobs(be, jobs + 3, 1, 1 << 20); /* alone: a batch of one, when due */
  run_jobs(be, jobs + 4, 2, 1 << 20); /* two shapes: the second sends the first on its way */
  for (int i = 0; i < N; i++) {
    CHECK(!jobs[i].failed, "delayed job %d failed (%d)", i, jobs[i].fail_code);
    if (!jobs[i].failed)
      tjob_verify(&jobs[i], "delay");
    tjob_free(&jobs[i]);
  }
  gd__gpu_dev *dev = &((gd__gpu_backend *)be)->devs[0];
  pthread_mutex_lock(&dev->mu);
  uint64_t one = dev->small_batches[0], two_three = dev->small_batches[1];
  pthread_mutex_unlock(&dev->mu);
  CHECK(one == 3 && two_three == 1, "delay: %llu batches of 1, %llu of 2-3 (want 3 and 1)",
        (unsigned long long)one, (unsigned long long)two_three);
  be->ops->destroy(be);
}

int main(void) {
  gd_log_init(GD_LOG_WARN);
  srand(12345);
  scenario_pool();
  scenario_cpulist();
  scenario_split_plan();
  scenario_many(4096, 16, 70, 5000);     /* tiny staging: pauses, spills, many chunks */
  scenario_many(1 << 20, 24, 120, 70000); /* roomy staging, more jobs than buffers */
  scenario_memory();
  scenario_memory_on_demand();
  scenario_faults();
  scenario_destroy_busy();
  /* The small-job lane: 64 KiB slots, 8 a device (fewer than the jobs: some take staging). */
  g_small_bytes = 64 * 1024;
  fake_cuda_revive(); /* scenario_faults left a device dead */
  scenario_many(4096, 24, 70, 5000);
  scenario_many(1 << 20, 24, 120, 70000);
  scenario_destroy_busy();
  scenario_small_beside_large();
  scenario_small_batches();
  scenario_cast();
  scenario_small_delay();
  scenario_faults();
  fake_cuda_revive();
  scenario_small_fault();
  gd_backend *none = NULL;
  gd_gpu_config cfg;
  gd_gpu_config_default(&cfg);
  gp_error err;
  setenv("FAKE_CUDA_DEVICES", "0", 1);
  CHECK(gd_gpu_count() == 0, "no device");
  int rc = gd_backend_gpu_create(&cfg, &none, &err);
  CHECK(rc != 0 && none == NULL && strstr(err.message, "no CUDA device found"), "%s",
        err.message);
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("test_gpu_backend_fake: all passed\n");
  return 0;
}
