/*
 * gd_session_internal.h - what the files of one connection share (see gd_session.h for the
 * public contract). Not for the rest of the daemon.
 *
 *   gd_session.c          open, close and free; kick; the functions over all sessions
 *   gd_session_read.c     reading: the alloc_cb payload window, decoding, pausing, EOF
 *   gd_session_dispatch.c decoder events: requests, admission, payloads, message ends, rejects
 *   gd_session_write.c    the write path: the reply queue, replies held while a multi-chunk
 *                         result is half-way out, copies of shared chunks, error replies
 *   gd_session_hooks.c    the scheduler's hooks (output, failed, resume)
 *   gd_session_timers.c   the one timer: idle, request arrival, stalled reader
 *
 * Loop thread only, like everything in a session.
 */
#ifndef GD_SESSION_INTERNAL_H
#define GD_SESSION_INTERNAL_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "gd_session.h"
#include "gd_uv_stream.h"
#include "gp_decode.h"

#define GD__READ_BUFFER_BYTES (64 * 1024)

/* The session's record of one gemm job it admitted and has not answered yet. */
typedef struct gd__sjob {
  gd_job *job;
  struct gd__sjob *prev, *next;
  uint32_t msgid;
  uint32_t writes_pending; /* chunks of this job in uv_write */
  uint64_t next_offset;    /* where the next chunk of C must start */
  bool head_sent;          /* the reply's head went out with the first chunk */
  bool reply_out;          /* its last byte left through uv_try_write while writes of it were
                            * still pending: the last of those answers the job */
  bool orphan;             /* the session closed: job abandoned, only chunks come back */
} gd__sjob;

/* A reply held while another result is half-way out (gd_session_write.c). */
typedef struct gd__held gd__held;

/* A chunk of C in memory the backend shares between jobs (GPU staging) that is not all out yet
 * (gd_session_write.c). Only uv_try_write and memcpy read it, never uv_write. */
typedef struct gd__shared gd__shared;

struct gd_session {
  gd_uv_stream h;
  uv_timer_t timer;
  int open_handles; /* handle + timer: freed when both close callbacks ran */
  gd_daemon *d;
  struct gd_session *prev, *next;
  uint64_t id;
  char peer[80];
  gp_decoder *dec;

  uint8_t *rbuf;             /* GD__READ_BUFFER_BYTES */
  const uint8_t *pending;    /* bytes read and not yet decoded (in rbuf or a job's window) */
  size_t pending_len;
  bool pending_in_window;    /* pending points into the current job's buffer */
  bool reading, paused, closing;
  bool eof;                  /* the client shut its side: answer what is in flight, then close */

  /* the message being decoded */
  bool in_request;           /* a REQUEST was seen and MESSAGE_END has not come */
  gp_method method;
  uint32_t msgid;
  gd__sjob *cur;             /* its job, for a gemm */
  uint64_t msg_started_us;   /* moved on by the time spent paused: see gd__session_pause_reading */
  uint64_t paused_since_us;

  gd__sjob *jobs;            /* admitted gemm jobs not yet answered */
  uint32_t in_flight;
  uint64_t write_bytes;      /* queued in uv_write */
  gd__sjob *streaming;       /* its result's first chunk is queued and its last is not */
  gd__held *held_head, **held_tail; /* replies waiting for `streaming` to end, in arrival order */
  uint64_t held_bytes;
  gd__shared *shared_head, **shared_tail; /* in order; the first is the open one, being written */
  void *shared_probe;        /* the probe write of the open chunk in flight, or NULL */
  uint32_t writes;
  uint64_t last_activity_us;
  uint64_t write_progress_us; /* last write completed, or the first one queued */
  size_t write_queue_seen;    /* libuv's write queue size when the timer last looked */
};

/* ---- gd_session.c ---- */

/* Something that held this session back went away (a reply was written, a job answered, limits
 * changed): decode what is already read, then read more if allowed. May close the session. */
void gd__session_kick(gd_session *s);

/* Takes rec off the session's list of jobs and counts it out of in_flight; rec is not freed. */
void gd__session_unlink_job(gd_session *s, gd__sjob *rec);

/* ---- gd_session_read.c ---- */

/* Between messages: no message bytes decoded and no request open. */
bool gd__session_at_boundary(const gd_session *s);

/* Decodes pending bytes until they are used up or the session must stop, then updates reading
 * and the timer (unless the session closed meanwhile). */
void gd__session_process(gd_session *s);

/* Starts or stops reading: reads only when every byte read so far has been decoded and nothing
 * says stop. May close the session (uv_read_start failed). */
void gd__session_update_reading(gd_session *s);

/* The backend asked for no more bytes for now / may take them again. Idempotent. */
void gd__session_pause_reading(gd_session *s);
void gd__session_resume_reading(gd_session *s);

/* ---- gd_session_dispatch.c ---- */

/* Handles one decoder event; at/left are the bytes after it (for a protocol error's log). */
void gd__session_handle_event(gd_session *s, const gp_event *ev, const uint8_t *at, size_t left);

/* Drops the request being read before it was submitted, with any pause it asked for. The caller
 * makes the decoder skip the rest of the message (or it already does). No-op without one. */
void gd__session_drop_current(gd_session *s);

/* ---- gd_session_write.c ---- */

/* Sends what sbuf holds, taking its memory. Returns 0, or -1 when the session is closing. */
int gd__session_write_sbuffer(gd_session *s, msgpack_sbuffer *sbuf);

/* Counts and logs an error reply to msgid and sends it (unless the session is closing). */
void gd__session_send_error(gd_session *s, uint32_t msgid, int code, const char *message);
/* The same for a request of another method than gemm (counted under that method). */
void gd__session_send_error_for(gd_session *s, gp_method method, uint32_t msgid, int code,
                                const char *message);

/* Sends one chunk of rec's result (ev, already checked to continue C) after head (owned, may be
 * NULL): from the job's memory, or, when the backend shares that memory between jobs, straight
 * from it while the socket takes it, copying what is left after gpu.staging_hold_ms. The chunk
 * is always given back to the scheduler, exactly once. */
void gd__session_write_chunk(gd_session *s, gd__sjob *rec, char *head, size_t head_len,
                             const gd_backend_event *ev);

/* Session closing: drops what is held and the shared chunks not yet out, handing job memory
 * back to the scheduler (once per chunk). */
void gd__session_drop_held(gd_session *s);

/* When the open shared chunk started waiting for the socket: true and *since_us while there is
 * one. gpu.staging_hold_ms after that, gd__session_shared_expire copies what is left of it. */
bool gd__session_shared_since(const gd_session *s, uint64_t *since_us);

/* The hold limit of the open shared chunk may have passed: copy the unsent rest of every
 * chunk whose limit passed and give their staging back. May close the session. */
void gd__session_shared_expire(gd_session *s);

/* ---- gd_session_timers.c ---- */

/* (Re)arms the session's timer for the earliest timeout that applies now, or stops it. */
void gd__session_update_timer(gd_session *s);

#endif /* GD_SESSION_INTERNAL_H */
