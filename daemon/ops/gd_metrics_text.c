/*
 * gd_metrics_text.c - a snapshot in the Prometheus text exposition format
 * (version 0.0.4): HELP and TYPE lines, then samples. Written by hand because
 * it is a line format of a few rules (escaping of label values, cumulative
 * histogram buckets ending in +Inf, _sum and _count); Debian packages no C
 * client library for it. `promtool check metrics` checks the output in the
 * tests.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_metrics.h"
#include "gp_error.h"
#include "gp_types.h"

typedef struct {
  char *data;
  size_t len, cap;
  bool failed; /* out of memory: rendering gives up */
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(text *t, const char *fmt, ...) {
  if (t->failed)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->data + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap * 2 + (size_t)n + 1;
    char *grown = realloc(t->data, cap);
    if (!grown) {
      t->failed = true;
      return;
    }
    t->data = grown;
    t->cap = cap;
  }
}

/* A label value as the format wants it: backslash, double quote and newline escaped. */
static void put_label_value(text *t, const char *v) {
  for (; *v; v++) {
    if (*v == '\\')
      put(t, "\\\\");
    else if (*v == '"')
      put(t, "\\\"");
    else if (*v == '\n')
      put(t, "\\n");
    else
      put(t, "%c", *v);
  }
}

