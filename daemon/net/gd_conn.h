/*
 * gd_conn.h - the transport of one connection: its two libuv handles (the stream and one
 * timer), the read side (a read buffer, or the current job's payload window, and the bytes read
 * but not yet decoded), the reply queue (gd_replyq.h), the records of its calls (gd_call.h), and
 * closing.
 *
 * The transport has no policy: the protocol layer above it (gd_rpc.h) says where payload bytes
 * land, whether to read, and what to do with bytes that arrived, through gd_conn_events.
 *
 * Closing (gd_conn_close) abandons every call, drops the reply queue, stops reading and closes
 * both handles; the connection is freed (events->closed) in the last close callback, never
 * inside a read or write callback. The connection's loop thread only.
 */
#ifndef GD_CONN_H
#define GD_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gd_call.h"
#include "gd_peers.h"
#include "gd_replyq.h"
#include "gd_resident.h"
#include "gd_shm.h"
#include "gd_stats.h"
#include "gd_uv_stream.h"
#include "gp_error.h"

#define GD_CONN_READ_BUFFER_BYTES (64 * 1024)
/* Payload bytes read into a job's window after which the connection lets one loop iteration
 * pass before it reads again (see on_read in gd_conn.c). */
#define GD_CONN_READ_QUANTUM (1024 * 1024)

typedef struct gd_conn gd_conn;

typedef struct {
  /* Where the next bytes should land instead of the read buffer (a payload window): true with
   * *ptr, *len (len > 0). */
  bool (*window)(gd_conn *c, void **ptr, size_t *len);
  void (*data)(gd_conn *c);    /* bytes arrived: gd_conn_pending */
  void (*eof)(gd_conn *c);     /* the client shut its side */
  void (*kick)(gd_conn *c);    /* the reply backlog shrank: maybe read again */
  void (*queued)(gd_conn *c);  /* a reply write was queued: re-arm the timer */
  void (*closing)(gd_conn *c, const char *why); /* gd_conn_close began */
  void (*closed)(gd_conn *c);  /* both handles closed: free what embeds c */
} gd_conn_events;

struct gd_conn {
  gd_uv_stream h;
  uv_timer_t timer;          /* the protocol layer's; closed with the stream */
  uv_idle_t flush;           /* runs while replies wait in out's batch (gd_replyq_flush) */
  int open_handles;          /* handle, timer, flush: closed() when their close callbacks ran */
  uint64_t id;
  char peer[80];
  char peer_key[GD_PEER_KEY_MAX]; /* who it is for the per-peer caps (gd_peers.h) */
  gd_stats *stats;           /* bytes_in */
  const gd_conn_events *events;

  uint8_t *rbuf;             /* GD_CONN_READ_BUFFER_BYTES */
  const uint8_t *pending;    /* bytes read and not yet decoded (in rbuf or a job's window) */
  size_t pending_len;
  bool pending_in_window;    /* pending points into the current job's buffer */
  bool reading, closing;
  bool yielded;              /* stopped for one iteration after a quantum of window bytes */
  size_t window_read;        /* window bytes read since the last yield */
  uint64_t last_activity_us; /* the last byte read */

  gd_replyq out;
  gd_calls calls;
  gd_shm shm;                /* regions and received descriptors (Unix sockets, shm.enabled) */
  gd_resident resident;      /* resident operands (put / free) */
};

/* Its fields are gd_conn.c's (the struct is here only so that a session can embed it); the
 * other files read them through these. The parts embedded in it belong to their own modules:
 * the reply queue (gd_replyq.h), the call records (gd_call.h), the regions (gd_shm.h), the
 * resident operands (gd_resident.h). */
gd_replyq *gd_conn_out(const gd_conn *c);
gd_calls *gd_conn_calls(const gd_conn *c);
gd_shm *gd_conn_shm(const gd_conn *c);
gd_resident *gd_conn_resident(const gd_conn *c);
uint64_t gd_conn_id(const gd_conn *c);
const char *gd_conn_peer(const gd_conn *c);     /* for the log */
const char *gd_conn_peer_key(const gd_conn *c); /* for the per-peer caps (gd_peers.h) */
bool gd_conn_closing(const gd_conn *c);
/* Bytes read and not yet decoded (in the read buffer or the current job's window). */
const uint8_t *gd_conn_pending(const gd_conn *c);
size_t gd_conn_pending_len(const gd_conn *c);
bool gd_conn_pending_in_window(const gd_conn *c);
uint64_t gd_conn_last_activity(const gd_conn *c); /* the last byte read */
int gd_conn_open_handles(const gd_conn *c);
uv_timer_t *gd_conn_timer(gd_conn *c);            /* the protocol layer's */
bool gd_conn_fileno(const gd_conn *c, uv_os_fd_t *fd); /* its stream's; false when none */

/* Sets up c (read buffer, reply queue, call list); no handle yet. -1 when out of memory. */
int gd_conn_init(gd_conn *c, uint64_t id, gd_sched *sched, gd_stats *stats,
                 const uint64_t *hold_ms, const gd_conn_events *events);
/* Frees what gd_conn_init allocated, for a connection whose handles never opened. */
void gd_conn_free(gd_conn *c);

/* Accepts the pending connection of server into c (a pipe that receives descriptors when
 * gd_shm_attach was called on c->shm): 0, or a gp code with err filled (libuv's reason) after
 * which c is closing already (closed() follows) when open_handles > 0, else untouched. */
int gd_conn_accept(gd_conn *c, uv_loop_t *loop, uv_stream_t *server, gp_error *err);
/* The same for a connection accepted elsewhere (on loop 0, handed over as fd): the handles on
 * loop, the stream opened on fd (tcp: a TCP socket, else a Unix one). fd is closed on failure. */
int gd_conn_open(gd_conn *c, uv_loop_t *loop, int fd, bool tcp, gp_error *err);

/* Reads while want is true, else stops. May close c (uv_read_start failed). */
void gd_conn_want_read(gd_conn *c, bool want);

/* Bytes of pending were decoded. */
void gd_conn_consumed(gd_conn *c, size_t used);
/* Forgets pending bytes that are in the current job's window (the job is going away); the
 * caller made the decoder count them off first. */
void gd_conn_leave_window(gd_conn *c);

/* While c is not read: true when its client is gone for good, so that what it sent and
 * buffered can never complete a message of `needed` more bytes (a reset or a full close; a
 * half close with fewer bytes waiting than needed). A client that only shut down its writing
 * side after a complete request is not gone. */
bool gd_conn_peer_gone(gd_conn *c, uint64_t needed);

/* Closes c (see the top). why is logged by the closing callback. Idempotent. */
void gd_conn_close(gd_conn *c, const char *why);

#endif /* GD_CONN_H */
