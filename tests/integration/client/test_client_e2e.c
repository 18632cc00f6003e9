/*
 * test_client_e2e.c - libgemmclient against a real gemmd (GEMMD_ADDRESS; run
 * by test_client_e2e.py, which starts the daemon). Every result is checked
 * against a float64 reference on fresh random inputs (an i8 gemm's: exact,
 * bit for bit; an fp8 gemm's: within the bound of fp8 accumulation), with the
 * output poisoned so that an unwritten element fails.
 *
 *   test_client_e2e main     the daemon with default limits
 *   test_client_e2e limits   a daemon with limits.max_dim = 100
 *   test_client_e2e scaleout GEMMD_ADDRESS a list: a dead address, then a daemon that closes
 *                            idle connections quickly (GEMMD_TEST_IDLE_SLEEP_MS outlasts it)
 *   test_client_e2e token    GEMMD_ADDRESS a TCP address of a daemon wanting GEMMD_TOKEN
 *   test_client_e2e drain    GEMMD_ADDRESS "A,B": A (pid GEMMD_TEST_DRAIN_PID) is sent SIGTERM
 *                            with work queued; what it does not finish goes to B
 */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gctl_ref.h"
#include "gemmclient.h"

static uint64_t seed;

static uint64_t pick(const uint64_t *choices, size_t n) {
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return choices[(seed >> 33) % n];
}

/* One gemm with its buffers and reference. */
typedef struct {
  gc_gemm_opts o;
  void *a, *b, *c, *out;
  gc_req req;
} job;

/* c (random, when beta != 0) and out (poisoned) for j->o as it is now: in its out dtype. */
static void job_make_c_out(job *j) {
  gc_dtype out = gctl_out_dtype(&j->o);
  uint64_t cb = gc_gemm_operand_bytes(&j->o, 'c'), ob = gc_gemm_operand_bytes(&j->o, 'o');
  ck_assert(cb && ob);
  free(j->c);
  free(j->out);
  j->c = NULL;
  j->out = malloc(ob);
  if (j->o.beta != 0.0) {
    j->c = malloc(cb);
    gctl_fill_random(out, j->c, cb / gctl_dtype_size(out), &seed);
  }
  gctl_poison(out, j->out, ob / gctl_dtype_size(out));
}

static void job_make(job *j, uint64_t m, uint64_t n, uint64_t k, gc_dtype dtype, bool ta, bool tb,
                     double alpha, double beta, uint64_t batch) {
  memset(j, 0, sizeof *j);
  gc_gemm_opts_init(&j->o);
  j->o.m = m, j->o.n = n, j->o.k = k, j->o.dtype = dtype;
  j->o.trans_a = ta, j->o.trans_b = tb, j->o.alpha = alpha, j->o.beta = beta, j->o.batch = batch;
  size_t es = gctl_dtype_size(dtype);
  uint64_t ab = gc_gemm_operand_bytes(&j->o, 'a'), bb = gc_gemm_operand_bytes(&j->o, 'b');
  ck_assert(ab && bb);
  j->a = malloc(ab), j->b = malloc(bb);
  gctl_fill_random(dtype, j->a, ab / es, &seed);
  gctl_fill_random(dtype, j->b, bb / es, &seed);
  job_make_c_out(j);
}

static void job_check(const job *j, const char *what) {
  size_t cn = (size_t)(j->o.m * j->o.n * j->o.batch);
  double *ref = malloc(cn * sizeof *ref), *bound = malloc(cn * sizeof *bound);
  gctl_ref_gemm(&j->o, j->a, j->b, j->c, ref, bound);
  double err = gctl_ref_error(&j->o, j->out, ref, bound), tol = gctl_ref_tolerance(&j->o);
  ck_assert_msg(err <= tol,
                "%s: %llux%llux%llu dtype %d -> %d trans %d%d alpha %g beta %g batch %llu: error "
                "%g > %g", what, (unsigned long long)j->o.m, (unsigned long long)j->o.n,
                (unsigned long long)j->o.k, (int)j->o.dtype, (int)gctl_out_dtype(&j->o),
                j->o.trans_a, j->o.trans_b,
                j->o.alpha, j->o.beta, (unsigned long long)j->o.batch, err, tol);
  free(ref);
  free(bound);
}

static void job_free(job *j) {
  free(j->a);
  free(j->b);
  free(j->c);
  free(j->out);
}

static gc_conn *connect_env(void) {
  gc_conn *conn;
  int rc = gc_connect(NULL, &conn);
  ck_assert_msg(rc == 0, "connect: %s", gc_last_error(NULL)->message);
  return conn;
}

static const uint64_t dims[] = {1, 7, 16, 33, 65};

