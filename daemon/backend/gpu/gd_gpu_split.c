/*
 * gd_gpu_split.c - one large gemm across two devices, by rows of C (gpu.split_min_rows).
 *
 * Per-job spreading keeps every device busy when many jobs come; a lone large job would still
 * use one. When a job's A, B, C and result all lie in shared-memory regions registered for DMA
 * (Portable: every device copies straight from those pages) and another device is idle, submit
 * splits it: the job (the parent, the scheduler's) keeps the first rows on its device, and a
 * child job computes the rest on the other, reading its rows of A (and C) and all of B from the
 * regions and writing its rows of C straight into the result's region. Each half is an ordinary
 * job on its device (row blocks included, gd_gpu_pieces.c), so a row of C comes from the same
 * kernel code whichever device computes it.
 *
 * The child posts no event. The parent's final event, its whole C as one chunk or FAILED, waits
 * until the child's device work is over: the scheduler lets the regions go after that event,
 * and no copy may touch them after. The child's end reaches the parent's worker as a command
 * (GD__CMD_SPLIT_DONE), pushed from the child's job_finish, or from dev_kill when the child's
 * device died (its queued work never ends then); those ends, and what failing does to either
 * side, are in gd_gpu_jobs.c, which this file calls and never the other way. Locks: the split's own mu is a leaf; a device's
 * mu is never held while another device's is taken.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gd_gpu_internal.h"
#include "gd_log.h"

/* Row counts are cut at a multiple of the largest tile height (as gd_gpu_pieces.c does). */
#define SPLIT_ROW_ALIGN 128u

/* Registered host regions only: a CUDA IPC operand or result is open on the job's device alone
 * (gd_job.device_fixed), so its job never splits. */
static bool all_in_regions(const gd__gpu_job *gj) {
  if (!gj->mapped_out || gd__gpu_job_has_ipc(gj))
    return false;
  for (int op = 0; op < 3; op++)
    if (gj->bytes[op] > 0 && (!gj->mapped_in[op] || gj->res[op]))
      return false;
  return true;
}

static bool eligible(const gd__gpu_backend *be, const gd__gpu_job *gj) {
  const gp_gemm_hdr *h = &gj->hdr;
  uint64_t min = be->cfg.split_min_rows;
  return min > 0 && be->ndev > 1 && !gj->slot && gj->mem_ready && !gj->failed && gj->owner &&
         !gj->split && !h->trans_a && h->batch == 1 && !h->broadcast_b && !h->bias &&
         h->m >= 2 * min &&
         all_in_regions(gj);
}

/* Bytes of one row of operand op (A, or C as sent) and of the result. */
static uint64_t row_bytes(const gd__gpu_job *gj, gp_operand op) {
  return gj->bytes[op] / gj->hdr.m;
}

/* The child: the parent's rows from r on, in the same regions. */
static gd__gpu_job *child_new(const gd__gpu_job *p, gd__gpu_split *split, uint64_t r) {
  gd__gpu_job *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  uint64_t rows = p->hdr.m - r;
  uint64_t a_row = row_bytes(p, GP_OPERAND_A), c_in_row = row_bytes(p, GP_OPERAND_C);
  c->id = p->id;
  c->hdr = p->hdr;
  c->hdr.m = rows;
  c->has_c = p->has_c;
  c->bytes[GP_OPERAND_A] = rows * a_row;
  c->bytes[GP_OPERAND_B] = p->bytes[GP_OPERAND_B];
  c->bytes[GP_OPERAND_C] = rows * c_in_row;
  if (!gd__gpu_job_sizes(c, NULL)) { /* cannot fail: each is at most the parent's */
    free(c);
    return NULL;
  }
  c->admitted_us = p->admitted_us;
  c->deadline_us = p->deadline_us;
  c->load = p->load / 2;
  c->owner = p->owner; /* the worker's checks of a live job; it never posts (split_child) */
  c->split = split;
  c->split_child = true;
  c->pending_tail = &c->pending;
  c->mapped_in[GP_OPERAND_A] = p->mapped_in[GP_OPERAND_A] + r * a_row;
  c->mapped_in[GP_OPERAND_B] = p->mapped_in[GP_OPERAND_B];
  if (p->mapped_in[GP_OPERAND_C])
    c->mapped_in[GP_OPERAND_C] = p->mapped_in[GP_OPERAND_C] + r * c_in_row;
  c->run_cmd = (gd__gpu_cmd){.type = GD__CMD_RUN, .job = c};
  c->submitted = true;
  c->run_queued = true; /* assign_mem below pushes nothing more: RUN goes with it */
  return c;
}

/* Places c on dev when dev is idle and has its memory now; then ALLOC and RUN go to dev's
 * worker. false (c untouched) otherwise. */
static bool place_child(gd__gpu_dev *dev, gd__gpu_job *c, uint8_t *out) {
  gd__gpu_split *split = c->split;
  bool placed = false;
  uint64_t off = 0;
  pthread_mutex_lock(&dev->mu);
  if (dev->in_service && !dev->dead && !dev->stopping && dev->active == 0 && !dev->wait_head &&
      gd__gpu_pool_alloc(&dev->pool, c->alloc_len, &off)) {
    c->dev = dev;
    split->child = c;
    split->child_ordinal = dev->ordinal; /* before RUN: the parent reads it once told */
    gd__gpu_direct_out_set(c, out);
    gd__gpu_dev_add_job(dev, c);
    gd__gpu_job_assign_mem(c, off);
    gd__gpu_cmd_push(dev, &c->run_cmd);
    placed = true;
  }
  pthread_mutex_unlock(&dev->mu);
  return placed;
}

