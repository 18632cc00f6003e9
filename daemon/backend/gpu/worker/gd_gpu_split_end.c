/*
 * gd_gpu_split_end.c - a split job's end on its parent's worker (GD__CMD_SPLIT_DONE): the
 * children's end taken in, and what waited for it posted: a failure, or the parent's held
 * chunk as the whole C, named after every device that computed it. The split is made at
 * submit on the loop (loop/gd_gpu_split.c, which says the whole design).
 */
#include <stdio.h>

#include "gd_gpu_work.h"

bool gd__gpu_split_settled(const gd__gpu_job *parent) { return parent->split->handled; }

/* "cuda:0+1+2+3": the parent's device first, then its children's in row order. */
static void device_name(const gd__gpu_split *split, char *out, size_t cap) {
  size_t used = 0;
  for (uint32_t i = 0; i < split->parts && used < cap; i++) {
    int w = snprintf(out + used, cap - used, i ? "+%d" : "cuda:%d", split->ordinals[i]);
    if (w < 0)
      break;
    used += (size_t)w;
  }
}

bool gd__gpu_split_post_whole(gd__gpu_job *parent, gd__gpu_buf *buf) {
  gd__gpu_job_work *work = gd__gpu_work_half(parent);
  gd__gpu_split *split = parent->split;
  gp_gemm_result_hdr *res = &work->result;
  res->m = split->m;
  device_name(split, res->device, sizeof res->device);
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
  GD__GPU_ON_WORKER(dev);
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