START_TEST(many_in_flight) {
  enum { N = 300 };
  gc_conn *conn = connect_env();
  static job jobs[N];
  static const uint64_t dtypes[] = {GC_DTYPE_F32, GC_DTYPE_F64, GC_DTYPE_F16, GC_DTYPE_BF16};
  static const uint64_t flags[] = {0, 1}, batches[] = {1, 1, 2, 3};
  for (int i = 0; i < N; i++) {
    double alpha = pick(flags, 2) ? -0.5 : 1.0, beta = pick(flags, 2) ? 0.75 : 0.0;
    job_make(&jobs[i], pick(dims, 5), pick(dims, 5), pick(dims, 5), (gc_dtype)pick(dtypes, 4),
             pick(flags, 2), pick(flags, 2), alpha, beta, pick(batches, 4));
    jobs[i].o.user = &jobs[i]; /* handed back in gc_completion.user */
    int rc = gc_submit(conn, &jobs[i].o, jobs[i].a, jobs[i].b, jobs[i].c, jobs[i].out,
                       &jobs[i].req);
    ck_assert_msg(rc == 0, "submit %d: %s", i, gc_last_error(conn)->message);
  }
  ck_assert_uint_eq(gc_in_flight(conn), N);
  /* half collected by gc_poll in completion order, the rest by gc_wait, last first */
  int collected = 0;
  gc_completion done[16];
  while (collected < N / 2) {
    int n = gc_poll(conn, 30000, done, 16);
    ck_assert_msg(n > 0, "poll: %d %s", n, gc_last_error(conn)->message);
    for (int i = 0; i < n; i++) {
      ck_assert_msg(done[i].error.code == 0, "request %u: %s", done[i].req, done[i].error.message);
      for (int j = 0; j < N; j++) {
        if (jobs[j].req != done[i].req) continue;
        ck_assert_ptr_eq(done[i].user, &jobs[j]);
        job_check(&jobs[j], "polled");
        jobs[j].req = 0;
      }
    }
    collected += n;
  }
  for (int i = N - 1; i >= 0; i--) {
    if (jobs[i].req == 0) continue;
    int rc = gc_wait(conn, jobs[i].req, 30000, NULL);
    ck_assert_msg(rc == 0, "wait %d: %s", i, gc_last_error(conn)->message);
    job_check(&jobs[i], "waited");
  }
  ck_assert_uint_eq(gc_in_flight(conn), 0);
  for (int i = 0; i < N; i++) job_free(&jobs[i]);
  gc_close(conn);
}
END_TEST

START_TEST(blocking_forms) {
  gc_conn *conn = connect_env();
  static const uint64_t sizes[][3] = {{1, 1, 1}, {7, 1, 13}, {130, 67, 129}, {1, 200, 3}};
  for (int dtype = 0; dtype < 4; dtype++) {
    for (int s = 0; s < 4; s++) {
      for (int t = 0; t < 4; t++) {
        job j;
        job_make(&j, sizes[s][0], sizes[s][1], sizes[s][2], (gc_dtype)dtype, t & 1, t >> 1,
                 t == 3 ? 1.5 : 1.0, t == 2 ? -2.0 : 0.0, 1);
        gc_gemm_result res;
        int rc = gc_gemm(conn, &j.o, j.a, j.b, j.c, j.out, &res);
        ck_assert_msg(rc == 0, "gemm: %s", gc_last_error(conn)->message);
        ck_assert_uint_eq(res.m, j.o.m);
        ck_assert_uint_eq(res.n, j.o.n);
        ck_assert_int_eq(res.dtype, dtype);
        ck_assert(res.device[0] != '\0' && res.kernel[0] != '\0');
        job_check(&j, "blocking");
        job_free(&j);
      }
    }
  }
  gc_close(conn);
}
END_TEST

START_TEST(in_place_and_batched) {
  gc_conn *conn = connect_env();
  job j;
  job_make(&j, 17, 9, 31, GC_DTYPE_F32, 1, 0, 0.5, 3.0, 4);
  /* out == c: C is all sent before the reply's C can arrive */
  void *c_copy = malloc(gc_gemm_operand_bytes(&j.o, 'c'));
  memcpy(c_copy, j.c, gc_gemm_operand_bytes(&j.o, 'c'));
  ck_assert_int_eq(gc_gemm(conn, &j.o, j.a, j.b, j.c, j.c, NULL), 0);
  void *result = j.c;
  j.c = c_copy;
  free(j.out);
  j.out = result;
  job_check(&j, "in place");
  job_free(&j);
  gc_close(conn);
}
END_TEST

START_TEST(ping_and_info) {
  gc_conn *conn = connect_env();
  ck_assert_int_eq(gc_ping(conn, 10000), 0);
  void *buf;
  size_t len;
  ck_assert_int_eq(gc_info(conn, 10000, &buf, &len), 0);
  /* read with gc_map_*: no msgpack library in the caller */
  char text[64], tiny[3];
  ck_assert_int_eq(gc_map_string(buf, len, "version", text, sizeof text), 0);
  ck_assert_uint_gt(strlen(text), 0);
  ck_assert_int_eq(gc_map_string(buf, len, "backend", text, sizeof text), 0);
  ck_assert_msg(strcmp(text, "cpu") == 0 || strcmp(text, "gpu") == 0, "backend %s", text);
  ck_assert_int_eq(gc_map_string(buf, len, "backend", tiny, sizeof tiny),
                   GC_E_RESOURCE_EXHAUSTED);
  ck_assert_uint_eq(strlen(tiny), 2);
  int64_t max_dim = 0;
  ck_assert_int_eq(gc_map_int(buf, len, "limits.max_dim", &max_dim), 0);
  ck_assert_int_ge(max_dim, 1);
  double as_double = 0;
  ck_assert_int_eq(gc_map_double(buf, len, "limits.max_dim", &as_double), 0);
  ck_assert(as_double == (double)max_dim);
  size_t count = 0, devices = 0;
  ck_assert_int_eq(gc_map_count(buf, len, "", &count), 0);
  ck_assert_uint_ge(count, 2);
  ck_assert_int_eq(gc_map_count(buf, len, "devices", &devices), 0);
  if (devices > 0) ck_assert_int_eq(gc_map_string(buf, len, "devices.0.name", text, sizeof text), 0);
  bool have_limits = false;
  for (size_t i = 0; i < count; i++) {
    ck_assert_int_eq(gc_map_key(buf, len, "", i, text, sizeof text), 0);
    have_limits = have_limits || strcmp(text, "limits") == 0;
  }
  ck_assert(have_limits);
  ck_assert_int_eq(gc_map_key(buf, len, "", count, text, sizeof text), GC_E_NOT_FOUND);
  ck_assert_int_eq(gc_map_int(buf, len, "no_such_key", &max_dim), GC_E_NOT_FOUND);
  ck_assert_int_eq(gc_map_int(buf, len, "limits.max_dim.x", &max_dim), GC_E_NOT_FOUND);
  ck_assert_int_eq(gc_map_int(buf, len, "devices.99999", &max_dim), GC_E_NOT_FOUND);
  ck_assert_int_eq(gc_map_int(buf, len, "backend", &max_dim), GC_E_INVALID_ARGUMENT);
  ck_assert_int_eq(gc_map_int(buf, len - 1, "backend", &max_dim), GC_E_INVALID_ARGUMENT);
  gc_free(buf);
  ck_assert_int_eq(gc_stats(conn, 10000, &buf, &len), 0);
  ck_assert_int_eq(gc_map_count(buf, len, "", &count), 0);
  ck_assert_uint_ge(count, 1);
  gc_free(buf);
  gc_close(conn);
}
END_TEST

