/*
 * main.c - gemmctl: global options, the command table, usage, and the helpers
 * every command uses (connecting, reporting errors, parsing numbers).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemmctl.h"

static const char usage_text[] =
    "usage: gemmctl [--connect ADDR] [--json] COMMAND [ARGS]\n"
    "\n"
    "Sends work to a gemmd daemon.\n"
    "\n"
    "commands:\n"
    "  ping                       round trip to the daemon\n"
    "  info                       version, backend, devices, kernels, limits\n"
    "  stats                      counters, queues, bytes, latencies\n"
    "  gemm --a A.npy --b B.npy [--c C.npy] [--alpha X] [--beta Y] [--trans-a] [--trans-b]\n"
    "       [--precision exact|fast] [--dtype bf16] --out C.npy\n"
    "                             C = alpha * op(A) * op(B) + beta * C from .npy files\n"
    "  bench [--m M --n N --k K] [--dtype T] [--requests R] [--concurrency C]\n"
    "                             throughput (TFLOP/s, GB/s) and latency percentiles\n"
    "  verify [--m M --n N --k K] [--dtype T]\n"
    "                             random inputs, the daemon's answer against a float64\n"
    "                             reference: the error and PASS or FAIL\n"
    "\n"
    "options (before or after the command):\n"
    "  --connect ADDR   unix:PATH, tcp:HOST:PORT or tcp:[IPV6]:PORT (a path with a / alone is\n"
    "                   unix:PATH); default: $GEMMD_ADDRESS, then " GC_DEFAULT_ADDRESS "\n"
    "  --json           machine-readable output (one JSON object on stdout), errors included\n"
    "  --help           this text; `gemmctl COMMAND --help` for a command's own\n"
    "  --version        gemmctl's version\n"
    "\n"
    "exit status:\n"
    "  0  success\n"
    "  1  the daemon answered with an error, or verify found a wrong result\n"
    "  2  usage error: bad command line or unusable input files (nothing was sent)\n"
    "  3  connection error: the daemon could not be reached, or the connection was lost\n"
    "  4  local error: the output file could not be written, out of memory\n";

static const struct {
  const char *name;
  gctl_command_fn fn;
} commands[] = {
    {"ping", gctl_cmd_ping},   {"info", gctl_cmd_info},   {"stats", gctl_cmd_stats},
    {"gemm", gctl_cmd_gemm},   {"bench", gctl_cmd_bench}, {"verify", gctl_cmd_verify},
};

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
  if (gc_connect(g->addr, conn) == 0) return GCTL_EXIT_OK;
  const gc_error *err = gc_last_error(NULL);
  char message[sizeof err->message + 64];
  /* name where the address came from: a stale GEMMD_ADDRESS is otherwise a puzzle */
  snprintf(message, sizeof message, "%s%s%s", g->addr_source ? g->addr_source : "",
           g->addr_source ? ": " : "", err->message);
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

static const char *const dtype_names[] = {"f32", "f64", "f16", "bf16"};

bool gctl_parse_dtype(const char *text, gc_dtype *out) {
  for (int i = 0; i < 4; i++) {
    if (strcmp(text, dtype_names[i]) == 0) {
      *out = (gc_dtype)i;
      return true;
    }
  }
  fprintf(stderr, "gemmctl: --dtype takes f32, f64, f16 or bf16, not \"%s\"\n", text);
  return false;
}

const char *gctl_dtype_name(gc_dtype dtype) {
  return (unsigned)dtype < 4 ? dtype_names[dtype] : "?";
}

size_t gctl_dtype_size(gc_dtype dtype) {
  return dtype == GC_DTYPE_F64 ? 8 : dtype == GC_DTYPE_F32 ? 4 : 2;
}

int64_t gctl_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* One global option at argv[*i] (advancing *i past its value): 1 taken, 0 not a global
 * option, or -1 after printing a usage error into *rc. */
