/*
 * gd_session_read.c - a session's read path (see gd_session_internal.h).
 *
 * alloc_cb hands out the job's own buffer when the decoder is inside a
 * payload (gp_decoder_payload_window -> backend input_window), so payload
 * bytes land where the backend wants them and the decoder's PAYLOAD events
 * point at them in place; otherwise it hands out the session's read buffer.
 */
#include "gd_session_internal.h"

#include <stdio.h>

#include "gd_clock.h"
#include "gd_log.h"

bool gd__session_at_boundary(const gd_session *s) {
  return gp_decoder_message_bytes(s->dec) == 0 && !s->in_request;
}

/* Between messages: has this connection used its share for now? */
static bool over_caps(const gd_session *s) {
  const gd_config *cfg = &s->d->cfg;
  return s->in_flight >= cfg->max_requests_in_flight ||
         s->write_bytes + s->held_bytes >= cfg->max_buffered_bytes;
}

static bool may_decode(const gd_session *s) {
  if (s->closing || s->paused || s->eof)
    return false;
  return !(gd__session_at_boundary(s) && over_caps(s));
}

void gd__session_process(gd_session *s) {
  for (;;) {
    if (!may_decode(s))
      break;
    if (gd__session_at_boundary(s) && s->pending_len > 0)
      s->msg_started_us = gd_now_us();
    gp_event ev;
    size_t used = gp_decoder_feed(s->dec, s->pending, s->pending_len, &ev);
    const uint8_t *at = s->pending + used;
    s->pending += used;
    s->pending_len -= used;
    gd__session_handle_event(s, &ev, at, s->pending_len);
    if (ev.type == GP_EV_NEED_MORE || ev.type == GP_EV_FATAL)
      break;
  }
  if (s->closing)
    return;
  gd__session_update_reading(s);
  gd__session_update_timer(s);
}

/* The backend accepted the bytes but wants no more for now (GPU: waiting for device memory or
 * a staging buffer). That wait is the daemon's, not a stalled client's: timeouts.request_ms
 * stops counting until gd__session_resume_reading. */
void gd__session_pause_reading(gd_session *s) {
  if (s->paused)
    return;
  s->paused = true;
  s->paused_since_us = gd_now_us();
}

void gd__session_resume_reading(gd_session *s) {
  if (!s->paused)
    return;
  s->paused = false;
  s->msg_started_us += gd_now_us() - s->paused_since_us;
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  gd_session *s = handle->data;
  (void)suggested;
  gd__sjob *rec = s->cur;
  gp_operand operand;
  uint64_t offset, remaining;
  void *ptr;
  size_t len;
  if (rec && gp_decoder_payload_window(s->dec, &operand, &offset, &remaining) &&
      gd_sched_input_window(s->d->sched, rec->job, operand, offset, &ptr, &len) &&
      len > 0) {
    if (len > remaining)
      len = (size_t)remaining; /* never read past this payload into the job's memory */
    if (len > 0x40000000u)
      len = 0x40000000u; /* uv_buf_t's length is an unsigned int */
    *buf = uv_buf_init(ptr, (unsigned)len);
    return;
  }
  *buf = uv_buf_init((char *)s->rbuf, GD__READ_BUFFER_BYTES);
}

/* The client closed its side. A request cut short is dropped at once (it can never complete);
 * replies to the complete ones still go out, for a client that only shut down writing. */
static void on_eof(gd_session *s) {
  s->eof = true;
  if (!gd__session_at_boundary(s)) {
    gd_info("conn %llu: %s: went away in the middle of a request", (unsigned long long)s->id,
            s->peer);
    gd__session_drop_current(s);
    s->in_request = false;
  }
  gd__session_update_reading(s);
  if (!s->closing)
    gd__session_update_timer(s);
  gd__session_kick(s);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  gd_session *s = stream->data;
  if (nread == 0)
    return;
  if (nread < 0) {
    if (nread == UV_EOF)
      on_eof(s);
    else {
      char why[128];
      snprintf(why, sizeof why, "read error: %s", uv_strerror((int)nread));
      gd_session_close(s, why);
    }
    return;
  }
  s->d->stats.bytes_in += (uint64_t)nread;
  s->last_activity_us = gd_now_us();
  s->pending = (const uint8_t *)buf->base;
  s->pending_len = (size_t)nread;
  s->pending_in_window = buf->base != (char *)s->rbuf;
  gd__session_process(s);
}

void gd__session_update_reading(gd_session *s) {
  bool want = !s->closing && s->pending_len == 0 && may_decode(s);
  if (want && !s->reading) {
    int rc = uv_read_start(&s->h.stream, on_alloc, on_read);
    if (rc != 0) {
      char why[128];
      snprintf(why, sizeof why, "cannot read: %s", uv_strerror(rc));
      gd_session_close(s, why);
      return;
    }
    s->reading = true;
  } else if (!want && s->reading) {
    uv_read_stop(&s->h.stream);
    s->reading = false;
  }
}
