/*
 * gemmctl.h - what the files of gemmctl share: global options, exit codes,
 * error reporting, argument parsing helpers, output and progress display.
 */
#ifndef GEMMCTL_H
#define GEMMCTL_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "gemmclient.h"

/* Exit codes (documented in --help). */
enum {
  GCTL_EXIT_OK = 0,
  GCTL_EXIT_SERVER = 1,  /* the daemon answered with an error, or verify failed */
  GCTL_EXIT_USAGE = 2,   /* bad command line or input files (nothing was sent) */
  GCTL_EXIT_CONNECT = 3, /* could not connect, or the connection was lost */
  GCTL_EXIT_LOCAL = 4,   /* a local failure: output file not written, out of memory */
};

typedef struct {
  const char *addr;        /* from --connect or GEMMD_ADDRESS (a bare path made unix:PATH), or
                              NULL for the default */
  const char *addr_source; /* "--connect", "GEMMD_ADDRESS", or NULL (the default) */
  const char *token_file;  /* --token-file, or NULL (the library's GEMMD_TOKEN(_FILE)) */
  bool json;               /* --json */
} gctl_global;

typedef int (*gctl_command_fn)(const gctl_global *g, int argc, char **argv);
int gctl_cmd_ping(const gctl_global *g, int argc, char **argv);
int gctl_cmd_info(const gctl_global *g, int argc, char **argv);
int gctl_cmd_stats(const gctl_global *g, int argc, char **argv);
int gctl_cmd_gemm(const gctl_global *g, int argc, char **argv);
int gctl_cmd_bench(const gctl_global *g, int argc, char **argv);
int gctl_cmd_verify(const gctl_global *g, int argc, char **argv);

/* common.c (below the commands; main.c only dispatches to them). Connects (printing the
 * failure): GCTL_EXIT_OK, GCTL_EXIT_CONNECT, or GCTL_EXIT_USAGE (a
 * malformed address, an unreadable token file). */
int gctl_connect(const gctl_global *g, gc_conn **conn);
/* limits.c: o's sizes against the limits in the daemon's info (dimensions, work, operand
 * bytes, the message when payloads cross the socket, the memory budget), to be called before
 * anything is allocated: GCTL_EXIT_OK, or GCTL_EXIT_USAGE with the limit, its value and its
 * config key printed; a failed info call as gctl_fail_call. */
int gctl_check_limits(const gctl_global *g, gc_conn *conn, const gc_gemm_opts *o,
                      bool sends_payloads);
/* Prints a failed call (on stderr, and as a JSON object on stdout with --json) and returns its
 * exit code: GCTL_EXIT_CONNECT for a lost connection, GCTL_EXIT_SERVER otherwise. */
int gctl_fail_call(const gctl_global *g, const char *what, const gc_error *err);
/* Prints a usage or local error; returns code. */
int gctl_fail(const gctl_global *g, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Parses an integer >= min; false (message printed) when it is not one. */
bool gctl_parse_u64(const char *flag, const char *text, uint64_t min, uint64_t *out);
bool gctl_parse_double(const char *flag, const char *text, double *out);
/* A real or complex scalar ("2", "-0.5", "1+2j", "3j"): *im 0 for a real one. */
bool gctl_parse_scalar(const char *flag, const char *text, double *re, double *im);
bool gctl_parse_dtype(const char *text, gc_dtype *out);
bool gctl_parse_out_dtype(const char *text, gc_dtype *out);
/* A usage error (printed) when o->dtype cannot be cast to o->out_dtype, else GCTL_EXIT_OK. */
int gctl_check_out_dtype(const gctl_global *g, const gc_gemm_opts *o);
/* What the library refuses too, said with the flags' names, as a usage error (printed): an i8
 * gemm's alpha and beta not integers within int32 or an activation other than relu or none;
 * scales other than 1 on a gemm that is not e4m3 or e5m2, or alpha * scale_a * scale_b not
 * finite. GCTL_EXIT_OK otherwise. */
int gctl_check_dtype_rules(const gctl_global *g, const gc_gemm_opts *o);
/* The result's dtype: o->out_dtype, or the gemm's own result (i32 for i8, f32 for fp8) when that
 * is GC_DTYPE_DEFAULT. */
const char *gctl_out_dtype_name(const gc_gemm_opts *o);
/* For people: "f32", or "f32 -> bf16" when the result is cast (valid until the next call). */
const char *gctl_dtype_label(const gc_gemm_opts *o);
const char *gctl_dtype_name(gc_dtype dtype);
int64_t gctl_now_us(void);

/* output.c: msgpack objects as JSON or as indented text; JSON strings. */
void gctl_json_string(FILE *f, const char *s, size_t len);
void gctl_print_json(FILE *f, const msgpack_object *o);
/* A command's reply as one JSON line: {"ok": true, "command": NAME, then a map's own keys (or
 * "reply": the value when it is not a map)}. */
void gctl_print_json_reply(FILE *f, const char *command, const msgpack_object *o);
void gctl_print_text(FILE *f, const msgpack_object *o, int indent);

/* progress.c: a bar on stderr for transfers (or, rows set, for rows computed here), shown
 * only when stderr is a terminal and the work has run for more than half a second. */
typedef struct {
  bool enabled, shown, rows;
  int64_t start_us;
  const char *label;
} gctl_progress;
void gctl_progress_init(gctl_progress *p, const char *label);
void gctl_progress_update(gctl_progress *p, uint64_t done, uint64_t total);
void gctl_progress_end(gctl_progress *p);

#endif /* GEMMCTL_H */
