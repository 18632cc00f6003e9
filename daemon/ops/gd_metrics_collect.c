/*
 * gd_metrics_collect.c - the loop side of the metrics: copies what the
 * daemon knows into a snapshot (see gd_metrics.h). Loop thread only; the
 * backend's devices() takes its own locks.
 */
#include <stdio.h>
#include <string.h>

#include "gd_clock.h"
#include "gd_daemon.h"
#include "gd_metrics.h"
#include "gd_netloop.h"

static void collect_devices(const gd_daemon *d, gd_metrics_snapshot *snap) {
  static gd_device_info infos[GD_METRICS_MAX_DEVICES]; /* loop thread only: off the stack */
  snap->ndev = 0;
  if (!d->backend || !d->backend->ops->devices)
    return;
  size_t n = d->backend->ops->devices(d->backend, infos, GD_METRICS_MAX_DEVICES);
  if (n > GD_METRICS_MAX_DEVICES)
    n = GD_METRICS_MAX_DEVICES;
  for (size_t i = 0; i < n; i++) {
    gd_metrics_device *dev = &snap->dev[i];
    const gd_device_info *info = &infos[i];
    if (info->id < 0)
      snprintf(dev->id, sizeof dev->id, "cpu");
    else
      snprintf(dev->id, sizeof dev->id, "cuda:%d", info->id);
    snprintf(dev->name, sizeof dev->name, "%s", info->name);
    dev->in_service = info->in_service;
    dev->busy_us = info->busy_us;
    dev->memory_limit = info->memory_limit;
    dev->memory_reserved = info->memory_reserved;
    dev->memory_in_use = info->memory_in_use;
    memcpy(dev->batches, info->batches, sizeof dev->batches);
    dev->split_parts = info->split_parts;
    dev->resident_replicas = info->resident_replicas;
    dev->resident_bytes = info->resident_bytes;
    dev->resident_evictions = info->resident_evictions;
  }
  snap->ndev = n;
}

void gd_metrics_collect(const gd_daemon *d, gd_metrics_snapshot *snap) {
  if (d->sched) /* the shared counts and the backend's figures (gd_server.h) */
    gd_sched_lock(d->sched);
  snap->uptime_us = gd_now_us() - d->stats.started_us;
  snprintf(snap->backend, sizeof snap->backend, "%s",
           d->backend ? d->backend->ops->name : "none");
  gd_netloops_stats(&d->srv, &snap->stats); /* every loop's */
  snap->jobs = d->sched ? gd_sched_jobs(d->sched) : 0;
  snap->jobs_running = d->sched ? gd_sched_running(d->sched) : 0;
  snap->host_reserved_bytes = d->sched ? gd_sched_reserved_bytes(d->sched) : 0;
  snap->host_budget_bytes = d->cfg.memory_budget;
  snap->connections = d->srv.connections;
  snap->shm_regions = d->srv.shm.regions;
  snap->shm_bytes = d->srv.shm.bytes;
  snap->shm_pinned_bytes = d->backend && d->backend->ops->shm_pinned_bytes
                               ? d->backend->ops->shm_pinned_bytes(d->backend)
                               : 0;
  snap->draining = atomic_load(&d->srv.draining);
  collect_devices(d, snap);
  if (d->sched)
    gd_sched_unlock(d->sched);
}

bool gd_metrics_ready(const gd_metrics_snapshot *snap, const char **why) {
  const char *reason = NULL;
  size_t serving = 0;
  for (size_t i = 0; i < snap->ndev; i++)
    serving += snap->dev[i].in_service;
  if (snap->draining)
    reason = "draining";
  else if (serving == 0)
    reason = "no device in service";
  if (why)
    *why = reason;
  return reason == NULL;
}