static int64_t stat_int(gc_conn *conn, const char *path) {
  void *buf;
  size_t len;
  int64_t v = -1;
  ck_assert_int_eq(gc_stats(conn, 10000, &buf, &len), 0);
  ck_assert_int_eq(gc_map_int(buf, len, path, &v), 0);
  gc_free(buf);
  return v;
}

/* A gemm with a, b, c (when which says so) and out placed in shm, checked; the caller's copies
 * in j stay as the reference. */
static void shm_gemm(gc_conn *conn, uint8_t *shm, job *j, const char *which) {
  size_t sizes[4] = {gc_gemm_operand_bytes(&j->o, 'a'), gc_gemm_operand_bytes(&j->o, 'b'),
                     gc_gemm_operand_bytes(&j->o, 'c'), gc_gemm_operand_bytes(&j->o, 'o')};
  void *src[4] = {j->a, j->b, j->c, j->out}, *arg[4];
  size_t at = 0;
  for (int i = 0; i < 4; i++) {
    arg[i] = src[i];
    if (src[i] != NULL && strchr(which, "abco"[i]) != NULL) {
      memcpy(shm + at, src[i], sizes[i]);
      arg[i] = shm + at;
      at += (sizes[i] + 63) / 64 * 64;
    }
  }
  ck_assert_int_eq(gc_gemm(conn, &j->o, arg[0], arg[1], arg[2], arg[3], NULL), 0);
  if (arg[3] != j->out) memcpy(j->out, arg[3], sizes[3]);
  job_check(j, which);
}

START_TEST(shared_memory) {
  gc_conn *conn = connect_env();
  uint8_t *shm = NULL;
  ck_assert_int_eq(gc_shm_alloc(conn, 1u << 20, 10000, (void **)&shm), 0);
  ck_assert_ptr_nonnull(shm);
  ck_assert_int_eq(stat_int(conn, "shm_regions"), 1);
  static const gc_dtype dtypes[] = {GC_DTYPE_F32, GC_DTYPE_F64, GC_DTYPE_F16, GC_DTYPE_BF16};
  static const char *const forms[] = {"abco", "abo", "ab", "o", "bc", "ao"};
  for (size_t d = 0; d < 4; d++) {
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
      job j;
      job_make(&j, 37, 29, 41, dtypes[d], f % 2, f % 3 == 0, 0.75, f % 2 ? 0.0 : -1.5,
               1 + f % 2);
      shm_gemm(conn, shm, &j, forms[f]);
      job_free(&j);
    }
  }
  /* nothing but framing crossed the socket for a gemm entirely in shared memory */
  job j;
  job_make(&j, 128, 128, 128, GC_DTYPE_F64, 0, 0, 1.0, 0.5, 1);
  int64_t before = stat_int(conn, "bytes_in");
  shm_gemm(conn, shm, &j, "abco");
  ck_assert_int_lt(stat_int(conn, "bytes_in") - before, 1024);
  /* an output overlapping an input: the daemon's INVALID_ARGUMENT */
  j.o.beta = 0.0;
  ck_assert_int_eq(gc_gemm(conn, &j.o, shm, shm + 8, NULL, shm, NULL), GC_E_INVALID_ARGUMENT);
  ck_assert_msg(strstr(gc_last_error(conn)->message, "overlap") != NULL, "%s",
                gc_last_error(conn)->message);
  job_free(&j);
  ck_assert_int_eq(gc_shm_free(conn, shm + 1, 10000), GC_E_INVALID_ARGUMENT);
  ck_assert_int_eq(gc_shm_free(conn, shm, 10000), 0);
  ck_assert_int_eq(stat_int(conn, "shm_regions"), 0);
  /* a buffer still registered when the connection closes goes with it */
  ck_assert_int_eq(gc_shm_alloc(conn, 4096, 10000, (void **)&shm), 0);
  gc_close(conn);
  conn = connect_env();
  for (int i = 0; i < 1000 && stat_int(conn, "shm_regions") != 0; i++)
    nanosleep(&(struct timespec){0, 10000000}, NULL);
  ck_assert_int_eq(stat_int(conn, "shm_regions"), 0);
  gc_close(conn);
}
END_TEST

/* Resident operands: each of a, b, c put once and named by handle (every dtype, transposes,
 * alpha/beta, a batch by one shared b), then freed; the daemon's counts back to zero. */
