/*
 * cmd_verify.c - gemmctl verify: random inputs, the daemon's answer against
 * a float64 reference computed here (exact for i8; fp8 within a bound fitted to
 * its accumulation), PASS or FAIL.
 */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gctl_ref.h"
#include "gemmctl.h"

static const char help[] =
    "usage: gemmctl [--connect ADDR] [--json] verify [--m M --n N --k K] [--dtype T]\n"
    "         [--out-dtype f16|bf16] [--alpha X] [--beta Y] [--scale-a X] [--scale-b X]\n"
    "\n"
    "Multiplies random matrices (default 129 x 127 x 131, f32; values in [-1, 1)) on the\n"
    "daemon, computes the same product here in float64, and prints the largest error\n"
    "relative to |alpha| sum |a||b| + |beta c| (the rounding bound) against a tolerance\n"
    "fitted to the dtype and k, then PASS or FAIL. --alpha (default 1) and --beta (default\n"
    "0; other values add a random C) scale the product and C.\n"
    "--dtype i8 (the daemon's \"i8\" feature): random int8 A and B (and int32 C), an int32\n"
    "result computed here exactly, in 32-bit two's complement as the daemon does (wrapping\n"
    "where it overflows): it must be bit-exact (the error is the largest difference, the\n"
    "tolerance 0). --alpha and --beta are then integers within int32.\n"
    "--dtype e4m3 or e5m2 (the daemon's \"fp8\" feature): A and B uniform in [-1, 1) rounded\n"
    "to that fp8 format, an f32 result against the float64 product of the fp8 values times\n"
    "alpha * scale_a * scale_b (--scale-a, --scale-b: default 1, fp8 only). Each element may\n"
    "be off by 2^-10 sum |alpha scale_a scale_b a b| + 2^-22 |ref| (Hopper's fp8 tensor cores\n"
    "add with fewer bits than f32): the error is the largest share of that used, the\n"
    "tolerance 1.\n"
    "--out-dtype f16|bf16 asks an f32, f64 or fp8 gemm for its result rounded to f16 or bf16\n"
    "(the daemon's \"out_dtype\" feature): it is checked against the reference rounded to that\n"
    "dtype, the tolerance growing by half its ulp.\n"
    "Exit status: 0 PASS, 1 FAIL or error reply, 2 usage error, 3 connection error.\n";

static int parse_args(const gctl_global *g, int argc, char **argv, gc_gemm_opts *o) {
  enum { OPT_M = 1, OPT_N, OPT_K, OPT_DTYPE, OPT_OUT_DTYPE, OPT_ALPHA, OPT_BETA, OPT_SCALE_A,
         OPT_SCALE_B, OPT_HELP };
  static const struct option options[] = {
      {"m", required_argument, NULL, OPT_M}, {"n", required_argument, NULL, OPT_N},
      {"k", required_argument, NULL, OPT_K}, {"dtype", required_argument, NULL, OPT_DTYPE},
      {"out-dtype", required_argument, NULL, OPT_OUT_DTYPE},
      {"alpha", required_argument, NULL, OPT_ALPHA}, {"beta", required_argument, NULL, OPT_BETA},
      {"scale-a", required_argument, NULL, OPT_SCALE_A},
      {"scale-b", required_argument, NULL, OPT_SCALE_B},
      {"help", no_argument, NULL, OPT_HELP}, {NULL, 0, NULL, 0}};
  gc_gemm_opts_init(o);
  o->m = 129;
  o->n = 127;
  o->k = 131;
  optind = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, "+", options, NULL)) != -1) {
    bool ok = true;
    switch (opt) {
      case OPT_M: ok = gctl_parse_u64("--m", optarg, 1, &o->m); break;
      case OPT_N: ok = gctl_parse_u64("--n", optarg, 1, &o->n); break;
      case OPT_K: ok = gctl_parse_u64("--k", optarg, 1, &o->k); break;
      case OPT_DTYPE: ok = gctl_parse_dtype(optarg, &o->dtype); break;
      case OPT_OUT_DTYPE: ok = gctl_parse_out_dtype(optarg, &o->out_dtype); break;
      case OPT_ALPHA: ok = gctl_parse_scalar("--alpha", optarg, &o->alpha, &o->alpha_im); break;
      case OPT_BETA: ok = gctl_parse_scalar("--beta", optarg, &o->beta, &o->beta_im); break;
      case OPT_SCALE_A: ok = gctl_parse_double("--scale-a", optarg, &o->scale_a); break;
      case OPT_SCALE_B: ok = gctl_parse_double("--scale-b", optarg, &o->scale_b); break;
      case OPT_HELP: fputs(help, stdout); return -2;
      default: ok = false;
    }
    if (!ok) {
      fputs(help, stderr);
      return gctl_fail(g, GCTL_EXIT_USAGE, "bad verify arguments");
    }
  }
  if (optind < argc) return gctl_fail(g, GCTL_EXIT_USAGE, "verify: unexpected argument \"%s\"", argv[optind]);
  if (gctl_check_out_dtype(g, o) != GCTL_EXIT_OK || gctl_check_dtype_rules(g, o) != GCTL_EXIT_OK)
    return GCTL_EXIT_USAGE;
  /* the reference is O(m n k) here: keep it to seconds */
  if ((double)o->m * (double)o->n * (double)o->k > 4e10)
    return gctl_fail(g, GCTL_EXIT_USAGE, "verify: m * n * k is at most 4e10 (the reference runs here)");
  return GCTL_EXIT_OK;
}

