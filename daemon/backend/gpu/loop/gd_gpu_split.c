/*
 * gd_gpu_split.c - one large gemm across every idle device of the box, by rows of C
 * (gpu.split_min_rows, gpu.split_max_parts).
 *
 * Per-job spreading keeps every device busy when many jobs come; a lone large job would still
 * use one. When a job's A, B, C and result all lie in shared-memory regions registered for DMA
 * (Portable: every device copies straight from those pages; B may be a resident operand instead,
 * of which each device keeps its replica) and other devices are idle, submit
 * splits it N ways: the job (the parent, the scheduler's) keeps the first rows on its device,
 * and one child job per other idle device computes the next run of rows there, reading its rows
 * of A (and C) and all of B from the regions and writing its rows of C straight into the
 * result's region. Each part is an ordinary job on its device (row blocks included,
 * gd_gpu_pieces.c), so a row of C comes from the same kernel code whichever device computes it.
 *
 * How many parts: one per idle device (the parent's included), at most gpu.split_max_parts and
 * at most m / gpu.split_min_rows. Which rows: in proportion to each device's speed (its SMs
 * times its clock, gd__gpu_dev.speed), the cuts at multiples of 128 rows (the largest tile
 * height) when every part has at least 256. Before anything is cut every child's pool memory is
 * reserved on its device (the ops run under the scheduler's lock, so an idle device stays idle
 * meanwhile; only a device's death can intervene, and then the job runs whole).
 *
 * The children post no event. The parent's final event, its whole C as one chunk or FAILED,
 * waits until every child's device work is over: the scheduler lets the regions go after that
 * event, and no copy may touch them after. Each child's end is counted in the split
 * (ends_owed); the last one pushes GD__CMD_SPLIT_DONE on the parent's worker, from a child's
 * job_finish or from dev_kill when a child's device died (its queued work never ends then);
 * those ends, and what failing does to either side, are in gd_gpu_jobs.c, which this file calls
 * and never the other way. Locks: the split's own mu is a leaf; a device's mu is never held
 * while another device's is taken.
 *
 * A job whose operands come over the socket is not split: its A arrives through one device's
 * staging, so the other devices would first need their rows of A and all of B copied peer to
 * peer, and C gathered back the same way before it leaves through that device's staging; for
 * the shapes worth splitting the socket itself (one loop thread) is the bound (bench/RESULTS.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_gpu_loop.h"
#include "gd_list.h"
#include "gd_log.h"

/* Row counts are cut at a multiple of the largest tile height (as gd_gpu_pieces.c does). */
#define SPLIT_ROW_ALIGN 128u

/* Registered host regions only: a CUDA IPC operand or result is open on the job's device alone
 * (gd_job.device_fixed), so its job never splits. B may instead be a resident operand (every
 * part reads its device's replica of it: gd_gpu_resident.c); A and C are cut by rows, so they
 * must lie in regions. */
static bool all_in_regions(const gd__gpu_job *gj) {
  if (!gj->mapped_out || gd__gpu_job_has_ipc(gj) || gp_gemm_has_ld(&gj->hdr)) /* 2D copies */
    return false;
  for (int op = 0; op < 3; op++) {
    if (gj->bytes[op] == 0 || (op == GP_OPERAND_B && gj->res[op] && !gj->mapped_in[op]))
      continue;
    if (!gj->mapped_in[op] || gj->res[op])
      return false;
  }
  return true;
}

static bool eligible(const gd__gpu_backend *be, const gd__gpu_job *gj) {
  const gp_gemm_hdr *h = &gj->hdr;
  uint64_t min = be->cfg.split_min_rows;
  return min > 0 && be->ndev > 1 && be->cfg.split_max_parts > 1 && !gj->slot && gj->mem_ready &&
         !gj->failed && gj->owner && !gj->split && !h->trans_a && h->batch == 1 &&
         !h->broadcast_b && !h->bias && h->m >= 2 * min && all_in_regions(gj);
}

/* Bytes of one row of operand op (A, or C as sent) and of the result. */
static uint64_t row_bytes(const gd__gpu_job *gj, gp_operand op) {
  return gj->bytes[op] / gj->hdr.m;
}

