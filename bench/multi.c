/*
 * multi.c - bench_multi: what every GPU of the box gives, through a running gemmd (--connect).
 *
 * The caller starts gemmd on 1, 2, 4 or 8 GPUs (gpu.devices; scripts/gpu-run.sh multi does) and
 * runs one mode against it; each prints one line "RESULT mode=... devices=N ..." with GEMM/s
 * (and ms a gemm), which the script turns into speedups over the one-GPU run, and a markdown
 * row for bench/RESULTS.md:
 *   split     one size^3 gemm at a time, A, B and the result in one shared-memory region (so
 *             the daemon may split it by rows across its idle GPUs: gpu.split_min_rows), --reps
 *             times; the median. The reply's device names the parts ("cuda:0+1+2+3").
 *   resident  one connection keeping --depth gemms of size^3 in flight, B put once (resident:
 *             each GPU that runs one copies it once), A and each result in shared memory, until
 *             --requests completed: GEMM/s.
 *   mixed     --clients connections (one thread each), each keeping two gemms in flight over the
 *             socket, sizes taken in turn from --sizes, until --requests completed in all:
 *             aggregate GEMM/s.
 * Every mode checks results against float64: split (its last gemm) and resident (each slot's
 * first) a block of 4 rows in each eighth of C (every part of a split is sampled), mixed each connection's first result of each
 * size (its first 64 rows). A wrong result fails the run (exit 1).
 *
 *   bench_multi --connect unix:PATH --mode split|resident|mixed [--size N] [--dtype f32|f16|bf16]
 *               [--reps N] [--depth D] [--requests N] [--clients N] [--sizes 256,1024,4096]
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "gctl_ref.h"
#include "gemmclient.h"

#define MAX_SIZES 8
#define MAX_REPS 100
#define MAX_DEPTH 64
#define MAX_CLIENTS 256
#define SAMPLE_BLOCKS 8
#define SAMPLE_ROWS 4
#define MIXED_CHECK_ROWS 64

typedef struct {
  const char *addr, *mode;
  uint64_t size;
  gc_dtype dtype;
  int reps;
  unsigned depth, clients;
  uint64_t requests;
  uint64_t sizes[MAX_SIZES];
  int nsizes;
} args_t;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "bench_multi: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

static gc_conn *connect_or_die(const char *addr) {
  gc_conn *conn = NULL;
  if (gc_connect(addr, &conn) != 0)
    die("cannot connect", conn ? gc_last_error(conn)->message : addr);
  return conn;
}

static void *alloc_or_die(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p)
    die("out of memory", NULL);
  return p;
}

/* The daemon's device count (info's devices list). */
static size_t device_count(gc_conn *conn) {
  void *buf = NULL;
  size_t len = 0, n = 0;
  if (gc_info(conn, 10000, &buf, &len) != 0)
    die("info", gc_last_error(conn)->message);
  if (gc_map_count(buf, len, "devices", &n) != 0 &&
      gc_map_count(buf, len, "backend_info.devices", &n) != 0)
    n = 0;
  gc_free(buf);
  return n;
}

/* rows [row0, row0 + rows) of out against float64 from a and b (opts' shape): the error over
 * its tolerance (<= 1: right). */
static double check_rows(const gc_gemm_opts *opts, const void *a, const void *b, const void *out,
                         uint64_t row0, uint64_t rows) {
  gc_gemm_opts part = *opts;
  part.m = rows;
  size_t in = gctl_dtype_size(opts->dtype), res = gctl_dtype_size(gctl_out_dtype(opts));
  double *ref = alloc_or_die(rows * opts->n * sizeof(double));
  double *bound = alloc_or_die(rows * opts->n * sizeof(double));
  gctl_ref_gemm(&part, (const char *)a + row0 * opts->k * in, b, NULL, ref, bound);
  double e = gctl_ref_error(&part, (const char *)out + row0 * opts->n * res, ref, bound);
  free(ref);
  free(bound);
  double tol = gctl_ref_tolerance(opts);
  return tol > 0 ? e / tol : e;
}