START_TEST(resident_operands) {
  gc_conn *conn = connect_env();
  static const gc_dtype dtypes[] = {GC_DTYPE_F32, GC_DTYPE_F64, GC_DTYPE_F16, GC_DTYPE_BF16};
  for (size_t d = 0; d < 4; d++) {
    for (int form = 0; form < 4; form++) { /* which: a, b, c, all */
      bool broadcast = form == 1;
      job j;
      job_make(&j, 23, 17, 31, dtypes[d], form % 2, form == 2, 1.25, form >= 2 ? -0.5 : 0.0,
               broadcast ? 3 : 1 + form % 2);
      if (broadcast) { /* one b (k x n) for every batch entry: the first of job_make's */
        j.o.broadcast_b = 1;
        ck_assert_uint_eq(gc_gemm_operand_bytes(&j.o, 'b'), 31u * 17u * (d == 1 ? 8 : d ? 2 : 4));
      }
      void *ops[3] = {j.a, j.b, j.c};
      uint64_t *handles[3] = {&j.o.a_handle, &j.o.b_handle, &j.o.c_handle};
      for (int op = 0; op < 3; op++) {
        if ((form != 3 && op != form) || ops[op] == NULL) continue;
        gc_gemm_opts shape = j.o; /* the stored rows x cols of that operand */
        uint64_t rows = op == 0 ? (j.o.trans_a ? j.o.k : j.o.m)
                        : op == 1 ? (j.o.trans_b ? j.o.n : j.o.k) : j.o.m;
        uint64_t cols = gc_gemm_operand_bytes(&shape, "abc"[op]) /
                        (op == 1 && broadcast ? 1 : j.o.batch) /
                        (dtypes[d] == GC_DTYPE_F64 ? 8 : dtypes[d] == GC_DTYPE_F32 ? 4 : 2) / rows;
        ck_assert_int_eq(gc_put(conn, dtypes[d], op == 1 && broadcast ? 1 : j.o.batch, rows,
                                cols, ops[op], 10000, handles[op]), 0);
        ck_assert_uint_ne(*handles[op], 0);
      }
      ck_assert_int_eq(gc_gemm(conn, &j.o, j.o.a_handle ? NULL : j.a, j.o.b_handle ? NULL : j.b,
                               j.o.c_handle ? NULL : j.c, j.out, NULL), 0);
      job_check(&j, "resident");
      for (int op = 0; op < 3; op++)
        if (*handles[op]) ck_assert_int_eq(gc_put_free(conn, *handles[op], 10000), 0);
      ck_assert_int_eq(gc_put_free(conn, j.o.a_handle ? j.o.a_handle : j.o.b_handle ? j.o.b_handle
                                                                                  : j.o.c_handle,
                                   10000), GC_E_NOT_FOUND);
      job_free(&j);
    }
  }
  ck_assert_int_eq(stat_int(conn, "resident_handles"), 0);
  ck_assert_int_eq(stat_int(conn, "resident_bytes"), 0);
  /* a handle goes with its connection */
  uint64_t h = 0;
  float one[4] = {1, 1, 1, 1};
  ck_assert_int_eq(gc_put(conn, GC_DTYPE_F32, 1, 2, 2, one, 10000, &h), 0);
  gc_close(conn);
  conn = connect_env();
  for (int i = 0; i < 1000 && stat_int(conn, "resident_handles") != 0; i++)
    nanosleep(&(struct timespec){0, 10000000}, NULL);
  ck_assert_int_eq(stat_int(conn, "resident_handles"), 0);
  ck_assert_int_eq(gc_put_free(conn, h, 10000), GC_E_NOT_FOUND);
  gc_close(conn);
}
END_TEST

/* Submits jobs[0..n) all at once, then waits for each, last first, and checks it. */
static void submit_all_then_wait(gc_conn *conn, job *jobs, int n, const char *what) {
  for (int i = 0; i < n; i++)
    ck_assert_int_eq(gc_submit(conn, &jobs[i].o, jobs[i].a, jobs[i].b, jobs[i].c, jobs[i].out,
                               &jobs[i].req), 0);
  for (int i = n - 1; i >= 0; i--) {
    ck_assert_int_eq(gc_wait(conn, jobs[i].req, 30000, NULL), 0);
    job_check(&jobs[i], what);
    job_free(&jobs[i]);
  }
}

/* The output cast (gc_gemm_opts.out_dtype): f32 and f64 gemms returning f16 or bf16, c (or the
 * bias row) in the out dtype, blocking and in flight, in shared memory and with c by handle
 * (put with the out dtype; the input dtype refused); each against the float64 reference
 * rounded to the out dtype, out poisoned. */
static job cast_job(gc_dtype dtype, gc_dtype out, int form) {
  job j;
  job_make(&j, 37, 29, 41, dtype, form & 1, form & 2, form == 3 ? -1.5 : 1.0,
           form >= 2 ? 0.5 : 0.0, 1 + (form == 1) * 2);
  j.o.out_dtype = out;
  if (form == 4) { /* the epilogue: one bias row, gelu, then the one rounding */
    j.o.bias = 1, j.o.beta = 1.0, j.o.activation = GC_ACT_GELU;
  }
  job_make_c_out(&j);
  return j;
}

