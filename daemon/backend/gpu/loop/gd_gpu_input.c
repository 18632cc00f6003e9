/*
 * gd_gpu_input.c - a GPU job's payload on the loop thread (under the device's mu): staging
 * buffers claimed and filled, full ones flushed to the worker, bytes with no buffer spilled,
 * and the input_window / input ops.
 *
 * Input, per job, on the loop:
 *   - input_window() lends the job the free part of a staging buffer (one
 *     operand's contiguous bytes); the session reads the socket into it;
 *   - input() counts the bytes. A full buffer, or the end of an operand,
 *     goes to the worker (COPY_IN) and the job takes the next free buffer; if
 *     none is free (both in flight) it sets *pause, and the first buffer that
 *     comes back posts GD_EV_INPUT_RESUME;
 *   - bytes handed to input() from elsewhere are copied into the buffer; when
 *     there is no buffer (or no pool memory yet) they are spilled to ordinary
 *     memory and copied pageable by the worker, and the session is paused, so
 *     a spill is at most what the session had already read.
 */
#include <stdlib.h>
#include <string.h>

#include "gd_gpu_loop.h"

static void claim(gd__gpu_job *job, gd__gpu_buf *buf, gp_operand op, uint64_t offset) {
  buf->state = GD__BUF_FILLING;
  buf->job = job;
  job->refs++;
  buf->operand = op;
  buf->op_offset = offset;
  buf->fill = 0;
  buf->dst = job->op_dev[op] + offset;
  gd__gpu_loop_half(job)->cur = buf;
}

void gd__gpu_input_elsewhere(gd__gpu_job *job, gp_operand operand) {
  gd__gpu_job_loop *half = gd__gpu_loop_half(job);
  if (half->cur)
    gd__gpu_flush(job); /* the other operand's bytes go on their way */
  half->received += job->bytes[operand];
}

/* The job's current buffer goes to the worker (or back to the free set when empty). */
void gd__gpu_flush(gd__gpu_job *job) {
  gd__gpu_job_loop *half = gd__gpu_loop_half(job);
  gd__gpu_buf *buf = half->cur;
  if (!buf)
    return;
  half->cur = NULL;
  gd__gpu_dev *dev = job->dev;
  if (buf->fill == 0 || job->failed || dev->dead) {
    buf->state = GD__BUF_FREE;
    buf->job = NULL;
    buf->fill = 0;
    gd__gpu_staging_freed(dev);
    gd__gpu_job_unref(job);
    return;
  }
  buf->state = GD__BUF_BUSY;
  buf->cmd.type = GD__CMD_COPY_IN;
  buf->cmd.buf = buf;
  buf->cmd.job = job;
  dev->inflight_in++;
  gd__gpu_cmd_push(dev, &buf->cmd);
}

static bool continues(const gd__gpu_buf *buf, gp_operand op, uint64_t offset) {
  return buf && buf->operand == op && buf->op_offset + buf->fill == offset && buf->fill < buf->cap;
}

uint64_t gd__gpu_job_input_total(const gd__gpu_job *job) {
  return job->bytes[GP_OPERAND_A] + job->bytes[GP_OPERAND_B] +
         (job->has_c ? job->bytes[GP_OPERAND_C] : 0);
}

/* Keeps bytes that found no staging buffer. Before the job has pool memory they wait in its
 * pending list (their offset made absolute later); after, they go to the worker at once. */
static int spill(gd__gpu_job *job, gp_operand op, uint64_t offset, const void *data, size_t len,
                 gp_error *err) {
  gd__gpu_spill *s = malloc(sizeof(*s) + len);
  if (!s)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "out of memory buffering %zu payload bytes",
                        len);
  memset(s, 0, sizeof(*s));
  s->cmd.type = GD__CMD_SPILL_IN;
  s->cmd.job = job;
  s->len = len;
  memcpy(s->data, data, len);
  job->refs++;
  if (job->mem_ready) {
    s->dst = job->op_dev[op] + offset;
    gd__gpu_cmd_push(job->dev, &s->cmd);
  } else {
    /* relative to the job's block until gd__gpu_job_assign_mem() adds the block's offset */
    uint64_t rel = 0;
    for (int i = 0; i < (int)op; i++) {
      uint64_t rounded = 0;
      (void)gd__gpu_pool_round(job->bytes[i], &rounded);
      rel += rounded;
    }
    s->dst = rel + offset;
    *job->pending_tail = s;
    job->pending_tail = &s->next;
  }
  return 0;
}

