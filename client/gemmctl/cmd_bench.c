/*
 * cmd_bench.c - gemmctl bench: R requests, C of them in flight at once on
 * one connection (the asynchronous API), then throughput and latency.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gctl_ref.h"
#include "gemmctl.h"

static const char help[] =
    "usage: gemmctl [--connect ADDR] [--json] bench [--m M --n N --k K] [--dtype T]\n"
    "         [--out-dtype f16|bf16] [--requests R] [--concurrency C] [--shm] [--resident-b]\n"
    "\n"
    "Sends R gemm requests of m x k times k x n (default 512 each, f32, 64 requests;\n"
    "--dtype f32, f64, f16, bf16, i8, e4m3 or e5m2, whose ops count as FLOP here),\n"
    "keeping C in flight at once on one connection (default 1: each request a blocking\n"
    "gc_gemm, which on a Unix socket moves the matrices through the library's automatic\n"
    "scratch region; more go over the socket by gc_submit), and prints the\n"
    "throughput in TFLOP/s and GB/s (bytes sent and received) and the latency\n"
    "percentiles p50, p90 and p99 of single requests. --shm puts A, B and every C in one\n"
    "shared-memory buffer registered with the daemon (a Unix socket to a daemon with the\n"
    "\"shm\" feature): the matrices then never cross the socket. --resident-b puts B once\n"
    "(a daemon with the \"resident\" feature) and names it by handle in every request, as\n"
    "a layer's weights would be: only A goes with each request (GB/s counts A and C).\n"
    "--out-dtype f16|bf16 asks an f32, f64 or fp8 gemm for its result rounded to f16 or bf16\n"
    "(the daemon's \"out_dtype\" feature): half or a quarter of the bytes back.\n"
    "Exit status: 0 ok, 1 error reply, 2 usage error, 3 connection error.\n";

typedef struct {
  gc_gemm_opts opts;
  uint64_t requests, concurrency;
  bool shm, resident_b;
} bench_args;

static int parse_args(const gctl_global *g, int argc, char **argv, bench_args *args) {
  enum { OPT_M = 1, OPT_N, OPT_K, OPT_DTYPE, OPT_OUT_DTYPE, OPT_REQ, OPT_CONC, OPT_SHM,
         OPT_RESIDENT, OPT_HELP };
  static const struct option options[] = {
      {"m", required_argument, NULL, OPT_M},          {"n", required_argument, NULL, OPT_N},
      {"k", required_argument, NULL, OPT_K},          {"dtype", required_argument, NULL, OPT_DTYPE},
      {"requests", required_argument, NULL, OPT_REQ}, {"concurrency", required_argument, NULL, OPT_CONC},
      {"shm", no_argument, NULL, OPT_SHM},            {"help", no_argument, NULL, OPT_HELP},
      {"resident-b", no_argument, NULL, OPT_RESIDENT},
      {"out-dtype", required_argument, NULL, OPT_OUT_DTYPE},
      {NULL, 0, NULL, 0}};
  gc_gemm_opts_init(&args->opts);
  args->opts.m = args->opts.n = args->opts.k = 512;
  args->requests = 64;
  args->concurrency = 1;
  args->shm = args->resident_b = false;
  optind = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, "+", options, NULL)) != -1) {
    bool ok = true;
    switch (opt) {
      case OPT_M: ok = gctl_parse_u64("--m", optarg, 1, &args->opts.m); break;
      case OPT_N: ok = gctl_parse_u64("--n", optarg, 1, &args->opts.n); break;
      case OPT_K: ok = gctl_parse_u64("--k", optarg, 1, &args->opts.k); break;
      case OPT_DTYPE: ok = gctl_parse_dtype(optarg, &args->opts.dtype); break;
      case OPT_OUT_DTYPE: ok = gctl_parse_out_dtype(optarg, &args->opts.out_dtype); break;
      case OPT_REQ: ok = gctl_parse_u64("--requests", optarg, 1, &args->requests); break;
      case OPT_CONC: ok = gctl_parse_u64("--concurrency", optarg, 1, &args->concurrency); break;
      case OPT_SHM: args->shm = true; break;
      case OPT_RESIDENT: args->resident_b = true; break;
      case OPT_HELP: fputs(help, stdout); return -2;
      default: ok = false;
    }
    if (!ok) {
      fputs(help, stderr);
      return gctl_fail(g, GCTL_EXIT_USAGE, "bad bench arguments");
    }
  }
  if (optind < argc) return gctl_fail(g, GCTL_EXIT_USAGE, "bench: unexpected argument \"%s\"", argv[optind]);
  if (gctl_check_out_dtype(g, &args->opts) != GCTL_EXIT_OK) return GCTL_EXIT_USAGE;
  if (args->concurrency > 4096) return gctl_fail(g, GCTL_EXIT_USAGE, "--concurrency is at most 4096");
  if (args->concurrency > args->requests) args->concurrency = args->requests;
  return GCTL_EXIT_OK;
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

static double percentile(const double *sorted, size_t n, double p) {
  size_t i = (size_t)(p * (double)(n - 1) + 0.5);
  return sorted[i < n ? i : n - 1];
}

typedef struct {
  gc_req req;     /* 0 when the slot is free */
  int64_t start_us;
  void *out;
} slot;

