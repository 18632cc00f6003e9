/*
 * cmd_gemm.c - gemmctl gemm: operands from .npy files, the result into one.
 *
 * dtype and shapes come from the files and are checked against each other
 * before anything is sent. A 2-D array is one problem, a 3-D array (batch,
 * rows, cols) a batch. A 2-D Fortran-order A or B is sent as it lies on
 * disk, with its trans flag flipped (column-major X is row-major X^T): no
 * copy. Other Fortran-order arrays are rewritten in C order first.
 */
#include <getopt.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gctl_npy.h"
#include "gctl_ref.h"
#include "gemmctl.h"

static const char help[] =
    "usage: gemmctl [--connect ADDR] [--json] gemm --a A.npy --b B.npy [--c C.npy]\n"
    "         [--alpha X] [--beta Y] [--trans-a] [--trans-b] [--precision exact|fast]\n"
    "         [--dtype bf16|i8|e4m3|e5m2] [--scale-a X] [--scale-b X] [--bias BIAS.npy]\n"
    "         [--activation relu|gelu|gelu_tanh] [--out-dtype f16|bf16] --out C.npy\n"
    "\n"
    "Computes C = alpha * op(A) * op(B) + beta * C on the daemon and writes C to --out.\n"
    "--bias (n values, 1-D, the dtype of A) is added to every row instead of --c, and\n"
    "--activation is applied to every element last: act(alpha * op(A) * op(B) + bias).\n"
    "--out-dtype f16|bf16 (an f32, f64 or fp8 gemm; the daemon's \"out_dtype\" feature)\n"
    "rounds the result to f16 or bf16 once, at the end; --c or --bias must then hold that dtype\n"
    "(bf16: as below, <u2 bits writing the result as <u2 too), and --out gets it.\n"
    "dtype and shapes come from the files: <f4 (f32), <f8 (f64), <f2 (f16), |i1 (i8); NumPy\n"
    "has no bfloat16, so bf16 is read from a '<V2' descr (ml_dtypes) or from <u2 data holding\n"
    "bfloat16 bits with --dtype bf16 (the result is then written as <u2 too).\n"
    "i8 (int8 A and B, the daemon's \"i8\" feature) returns int32: --c or --bias hold <i4 and\n"
    "--out gets <i4; --alpha and --beta are integers within int32, --activation relu or none,\n"
    "and the arithmetic is 32-bit two's complement (exact while it fits, wrapping beyond).\n"
    "e4m3 and e5m2 (fp8 A and B, the daemon's \"fp8\" feature): NumPy has no fp8, so A and B\n"
    "are |u1 files holding the fp8 bytes and --dtype says which format; the result is f32\n"
    "(--c or --bias <f4, --out <f4, or --out-dtype's), and --scale-a and --scale-b (default\n"
    "1, fp8 only) are the per-tensor scales: C = alpha * scale_a * scale_b * op(A) * op(B) +\n"
    "beta * C.\n"
    "2-D arrays are one matrix, 3-D arrays (batch, rows, cols) a batch. op(A) is m x k\n"
    "(A is stored k x m with --trans-a), op(B) is k x n, C is m x n. Both C and Fortran\n"
    "order are accepted; little-endian only. --beta other than 0 needs --c; with --c\n"
    "and no --beta, beta is 1 (C is added: C = alpha * op(A) * op(B) + C).\n"
    "A file name - means stdin (--a, --b, --c: one array each, read in that order) or stdout\n"
    "(--out: the summary then goes to stderr).\n"
    "Exit status: 0 ok, 1 error reply, 2 usage or input error, 3 connection error,\n"
    "4 output not written.\n";

typedef struct {
  const char *a_path, *b_path, *c_path, *out_path, *bias_path;
  gc_gemm_opts opts;
  bool have_dtype;
  bool have_beta;
  gc_dtype dtype;
} gemm_args;

enum { OPT_A = 1, OPT_B, OPT_C, OPT_OUT, OPT_ALPHA, OPT_BETA, OPT_TA, OPT_TB, OPT_PREC,
       OPT_DTYPE, OPT_BIAS, OPT_ACT, OPT_OUT_DTYPE, OPT_SCALE_A, OPT_SCALE_B, OPT_HELP };