/* A child: the parent's rows [r0, r1), in the same regions. */
static gd__gpu_job *child_new(const gd__gpu_job *p, gd__gpu_split *split, uint64_t r0,
                              uint64_t r1) {
  gd__gpu_job *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  uint64_t rows = r1 - r0;
  uint64_t a_row = row_bytes(p, GP_OPERAND_A), c_in_row = row_bytes(p, GP_OPERAND_C);
  c->id = p->id;
  c->hdr = p->hdr;
  c->hdr.m = rows;
  c->has_c = p->has_c;
  c->bytes[GP_OPERAND_A] = rows * a_row;
  c->bytes[GP_OPERAND_B] = p->bytes[GP_OPERAND_B];
  c->bytes[GP_OPERAND_C] = rows * c_in_row;
  if (gd__gpu_job_sizes(c, NULL) != 0) { /* cannot fail: each is at most the parent's */
    free(c);
    return NULL;
  }
  c->admitted_us = p->admitted_us;
  c->deadline_us = p->deadline_us;
  c->load = p->load * (double)rows / (double)p->hdr.m;
  c->owner = p->owner; /* the worker's checks of a live job; it never posts (split_child) */
  c->split = split;
  c->split_child = true;
  c->pending_tail = &c->pending;
  c->mapped_in[GP_OPERAND_A] = p->mapped_in[GP_OPERAND_A] + r0 * a_row;
  c->mapped_in[GP_OPERAND_B] = p->mapped_in[GP_OPERAND_B];
  if (p->mapped_in[GP_OPERAND_C])
    c->mapped_in[GP_OPERAND_C] = p->mapped_in[GP_OPERAND_C] + r0 * c_in_row;
  if (p->res[GP_OPERAND_B]) { /* a resident B: the child's device takes its own replica */
    gd_resident_buf_ref(p->res[GP_OPERAND_B]);
    c->res[GP_OPERAND_B] = p->res[GP_OPERAND_B];
  }
  c->run_cmd = (gd__gpu_cmd){.type = GD__CMD_RUN, .job = c};
  c->submitted = true;
  c->run_queued = true; /* assign_mem below pushes nothing more: RUN goes with it */
  return c;
}

/* Under dev's mu: whether dev takes nothing now and may take a part. */
static bool idle_locked(const gd__gpu_dev *dev) {
  return dev->in_service && !dev->dead && !dev->stopping && dev->active == 0 && !dev->wait_head;
}

/* The fastest max of the idle devices other than the parent's, fastest first (out holds
 * GD_GPU_MAX_DEVICES): their count. */
static size_t idle_devices(gd__gpu_backend *be, const gd__gpu_dev *self, gd__gpu_dev **out,
                           size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < be->ndev && n < GD_GPU_MAX_DEVICES; i++) {
    gd__gpu_dev *dev = &be->devs[i];
    if (dev == self)
      continue;
    pthread_mutex_lock(&dev->mu);
    bool idle = idle_locked(dev);
    pthread_mutex_unlock(&dev->mu);
    if (!idle)
      continue;
    size_t at = n++;
    while (at > 0 && out[at - 1]->speed < dev->speed) { /* insertion: fastest first */
      out[at] = out[at - 1];
      at--;
    }
    out[at] = dev;
  }
  return n < max ? n : max;
}

void gd__gpu_split_plan(uint64_t m, const double *speed, uint32_t parts, uint64_t *cut) {
  double total = 0;
  for (uint32_t i = 0; i < parts; i++)
    total += speed[i] > 0 ? speed[i] : 1.0;
  uint64_t align = m / parts >= 2 * SPLIT_ROW_ALIGN ? SPLIT_ROW_ALIGN : 1;
  double sum = 0;
  cut[0] = 0;
  for (uint32_t i = 1; i < parts; i++) {
    sum += speed[i - 1] > 0 ? speed[i - 1] : 1.0;
    uint64_t at = (uint64_t)((double)m * sum / total + 0.5);
    at = (at + align / 2) / align * align;
    if (at < cut[i - 1] + 1) /* every part keeps a row, and leaves one for each after it */
      at = cut[i - 1] + 1;
    if (at > m - (parts - i))
      at = m - (parts - i);
    cut[i] = at;
  }
  cut[parts] = m;
}

/* Under c's device mu taken here: reserves c's pool memory on dev while dev is still idle
 * (c joins its jobs, nothing is pushed yet). false (c untouched) otherwise. */
static bool reserve_child(gd__gpu_dev *dev, gd__gpu_job *c) {
  bool ok = false;
  uint64_t off = 0;
  pthread_mutex_lock(&dev->mu);
  if (idle_locked(dev) && gd__gpu_pool_alloc(&dev->pool, c->alloc_len, &off)) {
    c->dev = dev;
    c->dev_off = off;
    gd__gpu_dev_add_job(dev, c);
    ok = true;
  }
  pthread_mutex_unlock(&dev->mu);
  return ok;
}

/* Undoes reserve_child. */
static void unreserve_child(gd__gpu_job *c) {
  gd__gpu_dev *dev = c->dev;
  pthread_mutex_lock(&dev->mu);
  GD_LIST_UNLINK(dev->jobs, c);
  gd__gpu_job_retire(c);
  gd__gpu_pool_free(&dev->pool, c->dev_off, c->alloc_len);
  pthread_mutex_unlock(&dev->mu);
}

/* A reserved child goes: ALLOC and RUN to its worker, C straight to out. Its end is owed from
 * here (counted before it can come). */
static void start_child(gd__gpu_job *c, uint8_t *out) {
  gd__gpu_split *split = c->split;
  pthread_mutex_lock(&split->mu);
  split->ends_owed++;
  pthread_mutex_unlock(&split->mu);
  gd__gpu_dev *dev = c->dev;
  pthread_mutex_lock(&dev->mu);
  gd__gpu_direct_out_set(c, out);
  gd__gpu_job_assign_mem(c, c->dev_off);
  gd__gpu_cmd_push(dev, &c->run_cmd);
  dev->split_parts++;
  dev->split_rows += c->hdr.m;
  pthread_mutex_unlock(&dev->mu);
}