bool gd__gpu_op_input_window(gd_backend *b, gd_job *job, gp_operand operand, uint64_t offset,
                             void **ptr, size_t *len) {
  (void)b;
  gd__gpu_job *gj = gd__gpu_job_of(job);
  if (!gj || operand > GP_OPERAND_C || offset >= gj->bytes[operand])
    return false;
  if (gj->slot)
    return gd__gpu_small_window(gj, operand, offset, ptr, len);
  gd__gpu_dev *dev = gj->dev;
  bool ok = false;
  pthread_mutex_lock(&dev->mu);
  if (!gj->failed && gj->mem_ready && !dev->dead) {
    gd__gpu_job_loop *loop = gd__gpu_loop_half(gj);
    if (loop->cur && !continues(loop->cur, operand, offset))
      gd__gpu_flush(gj);
    if (!loop->cur) {
      gd__gpu_buf *buf = gd__gpu_staging_take(dev, false);
      if (buf)
        claim(gj, buf, operand, offset);
    }
    gd__gpu_buf *buf = loop->cur;
    if (buf) {
      uint64_t left = gj->bytes[operand] - offset;
      size_t room = buf->cap - buf->fill;
      *ptr = buf->host + buf->fill;
      *len = left < room ? (size_t)left : room;
      ok = true;
    }
  }
  pthread_mutex_unlock(&dev->mu);
  return ok;
}

/* Lands len bytes of operand at offset in the job's staging (they may already be there). Returns
 * how many were taken; fewer than len when no buffer was free. */
static size_t land(gd__gpu_job *job, gp_operand op, uint64_t offset, const uint8_t *data,
                   size_t len) {
  gd__gpu_job_loop *loop = gd__gpu_loop_half(job);
  size_t done = 0;
  while (done < len) {
    if (loop->cur && !continues(loop->cur, op, offset + done))
      gd__gpu_flush(job);
    if (!loop->cur) {
      gd__gpu_buf *buf = gd__gpu_staging_take(job->dev, false);
      if (!buf)
        break;
      claim(job, buf, op, offset + done);
    }
    gd__gpu_buf *buf = loop->cur;
    size_t n = buf->cap - buf->fill;
    if (n > len - done)
      n = len - done;
    if (data + done != buf->host + buf->fill) /* else the socket read landed it there already */
      memcpy(buf->host + buf->fill, data + done, n);
    buf->fill += n;
    done += n;
    if (buf->fill == buf->cap || buf->op_offset + buf->fill == job->bytes[op])
      gd__gpu_flush(job);
  }
  return done;
}

int gd__gpu_op_input(gd_backend *b, gd_job *job, gp_operand operand, uint64_t offset,
                     const void *data, size_t len, bool *pause, gp_error *err) {
  (void)b;
  gd__gpu_job *gj = gd__gpu_job_of(job);
  if (pause)
    *pause = false;
  if (!gj)
    return gp_error_set(err, GP_E_INTERNAL, "input for a job the GPU backend does not know");
  if (operand > GP_OPERAND_C || offset > gj->bytes[operand] ||
      len > gj->bytes[operand] - offset)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "payload bytes past the end of operand %s",
                        gp_operand_name(operand));
  if (gj->slot)
    return gd__gpu_small_input(gj, operand, offset, data, len);
  gd__gpu_dev *dev = gj->dev;
  int rc = 0;
  pthread_mutex_lock(&dev->mu);
  gd__gpu_job_loop *loop = gd__gpu_loop_half(gj);
  loop->received += len;
  if (gj->failed || dev->dead) {
    pthread_mutex_unlock(&dev->mu);
    return 0; /* its FAILED event is on the way; the bytes are of no use */
  }
  size_t taken = gj->mem_ready ? land(gj, operand, offset, data, len) : 0;
  if (taken < len)
    rc = spill(gj, operand, offset + taken, (const uint8_t *)data + taken, len - taken, err);
  if (rc != 0) {
    gj->failed = true; /* the session answers with err; later bytes are dropped */
    dev->jobs_failed++;
  } else {
    bool more = loop->received < gd__gpu_job_input_total(gj);
    bool room = gj->mem_ready && ((loop->cur && loop->cur->fill < loop->cur->cap) ||
                                  gd__gpu_staging_any_free(dev, false));
    if (more && !room) {
      gj->paused = true;
      if (pause)
        *pause = true;
    }
  }
  pthread_mutex_unlock(&dev->mu);
  return rc;
}
