/*
 * throughput.c - bench_throughput: GEMM/s and latency of many small and medium requests
 * through gemmd, beside the same work done in-process.
 *
 * For each size s in --sizes (square s x s x s), each dtype in --dtypes and each client count
 * in --clients: that many connections (one thread each), every one keeping --depth requests in
 * flight (gc_submit / gc_poll) until --requests requests have completed in total. Reports
 * completed GEMM/s and the latency (submit to completion) quantiles; errors are counted, not
 * fatal. The first two results of every connection are checked against a float64 reference
 * (all of C up to 256 rows, a block of 256 rows from its middle above).
 *
 * In-process reference, same process, same sizes (--ref):
 *   gpu: pinned host arrays -> one cublasGemmStridedBatchedEx over `depth * clients` problems
 *        (at most 1024) -> back, synchronised: GEMM/s; and one problem at a time
 *        (copy in, cublasGemmEx, copy out, synchronise): its latency quantiles;
 *   cpu: OpenBLAS (gk_cpu_gemm) one problem at a time on `clients` threads;
 *   none.
 *
 * A --background SIZE connection streams SIZE^3 f32 requests (one in flight) for the whole
 * measurement: the mixed load (small requests beside large ones on one GPU).
 *
 *   bench_throughput [--connect ADDR] [--sizes 32,64,...] [--dtypes f32,bf16] [--clients 1,8,32]
 *                    [--depth D] [--requests N] [--ref gpu|cpu|none] [--background SIZE]
 * Prints a markdown table for bench/RESULTS.md.
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
#include <time.h>

#include "gctl_ref.h"
#include "gemmclient.h"
#include "gk_cpu.h"

#ifdef BENCH_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

#ifndef GEMMD_GIT_COMMIT
#define GEMMD_GIT_COMMIT "unknown"
#endif

#define MAX_LIST 16
#define MAX_DEPTH 1024
#define CHECKED_PER_CONN 2
#define CHECK_ROWS 256
#define CHECK_MACS (1ull << 30)

typedef struct {
  const char *addr;
  uint64_t sizes[MAX_LIST];
  int nsizes;
  gc_dtype dtypes[MAX_LIST];
  int ndtypes;
  unsigned clients[MAX_LIST];
  int nclients;
  unsigned depth;
  uint64_t requests;
  const char *ref;
  uint64_t background;
} bench_args;

/* One measurement: shared inputs, per-connection results. */
typedef struct {
  const bench_args *args;
  gc_gemm_opts opts;
  const void *a, *b;
  const double *ref, *bound;   /* of the rows checked: check.m rows from row check_row0 */
  gc_gemm_opts check;          /* opts with m = the rows checked */
  size_t check_row0;
  double tolerance;
  atomic_uint_fast64_t issued; /* requests handed out so far (all connections) */
  double *lat_us;              /* one per completed request, written by index */
  atomic_uint_fast64_t done;
  atomic_uint_fast64_t errors, wrong;
  atomic_bool stop_background;
} run_state;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

static double quantile(double *v, uint64_t n, double q) {
  if (n == 0)
    return NAN;
  uint64_t i = (uint64_t)(q * (double)(n - 1) + 0.5);
  return v[i];
}

static size_t elem_bytes(gc_dtype t) { return t == GC_DTYPE_F64 ? 8 : t == GC_DTYPE_F32 ? 4 : 2; }
static const char *dtype_name(gc_dtype t) {
  static const char *names[] = {"f32", "f64", "f16", "bf16"};
  return names[t];
}

/* ---- one connection ------------------------------------------------------------------------ */

typedef struct {
  run_state *st;
  void *out[MAX_DEPTH];
  double sent_us[MAX_DEPTH];
  gc_req req[MAX_DEPTH];
  int fail;
} conn_state;

/* Claims the next request number, or false when all are handed out. */
static bool claim(run_state *st) {
  uint64_t n = atomic_fetch_add(&st->issued, 1);
  return n < st->args->requests;
}

static void check_result(run_state *st, const void *out) {
  const char *rows = (const char *)out + st->check_row0 * st->opts.n * elem_bytes(st->opts.dtype);
  double e = gctl_ref_error(&st->check, rows, st->ref, st->bound);
  if (!(e <= st->tolerance))
    atomic_fetch_add(&st->wrong, 1);
}

static int submit_slot(gc_conn *c, conn_state *cs, unsigned slot) {
  run_state *st = cs->st;
  gctl_poison(st->opts.dtype, cs->out[slot], st->opts.m * st->opts.n);
  cs->sent_us[slot] = now_us();
  return gc_submit(c, &st->opts, st->a, st->b, NULL, cs->out[slot], &cs->req[slot]);
}