START_TEST(out_dtype_casts) {
  gc_conn *conn = connect_env();
  static const gc_dtype casts[][2] = {{GC_DTYPE_F32, GC_DTYPE_BF16}, {GC_DTYPE_F32, GC_DTYPE_F16},
                                      {GC_DTYPE_F64, GC_DTYPE_BF16}, {GC_DTYPE_F64, GC_DTYPE_F16}};
  uint8_t *shm = NULL;
  ck_assert_int_eq(gc_shm_alloc(conn, 1u << 20, 10000, (void **)&shm), 0);
  for (size_t i = 0; i < 4; i++) {
    for (int form = 0; form < 5; form++) {
      job j = cast_job(casts[i][0], casts[i][1], form);
      ck_assert_uint_eq(gc_gemm_operand_bytes(&j.o, 'o'), 37u * 29u * 2u * j.o.batch);
      gc_gemm_result res;
      int rc = gc_gemm(conn, &j.o, j.a, j.b, j.c, j.out, &res);
      ck_assert_msg(rc == 0, "gemm: %s", gc_last_error(conn)->message);
      ck_assert_int_eq(res.dtype, casts[i][1]);
      job_check(&j, "cast");
      job_make_c_out(&j); /* afresh, poisoned: the same in shared memory */
      shm_gemm(conn, shm, &j, form % 2 ? "abco" : "o");
      job_free(&j);
    }
    job j = cast_job(casts[i][0], casts[i][1], 2); /* c by handle */
    ck_assert_int_eq(gc_put(conn, casts[i][1], 1, 37, 29, j.c, 10000, &j.o.c_handle), 0);
    ck_assert_int_eq(gc_gemm(conn, &j.o, j.a, j.b, NULL, j.out, NULL), 0);
    job_check(&j, "c by handle");
    uint64_t wide = 0; /* c put in the gemm's own dtype: not what the cast takes */
    void *zeros = calloc(37 * 29, 8);
    ck_assert_int_eq(gc_put(conn, casts[i][0], 1, 37, 29, zeros, 10000, &wide), 0);
    gc_gemm_opts o = j.o;
    o.c_handle = wide;
    ck_assert_int_eq(gc_gemm(conn, &o, j.a, j.b, NULL, j.out, NULL), GC_E_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(gc_last_error(conn)->message, casts[i][1] == GC_DTYPE_F16 ? "f16"
                                                                                          : "bf16"));
    ck_assert_int_eq(gc_put_free(conn, wide, 10000), 0);
    ck_assert_int_eq(gc_put_free(conn, j.o.c_handle, 10000), 0);
    free(zeros);
    job_free(&j);
  }
  /* many in flight, casts and plain gemms of one shape mixed */
  enum { N = 40 };
  static job jobs[N];
  for (int i = 0; i < N; i++)
    jobs[i] = cast_job(casts[i % 4][0], i % 5 == 4 ? GC_DTYPE_DEFAULT : casts[i % 4][1], i % 4);
  submit_all_then_wait(conn, jobs, N, "in flight");
  gc_close(conn);
}
END_TEST

/* The integer gemm (GC_DTYPE_I8, 1.5): int8 a and b (uniform over [-128, 127]), an int32 c over
 * the whole range, every result exact. Odd shapes in the four transposes with alpha and beta
 * that wrap (the int32 limits among them), a batch by one b, the bias row with ReLU, many in
 * flight, in shared memory, and a, b, c by handle (put as I8, I8, I32). */
static job i8_job(uint64_t m, uint64_t n, uint64_t k, int form, double alpha, double beta) {
  job j;
  job_make(&j, m, n, k, GC_DTYPE_I8, form & 1, (form >> 1) & 1, alpha, beta, 1 + (form & 4) / 2);
  ck_assert_uint_eq(gc_gemm_operand_bytes(&j.o, 'o'), m * n * 4 * j.o.batch);
  return j;
}

/* A blocking gemm of j, its reported dtype the result's (I32 for I8, F32 for fp8), checked. */
static void job_run(gc_conn *conn, job *j, const char *what) {
  gc_gemm_result res;
  int rc = gc_gemm(conn, &j->o, j->a, j->b, j->c, j->out, &res);
  ck_assert_msg(rc == 0, "%s: %s", what, gc_last_error(conn)->message);
  ck_assert_int_eq(res.dtype, gctl_out_dtype(&j->o));
  job_check(j, what);
}

START_TEST(i8_gemms) {
  gc_conn *conn = connect_env();
  static const uint64_t sizes[][3] = {{37, 29, 53}, {1, 1, 1}, {130, 67, 129}, {5, 3, 4099}};
  static const double scalars[][2] = {
      {1, 0}, {-3, 7}, {2147483647.0, -2}, {-2147483648.0, 2147483647.0}};
  for (int s = 0; s < 4; s++) {
    for (int form = 0; form < 8; form++) { /* the transposes, then batched */
      job j = i8_job(sizes[s][0], sizes[s][1], sizes[s][2], form, scalars[form % 4][0],
                     scalars[form % 4][1]);
      job_run(conn, &j, "i8 blocking");
      job_free(&j);
    }
  }
  job j = i8_job(23, 17, 31, 4, -5, 0); /* a batch of 3 by one b: job_make's first */
  j.o.broadcast_b = 1;
  ck_assert_uint_eq(gc_gemm_operand_bytes(&j.o, 'b'), 31u * 17u);
  job_run(conn, &j, "i8 broadcast_b");
  j.o.broadcast_b = 0, j.o.bias = 1, j.o.beta = 1, j.o.activation = GC_ACT_RELU;
  job_make_c_out(&j); /* one i32 row of n */
  ck_assert_uint_eq(gc_gemm_operand_bytes(&j.o, 'c'), 17u * 4u);
  job_run(conn, &j, "i8 bias relu");
  job_free(&j);
  enum { N = 40 };
  static job jobs[N];
  for (int i = 0; i < N; i++)
    jobs[i] = i8_job(1 + (uint64_t)i % 17, 9, 2 + (uint64_t)i * 5, i % 8, 1 - i * 1000003.0,
                     i % 3 ? 0 : -i);
  submit_all_then_wait(conn, jobs, N, "i8 in flight");
  uint8_t *shm = NULL;
  ck_assert_int_eq(gc_shm_alloc(conn, 1u << 20, 10000, (void **)&shm), 0);
  j = i8_job(37, 29, 41, 3, 65537, -9);
  shm_gemm(conn, shm, &j, "abco");
  job_make_c_out(&j);
  shm_gemm(conn, shm, &j, "o");
  ck_assert_int_eq(gc_shm_free(conn, shm, 10000), 0);
  /* by handle: a (stored k x m with trans_a), b (n x k with trans_b), c */
  job_make_c_out(&j);
  ck_assert_int_eq(gc_put(conn, GC_DTYPE_I8, 1, 41, 37, j.a, 10000, &j.o.a_handle), 0);
  ck_assert_int_eq(gc_put(conn, GC_DTYPE_I8, 1, 29, 41, j.b, 10000, &j.o.b_handle), 0);
  ck_assert_int_eq(gc_put(conn, GC_DTYPE_I32, 1, 37, 29, j.c, 10000, &j.o.c_handle), 0);
  ck_assert_int_eq(gc_gemm(conn, &j.o, NULL, NULL, NULL, j.out, NULL), 0);
  job_check(&j, "i8 by handle");
  gc_gemm_opts o = j.o; /* a c put as i8 is not an i8 gemm's c: the daemon says so */
  ck_assert_int_eq(gc_put(conn, GC_DTYPE_I8, 1, 37, 29, j.c, 10000, &o.c_handle), 0);
  ck_assert_int_eq(gc_gemm(conn, &o, NULL, NULL, NULL, j.out, NULL), GC_E_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(gc_last_error(conn)->message, "i32"));
  for (int i = 0; i < 4; i++) {
    uint64_t h = i == 0 ? j.o.a_handle : i == 1 ? j.o.b_handle : i == 2 ? j.o.c_handle : o.c_handle;
    ck_assert_int_eq(gc_put_free(conn, h, 10000), 0);
  }
  job_free(&j);
  gc_close(conn);
}
END_TEST