/* What the error printed is (refgemm.c): an integer result is exact, its error a difference;
 * an fp8 one's is the share of its allowance used. */
static const char *error_label(gc_dtype dtype) {
  if (dtype == GC_DTYPE_I8) return "largest difference";
  return gctl_dtype_is_fp8(dtype) ? "largest share of the fp8 bound" : "max relative error";
}

static void print_verdict(const gctl_global *g, const gc_gemm_opts *o, const gc_gemm_result *r,
                          double error, double tolerance, bool pass) {
  if (g->json) {
    printf("{\"ok\": %s, \"command\": \"verify\", \"m\": %llu, \"n\": %llu, \"k\": %llu, "
           "\"dtype\": \"%s\", \"out_dtype\": \"%s\", \"device\": \"%s\", \"kernel\": \"%s\", "
           "\"error\": %s%.6g%s, \"tolerance\": %.6g, \"result\": \"%s\"}\n",
           pass ? "true" : "false", (unsigned long long)o->m, (unsigned long long)o->n,
           (unsigned long long)o->k, gctl_dtype_name(o->dtype), gctl_out_dtype_name(o),
           r->device, r->kernel,
           isfinite(error) ? "" : "\"", error, isfinite(error) ? "" : "\"", tolerance,
           pass ? "PASS" : "FAIL");
  } else {
    printf("verify %llux%llux%llu %s on %s (%s): %s %.3g, tolerance %.3g: %s\n",
           (unsigned long long)o->m, (unsigned long long)o->n, (unsigned long long)o->k,
           gctl_dtype_label(o), r->device, r->kernel, error_label(o->dtype), error, tolerance,
           pass ? "PASS" : "FAIL");
  }
}

static void ref_progress(void *arg, uint64_t done, uint64_t total) {
  gctl_progress_update(arg, done, total);
}

/* The float64 reference, with a bar on a terminal when it takes more than half a second. */
static void reference(const gc_gemm_opts *o, const void *a, const void *b, const void *c,
                      double *ref, double *bound) {
  gctl_progress p;
  gctl_progress_init(&p, "float64 reference");
  p.rows = true;
  gctl_ref_gemm_progress(o, a, b, c, ref, bound, ref_progress, &p);
  gctl_progress_end(&p);
}

static int run(const gctl_global *g, const gc_gemm_opts *o) {
  size_t esize = gctl_dtype_size(o->dtype);
  gc_dtype out_dtype = gctl_out_dtype(o);
  uint64_t a_bytes = gc_gemm_operand_bytes(o, 'a'), b_bytes = gc_gemm_operand_bytes(o, 'b');
  uint64_t out_bytes = gc_gemm_operand_bytes(o, 'o');
  if (a_bytes == 0 || b_bytes == 0 || out_bytes == 0) return gctl_fail(g, GCTL_EXIT_USAGE, "sizes too large");
  size_t cn = (size_t)(out_bytes / gctl_dtype_size(out_dtype));
  /* the daemon's limits first: nothing is allocated for sizes it cannot serve */
  gc_conn *conn = NULL;
  int rc = gctl_connect(g, &conn);
  if (rc == GCTL_EXIT_OK) rc = gctl_check_limits(g, conn, o, true);
  if (rc != GCTL_EXIT_OK) {
    gc_close(conn);
    return rc;
  }
  void *a = malloc(a_bytes), *b = malloc(b_bytes), *out = malloc(out_bytes);
  bool beta_read = o->beta != 0.0 || o->beta_im != 0.0;
  void *c = beta_read ? malloc(out_bytes) : NULL; /* C: the result's shape and dtype */
  size_t parts = cn * gctl_dtype_parts(out_dtype); /* complex: re, im */
  double *ref = malloc(parts * sizeof *ref), *bound = malloc(parts * sizeof *bound);
  bool have = a && b && out && ref && bound && (c || !beta_read);
  rc = have ? GCTL_EXIT_OK : gctl_fail(g, GCTL_EXIT_LOCAL, "out of memory");
  if (rc == GCTL_EXIT_OK) {
    uint64_t seed = (uint64_t)time(NULL) * 2654435761u;
    gctl_fill_random(o->dtype, a, a_bytes / esize, &seed);
    gctl_fill_random(o->dtype, b, b_bytes / esize, &seed);
    if (c != NULL) gctl_fill_random(out_dtype, c, cn, &seed);
    gctl_poison(out_dtype, out, cn);
  }
  gc_gemm_result result;
  if (rc == GCTL_EXIT_OK && gc_gemm(conn, o, a, b, c, out, &result) != 0)
    rc = gctl_fail_call(g, "gemm", gc_last_error(conn));
  gc_close(conn);
  if (rc == GCTL_EXIT_OK) {
    reference(o, a, b, c, ref, bound);
    double error = gctl_ref_error(o, out, ref, bound), tolerance = gctl_ref_tolerance(o);
    bool pass = error <= tolerance;
    print_verdict(g, o, &result, error, tolerance, pass);
    if (!pass) rc = GCTL_EXIT_SERVER;
  }
  free(a);
  free(b);
  free(out);
  free(c);
  free(ref);
  free(bound);
  return rc;
}

int gctl_cmd_verify(const gctl_global *g, int argc, char **argv) {
  gc_gemm_opts o;
  int rc = parse_args(g, argc, argv, &o);
  if (rc == -2) return GCTL_EXIT_OK;
  if (rc != GCTL_EXIT_OK) return rc;
  return run(g, &o);
}