static int parse_args(const gctl_global *g, int argc, char **argv, gemm_args *args) {
  static const struct option options[] = {
      {"a", required_argument, NULL, OPT_A},         {"b", required_argument, NULL, OPT_B},
      {"c", required_argument, NULL, OPT_C},         {"out", required_argument, NULL, OPT_OUT},
      {"alpha", required_argument, NULL, OPT_ALPHA}, {"beta", required_argument, NULL, OPT_BETA},
      {"trans-a", no_argument, NULL, OPT_TA},        {"trans-b", no_argument, NULL, OPT_TB},
      {"precision", required_argument, NULL, OPT_PREC},
      {"dtype", required_argument, NULL, OPT_DTYPE}, {"help", no_argument, NULL, OPT_HELP},
      {"bias", required_argument, NULL, OPT_BIAS},
      {"activation", required_argument, NULL, OPT_ACT},
      {"out-dtype", required_argument, NULL, OPT_OUT_DTYPE},
      {"scale-a", required_argument, NULL, OPT_SCALE_A},
      {"scale-b", required_argument, NULL, OPT_SCALE_B},
      {NULL, 0, NULL, 0}};
  memset(args, 0, sizeof *args);
  gc_gemm_opts_init(&args->opts);
  optind = 0;
  opterr = 1;
  int opt;
  while ((opt = getopt_long(argc, argv, "+", options, NULL)) != -1) {
    switch (opt) {
      case OPT_A: args->a_path = optarg; break;
      case OPT_B: args->b_path = optarg; break;
      case OPT_C: args->c_path = optarg; break;
      case OPT_OUT: args->out_path = optarg; break;
      case OPT_ALPHA:
        if (!gctl_parse_scalar("--alpha", optarg, &args->opts.alpha, &args->opts.alpha_im))
          return GCTL_EXIT_USAGE;
        break;
      case OPT_BETA:
        if (!gctl_parse_scalar("--beta", optarg, &args->opts.beta, &args->opts.beta_im))
          return GCTL_EXIT_USAGE;
        args->have_beta = true;
        break;
      case OPT_SCALE_A:
        if (!gctl_parse_double("--scale-a", optarg, &args->opts.scale_a)) return GCTL_EXIT_USAGE;
        break;
      case OPT_SCALE_B:
        if (!gctl_parse_double("--scale-b", optarg, &args->opts.scale_b)) return GCTL_EXIT_USAGE;
        break;
      case OPT_TA: args->opts.trans_a = 1; break;
      case OPT_TB: args->opts.trans_b = 1; break;
      case OPT_PREC:
        if (strcmp(optarg, "exact") == 0) args->opts.precision = GC_PRECISION_EXACT;
        else if (strcmp(optarg, "fast") == 0) args->opts.precision = GC_PRECISION_FAST;
        else return gctl_fail(g, GCTL_EXIT_USAGE, "--precision is exact or fast, not \"%s\"", optarg);
        break;
      case OPT_DTYPE:
        if (!gctl_parse_dtype(optarg, &args->dtype)) return GCTL_EXIT_USAGE;
        args->have_dtype = true;
        break;
      case OPT_BIAS: args->bias_path = optarg; break;
      case OPT_OUT_DTYPE:
        if (!gctl_parse_out_dtype(optarg, &args->opts.out_dtype)) return GCTL_EXIT_USAGE;
        break;
      case OPT_ACT:
        if (strcmp(optarg, "none") == 0) args->opts.activation = GC_ACT_NONE;
        else if (strcmp(optarg, "relu") == 0) args->opts.activation = GC_ACT_RELU;
        else if (strcmp(optarg, "gelu") == 0) args->opts.activation = GC_ACT_GELU;
        else if (strcmp(optarg, "gelu_tanh") == 0) args->opts.activation = GC_ACT_GELU_TANH;
        else return gctl_fail(g, GCTL_EXIT_USAGE, "--activation is relu, gelu, gelu_tanh or none, not \"%s\"", optarg);
        break;
      case OPT_HELP: fputs(help, stdout); return -2;
      default: fputs(help, stderr); return gctl_fail(g, GCTL_EXIT_USAGE, "bad gemm arguments");
    }
  }
  if (optind < argc) return gctl_fail(g, GCTL_EXIT_USAGE, "gemm: unexpected argument \"%s\"", argv[optind]);
  if (!args->a_path || !args->b_path || !args->out_path) {
    fputs(help, stderr);
    return gctl_fail(g, GCTL_EXIT_USAGE, "gemm needs --a, --b and --out");
  }
  if (args->bias_path != NULL) {
    if (args->c_path != NULL || args->have_beta)
      return gctl_fail(g, GCTL_EXIT_USAGE, "--bias is added to every row: it takes no --c or --beta");
    args->c_path = args->bias_path; /* sent as c, one row, beta 1 */
    args->opts.bias = 1;
    args->opts.beta = 1.0;
    return GCTL_EXIT_OK;
  }
  if (args->c_path != NULL && !args->have_beta) args->opts.beta = 1.0; /* --c alone: C += */
  if (args->opts.beta != 0.0 && args->c_path == NULL)
    return gctl_fail(g, GCTL_EXIT_USAGE, "--beta %g needs --c (the C to scale)", args->opts.beta);
  return GCTL_EXIT_OK;
}