static void print_report(const gctl_global *g, const bench_args *args, double wall_s,
                         double *lat_ms, uint64_t bytes_per_request) {
  size_t n = (size_t)args->requests;
  qsort(lat_ms, n, sizeof *lat_ms, cmp_double);
  const gc_gemm_opts *o = &args->opts;
  /* a complex multiply-add is 8 real operations (4 multiplies, 4 adds) */
  double per = 2.0 * (double)gctl_dtype_parts(o->dtype) * (double)gctl_dtype_parts(o->dtype);
  double flops = per * (double)o->m * (double)o->n * (double)o->k * (double)n;
  double tflops = flops / wall_s / 1e12;
  double gbps = (double)bytes_per_request * (double)n / wall_s / 1e9;
  double p50 = percentile(lat_ms, n, 0.50), p90 = percentile(lat_ms, n, 0.90),
         p99 = percentile(lat_ms, n, 0.99);
  if (g->json) {
    printf("{\"ok\": true, \"command\": \"bench\", \"m\": %llu, \"n\": %llu, \"k\": %llu, "
           "\"dtype\": \"%s\", \"out_dtype\": \"%s\", \"requests\": %llu, \"concurrency\": %llu, "
           "\"seconds\": %.6f, \"tflops\": %.6f, \"gbps\": %.6f, \"latency_ms\": {\"p50\": %.3f, "
           "\"p90\": %.3f, \"p99\": %.3f}}\n",
           (unsigned long long)o->m, (unsigned long long)o->n, (unsigned long long)o->k,
           gctl_dtype_name(o->dtype), gctl_out_dtype_name(o), (unsigned long long)args->requests,
           (unsigned long long)args->concurrency, wall_s, tflops, gbps, p50, p90, p99);
  } else {
    printf("%llu x gemm %llux%llux%llu %s, %llu in flight: %.3f s\n",
           (unsigned long long)args->requests, (unsigned long long)o->m, (unsigned long long)o->n,
           (unsigned long long)o->k, gctl_dtype_label(o),
           (unsigned long long)args->concurrency, wall_s);
    printf("throughput  %.4f TFLOP/s  %.3f GB/s\n", tflops, gbps);
    printf("latency     p50 %.3f ms  p90 %.3f ms  p99 %.3f ms\n", p50, p90, p99);
  }
}

/* One blocking gc_gemm after another: what a plain C caller gets (on a Unix socket, the
 * library's automatic scratch region). */
static int drive_blocking(const gctl_global *g, gc_conn *conn, const bench_args *args,
                          const void *a, const void *b, void *out, double *lat_ms) {
  for (uint64_t i = 0; i < args->requests; i++) {
    int64_t start = gctl_now_us();
    if (gc_gemm(conn, &args->opts, a, b, NULL, out, NULL) != 0)
      return gctl_fail_call(g, "gemm", gc_last_error(conn));
    lat_ms[i] = (double)(gctl_now_us() - start) / 1000.0;
  }
  return GCTL_EXIT_OK;
}

/* Keeps `concurrency` requests in flight until `requests` have completed. */
static int drive(const gctl_global *g, gc_conn *conn, const bench_args *args, const void *a,
                 const void *b, slot *slots, double *lat_ms) {
  if (args->concurrency == 1 && !args->shm)
    return drive_blocking(g, conn, args, a, b, slots[0].out, lat_ms);
  uint64_t submitted = 0, completed = 0;
  size_t nslots = (size_t)args->concurrency;
  gc_completion *done = calloc(nslots, sizeof *done);
  if (done == NULL) return gctl_fail(g, GCTL_EXIT_LOCAL, "out of memory");
  int rc = GCTL_EXIT_OK;
  while (completed < args->requests && rc == GCTL_EXIT_OK) {
    for (size_t s = 0; s < nslots && submitted < args->requests; s++) {
      if (slots[s].req != 0) continue;
      slots[s].start_us = gctl_now_us();
      if (gc_submit(conn, &args->opts, a, b, NULL, slots[s].out, &slots[s].req) != 0) {
        rc = gctl_fail_call(g, "submit", gc_last_error(conn));
        break;
      }
      submitted++;
    }
    if (rc != GCTL_EXIT_OK) break;
    int n = gc_poll(conn, -1, done, nslots);
    if (n < 0) {
      rc = gctl_fail_call(g, "bench", gc_last_error(conn));
      break;
    }
    int64_t now = gctl_now_us();
    for (int i = 0; i < n; i++) {
      if (done[i].error.code != 0) {
        rc = gctl_fail_call(g, "gemm", &done[i].error);
        break;
      }
      for (size_t s = 0; s < nslots; s++) {
        if (slots[s].req != done[i].req) continue;
        lat_ms[completed++] = (double)(now - slots[s].start_us) / 1000.0;
        slots[s].req = 0;
      }
    }
  }
  free(done);
  return rc;
}