/* SAMPLE_BLOCKS blocks of SAMPLE_ROWS rows spread over C, so every part of a split is seen:
 * the worst error over tolerance. */
static double check_sampled(const gc_gemm_opts *opts, const void *a, const void *b,
                            const void *out) {
  double worst = 0;
  for (int i = 0; i < SAMPLE_BLOCKS; i++) {
    uint64_t rows = opts->m < SAMPLE_ROWS ? opts->m : SAMPLE_ROWS;
    uint64_t row0 = (opts->m - rows) * (uint64_t)i / (SAMPLE_BLOCKS - 1);
    double e = check_rows(opts, a, b, out, row0, rows);
    if (!(e <= worst)) /* NaN sticks */
      worst = e;
  }
  return worst;
}

/* A square size^3 gemm of the run's dtype. */
static void square_opts(const args_t *args, uint64_t size, gc_gemm_opts *o) {
  gc_gemm_opts_init(o);
  o->m = o->n = o->k = size;
  o->dtype = args->dtype;
}

static const char *dtype_name(gc_dtype d) {
  return d == GC_DTYPE_F16 ? "f16" : d == GC_DTYPE_BF16 ? "bf16" : "f32";
}

static void report(const args_t *args, size_t ndev, uint64_t size, double gemm_per_s, double ms,
                   const char *device, double err) {
  double tflops = 2.0 * (double)size * (double)size * (double)size * gemm_per_s / 1e12;
  printf("RESULT mode=%s devices=%zu size=%llu dtype=%s gemm_per_s=%.3f ms=%.3f tflops=%.1f "
         "device=%s check=%s\n",
         args->mode, ndev, (unsigned long long)size, dtype_name(args->dtype), gemm_per_s, ms,
         tflops, device, err <= 1.0 ? "ok" : "WRONG");
  printf("| %s | %zu | %llu^3 %s | %.2f | %.2f | %.1f | %s |\n", args->mode, ndev,
         (unsigned long long)size, dtype_name(args->dtype), gemm_per_s, ms, tflops, device);
  fflush(stdout);
  if (!(err <= 1.0)) {
    fprintf(stderr, "bench_multi: %s: a result is wrong (error %.3g of its tolerance)\n",
            args->mode, err);
    exit(1);
  }
}

/* A connection to the daemon, its device count, and the run's size^3 gemm with its operand and
 * result bytes. */
typedef struct {
  gc_conn *conn;
  size_t ndev;
  gc_gemm_opts o;
  uint64_t ab, ob;
} run_t;

static void run_open(const args_t *args, run_t *r) {
  r->conn = connect_or_die(args->addr);
  r->ndev = device_count(r->conn);
  square_opts(args, args->size, &r->o);
  r->ab = gc_gemm_operand_bytes(&r->o, 'a');
  r->ob = gc_gemm_operand_bytes(&r->o, 'o');
  if (!r->ab || !r->ob)
    die("size too large", NULL);
}

/* ---- split: one large gemm at a time in shared memory ------------------------------------- */

static void run_split(const args_t *args) {
  run_t run;
  run_open(args, &run);
  gc_conn *conn = run.conn;
  gc_gemm_opts o = run.o;
  uint8_t *region = NULL;
  if (gc_shm_alloc(conn, (size_t)(2 * run.ab + run.ob), 60000, (void **)&region) != 0)
    die("shm_alloc", gc_last_error(conn)->message);
  uint64_t seed = 42;
  gctl_fill_random(o.dtype, region, (size_t)(args->size * args->size), &seed);
  gctl_fill_random(o.dtype, region + run.ab, (size_t)(args->size * args->size), &seed);
  uint8_t *out = region + 2 * run.ab;
  double ms[MAX_REPS];
  gc_gemm_result res;
  memset(&res, 0, sizeof res);
  double err = 0;
  for (int r = -1; r < args->reps; r++) { /* one warm-up: registration, pool growth */
    gctl_poison(gctl_out_dtype(&o), out, (size_t)(args->size * args->size));
    double t0 = bench_now_ms();
    if (gc_gemm(conn, &o, region, region + run.ab, NULL, out, &res) != 0)
      die("gemm", gc_last_error(conn)->message);
    double t = bench_now_ms() - t0;
    if (r == args->reps - 1) { /* the last: a 32768^3 check takes a while on one core */
      double e = check_sampled(&o, region, region + run.ab, out);
      if (!(e <= err))
        err = e;
    }
    if (r >= 0)
      ms[r] = t;
  }
  double med = bench_median(ms, args->reps);
  report(args, run.ndev, args->size, 1000.0 / med, med, res.device, err);
  gc_close(conn);
}