typedef struct {
  gctl_npy a, b, c;
  bool has_c;
  bool raw_u2; /* the files hold <u2 reinterpreted as bf16: write <u2 back */
} gemm_inputs;

static void inputs_free(gemm_inputs *in) {
  gctl_npy_free(&in->a);
  gctl_npy_free(&in->b);
  gctl_npy_free(&in->c);
}

static int load(const gctl_global *g, const char *path, gctl_npy *arr, bool is_bias) {
  char err[512];
  if (gctl_npy_read(path, arr, err, sizeof err) != 0)
    return gctl_fail(g, GCTL_EXIT_USAGE, "%s", err);
  if (is_bias) { /* n values: a vector, read as one row */
    if (arr->ndim != 1)
      return gctl_fail(g, GCTL_EXIT_USAGE, "%s: a %d-D array; --bias takes n values (1-D)",
                       path, arr->ndim);
    arr->ndim = 2;
    arr->shape[1] = arr->shape[0];
    arr->shape[0] = 1;
    return GCTL_EXIT_OK;
  }
  if (arr->ndim != 2 && arr->ndim != 3)
    return gctl_fail(g, GCTL_EXIT_USAGE, "%s: a %d-D array; gemm takes 2-D matrices or 3-D "
                     "batches (batch, rows, cols)", path, arr->ndim);
  return GCTL_EXIT_OK;
}

/* One dtype for A and B (and C, unless the result has another: --out-dtype's, an i8 gemm's i32
 * or an fp8 gemm's f32); <u2 only with --dtype bf16, |u1 only with --dtype e4m3 or e5m2. */
static int settle_dtype(const gctl_global *g, const gemm_args *args, gemm_inputs *in,
                        gc_dtype *dtype) {
  int file_dtype = in->a.dtype;
  /* C in the result's dtype: checked by settle_out_dtype */
  bool c_apart = args->opts.out_dtype != GC_DTYPE_DEFAULT || file_dtype == GC_DTYPE_I8 ||
                 file_dtype == GCTL_NPY_U1;
  if (in->b.dtype != file_dtype || (in->has_c && !c_apart && in->c.dtype != file_dtype))
    return gctl_fail(g, GCTL_EXIT_USAGE, "A, B and C must have the same dtype (A is %s, B is %s%s%s)",
                     gctl_npy_descr(in->a.dtype), gctl_npy_descr(in->b.dtype),
                     in->has_c ? ", C is " : "", in->has_c ? gctl_npy_descr(in->c.dtype) : "");
  if (file_dtype == GCTL_NPY_U2) {
    if (!args->have_dtype || args->dtype != GC_DTYPE_BF16)
      return gctl_fail(g, GCTL_EXIT_USAGE, "<u2 files hold raw 16-bit data: pass --dtype bf16 "
                       "to read them as bfloat16");
    in->raw_u2 = true;
    *dtype = GC_DTYPE_BF16;
    return GCTL_EXIT_OK;
  }
  if (file_dtype == GCTL_NPY_U1) {
    if (!args->have_dtype || !gctl_dtype_is_fp8(args->dtype))
      return gctl_fail(g, GCTL_EXIT_USAGE, "|u1 files hold raw bytes: pass --dtype e4m3 or e5m2 "
                       "to read them as fp8 of that format");
    *dtype = args->dtype;
    return GCTL_EXIT_OK;
  }
  if (args->have_dtype && (int)args->dtype != file_dtype)
    return gctl_fail(g, GCTL_EXIT_USAGE, "--dtype %s but the files hold %s",
                     gctl_dtype_name(args->dtype), gctl_npy_descr(file_dtype));
  if (file_dtype == GC_DTYPE_I32)
    return gctl_fail(g, GCTL_EXIT_USAGE, "A and B hold <i4 (int32): no gemm takes int32 "
                     "operands (an i8 gemm, of |i1 files, returns int32)");
  *dtype = (gc_dtype)file_dtype;
  return GCTL_EXIT_OK;
}