/* The matrices: a, b and one C per slot, from malloc, or laid out in one shared-memory
 * buffer registered on conn (then gc_close frees it). */
typedef struct {
  void *a, *b;
  bool shm;
} buffers;

static uint64_t aligned(uint64_t bytes) { return (bytes + 63) / 64 * 64; }

static int alloc_buffers(const gctl_global *g, gc_conn *conn, const bench_args *args,
                         const uint64_t bytes[3], buffers *buf, slot *slots) {
  size_t n = (size_t)args->concurrency;
  buf->shm = args->shm;
  if (!args->shm) {
    buf->a = malloc(bytes[0]);
    buf->b = malloc(bytes[1]);
    bool ok = buf->a && buf->b;
    for (size_t s = 0; s < n; s++) ok = (slots[s].out = malloc(bytes[2])) != NULL && ok;
    return ok ? GCTL_EXIT_OK : gctl_fail(g, GCTL_EXIT_LOCAL, "out of memory");
  }
  uint64_t total = aligned(bytes[0]) + aligned(bytes[1]) + aligned(bytes[2]) * n;
  uint8_t *base = NULL;
  if (total > SIZE_MAX || gc_shm_alloc(conn, (size_t)total, 30000, (void **)&base) != 0)
    return gctl_fail_call(g, "shared memory", gc_last_error(conn));
  buf->a = base;
  buf->b = base + aligned(bytes[0]);
  for (size_t s = 0; s < n; s++)
    slots[s].out = base + aligned(bytes[0]) + aligned(bytes[1]) + aligned(bytes[2]) * s;
  return GCTL_EXIT_OK;
}

static void free_buffers(const bench_args *args, buffers *buf, slot *slots) {
  if (buf->shm) return; /* unmapped by gc_close */
  for (size_t s = 0; slots && s < args->concurrency; s++) free(slots[s].out);
  free(buf->a);
  free(buf->b);
}

static int run(const gctl_global *g, const bench_args *args) {
  const gc_gemm_opts *o = &args->opts;
  uint64_t bytes[3] = {gc_gemm_operand_bytes(o, 'a'), gc_gemm_operand_bytes(o, 'b'),
                       gc_gemm_operand_bytes(o, 'o')};
  if (bytes[0] == 0 || bytes[1] == 0 || bytes[2] == 0)
    return gctl_fail(g, GCTL_EXIT_USAGE, "sizes too large");
  size_t esize = gctl_dtype_size(o->dtype);
  buffers buf = {NULL, NULL, false};
  slot *slots = calloc((size_t)args->concurrency, sizeof *slots);
  double *lat_ms = calloc((size_t)args->requests, sizeof *lat_ms);
  int rc = slots && lat_ms ? GCTL_EXIT_OK : gctl_fail(g, GCTL_EXIT_LOCAL, "out of memory");
  gc_conn *conn = NULL;
  bench_args sent = *args; /* with --resident-b: B's handle */
  if (rc == GCTL_EXIT_OK) rc = gctl_connect(g, &conn);
  if (rc == GCTL_EXIT_OK) rc = gctl_check_limits(g, conn, o, !args->shm);
  if (rc == GCTL_EXIT_OK) rc = alloc_buffers(g, conn, args, bytes, &buf, slots);
  if (rc == GCTL_EXIT_OK) {
    uint64_t seed = 42;
    gctl_fill_random(o->dtype, buf.a, bytes[0] / esize, &seed);
    gctl_fill_random(o->dtype, buf.b, bytes[1] / esize, &seed);
    if (args->resident_b && gc_put(conn, o->dtype, 1, o->k, o->n, buf.b, 60000,
                                   &sent.opts.b_handle) != 0)
      rc = gctl_fail_call(g, "put", gc_last_error(conn));
  }
  if (rc == GCTL_EXIT_OK) {
    int64_t t0 = gctl_now_us();
    rc = drive(g, conn, &sent, buf.a, buf.b, slots, lat_ms);
    double wall_s = (double)(gctl_now_us() - t0) / 1e6;
    uint64_t per_request = bytes[0] + (args->resident_b ? 0 : bytes[1]) + bytes[2];
    if (rc == GCTL_EXIT_OK) print_report(g, args, wall_s, lat_ms, per_request);
  }
  gc_close(conn); /* drops anything still in flight before the buffers go */
  free_buffers(args, &buf, slots);
  free(slots);
  free(lat_ms);
  return rc;
}

int gctl_cmd_bench(const gctl_global *g, int argc, char **argv) {
  bench_args args;
  int rc = parse_args(g, argc, argv, &args);
  if (rc == -2) return GCTL_EXIT_OK;
  if (rc != GCTL_EXIT_OK) return rc;
  return run(g, &args);
}