static int global_option(int argc, char **argv, int *i, gctl_global *g, int *rc) {
  const char *arg = argv[*i];
  if (strcmp(arg, "--json") == 0) {
    g->json = true;
  } else if (strcmp(arg, "--connect") == 0) {
    if (*i + 1 >= argc) {
      *rc = gctl_fail(g, GCTL_EXIT_USAGE, "--connect needs an address");
      return -1;
    }
    g->addr = argv[++*i];
  } else if (strncmp(arg, "--connect=", 10) == 0) {
    g->addr = arg + 10;
  } else {
    return 0;
  }
  return 1;
}

/* Options before the command: the global ones, --help and --version. */
static int parse_global(int argc, char **argv, gctl_global *g, int *next) {
  int i = 1, rc = GCTL_EXIT_OK;
  for (; i < argc && argv[i][0] == '-'; i++) {
    int taken = global_option(argc, argv, &i, g, &rc);
    if (taken < 0) return rc;
    if (taken > 0) continue;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage_text, stdout);
      exit(GCTL_EXIT_OK);
    } else if (strcmp(argv[i], "--version") == 0) {
      printf("gemmctl %s (libgemmclient %u)\n", GC_VERSION_STRING, gc_version());
      exit(GCTL_EXIT_OK);
    }
    fputs(usage_text, stderr);
    return gctl_fail(g, GCTL_EXIT_USAGE, "unknown option \"%s\"", argv[i]);
  }
  *next = i;
  return GCTL_EXIT_OK;
}

/* Global options after the command (`gemmctl info --json`) are taken out of its arguments,
 * up to a "--". argv is rewritten in place; returns the new count, or -1 (*rc set). */
static int take_trailing_globals(int argc, char **argv, gctl_global *g, int *rc) {
  int kept = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) {
      while (i < argc) argv[kept++] = argv[i++];
      break;
    }
    int taken = global_option(argc, argv, &i, g, rc);
    if (taken < 0) return -1;
    if (taken == 0) argv[kept++] = argv[i];
  }
  argv[kept] = NULL;
  return kept;
}

/* The address: --connect, else GEMMD_ADDRESS, else the library's default (NULL). A bare
 * path with a slash ("/run/gemmd/gemmd.sock", "./x.sock") means unix:PATH. */
static void settle_address(gctl_global *g) {
  static char unix_addr[4096 + 8];
  g->addr_source = g->addr ? "--connect" : NULL;
  if (!g->addr && getenv("GEMMD_ADDRESS") && *getenv("GEMMD_ADDRESS")) {
    g->addr = getenv("GEMMD_ADDRESS");
    g->addr_source = "GEMMD_ADDRESS";
  }
  if (g->addr && strncmp(g->addr, "unix:", 5) != 0 && strncmp(g->addr, "tcp:", 4) != 0 &&
      strchr(g->addr, '/') != NULL && strlen(g->addr) < sizeof unix_addr - 5) {
    snprintf(unix_addr, sizeof unix_addr, "unix:%s", g->addr);
    g->addr = unix_addr;
  }
}

int main(int argc, char **argv) {
  gctl_global g = {NULL, NULL, false};
  int first = 1;
  int rc = parse_global(argc, argv, &g, &first);
  if (rc != GCTL_EXIT_OK) return rc;
  if (first >= argc) {
    fputs(usage_text, stderr);
    return gctl_fail(&g, GCTL_EXIT_USAGE, "no command given");
  }
  int cmd_argc = take_trailing_globals(argc - first, argv + first, &g, &rc);
  if (cmd_argc < 0) return rc;
  settle_address(&g);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(argv[first], commands[i].name) == 0)
      return commands[i].fn(&g, cmd_argc, argv + first);
  fputs(usage_text, stderr);
  return gctl_fail(&g, GCTL_EXIT_USAGE, "unknown command \"%s\"", argv[first]);
}