/* ---- resident: one client pipelining gemms by a resident B ------------------------------- */

typedef struct {
  gc_req req;
  bool busy, checked;
  uint8_t *a, *out;
} slot_t;

static void run_resident(const args_t *args) {
  run_t run;
  run_open(args, &run);
  gc_conn *conn = run.conn;
  gc_gemm_opts o = run.o;
  size_t elems = (size_t)(args->size * args->size);
  uint8_t *b = alloc_or_die((size_t)run.ab), *region = NULL;
  uint64_t seed = 7;
  gctl_fill_random(o.dtype, b, elems, &seed);
  if (gc_put(conn, o.dtype, 1, args->size, args->size, b, 60000, &o.b_handle) != 0)
    die("put", gc_last_error(conn)->message);
  unsigned depth = args->depth;
  if (gc_shm_alloc(conn, (size_t)((run.ab + run.ob) * depth), 60000, (void **)&region) != 0)
    die("shm_alloc", gc_last_error(conn)->message);
  slot_t slots[MAX_DEPTH];
  for (unsigned i = 0; i < depth; i++) {
    uint8_t *at = region + i * (run.ab + run.ob);
    slots[i] = (slot_t){.a = at, .out = at + run.ab};
    gctl_fill_random(o.dtype, slots[i].a, elems, &seed);
  }
  uint64_t issued = 0, done = 0, warm = depth; /* the first depth results are not timed */
  double t0 = 0, err = 0;
  char device[64] = "";
  while (done < args->requests + warm) {
    for (unsigned i = 0; i < depth && issued < args->requests + warm; i++) {
      if (slots[i].busy)
        continue;
      o.user = &slots[i];
      if (gc_submit(conn, &o, slots[i].a, NULL, NULL, slots[i].out, &slots[i].req) != 0)
        die("submit", gc_last_error(conn)->message);
      slots[i].busy = true;
      issued++;
    }
    gc_completion c[MAX_DEPTH];
    int n = gc_poll(conn, 60000, c, depth);
    if (n < 0)
      die("poll", gc_last_error(conn)->message);
    for (int i = 0; i < n; i++) {
      slot_t *s = c[i].user;
      if (c[i].error.code != 0)
        die("gemm", c[i].error.message);
      if (!s->checked) { /* each slot's first result, and so each device's early ones */
        double e = check_sampled(&o, s->a, b, s->out);
        if (!(e <= err))
          err = e;
        s->checked = true;
      }
      s->busy = false;
      snprintf(device, sizeof device, "%s", c[i].result.device);
      if (++done == warm)
        t0 = bench_now_ms();
    }
  }
  double secs = (bench_now_ms() - t0) / 1e3;
  double rate = (double)args->requests / secs;
  report(args, run.ndev, args->size, rate, 1000.0 / rate, device, err);
  free(b);
  gc_close(conn);
}

/* ---- mixed: many clients of mixed sizes over the socket ----------------------------------- */