/* The fp8 gemm (GC_DTYPE_E4M3 / E5M2, 1.6): a and b uniform in [-1, 1) rounded to the format,
 * an f32 c, each result within the fp8 bound (gctl_ref). Odd shapes in the four transposes with
 * alpha, beta and the per-tensor scales, a batch by one b, the bias row with GELU and a bf16
 * result, many in flight, in shared memory, and a and b by handle (put as the format). */
static job fp8_job(gc_dtype dtype, uint64_t m, uint64_t n, uint64_t k, int form, double alpha,
                   double beta) {
  static const double scales[][2] = {{1, 1}, {0.5, 3}, {1.0 / 1024, 1}, {7.25, 0.0625}};
  job j;
  job_make(&j, m, n, k, dtype, form & 1, (form >> 1) & 1, alpha, beta, 1 + (form & 4) / 2);
  j.o.scale_a = scales[form % 4][0], j.o.scale_b = scales[form % 4][1];
  ck_assert_uint_eq(gc_gemm_operand_bytes(&j.o, 'a'), m * k * j.o.batch);
  ck_assert_uint_eq(gc_gemm_operand_bytes(&j.o, 'o'), m * n * 4 * j.o.batch);
  return j;
}

/* Many of one format in flight, then a and b in shared memory and by handle. */
static void fp8_async_shm_resident(gc_conn *conn, gc_dtype dtype) {
  enum { N = 24 };
  static job jobs[N];
  for (int i = 0; i < N; i++)
    jobs[i] = fp8_job(dtype, 1 + (uint64_t)i % 13, 9, 2 + (uint64_t)i * 7, i % 8, 1 - i * 0.25,
                      i % 3 ? 0 : -0.5 * i);
  submit_all_then_wait(conn, jobs, N, "fp8 in flight");
  uint8_t *shm = NULL;
  ck_assert_int_eq(gc_shm_alloc(conn, 1u << 20, 10000, (void **)&shm), 0);
  job j = fp8_job(dtype, 37, 29, 41, 3, -1.5, 0.75);
  shm_gemm(conn, shm, &j, "abco");
  ck_assert_int_eq(gc_shm_free(conn, shm, 10000), 0);
  /* by handle: a (stored k x m with trans_a), b (n x k with trans_b) */
  job_make_c_out(&j);
  ck_assert_int_eq(gc_put(conn, dtype, 1, 41, 37, j.a, 10000, &j.o.a_handle), 0);
  ck_assert_int_eq(gc_put(conn, dtype, 1, 29, 41, j.b, 10000, &j.o.b_handle), 0);
  ck_assert_int_eq(gc_gemm(conn, &j.o, NULL, NULL, j.c, j.out, NULL), 0);
  job_check(&j, "fp8 by handle");
  ck_assert_int_eq(gc_put_free(conn, j.o.a_handle, 10000), 0);
  ck_assert_int_eq(gc_put_free(conn, j.o.b_handle, 10000), 0);
  job_free(&j);
}

START_TEST(fp8_gemms) {
  gc_conn *conn = connect_env();
  static const uint64_t sizes[][3] = {{37, 29, 53}, {1, 1, 1}, {130, 67, 129}, {5, 3, 4099}};
  static const double scalars[][2] = {{1, 0}, {-3, 0.5}, {0.25, -2}, {1e-3, 1}};
  static const gc_dtype formats[] = {GC_DTYPE_E4M3, GC_DTYPE_E5M2};
  for (int f = 0; f < 2; f++) {
    for (int s = 0; s < 4; s++) {
      for (int form = 0; form < 8; form++) { /* the transposes, then batched */
        job j = fp8_job(formats[f], sizes[s][0], sizes[s][1], sizes[s][2], form,
                        scalars[form % 4][0], scalars[form % 4][1]);
        job_run(conn, &j, "fp8 blocking");
        job_free(&j);
      }
    }
    job j = fp8_job(formats[f], 23, 17, 31, 5, -2, 0); /* a batch of 3 by one b */
    j.o.broadcast_b = 1;
    ck_assert_uint_eq(gc_gemm_operand_bytes(&j.o, 'b'), 31u * 17u);
    job_run(conn, &j, "fp8 broadcast_b");
    j.o.broadcast_b = 0, j.o.bias = 1, j.o.beta = 1, j.o.activation = GC_ACT_GELU;
    j.o.out_dtype = GC_DTYPE_BF16;
    job_make_c_out(&j); /* one bf16 row of n */
    ck_assert_uint_eq(gc_gemm_operand_bytes(&j.o, 'c'), 17u * 2u);
    job_run(conn, &j, "fp8 bias gelu bf16");
    job_free(&j);
    fp8_async_shm_resident(conn, formats[f]);
  }
  gc_close(conn);
}
END_TEST

