/*
 * cmd_simple.c - gemmctl ping, info and stats.
 */
#include <getopt.h>
#include <string.h>

#include "gemmctl.h"

#define CALL_TIMEOUT_MS 30000

/* The commands take no arguments but --help. Returns -1 to go on, else an exit code. */
static int no_args(const gctl_global *g, int argc, char **argv, const char *help) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(help, stdout);
      return GCTL_EXIT_OK;
    }
    fputs(help, stderr);
    return gctl_fail(g, GCTL_EXIT_USAGE, "%s takes no argument \"%s\"", argv[0], argv[i]);
  }
  return -1;
}

int gctl_cmd_ping(const gctl_global *g, int argc, char **argv) {
  int rc = no_args(g, argc, argv,
                   "usage: gemmctl [--connect ADDR] [--json] ping\n"
                   "Sends a ping and prints the round-trip time. Exit 0 on \"pong\".\n");
  if (rc >= 0) return rc;
  gc_conn *conn;
  if ((rc = gctl_connect(g, &conn)) != GCTL_EXIT_OK) return rc;
  int64_t t0 = gctl_now_us();
  if (gc_ping(conn, CALL_TIMEOUT_MS) != 0) {
    rc = gctl_fail_call(g, "ping", gc_last_error(conn));
    gc_close(conn);
    return rc;
  }
  double ms = (double)(gctl_now_us() - t0) / 1000.0;
  if (g->json) printf("{\"ok\": true, \"command\": \"ping\", \"reply\": \"pong\", \"rtt_ms\": %.3f}\n", ms);
  else printf("pong (%.3f ms)\n", ms);
  gc_close(conn);
  return GCTL_EXIT_OK;
}

typedef int (*map_call_fn)(gc_conn *, int64_t, void **, size_t *);

static int map_command(const gctl_global *g, int argc, char **argv, const char *help,
                       map_call_fn call) {
  int rc = no_args(g, argc, argv, help);
  if (rc >= 0) return rc;
  gc_conn *conn;
  if ((rc = gctl_connect(g, &conn)) != GCTL_EXIT_OK) return rc;
  void *buf;
  size_t len;
  if (call(conn, CALL_TIMEOUT_MS, &buf, &len) != 0) {
    rc = gctl_fail_call(g, argv[0], gc_last_error(conn));
    gc_close(conn);
    return rc;
  }
  gc_close(conn);
  msgpack_unpacked up;
  msgpack_unpacked_init(&up);
  size_t off = 0;
  if (msgpack_unpack_next(&up, buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
    msgpack_unpacked_destroy(&up);
    gc_free(buf);
    gc_error err = {GC_E_INTERNAL, "the reply does not unpack"};
    return gctl_fail_call(g, argv[0], &err);
  }
  if (g->json) {
    gctl_print_json_reply(stdout, argv[0], &up.data);
  } else {
    gctl_print_text(stdout, &up.data, 0);
  }
  msgpack_unpacked_destroy(&up);
  gc_free(buf);
  return GCTL_EXIT_OK;
}

int gctl_cmd_info(const gctl_global *g, int argc, char **argv) {
  return map_command(g, argc, argv,
                     "usage: gemmctl [--connect ADDR] [--json] info\n"
                     "Prints the daemon's version, backend, devices, kernels, dtypes and limits.\n",
                     gc_info);
}

int gctl_cmd_stats(const gctl_global *g, int argc, char **argv) {
  return map_command(g, argc, argv,
                     "usage: gemmctl [--connect ADDR] [--json] stats\n"
                     "Prints the daemon's counters, queue depth, bytes in and out, per-device busy\n"
                     "time and latency histograms.\n",
                     gc_stats);
}
