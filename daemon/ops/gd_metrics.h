/*
 * gd_metrics.h - what /metrics, /healthz and /readyz report: a snapshot of
 * the daemon's counters, taken on loop 0's thread (gd_metrics_collect), and
 * its rendering in the Prometheus text exposition format 0.0.4
 * (gd_metrics_render), done on the HTTP thread from a private copy.
 *
 * Metric names follow the Prometheus conventions: a gemmd_ prefix, base units
 * (seconds, bytes), _total on counters. The latency histograms reuse the
 * stats method's log2 microsecond buckets (gd_stats.h) as `le` bounds in
 * seconds.
 */
#ifndef GD_METRICS_H
#define GD_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gd_backend.h"
#include "gd_stats.h"

#define GD_METRICS_MAX_DEVICES 64

struct gd_daemon;

typedef struct {
  char id[16];       /* "cuda:0", or "cpu" */
  char name[128];
  bool in_service;
  uint64_t busy_us, memory_limit, memory_reserved, memory_in_use;
  uint64_t batches[GD_BATCH_BUCKETS]; /* batched launches by size (gd_backend.h) */
  uint64_t split_parts, resident_replicas, resident_bytes, resident_evictions;
} gd_metrics_device;

typedef struct {
  uint64_t generation;             /* bumped by each collect (gd_ops_http.c) */
  uint64_t uptime_us;
  char backend[16];                /* "cpu", "gpu" */
  gd_stats stats;
  uint64_t jobs;                   /* admitted and not yet answered */
  uint64_t jobs_running;           /* submitted to the backend, not yet finished */
  uint64_t host_reserved_bytes;    /* counted against queue.memory_budget */
  uint64_t host_budget_bytes;      /* queue.memory_budget */
  uint64_t connections;
  uint64_t shm_regions, shm_bytes; /* shared-memory regions registered now */
  uint64_t shm_pinned_bytes;      /* of them, pinned for DMA by the backend (GPU) */
  bool draining;
  size_t ndev;
  gd_metrics_device dev[GD_METRICS_MAX_DEVICES];
} gd_metrics_snapshot;

/* Loop thread: fills snap from d (generation left alone). */
void gd_metrics_collect(const struct gd_daemon *d, gd_metrics_snapshot *snap);

/* Serving: at least one device in service and not draining. why (may be NULL) gets the reason
 * when it is not. */
bool gd_metrics_ready(const gd_metrics_snapshot *snap, const char **why);

/* The exposition text (malloc'd, NUL-terminated, *len bytes); NULL when out of memory. */
char *gd_metrics_render(const gd_metrics_snapshot *snap, size_t *len);

#endif /* GD_METRICS_H */