START_TEST(timeout_leaves_connection_usable) {
  gc_conn *conn = connect_env();
  /* 16 MiB out in 1 ms is not possible: the client gives up mid-send, sends the rest as zeros
   * and drops the reply */
  job big;
  job_make(&big, 1024, 1024, 1024, GC_DTYPE_F64, 0, 0, 1.0, 0.0, 1);
  big.o.timeout_ms = 1;
  ck_assert_int_eq(gc_gemm(conn, &big.o, big.a, big.b, NULL, big.out, NULL),
                   GC_E_DEADLINE_EXCEEDED);
  ck_assert_int_eq(gc_last_error(conn)->code, GC_E_DEADLINE_EXCEEDED);
  job_free(&big); /* the library let go of the buffers */

  /* async: a short wait times out, the request stays in flight and completes later */
  job mid;
  job_make(&mid, 300, 300, 300, GC_DTYPE_F64, 0, 1, 1.0, 0.0, 2);
  ck_assert_int_eq(gc_submit(conn, &mid.o, mid.a, mid.b, NULL, mid.out, &mid.req), 0);
  ck_assert_int_eq(gc_wait(conn, mid.req, 0, NULL), GC_E_DEADLINE_EXCEEDED);
  ck_assert_uint_eq(gc_in_flight(conn), 1);
  ck_assert_int_eq(gc_wait(conn, mid.req, 60000, NULL), 0);
  job_check(&mid, "after a timed-out wait");
  job_free(&mid);

  /* cancelled requests among live ones: the live ones still come back right */
  enum { N = 12 };
  job jobs[N];
  for (int i = 0; i < N; i++) {
    job_make(&jobs[i], 100 + i, 90, 80, GC_DTYPE_F32, i & 1, 0, 1.0, 0.0, 1);
    ck_assert_int_eq(gc_submit(conn, &jobs[i].o, jobs[i].a, jobs[i].b, NULL, jobs[i].out,
                               &jobs[i].req), 0);
  }
  for (int i = 0; i < N; i += 2) ck_assert_int_eq(gc_cancel(conn, jobs[i].req), 0);
  for (int i = 1; i < N; i += 2) {
    ck_assert_int_eq(gc_wait(conn, jobs[i].req, 60000, NULL), 0);
    job_check(&jobs[i], "beside cancelled ones");
  }
  for (int i = 0; i < N; i++) job_free(&jobs[i]);
  ck_assert_int_eq(gc_ping(conn, 10000), 0);
  gc_close(conn);
}
END_TEST

/* limits mode: the daemon's refusal arrives with its code and message; the stream stays in
 * step (the refused request's payload is still sent and skipped) */
START_TEST(daemon_errors_propagate) {
  gc_conn *conn = connect_env();
  job j;
  job_make(&j, 200, 5, 3, GC_DTYPE_F32, 0, 0, 1.0, 0.0, 1);
  int rc = gc_gemm(conn, &j.o, j.a, j.b, NULL, j.out, NULL);
  ck_assert_msg(rc == GC_E_RESOURCE_EXHAUSTED || rc == GC_E_INVALID_ARGUMENT, "rc %d", rc);
  ck_assert_int_eq(gc_last_error(conn)->code, rc);
  ck_assert_msg(strstr(gc_last_error(conn)->message, "m") != NULL &&
                    strstr(gc_last_error(conn)->message, "100") != NULL,
                "message \"%s\" names neither m nor the limit", gc_last_error(conn)->message);
  job_free(&j);
  /* a refused request among good ones, pipelined */
  job good[3], bad;
  job_make(&good[0], 50, 40, 30, GC_DTYPE_F64, 0, 0, 1.0, 0.0, 1);
  job_make(&bad, 5, 5, 150, GC_DTYPE_F64, 0, 0, 1.0, 0.0, 1);
  job_make(&good[1], 60, 70, 80, GC_DTYPE_F64, 1, 1, 1.0, 0.0, 1);
  job_make(&good[2], 1, 1, 1, GC_DTYPE_F16, 0, 0, 1.0, 0.0, 1);
  ck_assert_int_eq(gc_submit(conn, &good[0].o, good[0].a, good[0].b, NULL, good[0].out, &good[0].req), 0);
  ck_assert_int_eq(gc_submit(conn, &bad.o, bad.a, bad.b, NULL, bad.out, &bad.req), 0);
  ck_assert_int_eq(gc_submit(conn, &good[1].o, good[1].a, good[1].b, NULL, good[1].out, &good[1].req), 0);
  ck_assert_int_eq(gc_submit(conn, &good[2].o, good[2].a, good[2].b, NULL, good[2].out, &good[2].req), 0);
  ck_assert_int_ne(gc_wait(conn, bad.req, 30000, NULL), 0);
  ck_assert_ptr_nonnull(strstr(gc_last_error(conn)->message, "k"));
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(gc_wait(conn, good[i].req, 30000, NULL), 0);
    job_check(&good[i], "beside a refused request");
    job_free(&good[i]);
  }
  job_free(&bad);
  ck_assert_int_eq(gc_ping(conn, 10000), 0);
  gc_close(conn);
}
END_TEST

