/*
 * main.c - gemmctl: global options, the command table and usage. The functions every
 * command uses are common.c's (below the commands, which main.c calls).
 */
#include <stdlib.h>
#include <string.h>

#include "gemmctl.h"

static const char usage_text[] =
    "usage: gemmctl [--connect ADDR[,ADDR...]] [--token-file FILE] [--json] COMMAND [ARGS]\n"
    "\n"
    "Sends work to a gemmd daemon.\n"
    "\n"
    "commands:\n"
    "  ping                       round trip to the daemon\n"
    "  info                       version, backend, devices, kernels, limits\n"
    "  stats                      counters, queues, bytes, latencies\n"
    "  gemm --a A.npy --b B.npy [--c C.npy] [--alpha X] [--beta Y] [--trans-a] [--trans-b]\n"
    "       [--precision exact|fast] [--dtype bf16|i8|e4m3|e5m2] [--scale-a X] [--scale-b X]\n"
    "       [--out-dtype f16|bf16] --out C.npy\n"
    "                             C = alpha * op(A) * op(B) + beta * C from .npy files\n"
    "  bench [--m M --n N --k K] [--dtype T] [--out-dtype f16|bf16] [--requests R]\n"
    "        [--concurrency C]    throughput (TFLOP/s, GB/s) and latency percentiles\n"
    "  verify [--m M --n N --k K] [--dtype T] [--out-dtype f16|bf16] [--alpha X] [--beta Y]\n"
    "         [--scale-a X] [--scale-b X]\n"
    "                             random inputs, the daemon's answer against a float64\n"
    "                             reference (i8: exact): the error and PASS or FAIL\n"
    "  --dtype T is f32, f64, f16, bf16, i8 (int8 A and B, an int32 C: the daemon's \"i8\"\n"
    "  feature; alpha and beta integers, 32-bit arithmetic that wraps), e4m3 or e5m2 (fp8 A\n"
    "  and B, an f32 C: the daemon's \"fp8\" feature; --scale-a and --scale-b, default 1, are\n"
    "  their per-tensor scales: C = alpha * scale_a * scale_b * op(A) * op(B) + beta * C),\n"
    "  c64 or c128 (complex, <c8 / <c16 files: the daemon's \"complex\" feature; --alpha and\n"
    "  --beta may be complex, as 1+2j)\n"
    "  --out-dtype f16|bf16 asks an f32, f64 or fp8 gemm for its result rounded to f16 or\n"
    "  bf16 (the daemon's \"out_dtype\" feature; C is then in that dtype too)\n"
    "\n"
    "options (before or after the command):\n"
    "  --connect ADDR   unix:PATH, tcp:HOST:PORT or tcp:[IPV6]:PORT (a path with a / alone is\n"
    "                   unix:PATH), or a comma-separated list of them: the first that answers\n"
    "                   serves, a gemm lost with its connection goes again on another;\n"
    "                   default: $GEMMD_ADDRESS, then " GC_DEFAULT_ADDRESS "\n"
    "  --token-file FILE  the token TCP connections send first (one line); default:\n"
    "                   $GEMMD_TOKEN, then the file named by $GEMMD_TOKEN_FILE\n"
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

/* An option with a value, "--name VALUE" or "--name=VALUE", at argv[*i] (advancing *i past
 * its value): 1 taken into *value, 0 not this option, or -1 after printing a usage error
 * (what the value is) into *rc. */
static int valued_option(int argc, char **argv, int *i, const char *name, const char *what,
                         const char **value, const gctl_global *g, int *rc) {
  const char *arg = argv[*i];
  size_t len = strlen(name);
  if (strncmp(arg, name, len) != 0) return 0;
  if (arg[len] == '=') {
    *value = arg + len + 1;
    return 1;
  }
  if (arg[len] != '\0') return 0;
  if (*i + 1 >= argc) {
    *rc = gctl_fail(g, GCTL_EXIT_USAGE, "%s needs %s", name, what);
    return -1;
  }
  *value = argv[++*i];
  return 1;
}

/* One global option at argv[*i] (advancing *i past its value): 1 taken, 0 not a global
 * option, or -1 after printing a usage error into *rc. */
static int global_option(int argc, char **argv, int *i, gctl_global *g, int *rc) {
  if (strcmp(argv[*i], "--json") == 0) {
    g->json = true;
    return 1;
  }
  int taken = valued_option(argc, argv, i, "--connect", "an address", &g->addr, g, rc);
  if (taken != 0) return taken;
  return valued_option(argc, argv, i, "--token-file", "a file name", &g->token_file, g, rc);
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

/* Appends one item of an address list to out (size bytes), a bare path with a slash
 * ("/run/gemmd/gemmd.sock", "./x.sock") as unix:PATH. False when out is full. */
static bool append_item(char *out, size_t size, const char *item, size_t len) {
  while (len > 0 && (*item == ' ' || *item == '\t')) item++, len--;
  bool bare = strncmp(item, "unix:", 5) != 0 && strncmp(item, "tcp:", 4) != 0 &&
              memchr(item, '/', len) != NULL;
  size_t used = strlen(out);
  int n = snprintf(out + used, size - used, "%s%s%.*s", used ? "," : "", bare ? "unix:" : "",
                   (int)len, item);
  return n >= 0 && (size_t)n < size - used;
}

/* The address: --connect, else GEMMD_ADDRESS, else the library's default (NULL). Each item
 * of a list that is a bare path with a slash means unix:PATH. */
static void settle_address(gctl_global *g) {
  static char list[16384];
  g->addr_source = g->addr ? "--connect" : NULL;
  if (!g->addr && getenv("GEMMD_ADDRESS") && *getenv("GEMMD_ADDRESS")) {
    g->addr = getenv("GEMMD_ADDRESS");
    g->addr_source = "GEMMD_ADDRESS";
  }
  if (!g->addr) return;
  list[0] = '\0';
  for (const char *item = g->addr;; item++) {
    const char *end = strchr(item, ',');
    size_t len = end ? (size_t)(end - item) : strlen(item);
    if (!append_item(list, sizeof list, item, len)) return; /* too long: the library says so */
    if (!end) break;
    item = end;
  }
  g->addr = list;
}

int main(int argc, char **argv) {
  gctl_global g = {NULL, NULL, NULL, false};
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
