/*
 * common.c - what every gemmctl command uses: connecting, reporting errors, parsing
 * numbers and dtypes, checking a gemm's dtype rules, the clock.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gctl_ref.h"
#include "gemmctl.h"

int gctl_fail(const gctl_global *g, int code, const char *fmt, ...) {
  char message[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  fprintf(stderr, "gemmctl: %s\n", message);
  if (g != NULL && g->json) {
    const char *kind = code == GCTL_EXIT_USAGE ? "usage" : code == GCTL_EXIT_CONNECT ? "connection"
                                                                                      : "local";
    printf("{\"ok\": false, \"error\": {\"kind\": \"%s\", \"message\": ", kind);
    gctl_json_string(stdout, message, strlen(message));
    printf("}, \"exit\": %d}\n", code);
  }
  return code;
}

int gctl_fail_call(const gctl_global *g, const char *what, const gc_error *err) {
  int exit_code = err->code == GC_E_UNAVAILABLE ? GCTL_EXIT_CONNECT : GCTL_EXIT_SERVER;
  fprintf(stderr, "gemmctl: %s: %s (%s)\n", what, err->message[0] ? err->message : gc_strerror(err->code),
          gc_code_name(err->code));
  if (g->json) {
    printf("{\"ok\": false, \"error\": {\"kind\": \"%s\", \"code\": \"%s\", \"message\": ",
           exit_code == GCTL_EXIT_CONNECT ? "connection" : "server", gc_code_name(err->code));
    gctl_json_string(stdout, err->message, strlen(err->message));
    printf("}, \"exit\": %d}\n", exit_code);
  }
  return exit_code;
}

int gctl_connect(const gctl_global *g, gc_conn **conn) {
  gc_connect_opts opts;
  gc_connect_opts_init(&opts);
  opts.token_file = g->token_file; /* NULL: the library reads GEMMD_TOKEN(_FILE) */
  if (gc_connect_with(g->addr, &opts, conn) == 0) return GCTL_EXIT_OK;
  const gc_error *err = gc_last_error(NULL);
  char message[sizeof err->message + 64];
  /* name where the address came from: a stale GEMMD_ADDRESS is otherwise a puzzle (the
   * library names a token's source itself) */
  const char *source = g->addr_source;
  if (strncmp(err->message, "token", 5) == 0 || strncmp(err->message, "GEMMD_TOKEN", 11) == 0)
    source = g->token_file ? "--token-file" : NULL;
  snprintf(message, sizeof message, "%s%s%s", source ? source : "", source ? ": " : "",
           err->message);
  fprintf(stderr, "gemmctl: cannot connect: %s (%s)\n", message, gc_code_name(err->code));
  if (g->json) {
    printf("{\"ok\": false, \"error\": {\"kind\": \"connection\", \"code\": \"%s\", \"message\": ",
           gc_code_name(err->code));
    gctl_json_string(stdout, message, strlen(message));
    printf("}, \"exit\": %d}\n", GCTL_EXIT_CONNECT);
  }
  /* a malformed address is a usage error, nothing answering is a connection error */
  return err->code == GC_E_INVALID_ARGUMENT ? GCTL_EXIT_USAGE : GCTL_EXIT_CONNECT;
}

bool gctl_parse_u64(const char *flag, const char *text, uint64_t min, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (text[0] == '\0' || text[0] == '-' || *end != '\0' || errno != 0 || v < min) {
    fprintf(stderr, "gemmctl: %s takes an integer >= %llu, not \"%s\"\n", flag,
            (unsigned long long)min, text);
    return false;
  }
  *out = v;
  return true;
}

bool gctl_parse_double(const char *flag, const char *text, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (text[0] == '\0' || *end != '\0' || errno != 0 || !isfinite(v)) {
    fprintf(stderr, "gemmctl: %s takes a finite number, not \"%s\"\n", flag, text);
    return false;
  }
  *out = v;
  return true;
}

bool gctl_parse_scalar(const char *flag, const char *text, double *re, double *im) {
  /* "X", "Yj", "X+Yj" or "X-Yj" (Python's spelling of a complex number) */
  char *end;
  errno = 0;
  double a = strtod(text, &end), b = 0.0;
  bool ok = text[0] != '\0' && end != text && errno == 0 && isfinite(a);
  if (ok && (*end == 'j' || *end == 'i') && end[1] == '\0') { /* imaginary only */
    *re = 0.0, *im = a;
    return true;
  }
  if (ok && (*end == '+' || *end == '-')) {
    const char *rest = end;
    b = strtod(rest, &end);
    ok = end != rest && errno == 0 && isfinite(b) && (*end == 'j' || *end == 'i') &&
         end[1] == '\0';
  } else {
    ok = ok && *end == '\0';
  }
  if (!ok) {
    fprintf(stderr, "gemmctl: %s takes a finite number (or a complex one: 1+2j), not \"%s\"\n",
            flag, text);
    return false;
  }
  *re = a, *im = b;
  return true;
}

/* By gc_dtype value. */
static const char *const dtype_names[] = {"f32", "f64", "f16", "bf16", "i8",
                                           "i32", "e4m3", "e5m2", "c64", "c128"};