typedef struct {
  const args_t *args;
  uint8_t *a[MAX_SIZES], *b[MAX_SIZES]; /* shared inputs, one pair per size */
  atomic_uint_fast64_t issued;
  atomic_uint_fast64_t flops_done;      /* in units of 2 * size^3 / 1e6 */
  atomic_uint next_client;              /* each starts at another size */
  double worst;                         /* under mu */
  pthread_mutex_t mu;
} mixed_t;

static void *mixed_client(void *arg) {
  mixed_t *mx = arg;
  const args_t *args = mx->args;
  gc_conn *conn = connect_or_die(args->addr);
  enum { DEPTH = 2 };
  uint8_t *out[DEPTH];
  int size_of[DEPTH];
  gc_req reqs[DEPTH];
  bool busy[DEPTH] = {false, false}, checked[MAX_SIZES] = {false};
  uint64_t maxo = 0;
  for (int s = 0; s < args->nsizes; s++) {
    gc_gemm_opts o;
    square_opts(args, args->sizes[s], &o);
    if (gc_gemm_operand_bytes(&o, 'o') > maxo)
      maxo = gc_gemm_operand_bytes(&o, 'o');
  }
  for (int i = 0; i < DEPTH; i++)
    out[i] = alloc_or_die((size_t)maxo);
  unsigned turn = atomic_fetch_add(&mx->next_client, 1);
  for (;;) {
    bool any = false;
    for (int i = 0; i < DEPTH; i++) {
      if (!busy[i] && atomic_fetch_add(&mx->issued, 1) < args->requests) {
        int si = (int)(turn++ % (unsigned)args->nsizes);
        gc_gemm_opts o;
        square_opts(args, args->sizes[si], &o);
        o.user = (void *)(uintptr_t)i;
        if (gc_submit(conn, &o, mx->a[si], mx->b[si], NULL, out[i], &reqs[i]) != 0)
          die("submit", gc_last_error(conn)->message);
        busy[i] = true;
        size_of[i] = si;
      }
      any |= busy[i];
    }
    if (!any)
      break;
    gc_completion c[DEPTH];
    int n = gc_poll(conn, 120000, c, DEPTH);
    if (n < 0)
      die("poll", gc_last_error(conn)->message);
    for (int j = 0; j < n; j++) {
      int i = (int)(uintptr_t)c[j].user, si = size_of[i];
      if (c[j].error.code != 0)
        die("gemm", c[j].error.message);
      gc_gemm_opts o;
      square_opts(args, args->sizes[si], &o);
      if (!checked[si]) {
        double e = check_rows(&o, mx->a[si], mx->b[si], out[i], 0,
                              o.m < MIXED_CHECK_ROWS ? o.m : MIXED_CHECK_ROWS);
        pthread_mutex_lock(&mx->mu);
        if (!(e <= mx->worst))
          mx->worst = e;
        pthread_mutex_unlock(&mx->mu);
        checked[si] = true;
      }
      double s = (double)args->sizes[si];
      atomic_fetch_add(&mx->flops_done, (uint_fast64_t)(2.0 * s * s * s / 1e6));
      busy[i] = false;
    }
  }
  for (int i = 0; i < DEPTH; i++)
    free(out[i]);
  gc_close(conn);
  return NULL;
}