/* The result in another dtype than A's (--out-dtype's cast, an i8 gemm's i32, an fp8 gemm's
 * f32), and C (or the bias) in it too; bf16 also as <u2 bits, the result then written as <u2
 * too. */
static int settle_out_dtype(const gctl_global *g, gemm_inputs *in, const gc_gemm_opts *o) {
  if (o->out_dtype != GC_DTYPE_DEFAULT && gctl_check_out_dtype(g, o) != GCTL_EXIT_OK)
    return GCTL_EXIT_USAGE;
  gc_dtype result = gctl_out_dtype(o);
  if (o->out_dtype == GC_DTYPE_DEFAULT && result == o->dtype) return GCTL_EXIT_OK;
  if (!in->has_c) {
    in->raw_u2 = in->raw_u2 && result == o->dtype;
    return GCTL_EXIT_OK;
  }
  bool u2 = in->c.dtype == GCTL_NPY_U2 && result == GC_DTYPE_BF16;
  char why[32]; /* what sets the result's dtype */
  if (o->out_dtype != GC_DTYPE_DEFAULT) snprintf(why, sizeof why, "--out-dtype");
  else snprintf(why, sizeof why, "an %s gemm returns", gctl_dtype_name(o->dtype));
  if (in->c.dtype != (int)result && !u2)
    return gctl_fail(g, GCTL_EXIT_USAGE, "%s %s: %s must hold %s too, not %s", why,
                     gctl_dtype_name(result), o->bias ? "--bias" : "--c", gctl_npy_descr(result),
                     gctl_npy_descr(in->c.dtype));
  in->raw_u2 = u2;
  return GCTL_EXIT_OK;
}

/* Fortran order: the copy-free flip for 2-D A and B, a C-order copy otherwise. */
static int settle_order(const gctl_global *g, gctl_npy *arr, int *trans, bool can_flip) {
  if (!arr->fortran_order) return GCTL_EXIT_OK;
  if (can_flip && arr->ndim == 2) {
    uint64_t rows = arr->shape[0];
    arr->shape[0] = arr->shape[1]; /* the bytes are the C-order transpose */
    arr->shape[1] = rows;
    arr->fortran_order = false;
    *trans = !*trans;
    return GCTL_EXIT_OK;
  }
  char err[256];
  if (gctl_npy_to_c_order(arr, err, sizeof err) != 0) return gctl_fail(g, GCTL_EXIT_LOCAL, "%s", err);
  return GCTL_EXIT_OK;
}

static uint64_t batch_of(const gctl_npy *arr) { return arr->ndim == 3 ? arr->shape[0] : 1; }
static uint64_t rows_of(const gctl_npy *arr) { return arr->shape[arr->ndim - 2]; }
static uint64_t cols_of(const gctl_npy *arr) { return arr->shape[arr->ndim - 1]; }

