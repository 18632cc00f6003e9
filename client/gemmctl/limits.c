/*
 * limits.c - a gemm's sizes against the limits the daemon's info lists, checked before
 * gemmctl allocates anything: a size the daemon cannot serve is refused at once with the
 * limit, its value and the config key that sets it, instead of after gigabytes are filled
 * (or never, when the machine runs out of memory first).
 */
#include <stdlib.h>

#include "gemmctl.h"

typedef struct {
  const void *info;
  size_t len;
} info_map;

/* The limit at path, or 0 when the daemon does not list it (then it is not checked). */
static uint64_t limit_of(const info_map *im, const char *path) {
  int64_t v;
  return gc_map_int(im->info, im->len, path, &v) == 0 && v > 0 ? (uint64_t)v : 0;
}

static int refuse(const gctl_global *g, const char *what, uint64_t value, const char *limit,
                  uint64_t max, const char *key) {
  return gctl_fail(g, GCTL_EXIT_USAGE,
                   "%s: %llu is over the daemon's %s of %llu (%s in its gemmd.yaml; nothing "
                   "was allocated or sent)",
                   what, (unsigned long long)value, limit, (unsigned long long)max, key);
}

static int check_dims(const gctl_global *g, const info_map *im, const gc_gemm_opts *o) {
  uint64_t max_dim = limit_of(im, "limits.max_dim"), max_batch = limit_of(im, "limits.max_batch");
  const struct { const char *name; uint64_t v; } dims[] = {{"m", o->m}, {"n", o->n}, {"k", o->k}};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
    if (max_dim && dims[i].v > max_dim)
      return refuse(g, dims[i].name, dims[i].v, "largest dimension", max_dim, "limits.max_dim");
  if (max_batch && o->batch > max_batch)
    return refuse(g, "batch", o->batch, "largest batch", max_batch, "limits.max_batch");
  uint64_t max_work = limit_of(im, "limits.max_work");
  double work = (double)o->m * (double)o->n * (double)o->k * (double)o->batch;
  if (max_work && work > (double)max_work)
    return refuse(g, "m*n*k*batch", (uint64_t)work, "largest m*n*k*batch", max_work,
                  "limits.max_work");
  return GCTL_EXIT_OK;
}

/* a, b, c as sent and the result, each within max_operand_bytes; what is sent within
 * max_message_bytes; what the daemon holds for the request within queue.memory_budget. */
static int check_bytes(const gctl_global *g, const info_map *im, const gc_gemm_opts *o,
                       bool sends_payloads) {
  uint64_t max_operand = limit_of(im, "limits.max_operand_bytes");
  const char *names[] = {"a (bytes)", "b (bytes)", "c (bytes)", "the result (bytes)"};
  const char ops[] = {'a', 'b', 'c', 'o'};
  bool has_c = o->beta != 0.0 || o->bias;
  uint64_t bytes[4], sent = 0, held = 0;
  for (int i = 0; i < 4; i++) {
    bytes[i] = ops[i] == 'c' && !has_c ? 0 : gc_gemm_operand_bytes(o, ops[i]);
    if (bytes[i] == 0 && ops[i] != 'c') return gctl_fail(g, GCTL_EXIT_USAGE, "sizes too large");
    if (max_operand && bytes[i] > max_operand)
      return refuse(g, names[i], bytes[i], "largest operand", max_operand,
                    "limits.max_operand_bytes");
  }
  sent = bytes[0] + (o->b_handle ? 0 : bytes[1]) + (has_c ? bytes[2] : 0);
  held = bytes[0] + bytes[1] + bytes[3];
  uint64_t max_message = limit_of(im, "limits.max_message_bytes");
  if (sends_payloads && max_message && sent > max_message)
    return refuse(g, "one request (bytes)", sent, "largest message", max_message,
                  "limits.max_message_bytes");
  uint64_t budget = limit_of(im, "limits.memory_budget");
  if (budget && held > budget)
    return refuse(g, "the request's host memory (a + b + result, bytes)", held,
                  "memory budget", budget, "queue.memory_budget");
  return GCTL_EXIT_OK;
}

int gctl_check_limits(const gctl_global *g, gc_conn *conn, const gc_gemm_opts *o,
                      bool sends_payloads) {
  info_map im = {NULL, 0};
  void *buf = NULL;
  if (gc_info(conn, 30000, &buf, &im.len) != 0) return gctl_fail_call(g, "info", gc_last_error(conn));
  im.info = buf;
  int rc = check_dims(g, &im, o);
  if (rc == GCTL_EXIT_OK) rc = check_bytes(g, &im, o, sends_payloads);
  gc_free(buf);
  return rc;
}