static void *conn_main(void *arg) {
  conn_state *cs = arg;
  run_state *st = cs->st;
  gc_conn *c = NULL;
  if (gc_connect(st->args->addr, &c) != 0) {
    fprintf(stderr, "bench_throughput: connect: %s\n", gc_last_error(NULL)->message);
    cs->fail = 1;
    return NULL;
  }
  unsigned depth = st->args->depth, live = 0, checked = 0;
  for (unsigned i = 0; i < depth && claim(st); i++, live++)
    if (submit_slot(c, cs, i) != 0) {
      cs->fail = 1;
      goto out;
    }
  gc_completion done[64];
  while (live > 0) {
    int got = gc_poll(c, 10000, done, 64);
    if (got < 0) {
      fprintf(stderr, "bench_throughput: connection failed: %s\n", gc_last_error(c)->message);
      cs->fail = 1;
      break;
    }
    if (got == 0) {
      fprintf(stderr, "bench_throughput: no completion in 10 s\n");
      cs->fail = 1;
      break;
    }
    double t = now_us();
    for (int i = 0; i < got; i++) {
      unsigned slot = 0;
      while (slot < depth && cs->req[slot] != done[i].req)
        slot++;
      if (slot == depth)
        continue;
      live--;
      if (done[i].error.code != 0) {
        atomic_fetch_add(&st->errors, 1);
      } else {
        uint64_t n = atomic_fetch_add(&st->done, 1);
        st->lat_us[n] = t - cs->sent_us[slot];
        if (checked < CHECKED_PER_CONN) {
          check_result(st, cs->out[slot]);
          checked++;
        }
      }
      if (claim(st)) {
        if (submit_slot(c, cs, slot) != 0) {
          cs->fail = 1;
          goto out;
        }
        live++;
      }
    }
  }
out:
  gc_close(c);
  return NULL;
}

/* ---- the large background stream -------------------------------------------------------- */

typedef struct {
  run_state *st;
  uint64_t size;
  uint64_t done;
} background_state;

static void *background_main(void *arg) {
  background_state *bg = arg;
  gc_conn *c = NULL;
  if (gc_connect(bg->st->args->addr, &c) != 0)
    return NULL;
  gc_gemm_opts o;
  gc_gemm_opts_init(&o);
  o.m = o.n = o.k = bg->size;
  size_t bytes = (size_t)gc_gemm_operand_bytes(&o, 'a');
  void *a = calloc(1, bytes), *b = calloc(1, bytes), *out = malloc(bytes);
  uint64_t seed = 7;
  if (a && b && out) {
    gctl_fill_random(o.dtype, a, bytes / 4, &seed);
    gctl_fill_random(o.dtype, b, bytes / 4, &seed);
    while (!atomic_load(&bg->st->stop_background) && gc_gemm(c, &o, a, b, NULL, out, NULL) == 0)
      bg->done++;
  }
  free(a);
  free(b);
  free(out);
  gc_close(c);
  return NULL;
}

/* ---- in-process references --------------------------------------------------------------- */

typedef struct {
  double gemm_per_s;
  double p50_us, p99_us; /* one at a time; NAN when not measured */
} ref_result;

typedef struct {
  const gc_gemm_opts *o;
  const void *a, *b;
  uint64_t count;
} cpu_ref_thread;

static void *cpu_ref_main(void *arg) {
  cpu_ref_thread *t = arg;
  gk_problem p = {.dtype = (gk_dtype)t->o->dtype, .m = (int64_t)t->o->m, .n = (int64_t)t->o->n,
                  .k = (int64_t)t->o->k, .batch = 1, .alpha = 1.0, .beta = 0.0,
                  .a = t->a, .b = t->b};
  void *c = malloc((size_t)gc_gemm_operand_bytes(t->o, 'c'));
  p.c = c;
  for (uint64_t i = 0; c && i < t->count; i++)
    gk_cpu_gemm(&p, NULL);
  free(c);
  return NULL;
}

static ref_result ref_cpu(const gc_gemm_opts *o, const void *a, const void *b, unsigned threads,
                          uint64_t requests) {
  ref_result r = {0, NAN, NAN};
  pthread_t tid[256];
  cpu_ref_thread t[256];
  if (threads > 256)
    threads = 256;
  uint64_t each = requests / threads ? requests / threads : 1;
  double t0 = now_us();
  for (unsigned i = 0; i < threads; i++) {
    t[i] = (cpu_ref_thread){o, a, b, each};
    pthread_create(&tid[i], NULL, cpu_ref_main, &t[i]);
  }
  for (unsigned i = 0; i < threads; i++)
    pthread_join(tid[i], NULL);
  r.gemm_per_s = (double)(each * threads) / ((now_us() - t0) / 1e6);
  return r;
}