/* One gemm on conn, checked against the reference. */
static void gemm_checked(gc_conn *conn, const char *what) {
  job j;
  job_make(&j, 33, 65, 16, GC_DTYPE_F32, 0, 1, 1.0, 0.0, 1);
  int rc = gc_gemm(conn, &j.o, j.a, j.b, NULL, j.out, NULL);
  ck_assert_msg(rc == 0, "%s: %s", what, gc_last_error(conn)->message);
  job_check(&j, what);
  job_free(&j);
}

/* scaleout mode: every connection finds the live daemon whichever address of the list it
 * starts at, and carries on after the daemon closed it while idle, blocking and async. */
START_TEST(idle_close_and_dead_address) {
  const char *sleep_env = getenv("GEMMD_TEST_IDLE_SLEEP_MS");
  unsigned sleep_ms = sleep_env ? (unsigned)strtoul(sleep_env, NULL, 10) : 1000;
  for (int round = 0; round < 2; round++) { /* round robin: both starting points */
    gc_conn *conn = connect_env();
    for (int i = 0; i < 3; i++) {
      gemm_checked(conn, "after an idle close");
      usleep(sleep_ms * 1000);
    }
    enum { N = 16 };
    job jobs[N];
    for (int i = 0; i < N; i++) {
      job_make(&jobs[i], pick(dims, 5), pick(dims, 5), pick(dims, 5), GC_DTYPE_F64, 0, 0, 1.0,
               0.0, 1);
      ck_assert_int_eq(gc_submit(conn, &jobs[i].o, jobs[i].a, jobs[i].b, NULL, jobs[i].out,
                                 &jobs[i].req), 0);
    }
    for (int i = 0; i < N; i++) {
      int rc = gc_wait(conn, jobs[i].req, 30000, NULL);
      ck_assert_msg(rc == 0, "async after an idle close: %s", gc_last_error(conn)->message);
      job_check(&jobs[i], "async after an idle close");
      job_free(&jobs[i]);
    }
    usleep(sleep_ms * 1000);
    ck_assert_int_eq(gc_ping(conn, 10000), 0);
    gc_close(conn);
  }
}
END_TEST

/* drain mode: the first connection of a process starts at the list's first address, A. A is
 * told to drain with work queued: the requests it answers UNAVAILABLE, or that its closing
 * connection loses, complete on B, each once and right. */
START_TEST(draining_daemon_retried) {
  const char *pid_env = getenv("GEMMD_TEST_DRAIN_PID");
  ck_assert_ptr_nonnull(pid_env);
  gc_conn *conn = connect_env();
  enum { N = 24 };
  static job jobs[N];
  for (int i = 0; i < N; i++) {
    job_make(&jobs[i], 192, 192, 192, GC_DTYPE_F64, 0, 0, 1.0, 0.0, 1);
    ck_assert_int_eq(gc_submit(conn, &jobs[i].o, jobs[i].a, jobs[i].b, NULL, jobs[i].out,
                               &jobs[i].req), 0);
  }
  ck_assert_int_eq(kill((pid_t)strtol(pid_env, NULL, 10), SIGTERM), 0);
  for (int i = 0; i < N; i++) {
    int rc = gc_wait(conn, jobs[i].req, 60000, NULL);
    ck_assert_msg(rc == 0, "request %d beside a draining daemon: %s", i,
                  gc_last_error(conn)->message);
    job_check(&jobs[i], "beside a draining daemon");
    job_free(&jobs[i]);
  }
  gc_close(conn);
}
END_TEST

/* token mode: GEMMD_TOKEN gets the requests served; a wrong token gets UNAUTHENTICATED. */
START_TEST(token_accepted_and_refused) {
  gc_conn *conn = connect_env();
  gemm_checked(conn, "with the token");
  ck_assert_int_eq(gc_ping(conn, 10000), 0);
  gc_close(conn);
  gc_connect_opts copts;
  gc_connect_opts_init(&copts);
  copts.token = "not-the-token";
  ck_assert_int_eq(gc_connect_with(NULL, &copts, &conn), 0);
  ck_assert_int_eq(gc_ping(conn, 10000), GC_E_UNAUTHENTICATED);
  gc_close(conn);
}
END_TEST

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "main";
  const char *env_seed = getenv("GEMMD_TEST_SEED");
  seed = env_seed ? strtoull(env_seed, NULL, 10) : (uint64_t)time(NULL);
  printf("seed %llu (GEMMD_TEST_SEED replays it)\n", (unsigned long long)seed);
  Suite *s = suite_create("client_e2e");
  TCase *tc = tcase_create(mode);
  tcase_set_timeout(tc, 240);
  if (strcmp(mode, "limits") == 0) {
    tcase_add_test(tc, daemon_errors_propagate);
  } else if (strcmp(mode, "scaleout") == 0) {
    tcase_add_test(tc, idle_close_and_dead_address);
  } else if (strcmp(mode, "drain") == 0) {
    tcase_add_test(tc, draining_daemon_retried);
  } else if (strcmp(mode, "token") == 0) {
    tcase_add_test(tc, token_accepted_and_refused);
  } else {
    tcase_add_test(tc, many_in_flight);
    tcase_add_test(tc, blocking_forms);
    tcase_add_test(tc, in_place_and_batched);
    tcase_add_test(tc, ping_and_info);
    tcase_add_test(tc, shared_memory);
    tcase_add_test(tc, resident_operands);
    tcase_add_test(tc, out_dtype_casts);
    tcase_add_test(tc, i8_gemms);
    tcase_add_test(tc, fp8_gemms);
    tcase_add_test(tc, timeout_leaves_connection_usable);
  }
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