static void header(text *t, const char *name, const char *type, const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Microseconds as exact decimal seconds ("0.000001", "1.048576"). */
static void put_seconds(text *t, uint64_t us) {
  put(t, "%llu.%06llu", (unsigned long long)(us / 1000000u), (unsigned long long)(us % 1000000u));
}

static void put_u64(text *t, const char *name, const char *type, const char *help, uint64_t v) {
  header(t, name, type, help);
  put(t, "%s %llu\n", name, (unsigned long long)v);
}

/* Bucket i of gd_hist counts the durations measured below 2^i us (gd_stats.h). Measured values
 * are whole microseconds cut down from the real ones, so "measured < 2^i us" is "real < 2^i us":
 * the cumulative count up to bucket i is the count at le = 2^i us. */
static void put_hist(text *t, const char *name, const char *help, const gd_hist *h) {
  header(t, name, "histogram", help);
  uint64_t cumulative = 0;
  for (unsigned i = 0; i + 1 < GD_HIST_BUCKETS; i++) {
    cumulative += h->counts[i];
    put(t, "%s_bucket{le=\"", name);
    put_seconds(t, gd_hist_bucket_limit(i));
    put(t, "\"} %llu\n", (unsigned long long)cumulative);
  }
  put(t, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum ", name, (unsigned long long)h->count, name);
  put_seconds(t, h->sum_us);
  put(t, "\n%s_count %llu\n", name, (unsigned long long)h->count);
}

static const char *method_label(unsigned m) {
  const char *name = gp_method_name((gp_method)m);
  return name ? name : "unknown";
}

static void put_requests(text *t, const gd_stats *s) {
  header(t, "gemmd_requests_total", "counter",
         "Requests answered, by method and reply code (OK: a result).");
  for (unsigned m = 0; m < GD_STATS_METHODS; m++) {
    for (unsigned c = 0; c < GD_STATS_CODES; c++) {
      /* Every method's OK series always; an error series once it happened. */
      if (c != 0 && s->replies[m][c] == 0)
        continue;
      if (m == GP_METHOD_UNKNOWN && c == 0)
        continue; /* an unknown method is never answered with a result */
      put(t, "gemmd_requests_total{method=\"%s\",code=\"%s\"} %llu\n", method_label(m),
          gp_code_name(-(int)c), (unsigned long long)s->replies[m][c]);
    }
  }
}

typedef enum {
  DEV_BUSY,
  DEV_LIMIT,
  DEV_RESERVED,
  DEV_IN_USE,
  DEV_IN_SERVICE,
  DEV_SPLIT_PARTS,
  DEV_REPLICAS,
  DEV_REPLICA_BYTES,
  DEV_EVICTIONS
} dev_field;

static void put_device_samples(text *t, const char *name, const gd_metrics_snapshot *snap,
                               dev_field field) {
  for (size_t i = 0; i < snap->ndev; i++) {
    const gd_metrics_device *dev = &snap->dev[i];
    put(t, "%s{device=\"", name);
    put_label_value(t, dev->id);
    put(t, "\"} ");
    switch (field) {
    case DEV_BUSY: put_seconds(t, dev->busy_us); break;
    case DEV_LIMIT: put(t, "%llu", (unsigned long long)dev->memory_limit); break;
    case DEV_RESERVED: put(t, "%llu", (unsigned long long)dev->memory_reserved); break;
    case DEV_IN_USE: put(t, "%llu", (unsigned long long)dev->memory_in_use); break;
    case DEV_IN_SERVICE: put(t, "%d", dev->in_service ? 1 : 0); break;
    case DEV_SPLIT_PARTS: put(t, "%llu", (unsigned long long)dev->split_parts); break;
    case DEV_REPLICAS: put(t, "%llu", (unsigned long long)dev->resident_replicas); break;
    case DEV_REPLICA_BYTES: put(t, "%llu", (unsigned long long)dev->resident_bytes); break;
    case DEV_EVICTIONS: put(t, "%llu", (unsigned long long)dev->resident_evictions); break;
    }
    put(t, "\n");
  }
}

/* The GPU's small-job batches by how many jobs each launch ran (a size label per bucket, not a
 * histogram: the sum of the sizes is not kept). */
static void put_batches(text *t, const gd_metrics_snapshot *snap) {
  header(t, "gemmd_device_batches_total", "counter",
         "Launches of batched small requests, by how many requests each ran.");
  for (size_t i = 0; i < snap->ndev; i++)
    for (int b = 0; b < GD_BATCH_BUCKETS; b++) {
      put(t, "gemmd_device_batches_total{device=\"");
      put_label_value(t, snap->dev[i].id);
      put(t, "\",size=\"%s\"} %llu\n", gd_batch_bucket_name(b),
          (unsigned long long)snap->dev[i].batches[b]);
    }
}

static void put_devices(text *t, const gd_metrics_snapshot *snap) {
  header(t, "gemmd_device_info", "gauge", "The devices gemmd computes on (value 1), by name.");
  for (size_t i = 0; i < snap->ndev; i++) {
    put(t, "gemmd_device_info{device=\"");
    put_label_value(t, snap->dev[i].id);
    put(t, "\",name=\"");
    put_label_value(t, snap->dev[i].name);
    put(t, "\"} 1\n");
  }
  static const struct {
    const char *name, *type, *help;
  } fields[] = {
      [DEV_BUSY] = {"gemmd_device_busy_seconds_total", "counter", "Time spent computing."},
      [DEV_LIMIT] = {"gemmd_device_memory_limit_bytes", "gauge",
                     "Device memory the backend may reserve for jobs (its cap; 0: none)."},
      [DEV_RESERVED] = {"gemmd_device_memory_reserved_bytes", "gauge",
                        "Device memory the backend holds now."},
      [DEV_IN_USE] = {"gemmd_device_memory_in_use_bytes", "gauge",
                      "Of the reserved device memory, what jobs hold now."},
      [DEV_IN_SERVICE] = {"gemmd_device_in_service", "gauge",
                          "1 while the device takes jobs, 0 after a fatal device error."},
      [DEV_SPLIT_PARTS] = {"gemmd_device_split_parts_total", "counter",
                           "Parts of gemms split across devices that this device computed."},
      [DEV_REPLICAS] = {"gemmd_device_resident_replicas", "gauge",
                        "Copies of resident operands (put) this device holds now."},
      [DEV_REPLICA_BYTES] = {"gemmd_device_resident_bytes", "gauge",
                             "Bytes of those copies (against gpu.resident_bytes)."},
      [DEV_EVICTIONS] = {"gemmd_device_resident_evictions_total", "counter",
                         "Copies of resident operands let go of to make room for another."},
  };
  for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
    header(t, fields[f].name, fields[f].type, fields[f].help);
    put_device_samples(t, fields[f].name, snap, (dev_field)f);
  }
  put_batches(t, snap);
}

static void put_daemon(text *t, const gd_metrics_snapshot *snap) {
  const gd_stats *s = &snap->stats;
  header(t, "gemmd_build_info", "gauge", "gemmd's version and backend (value 1).");
  put(t, "gemmd_build_info{version=\"%s\",backend=\"", GEMMD_VERSION);
  put_label_value(t, snap->backend);
  put(t, "\"} 1\n");
  header(t, "gemmd_uptime_seconds", "gauge", "Time since gemmd started.");
  put(t, "gemmd_uptime_seconds ");
  put_seconds(t, snap->uptime_us);
  put(t, "\n");
  put_u64(t, "gemmd_draining", "gauge", "1 after SIGTERM or SIGINT: finishing, taking no work.",
          snap->draining);
  put_u64(t, "gemmd_received_bytes_total", "counter", "Bytes read from clients.", s->bytes_in);
  put_u64(t, "gemmd_sent_bytes_total", "counter", "Bytes written to clients.", s->bytes_out);
  put_u64(t, "gemmd_notifications_total", "counter", "Notifications received (ignored).",
          s->notifications);
  put_u64(t, "gemmd_connections", "gauge", "Open connections.", snap->connections);
  put_u64(t, "gemmd_connections_accepted_total", "counter", "Connections accepted.",
          s->connections_total);
  put_u64(t, "gemmd_connections_refused_total", "counter",
          "Connections closed at once for limits.max_connections(_per_peer).",
          s->connections_refused);
  put_u64(t, "gemmd_connections_dropped_total", "counter",
          "Connections closed at once for want of file descriptors (limits.reserved_fds).",
          s->connections_dropped);
  put_u64(t, "gemmd_admission_waits_total", "counter",
          "gemm requests that waited for room or their share before admission.",
          s->admission_waits);
  put_u64(t, "gemmd_queue_depth", "gauge",
          "gemm requests admitted and not yet running (receiving payload or queued).",
          snap->jobs >= snap->jobs_running ? snap->jobs - snap->jobs_running : 0);
  put_u64(t, "gemmd_jobs_running", "gauge", "gemm requests on the backend now.",
          snap->jobs_running);
  put_u64(t, "gemmd_host_memory_reserved_bytes", "gauge",
          "Host memory held for requests in flight (against queue.memory_budget).",
          snap->host_reserved_bytes);
  put_u64(t, "gemmd_host_memory_limit_bytes", "gauge", "queue.memory_budget.",
          snap->host_budget_bytes);
  put_u64(t, "gemmd_shm_regions", "gauge", "Shared-memory regions clients have registered.",
          snap->shm_regions);
  put_u64(t, "gemmd_shm_bytes", "gauge", "Bytes of those regions (against shm.max_bytes_total).",
          snap->shm_bytes);
  put_u64(t, "gemmd_shm_registered_bytes", "gauge",
          "Bytes of regions pinned for DMA by the GPU backend (against "
          "shm.gpu_register_max_bytes).",
          snap->shm_pinned_bytes);
}

char *gd_metrics_render(const gd_metrics_snapshot *snap, size_t *len) {
  text t = {NULL, 0, 0, false};
  t.cap = 16384;
  t.data = malloc(t.cap);
  if (!t.data)
    return NULL;
  put_daemon(&t, snap);
  put_requests(&t, &snap->stats);
  put_hist(&t, "gemmd_request_duration_seconds",
           "gemm requests, from admission to the last byte of the reply.",
           &snap->stats.hist[GD_HIST_TOTAL]);
  put_hist(&t, "gemmd_queue_wait_seconds",
           "Successful gemm requests: from all payload received to the start of compute.",
           &snap->stats.hist[GD_HIST_QUEUED]);
  put_hist(&t, "gemmd_compute_seconds", "Successful gemm requests: time computing.",
           &snap->stats.hist[GD_HIST_COMPUTE]);
  put_devices(&t, snap);
  if (t.failed) {
    free(t.data);
    return NULL;
  }
  *len = t.len;
  return t.data;
}