/* Under the parent's mu: the parent keeps rows [0, r) (r = 0: undoes it, rows of the whole m
 * again). The child's end holds a reference on it from here. */
static void parent_rows(gd__gpu_job *gj, gd__gpu_split *split, uint64_t r) {
  uint64_t m = split->m;
  uint64_t a_row = gj->bytes[GP_OPERAND_A] / gj->hdr.m, c_in_row = gj->bytes[GP_OPERAND_C] / gj->hdr.m;
  uint64_t out_row = split->c_bytes / m;
  uint64_t rows = r ? r : m;
  gj->hdr.m = rows;
  gj->bytes[GP_OPERAND_A] = rows * a_row;
  gj->bytes[GP_OPERAND_C] = rows * c_in_row;
  gj->c_bytes = rows * out_row;
  gj->direct_out.cap = (size_t)gj->c_bytes;
  gj->split = r ? split : NULL;
  if (r)
    gj->refs++;
  else
    gj->refs--; /* the loop's and the worker's remain: never the last */
}

void gd__gpu_split_try(gd__gpu_backend *be, gd__gpu_job *gj) {
  gd__gpu_dev *dev = gj->dev, *placed = NULL;
  pthread_mutex_lock(&dev->mu); /* failed and owner may change on other threads */
  bool ok = eligible(be, gj);
  pthread_mutex_unlock(&dev->mu);
  if (!ok)
    return;
  uint64_t m = gj->hdr.m;
  uint64_t r = (m / 2 + SPLIT_ROW_ALIGN - 1) / SPLIT_ROW_ALIGN * SPLIT_ROW_ALIGN;
  if (r >= m)
    return;
  gd__gpu_split *split = calloc(1, sizeof *split);
  if (!split || pthread_mutex_init(&split->mu, NULL) != 0) {
    free(split);
    return; /* the job runs whole */
  }
  split->parent = gj;
  split->m = m;
  split->c_bytes = gj->c_bytes;
  gd__gpu_job *child = child_new(gj, split, r);
  uint8_t *out = gj->mapped_out + r * (gj->c_bytes / m);
  /* The parent is cut first: the child may end (and tell it) as soon as it is placed. */
  pthread_mutex_lock(&dev->mu);
  parent_rows(gj, split, r);
  pthread_mutex_unlock(&dev->mu);
  for (size_t i = 0; child && i < be->ndev && !placed; i++)
    if (&be->devs[i] != dev && place_child(&be->devs[i], child, out))
      placed = &be->devs[i];
  if (!placed) {
    pthread_mutex_lock(&dev->mu);
    parent_rows(gj, split, 0);
    if (split->fail_pending) { /* it failed meanwhile (its device died): as unsplit */
      gd_backend_event ev = {.type = GD_EV_FAILED, .err = split->fail_err};
      (void)gd__gpu_post(gj, &ev);
    }
    pthread_mutex_unlock(&dev->mu);
    free(child);
    pthread_mutex_destroy(&split->mu);
    free(split);
    return;
  }
  gd__gpu_reg_count_split(be);
  gd_debug("gpu: job %llu split: rows 0-%llu on cuda:%d, %llu-%llu on cuda:%d",
           (unsigned long long)gj->id, (unsigned long long)r, dev->ordinal,
           (unsigned long long)r, (unsigned long long)m, placed->ordinal);
}

/* ---- the parent (under its device's mu) ------------------------------------ */

bool gd__gpu_split_settled(const gd__gpu_job *parent) { return parent->split->handled; }

bool gd__gpu_split_post_whole(gd__gpu_job *parent, gd__gpu_buf *buf) {
  gd__gpu_split *split = parent->split;
  gp_gemm_result_hdr *res = &parent->work.result;
  res->m = split->m;
  snprintf(res->device, sizeof res->device, "cuda:%d+%d", parent->dev->ordinal,
           split->child_ordinal);
  if (parent->owner)
    parent->owner->result = *res;
  gd_backend_event ev = {.type = GD_EV_OUTPUT_CHUNK,
                         .data = buf->host,
                         .len = (size_t)split->c_bytes,
                         .offset = 0,
                         .last = true};
  buf->posted = true;
  if (!gd__gpu_post(parent, &ev)) {
    buf->posted = false;
    return false;
  }
  return true;
}

gd__gpu_buf *gd__gpu_split_handle(gd__gpu_dev *dev, gd__gpu_split *split) {
  (void)dev;
  gd__gpu_job *p = split->parent;
  pthread_mutex_lock(&split->mu);
  bool child_failed = split->child_failed;
  gp_error child_err = split->child_err;
  pthread_mutex_unlock(&split->mu);
  split->handled = true;
  if (child_failed && !p->failed) /* held back until the parent's own work is over too */
    gd__gpu_fail(p, child_err.code, "%s", child_err.message);
  gd__gpu_split_maybe_final(p);
  gd__gpu_buf *held = split->held;
  split->held = NULL;
  if (held && !p->failed && p->owner && !p->dev->stopping) {
    if (gd__gpu_split_post_whole(p, held))
      return NULL;
    gd__gpu_fail(p, GP_E_INTERNAL, "cannot hand the result to the loop");
  }
  return held;
}