#ifdef BENCH_WITH_CUDA
static cudaDataType cuda_type(gc_dtype t) {
  switch (t) {
  case GC_DTYPE_F64: return CUDA_R_64F;
  case GC_DTYPE_F16: return CUDA_R_16F;
  case GC_DTYPE_BF16: return CUDA_R_16BF;
  default: return CUDA_R_32F;
  }
}

/* Row-major C = A B as column-major C^T = B^T A^T: cuBLAS gets (n, m, k) with B first. */
static ref_result ref_gpu(const gc_gemm_opts *o, const void *a, const void *b, unsigned batch,
                          uint64_t requests) {
  ref_result r = {NAN, NAN, NAN};
  size_t es = elem_bytes(o->dtype), na = o->m * o->k * es, nb = o->k * o->n * es,
         nc = o->m * o->n * es;
  if (batch > 1024)
    batch = 1024;
  cublasHandle_t h;
  void *ha = NULL, *hb = NULL, *hc = NULL, *da = NULL, *db = NULL, *dc = NULL;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
    return r;
  bool ok = cudaMallocHost(&ha, na * batch) == cudaSuccess &&
            cudaMallocHost(&hb, nb * batch) == cudaSuccess &&
            cudaMallocHost(&hc, nc * batch) == cudaSuccess &&
            cudaMalloc(&da, na * batch) == cudaSuccess && cudaMalloc(&db, nb * batch) == cudaSuccess &&
            cudaMalloc(&dc, nc * batch) == cudaSuccess;
  cudaDataType dt = cuda_type(o->dtype);
  cublasComputeType_t ct = o->dtype == GC_DTYPE_F64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  double one = 1.0, zero = 0.0;
  float onef = 1.0f, zerof = 0.0f;
  const void *alpha = o->dtype == GC_DTYPE_F64 ? (const void *)&one : (const void *)&onef;
  const void *beta = o->dtype == GC_DTYPE_F64 ? (const void *)&zero : (const void *)&zerof;
  int m = (int)o->m, n = (int)o->n, k = (int)o->k;
  for (unsigned i = 0; ok && i < batch; i++) {
    memcpy((char *)ha + i * na, a, na);
    memcpy((char *)hb + i * nb, b, nb);
  }
  /* batched: copy in, one strided batched gemm, copy out, synchronise */
  uint64_t rounds = requests / batch ? requests / batch : 1;
  for (uint64_t round = 0; ok && round <= rounds; round++) {
    double t0 = now_us();
    ok = cudaMemcpy(da, ha, na * batch, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(db, hb, nb * batch, cudaMemcpyHostToDevice) == cudaSuccess &&
         cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, alpha, db, dt, n,
                                    (long long)(o->k * o->n), da, dt, k, (long long)(o->m * o->k),
                                    beta, dc, dt, n, (long long)(o->m * o->n), (int)batch, ct,
                                    CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS &&
         cudaMemcpy(hc, dc, nc * batch, cudaMemcpyDeviceToHost) == cudaSuccess &&
         cudaDeviceSynchronize() == cudaSuccess;
    if (round == 0) /* warm-up */
      continue;
    double rate = (double)batch / ((now_us() - t0) / 1e6);
    if (round == 1 || rate > r.gemm_per_s || isnan(r.gemm_per_s))
      r.gemm_per_s = rate; /* best round: the card at its best */
  }
  /* one at a time */
  enum { ONE_REPS = 200 };
  double lat[ONE_REPS];
  int got = 0;
  for (int i = 0; ok && i < ONE_REPS + 10; i++) {
    double t0 = now_us();
    ok = cudaMemcpy(da, ha, na, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(db, hb, nb, cudaMemcpyHostToDevice) == cudaSuccess &&
         cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, alpha, db, dt, n, da, dt, k, beta, dc,
                      dt, n, ct, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS &&
         cudaMemcpy(hc, dc, nc, cudaMemcpyDeviceToHost) == cudaSuccess &&
         cudaDeviceSynchronize() == cudaSuccess;
    if (i >= 10)
      lat[got++] = now_us() - t0;
  }
  if (got == ONE_REPS) {
    qsort(lat, ONE_REPS, sizeof lat[0], cmp_double);
    r.p50_us = quantile(lat, ONE_REPS, 0.5);
    r.p99_us = quantile(lat, ONE_REPS, 0.99);
  }
  if (!ok)
    fprintf(stderr, "bench_throughput: the cuBLAS reference failed\n");
  cudaFreeHost(ha);
  cudaFreeHost(hb);
  cudaFreeHost(hc);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  cublasDestroy(h);
  return r;
}
#endif

/* ---- one row of the table ---------------------------------------------------------------- */

static void run_one(const bench_args *args, uint64_t size, gc_dtype dtype, unsigned clients) {
  run_state st;
  memset(&st, 0, sizeof st);
  st.args = args;
  gc_gemm_opts_init(&st.opts);
  st.opts.m = st.opts.n = st.opts.k = size;
  st.opts.dtype = dtype;
  size_t elems = (size_t)(size * size), bytes = elems * elem_bytes(dtype);
  /* The float64 reference of a whole 4096^3 takes minutes on one core: a block of rows from the
   * middle of C is checked (A row-major, not transposed), at most CHECK_ROWS and at most
   * CHECK_MACS multiply-adds' worth (64 rows at 4096^3: a second, where 256 took 15 to 40 s
   * before the clients even connected). */
  uint64_t budget_rows = CHECK_MACS / (size * size);
  st.check = st.opts;
  st.check.m = size < CHECK_ROWS ? size : CHECK_ROWS;
  if (st.check.m > budget_rows)
    st.check.m = budget_rows > 16 ? budget_rows : 16;
  st.check_row0 = (size - st.check.m) / 2;
  size_t ref_elems = st.check.m * size;
  void *a = malloc(bytes), *b = malloc(bytes);
  double *ref = malloc(ref_elems * sizeof(double)), *bound = malloc(ref_elems * sizeof(double));
  st.lat_us = malloc(args->requests * sizeof(double));
  conn_state *cs = calloc(clients, sizeof *cs);
  pthread_t *tid = calloc(clients, sizeof *tid);
  if (!a || !b || !ref || !bound || !st.lat_us || !cs || !tid) {
    fprintf(stderr, "bench_throughput: out of memory\n");
    exit(1);
  }
  uint64_t seed = size * 31 + dtype;
  gctl_fill_random(dtype, a, elems, &seed);
  gctl_fill_random(dtype, b, elems, &seed);
  gctl_ref_gemm(&st.check, (const char *)a + st.check_row0 * size * elem_bytes(dtype), b, NULL,
                ref, bound);
  st.a = a;
  st.b = b;
  st.ref = ref;
  st.bound = bound;
  st.tolerance = gctl_ref_tolerance(&st.opts);
  for (unsigned i = 0; i < clients; i++) {
    cs[i].st = &st;
    for (unsigned s = 0; s < args->depth; s++)
      if (!(cs[i].out[s] = malloc(bytes))) {
        fprintf(stderr, "bench_throughput: out of memory\n");
        exit(1);
      }
  }

  background_state bg = {&st, args->background, 0};
  pthread_t bg_tid;
  bool with_bg = args->background > 0 &&
                 pthread_create(&bg_tid, NULL, background_main, &bg) == 0;
  double t0 = now_us();
  for (unsigned i = 0; i < clients; i++)
    pthread_create(&tid[i], NULL, conn_main, &cs[i]);
  int failed = 0;
  for (unsigned i = 0; i < clients; i++) {
    pthread_join(tid[i], NULL);
    failed += cs[i].fail;
  }
  double secs = (now_us() - t0) / 1e6;
  if (with_bg) {
    atomic_store(&st.stop_background, true);
    pthread_join(bg_tid, NULL);
  }
  uint64_t done = atomic_load(&st.done);
  qsort(st.lat_us, done, sizeof(double), cmp_double);

  ref_result rr = {NAN, NAN, NAN};
  if (!strcmp(args->ref, "cpu"))
    rr = ref_cpu(&st.opts, a, b, clients, args->requests / 4 ? args->requests / 4 : 1);
#ifdef BENCH_WITH_CUDA
  else if (!strcmp(args->ref, "gpu"))
    rr = ref_gpu(&st.opts, a, b, clients * args->depth, args->requests);
#endif
  char bgcol[48] = "";
  if (args->background)
    snprintf(bgcol, sizeof bgcol, " %llu done |", (unsigned long long)bg.done);
  printf("| %llu | %s | %u x %u | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |%s %llu / %llu / %d |\n",
         (unsigned long long)size, dtype_name(dtype), clients, args->depth,
         (double)done / secs, quantile(st.lat_us, done, 0.5), quantile(st.lat_us, done, 0.99),
         rr.gemm_per_s, rr.p50_us, rr.p99_us, bgcol,
         (unsigned long long)atomic_load(&st.errors), (unsigned long long)atomic_load(&st.wrong),
         failed);
  fflush(stdout);
  for (unsigned i = 0; i < clients; i++)
    for (unsigned s = 0; s < args->depth; s++)
      free(cs[i].out[s]);
  free(cs);
  free(tid);
  free(a);
  free(b);
  free(ref);
  free(bound);
  free(st.lat_us);
}

/* ---- arguments ----------------------------------------------------------------------------- */

static int parse_list(const char *s, uint64_t *out, int max) {
  int n = 0;
  char *copy = strdup(s), *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok && n < max; tok = strtok_r(NULL, ",", &save)) {
    char *end;
    unsigned long long v = strtoull(tok, &end, 10);
    if (*end || v == 0) {
      free(copy);
      return -1;
    }
    out[n++] = v;
  }
  free(copy);
  return n;
}

static int parse_dtypes(const char *s, gc_dtype *out) {
  int n = 0;
  char *copy = strdup(s), *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok && n < MAX_LIST; tok = strtok_r(NULL, ",", &save)) {
    int t = !strcmp(tok, "f32") ? 0 : !strcmp(tok, "f64") ? 1 : !strcmp(tok, "f16") ? 2
          : !strcmp(tok, "bf16") ? 3 : -1;
    if (t < 0) {
      free(copy);
      return -1;
    }
    out[n++] = (gc_dtype)t;
  }
  free(copy);
  return n;
}