/* m, n, k and batch from the shapes (after settle_order), each mismatch named. */
static int settle_shapes(const gctl_global *g, const gemm_inputs *in, gc_gemm_opts *o) {
  uint64_t a_rows = rows_of(&in->a), a_cols = cols_of(&in->a);
  uint64_t b_rows = rows_of(&in->b), b_cols = cols_of(&in->b);
  o->m = o->trans_a ? a_cols : a_rows;
  o->k = o->trans_a ? a_rows : a_cols;
  uint64_t kb = o->trans_b ? b_cols : b_rows;
  o->n = o->trans_b ? b_rows : b_cols;
  if (o->k != kb)
    return gctl_fail(g, GCTL_EXIT_USAGE, "shapes do not match: op(A) is %llux%llu, so op(B) "
                     "needs %llu rows, but it is %llux%llu",
                     (unsigned long long)o->m, (unsigned long long)o->k, (unsigned long long)o->k,
                     (unsigned long long)kb, (unsigned long long)o->n);
  if (in->a.ndim != in->b.ndim || batch_of(&in->a) != batch_of(&in->b))
    return gctl_fail(g, GCTL_EXIT_USAGE, "A and B must both be 2-D, or both 3-D with the same "
                     "batch (A has %llu, B %llu)", (unsigned long long)batch_of(&in->a),
                     (unsigned long long)batch_of(&in->b));
  o->batch = batch_of(&in->a);
  if (o->m == 0 || o->n == 0 || o->k == 0 || o->batch == 0)
    return gctl_fail(g, GCTL_EXIT_USAGE, "empty matrices: every dimension must be >= 1");
  if (in->has_c && o->bias && cols_of(&in->c) != o->n)
    return gctl_fail(g, GCTL_EXIT_USAGE, "--bias must hold n = %llu values (one per column of C)",
                     (unsigned long long)o->n);
  if (in->has_c && !o->bias && (in->c.ndim != in->a.ndim || batch_of(&in->c) != o->batch ||
                                rows_of(&in->c) != o->m || cols_of(&in->c) != o->n))
    return gctl_fail(g, GCTL_EXIT_USAGE, "C must be %s%llux%llu to match op(A) * op(B)",
                     in->a.ndim == 3 ? "batch x " : "", (unsigned long long)o->m,
                     (unsigned long long)o->n);
  return GCTL_EXIT_OK;
}

static int read_inputs(const gctl_global *g, gemm_args *args, gemm_inputs *in) {
  int rc;
  memset(in, 0, sizeof *in);
  in->has_c = args->c_path != NULL;
  if ((rc = load(g, args->a_path, &in->a, false)) != 0) return rc;
  if ((rc = load(g, args->b_path, &in->b, false)) != 0) return rc;
  if (in->has_c && (rc = load(g, args->c_path, &in->c, args->opts.bias != 0)) != 0) return rc;
  if ((rc = settle_dtype(g, args, in, &args->opts.dtype)) != 0) return rc;
  if ((rc = settle_out_dtype(g, in, &args->opts)) != 0) return rc;
  if ((rc = gctl_check_dtype_rules(g, &args->opts)) != 0) return rc;
  if ((rc = settle_order(g, &in->a, &args->opts.trans_a, true)) != 0) return rc;
  if ((rc = settle_order(g, &in->b, &args->opts.trans_b, true)) != 0) return rc;
  if (in->has_c && (rc = settle_order(g, &in->c, NULL, false)) != 0) return rc;
  return settle_shapes(g, in, &args->opts);
}

/* Waits for req, drawing the progress bar while the bytes move. */
static int wait_with_progress(gc_conn *conn, gc_req req, gc_gemm_result *result) {
  gctl_progress bar;
  gctl_progress_init(&bar, "gemm");
  int rc;
  uint64_t sent = 0, send_total = 0, received = 0, receive_total = 0;
  while ((rc = gc_wait(conn, req, 100, result)) == GC_E_DEADLINE_EXCEEDED &&
         gc_progress(conn, req, NULL, NULL, NULL, NULL) == 0) {
    gc_progress(conn, req, &sent, &send_total, &received, &receive_total);
    bar.label = sent < send_total ? "gemm: sending  " : received == 0 ? "gemm: computing" : "gemm: receiving";
    gctl_progress_update(&bar, sent + received, send_total + receive_total);
  }
  if (rc == 0) {
    bar.label = "gemm: done     ";
    gctl_progress_update(&bar, send_total + receive_total, send_total + receive_total);
  }
  gctl_progress_end(&bar);
  return rc;
}