/* Under the parent's mu: the parent keeps rows [0, r). The children's ends hold a reference on
 * it from here (dropped when SPLIT_DONE is handled). */
static void parent_rows(gd__gpu_job *gj, gd__gpu_split *split, uint64_t r) {
  uint64_t m = split->m;
  uint64_t a_row = row_bytes(gj, GP_OPERAND_A), c_in_row = row_bytes(gj, GP_OPERAND_C);
  uint64_t out_row = split->c_bytes / m;
  gj->hdr.m = r;
  gj->bytes[GP_OPERAND_A] = r * a_row;
  gj->bytes[GP_OPERAND_C] = r * c_in_row;
  gj->c_bytes = r * out_row;
  gj->direct_out.cap = (size_t)gj->c_bytes;
  gj->split = split;
  gj->refs++;
}

/* The split's children, made and reserved on devs (one each, in row order after the parent's
 * rows cut[0..1)); false with nothing left reserved when one cannot be. */
static bool make_children(gd__gpu_job *gj, gd__gpu_split *split, gd__gpu_dev **devs,
                          const uint64_t *cut, gd__gpu_job **kids) {
  uint32_t n = split->parts - 1;
  for (uint32_t i = 0; i < n; i++) {
    kids[i] = child_new(gj, split, cut[i + 1], cut[i + 2]);
    if (!kids[i] || !reserve_child(devs[i], kids[i])) {
      if (kids[i])
        gd__gpu_job_drop_resident(kids[i]);
      free(kids[i]);
      for (uint32_t j = 0; j < i; j++) {
        unreserve_child(kids[j]);
        gd__gpu_job_drop_resident(kids[j]);
        free(kids[j]);
      }
      return false;
    }
  }
  return true;
}

void gd__gpu_split_try(gd__gpu_backend *be, gd__gpu_job *gj) {
  GD__GPU_OFF_WORKER(gj->dev);
  gd__gpu_dev *dev = gj->dev;
  pthread_mutex_lock(&dev->mu); /* failed and owner may change on other threads */
  bool ok = eligible(be, gj);
  pthread_mutex_unlock(&dev->mu);
  if (!ok)
    return;
  uint64_t m = gj->hdr.m;
  gd__gpu_dev *devs[GD_GPU_MAX_DEVICES];
  uint64_t by_size = m / be->cfg.split_min_rows;
  uint32_t max = be->cfg.split_max_parts < by_size ? be->cfg.split_max_parts : (uint32_t)by_size;
  if (max > GD_GPU_MAX_DEVICES)
    max = GD_GPU_MAX_DEVICES;
  uint32_t parts = 1 + (uint32_t)idle_devices(be, dev, devs, max - 1);
  if (parts < 2)
    return;
  gd__gpu_split *split = calloc(1, sizeof *split);
  if (!split || pthread_mutex_init(&split->mu, NULL) != 0) {
    free(split);
    return; /* the job runs whole */
  }
  double speed[GD_GPU_MAX_DEVICES];
  uint64_t cut[GD_GPU_MAX_DEVICES + 1];
  gd__gpu_job *kids[GD_GPU_MAX_DEVICES];
  speed[0] = dev->speed;
  split->ordinals[0] = dev->ordinal;
  for (uint32_t i = 1; i < parts; i++) {
    speed[i] = devs[i - 1]->speed;
    split->ordinals[i] = devs[i - 1]->ordinal;
  }
  gd__gpu_split_plan(m, speed, parts, cut);
  split->parent = gj;
  split->parts = parts;
  split->m = m;
  split->c_bytes = gj->c_bytes;
  split->ends_owed = 1; /* this function's, until every child was started */
  if (!make_children(gj, split, devs, cut, kids)) {
    pthread_mutex_destroy(&split->mu);
    free(split);
    return;
  }
  uint64_t out_row = gj->c_bytes / m;
  /* The parent is cut first: a child may end (and tell it) as soon as it is started. */
  pthread_mutex_lock(&dev->mu);
  parent_rows(gj, split, cut[1]);
  pthread_mutex_unlock(&dev->mu);
  for (uint32_t i = 0; i + 1 < parts; i++)
    start_child(kids[i], gj->mapped_out + cut[i + 1] * out_row);
  gd__gpu_reg_count_split(be);
  pthread_mutex_lock(&dev->mu);
  dev->split_parts++;
  dev->split_rows += cut[1];
  pthread_mutex_unlock(&dev->mu);
  gd_debug("gpu: job %llu split %u ways: rows 0-%llu on cuda:%d, the rest on %u more devices",
           (unsigned long long)gj->id, parts, (unsigned long long)cut[1], dev->ordinal,
           parts - 1);
  gd__gpu_split_child_ended(split, false, NULL); /* this function's end */
}