#define DTYPE_COUNT (sizeof dtype_names / sizeof dtype_names[0])

static bool parse_dtype_flag(const char *flag, const char *text, gc_dtype *out) {
  for (size_t i = 0; i < DTYPE_COUNT; i++) {
    if (strcmp(text, dtype_names[i]) == 0) {
      *out = (gc_dtype)i;
      return true;
    }
  }
  fprintf(stderr, "gemmctl: %s takes f32, f64, f16, bf16, i8, i32, e4m3, e5m2, c64 or c128, "
          "not \"%s\"\n", flag, text);
  return false;
}

bool gctl_parse_dtype(const char *text, gc_dtype *out) {
  if (!parse_dtype_flag("--dtype", text, out)) return false;
  if (*out != GC_DTYPE_I32) return true;
  fprintf(stderr, "gemmctl: --dtype i32: no gemm takes int32 operands (an i8 gemm returns "
          "i32)\n");
  return false;
}

bool gctl_parse_out_dtype(const char *text, gc_dtype *out) {
  return parse_dtype_flag("--out-dtype", text, out);
}

int gctl_check_out_dtype(const gctl_global *g, const gc_gemm_opts *o) {
  gc_gemm_opts probe = *o; /* the library's own rule, on a shape that cannot overflow */
  probe.m = probe.n = probe.k = probe.batch = 1;
  if (o->out_dtype == GC_DTYPE_DEFAULT || gc_gemm_operand_bytes(&probe, 'o') != 0)
    return GCTL_EXIT_OK;
  return gctl_fail(g, GCTL_EXIT_USAGE, "--out-dtype %s: a %s gemm cannot return %s (an f32, f64, "
                   "e4m3 or e5m2 gemm's result may be cast to f16 or bf16; an i8 gemm returns "
                   "i32)",
                   gctl_dtype_name(o->out_dtype), gctl_dtype_name(o->dtype),
                   gctl_dtype_name(o->out_dtype));
}

/* A scalar the integer gemm's 32-bit arithmetic takes as it is. */
static bool is_int32(double v) { return v == floor(v) && v >= INT32_MIN && v <= INT32_MAX; }

static int check_int_gemm(const gctl_global *g, const gc_gemm_opts *o) {
  if (!is_int32(o->alpha) || !is_int32(o->beta))
    return gctl_fail(g, GCTL_EXIT_USAGE, "--alpha %.15g, --beta %.15g: an i8 gemm takes integers "
                     "within int32 (its arithmetic is 32-bit, exact)", o->alpha, o->beta);
  if (o->activation != GC_ACT_NONE && o->activation != GC_ACT_RELU)
    return gctl_fail(g, GCTL_EXIT_USAGE, "--activation: an i8 gemm takes relu or none");
  return GCTL_EXIT_OK;
}

/* The per-tensor scales: an fp8 gemm's alone, and alpha times them finite. */
static int check_scales(const gctl_global *g, const gc_gemm_opts *o) {
  if (!gctl_dtype_is_fp8(o->dtype) && (o->scale_a != 1.0 || o->scale_b != 1.0))
    return gctl_fail(g, GCTL_EXIT_USAGE, "--scale-a %.15g, --scale-b %.15g: only an e4m3 or e5m2 "
                     "gemm takes per-tensor scales (this one is %s; fold a scale into --alpha)",
                     o->scale_a, o->scale_b, gctl_dtype_name(o->dtype));
  if (!isfinite(o->alpha * o->scale_a * o->scale_b))
    return gctl_fail(g, GCTL_EXIT_USAGE, "--alpha * --scale-a * --scale-b is not finite");
  return GCTL_EXIT_OK;
}

int gctl_check_dtype_rules(const gctl_global *g, const gc_gemm_opts *o) {
  if (gctl_dtype_parts(o->dtype) == 1 && (o->alpha_im != 0.0 || o->beta_im != 0.0))
    return gctl_fail(g, GCTL_EXIT_USAGE, "--alpha, --beta: only a c64 or c128 gemm takes a "
                     "complex value (this one is %s)", gctl_dtype_name(o->dtype));
  if (o->dtype == GC_DTYPE_I8 && check_int_gemm(g, o) != GCTL_EXIT_OK) return GCTL_EXIT_USAGE;
  return check_scales(g, o);
}

const char *gctl_out_dtype_name(const gc_gemm_opts *o) {
  return gctl_dtype_name(gctl_out_dtype(o));
}

const char *gctl_dtype_label(const gc_gemm_opts *o) {
  static _Thread_local char label[16];
  const char *in = gctl_dtype_name(o->dtype), *out = gctl_out_dtype_name(o);
  snprintf(label, sizeof label, "%s%s%s", in, strcmp(in, out) ? " -> " : "",
           strcmp(in, out) ? out : "");
  return label;
}

const char *gctl_dtype_name(gc_dtype dtype) {
  return (unsigned)dtype < DTYPE_COUNT ? dtype_names[dtype] : "?";
}

int64_t gctl_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