static void print_result(const gctl_global *g, const gemm_args *args, const gc_gemm_result *r,
                         double seconds) {
  const gc_gemm_opts *o = &args->opts;
  /* --out -: stdout carries the .npy file, the summary goes beside it */
  FILE *f = strcmp(args->out_path, GCTL_NPY_STDIO) == 0 ? stderr : stdout;
  if (g->json) {
    fprintf(f, "{\"ok\": true, \"command\": \"gemm\", \"out\": ");
    gctl_json_string(f, args->out_path, strlen(args->out_path));
    fprintf(f, ", \"m\": %llu, \"n\": %llu, \"k\": %llu, \"batch\": %llu, \"dtype\": \"%s\", "
           "\"out_dtype\": \"%s\", \"device\": \"%s\", \"kernel\": \"%s\", \"seconds\": %.6f, "
           "\"timings_us\": {\"queue\": %llu, \"transfer_in\": %llu, \"compute\": %llu, "
           "\"transfer_out\": %llu}}\n",
           (unsigned long long)o->m, (unsigned long long)o->n, (unsigned long long)o->k,
           (unsigned long long)o->batch, gctl_dtype_name(o->dtype), gctl_out_dtype_name(o),
           r->device, r->kernel, seconds,
           (unsigned long long)r->queue_us, (unsigned long long)r->transfer_in_us,
           (unsigned long long)r->compute_us, (unsigned long long)r->transfer_out_us);
  } else {
    fprintf(f, "C (%llux%llu%s, %s) written to %s: %s, kernel %s, %.3f ms (compute %.3f ms)\n",
           (unsigned long long)o->m, (unsigned long long)o->n, o->batch > 1 ? " batched" : "",
           gctl_dtype_label(o), args->out_path, r->device, r->kernel, seconds * 1e3,
           (double)r->compute_us / 1e3);
  }
}

/* Fails before anything is sent when --out cannot be created: no work is wasted. */
static int check_out_writable(const gctl_global *g, const char *path) {
  if (strcmp(path, GCTL_NPY_STDIO) == 0) return GCTL_EXIT_OK;
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", path);
  const char *dir = dirname(copy);
  if (access(dir, W_OK) != 0)
    return gctl_fail(g, GCTL_EXIT_LOCAL, "--out %s: cannot write into %s", path, dir);
  return GCTL_EXIT_OK;
}

static int run(const gctl_global *g, gemm_args *args, gemm_inputs *in) {
  if (check_out_writable(g, args->out_path) != GCTL_EXIT_OK) return GCTL_EXIT_LOCAL;
  uint64_t out_bytes = gc_gemm_operand_bytes(&args->opts, 'o');
  if (out_bytes == 0 || out_bytes > SIZE_MAX)
    return gctl_fail(g, GCTL_EXIT_USAGE, "the result would be too large");
  gc_conn *conn;
  int rc = gctl_connect(g, &conn);
  if (rc != GCTL_EXIT_OK) return rc;
  if ((rc = gctl_check_limits(g, conn, &args->opts, true)) != GCTL_EXIT_OK) {
    gc_close(conn);
    return rc;
  }
  void *out = malloc((size_t)out_bytes);
  if (out == NULL) {
    gc_close(conn);
    return gctl_fail(g, GCTL_EXIT_LOCAL, "out of memory for the result");
  }
  gc_req req;
  gc_gemm_result result;
  int64_t t0 = gctl_now_us();
  int code = gc_submit(conn, &args->opts, in->a.data, in->b.data, in->has_c ? in->c.data : NULL,
                       out, &req);
  if (code == 0) code = wait_with_progress(conn, req, &result);
  double seconds = (double)(gctl_now_us() - t0) / 1e6;
  if (code != 0) rc = gctl_fail_call(g, "gemm", gc_last_error(conn));
  gc_close(conn);
  if (rc == GCTL_EXIT_OK) {
    const gc_gemm_opts *o = &args->opts;
    uint64_t shape[3] = {o->batch, o->m, o->n};
    int ndim = in->a.ndim;
    char err[512];
    int dtype = in->raw_u2 ? GCTL_NPY_U2 : (int)gctl_out_dtype(o);
    if (gctl_npy_write(args->out_path, dtype, ndim, shape + (3 - ndim), out, 0, err, sizeof err) != 0)
      rc = gctl_fail(g, GCTL_EXIT_LOCAL, "%s", err);
    else
      print_result(g, args, &result, seconds);
  }
  free(out);
  return rc;
}

int gctl_cmd_gemm(const gctl_global *g, int argc, char **argv) {
  gemm_args args;
  int rc = parse_args(g, argc, argv, &args);
  if (rc == -2) return GCTL_EXIT_OK;
  if (rc != GCTL_EXIT_OK) return rc;
  gemm_inputs in;
  rc = read_inputs(g, &args, &in);
  if (rc == GCTL_EXIT_OK) rc = run(g, &args, &in);
  inputs_free(&in);
  return rc;
}