static void run_mixed(const args_t *args) {
  gc_conn *conn = connect_or_die(args->addr);
  size_t ndev = device_count(conn);
  gc_close(conn);
  mixed_t mx = {.args = args, .worst = 0};
  pthread_mutex_init(&mx.mu, NULL);
  atomic_init(&mx.issued, 0);
  atomic_init(&mx.flops_done, 0);
  atomic_init(&mx.next_client, 0);
  uint64_t seed = 99;
  for (int s = 0; s < args->nsizes; s++) {
    size_t elems = (size_t)(args->sizes[s] * args->sizes[s]);
    mx.a[s] = alloc_or_die(elems * gctl_dtype_size(args->dtype));
    mx.b[s] = alloc_or_die(elems * gctl_dtype_size(args->dtype));
    gctl_fill_random(args->dtype, mx.a[s], elems, &seed);
    gctl_fill_random(args->dtype, mx.b[s], elems, &seed);
  }
  pthread_t th[MAX_CLIENTS];
  double t0 = bench_now_ms();
  for (unsigned i = 0; i < args->clients; i++)
    if (pthread_create(&th[i], NULL, mixed_client, &mx) != 0)
      die("pthread_create", strerror(errno));
  for (unsigned i = 0; i < args->clients; i++)
    pthread_join(th[i], NULL);
  double secs = (bench_now_ms() - t0) / 1e3;
  double rate = (double)args->requests / secs;
  printf("# mixed: %u clients, sizes", args->clients);
  for (int s = 0; s < args->nsizes; s++)
    printf(" %llu", (unsigned long long)args->sizes[s]);
  printf(": %.1f TFLOP/s in all\n", (double)atomic_load(&mx.flops_done) / 1e6 / secs);
  report(args, ndev, args->sizes[args->nsizes - 1], rate, 1000.0 / rate, "all", mx.worst);
  for (int s = 0; s < args->nsizes; s++) {
    free(mx.a[s]);
    free(mx.b[s]);
  }
  pthread_mutex_destroy(&mx.mu);
}

/* ---- arguments ------------------------------------------------------------------------------ */

static uint64_t number(const char *s, const char *what) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || v == 0)
    die("not a positive number", what);
  return (uint64_t)v;
}

static void parse_sizes(const char *s, args_t *args) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  args->nsizes = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && args->nsizes < MAX_SIZES;
       tok = strtok_r(NULL, ",", &save))
    args->sizes[args->nsizes++] = number(tok, "--sizes");
}

static gc_dtype parse_dtype(const char *s) {
  if (strcmp(s, "f32") == 0)
    return GC_DTYPE_F32;
  if (strcmp(s, "f16") == 0)
    return GC_DTYPE_F16;
  if (strcmp(s, "bf16") == 0)
    return GC_DTYPE_BF16;
  die("--dtype is f32, f16 or bf16, not", s);
  return GC_DTYPE_F32;
}

int main(int argc, char **argv) {
  args_t args = {.size = 4096, .dtype = GC_DTYPE_F32, .reps = 5, .depth = 8, .requests = 200,
                 .clients = 64};
  parse_sizes("256,1024,2048,4096", &args);
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v)
      die("missing value after", argv[i]);
    if (strcmp(argv[i], "--connect") == 0)
      args.addr = v;
    else if (strcmp(argv[i], "--mode") == 0)
      args.mode = v;
    else if (strcmp(argv[i], "--size") == 0)
      args.size = number(v, "--size");
    else if (strcmp(argv[i], "--dtype") == 0)
      args.dtype = parse_dtype(v);
    else if (strcmp(argv[i], "--reps") == 0)
      args.reps = (int)number(v, "--reps");
    else if (strcmp(argv[i], "--depth") == 0)
      args.depth = (unsigned)number(v, "--depth");
    else if (strcmp(argv[i], "--requests") == 0)
      args.requests = number(v, "--requests");
    else if (strcmp(argv[i], "--clients") == 0)
      args.clients = (unsigned)number(v, "--clients");
    else if (strcmp(argv[i], "--sizes") == 0)
      parse_sizes(v, &args);
    else
      die("unknown option", argv[i]);
    i++;
  }
  if (!args.addr || !args.mode)
    die("usage", "bench_multi --connect ADDR --mode split|resident|mixed [options]");
  if (args.reps > MAX_REPS || args.depth > MAX_DEPTH || args.clients > MAX_CLIENTS)
    die("at most --reps 100, --depth 64, --clients 256", NULL);
  if (strcmp(args.mode, "split") == 0)
    run_split(&args);
  else if (strcmp(args.mode, "resident") == 0)
    run_resident(&args);
  else if (strcmp(args.mode, "mixed") == 0)
    run_mixed(&args);
  else
    die("--mode is split, resident or mixed, not", args.mode);
  return 0;
}