static void usage(void) {
  fprintf(stderr, "usage: bench_throughput [--connect ADDR] [--sizes 32,64] [--dtypes f32,bf16] "
                  "[--clients 1,8,32] [--depth D] [--requests N] [--ref gpu|cpu|none] "
                  "[--background SIZE]\n");
  exit(2);
}

int main(int argc, char **argv) {
  bench_args args = {.addr = NULL, .depth = 64, .requests = 20000, .background = 0};
#ifdef BENCH_WITH_CUDA
  args.ref = "gpu";
#else
  args.ref = "cpu";
#endif
  args.nsizes = parse_list("32,64,128,256,512,1024", args.sizes, MAX_LIST);
  args.ndtypes = parse_dtypes("f32,bf16", args.dtypes);
  uint64_t clients[MAX_LIST];
  int nclients = parse_list("1,8,32", clients, MAX_LIST);
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v)
      usage();
    if (!strcmp(argv[i], "--connect"))
      args.addr = v;
    else if (!strcmp(argv[i], "--sizes"))
      args.nsizes = parse_list(v, args.sizes, MAX_LIST);
    else if (!strcmp(argv[i], "--dtypes"))
      args.ndtypes = parse_dtypes(v, args.dtypes);
    else if (!strcmp(argv[i], "--clients"))
      nclients = parse_list(v, clients, MAX_LIST);
    else if (!strcmp(argv[i], "--depth"))
      args.depth = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(argv[i], "--requests"))
      args.requests = strtoull(v, NULL, 10);
    else if (!strcmp(argv[i], "--ref"))
      args.ref = v;
    else if (!strcmp(argv[i], "--background"))
      args.background = strtoull(v, NULL, 10);
    else
      usage();
    i++;
  }
  if (args.nsizes <= 0 || args.ndtypes <= 0 || nclients <= 0 || args.depth == 0 ||
      args.depth > MAX_DEPTH || args.requests == 0)
    usage();
  for (int i = 0; i < nclients; i++)
    args.clients[i] = (unsigned)clients[i];
  args.nclients = nclients;

  printf("bench_throughput: commit %s, %llu requests a row, depth %u a connection, reference %s%s\n\n",
         GEMMD_GIT_COMMIT, (unsigned long long)args.requests, args.depth, args.ref,
         args.background ? ", with a background stream" : "");
  printf("| size | dtype | clients x depth | GEMM/s | p50 us | p99 us | in-process GEMM/s | "
         "in-process one-at-a-time p50 us | p99 us |%s errors / wrong / failed conns |\n",
         args.background ? " background |" : "");
  printf("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |%s --- |\n",
         args.background ? " ---: |" : "");
  for (int s = 0; s < args.nsizes; s++)
    for (int d = 0; d < args.ndtypes; d++)
      for (int c = 0; c < args.nclients; c++)
        run_one(&args, args.sizes[s], args.dtypes[d], args.clients[c]);
  return 0;
}
