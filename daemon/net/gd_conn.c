/*
 * gd_conn.c - the transport of one connection (see gd_conn.h).
 *
 * alloc_cb hands out the current job's payload window when the protocol layer has one, so
 * payload bytes land where the backend wants them and are decoded in place; otherwise the
 * connection's read buffer.
 */
#include "gd_conn.h"

#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gd_clock.h"

#define CONN_OF(ptr, member) ((gd_conn *)((char *)(ptr)-offsetof(gd_conn, member)))

/* ---- the reply queue's reports ------------------------------------------- */

static void on_replyq_queued(gd_replyq *q) {
  gd_conn *c = CONN_OF(q, out);
  c->events->queued(c);
}

static void on_replyq_progress(gd_replyq *q) {
  gd_conn *c = CONN_OF(q, out);
  c->events->kick(c);
}

static void on_replyq_failed(gd_replyq *q, const char *why) {
  gd_conn_close(CONN_OF(q, out), why);
}

static void on_flush(uv_idle_t *idle) {
  gd_conn *c = idle->data;
  uv_idle_stop(idle);
  if (c->yielded) { /* its iteration has passed: the protocol layer says whether to read on */
    c->yielded = false;
    c->events->kick(c);
    if (c->closing)
      return;
  }
  gd_replyq_flush(&c->out);
}

/* The idle handle runs once the loop has run this iteration's callbacks (every read, every
 * completion) and keeps the next poll from blocking, so the replies they queued leave together
 * and at once. */
static void on_replyq_want_flush(gd_replyq *q) {
  gd_conn *c = CONN_OF(q, out);
  if (c->open_handles == 3) /* accepted; before that nothing is queued */
    uv_idle_start(&c->flush, on_flush); /* cannot fail with a callback */
  else
    gd_replyq_flush(q);
}

static const gd_replyq_events replyq_events = {on_replyq_queued, on_replyq_progress,
                                               on_replyq_failed, on_replyq_want_flush};

/* ---- set-up and accept ----------------------------------------------------- */

/* The read buffer is mapped, not malloc'ed: 64 KiB sits under glibc's mmap threshold, so
 * a burst of connections would spread these buffers over the heap among long-lived chunks,
 * and their memory would stay in RSS after the connections close (tests/load: clients killed
 * mid-payload). Unmapped, it goes back to the system at once. */
static uint8_t *rbuf_alloc(void) {
  void *p = mmap(NULL, GD_CONN_READ_BUFFER_BYTES, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void rbuf_free(uint8_t *p) {
  if (!p)
    return;
  int rc = munmap(p, GD_CONN_READ_BUFFER_BYTES);
  assert(rc == 0); /* fails only for a range that was never mapped */
  (void)rc;
}

int gd_conn_init(gd_conn *c, uint64_t id, gd_sched *sched, gd_stats *stats,
                 const uint64_t *hold_ms, const gd_conn_events *events) {
  memset(c, 0, sizeof *c);
  c->rbuf = rbuf_alloc();
  if (!c->rbuf)
    return -1;
  c->id = id;
  c->stats = stats;
  c->events = events;
  c->pending = c->rbuf; /* never NULL, even when empty */
  c->last_activity_us = gd_now_us();
  gd_replyq_init(&c->out, &c->h.stream, stats, hold_ms, &replyq_events, id);
  c->out.peer = c->peer; /* filled in once accepted */
  gd_calls_init(&c->calls, sched);
  return 0;
}

gd_replyq *gd_conn_out(const gd_conn *c) { return (gd_replyq *)&c->out; }
gd_calls *gd_conn_calls(const gd_conn *c) { return (gd_calls *)&c->calls; }
gd_shm *gd_conn_shm(const gd_conn *c) { return (gd_shm *)&c->shm; }
gd_resident *gd_conn_resident(const gd_conn *c) { return (gd_resident *)&c->resident; }
uint64_t gd_conn_id(const gd_conn *c) { return c->id; }
const char *gd_conn_peer(const gd_conn *c) { return c->peer; }
const char *gd_conn_peer_key(const gd_conn *c) { return c->peer_key; }
bool gd_conn_closing(const gd_conn *c) { return c->closing; }
const uint8_t *gd_conn_pending(const gd_conn *c) { return c->pending; }
size_t gd_conn_pending_len(const gd_conn *c) { return c->pending_len; }
bool gd_conn_pending_in_window(const gd_conn *c) { return c->pending_in_window; }
uint64_t gd_conn_last_activity(const gd_conn *c) { return c->last_activity_us; }
int gd_conn_open_handles(const gd_conn *c) { return c->open_handles; }
uv_timer_t *gd_conn_timer(gd_conn *c) { return &c->timer; }
bool gd_conn_fileno(const gd_conn *c, uv_os_fd_t *fd) { return uv_fileno(&c->h.handle, fd) == 0; }

void gd_conn_free(gd_conn *c) {
  assert(c->open_handles == 0);
  gd_calls_free_all(&c->calls);
  if (c->calls.sched) /* the regions' and resident operands' totals are every loop's */
    gd_netsched_lock(c->calls.sched);
  gd_shm_free(&c->shm);
  gd_replyq_free(&c->out);
  gd_resident_free(&c->resident); /* after its calls: none holds a pointer into it anyway */
  if (c->calls.sched)
    gd_netsched_unlock(c->calls.sched);
  rbuf_free(c->rbuf);
  c->rbuf = NULL;
}

/* A Unix socket's peer is its uid (SO_PEERCRED); "unix ?" when the kernel does not say. */
static void describe_unix_peer(gd_conn *c) {
  uv_os_fd_t fd;
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (uv_fileno(&c->h.handle, &fd) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && len == sizeof cred) {
    snprintf(c->peer_key, sizeof c->peer_key, "uid %u", (unsigned)cred.uid);
  } else {
    snprintf(c->peer_key, sizeof c->peer_key, "unix ?");
  }
  snprintf(c->peer, sizeof c->peer, "unix");
}

static void describe_peer(gd_conn *c) {
  if (c->h.handle.type != UV_TCP) {
    describe_unix_peer(c);
    return;
  }
  struct sockaddr_storage ss;
  int len = sizeof ss;
  char host[64] = "?";
  int port = 0;
  if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &len) == 0) {
    if (ss.ss_family == AF_INET6) {
      uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof host);
      port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    } else {
      uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof host);
      port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
  }
  snprintf(c->peer, sizeof c->peer, ss.ss_family == AF_INET6 ? "tcp [%s]:%d" : "tcp %s:%d", host,
           port);
  snprintf(c->peer_key, sizeof c->peer_key, "tcp %s", host);
}

/* The stream, timer and idle handles on loop; open_handles counts those that must be closed. */
static int init_handles(gd_conn *c, uv_loop_t *loop, bool tcp) {
  snprintf(c->peer, sizeof c->peer, "?");
  int rc = tcp ? uv_tcp_init(loop, &c->h.tcp)
               : uv_pipe_init(loop, &c->h.pipe, c->shm.totals != NULL);
  if (rc != 0)
    return rc;
  c->h.handle.data = c;
  c->open_handles = 1;
  rc = uv_timer_init(loop, &c->timer);
  if (rc != 0)
    return rc;
  c->timer.data = c;
  c->open_handles = 2;
  rc = uv_idle_init(loop, &c->flush);
  if (rc != 0)
    return rc;
  c->flush.data = c;
  c->open_handles = 3;
  return 0;
}

/* libuv's reason, the message its callers log after "accept failed: ". */
static int accept_error(gp_error *err, int rc) {
  return gp_error_set(err, GP_E_UNAVAILABLE, "%s", uv_strerror(rc));
}

int gd_conn_accept(gd_conn *c, uv_loop_t *loop, uv_stream_t *server, gp_error *err) {
  int rc = init_handles(c, loop, server->type == UV_TCP);
  if (rc == 0)
    rc = uv_accept(server, &c->h.stream);
  if (rc != 0)
    return accept_error(err, rc);
  describe_peer(c);
  return 0;
}

int gd_conn_open(gd_conn *c, uv_loop_t *loop, int fd, bool tcp, gp_error *err) {
  int rc = init_handles(c, loop, tcp);
  if (rc != 0) {
    close(fd);
    return accept_error(err, rc);
  }
  rc = tcp ? uv_tcp_open(&c->h.tcp, fd) : uv_pipe_open(&c->h.pipe, fd);
  if (rc != 0) {
    close(fd); /* not the handle's: closing it closes nothing */
    return accept_error(err, rc);
  }
  describe_peer(c);
  return 0;
}

/* ---- reading ----------------------------------------------------------------- */

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  gd_conn *c = handle->data;
  (void)suggested;
  void *ptr;
  size_t len;
  if (c->events->window(c, &ptr, &len)) {
    assert(len > 0);
    if (len > 0x40000000u)
      len = 0x40000000u; /* uv_buf_t's length is an unsigned int */
    *buf = uv_buf_init(ptr, (unsigned)len);
    return;
  }
  *buf = uv_buf_init((char *)c->rbuf, GD_CONN_READ_BUFFER_BYTES);
}

/* libuv reads a readable stream up to 32 times in one go, and a large payload's window takes
 * each read whole (what the socket holds, hundreds of KiB): one client streaming a large
 * operand could hold the loop for milliseconds while every other connection's requests and
 * replies waited. After GD_CONN_READ_QUANTUM window bytes the connection stops reading until
 * the idle handle runs (the next iteration, before its poll), so the loop goes round the others
 * once per MiB of a large payload. */
static void yield_after_quantum(gd_conn *c) {
  if (c->closing || !c->reading || c->window_read < GD_CONN_READ_QUANTUM)
    return;
  c->window_read = 0;
  uv_read_stop(&c->h.stream);
  c->reading = false;
  c->yielded = true;
  uv_idle_start(&c->flush, on_flush); /* cannot fail with a callback */
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  gd_conn *c = stream->data;
  if (nread == 0)
    return;
  if (nread < 0) {
    if (nread == UV_EOF) {
      c->events->eof(c);
    } else {
      char why[128];
      snprintf(why, sizeof why, "read error: %s", uv_strerror((int)nread));
      gd_conn_close(c, why);
    }
    return;
  }
  assert(c->pending_len == 0); /* reading only once everything read was decoded */
  if (c->shm.totals) /* before the bytes: a shm_register among them needs its descriptor */
    gd_shm_take_fds(&c->shm, &c->h.pipe);
  c->stats->bytes_in += (uint64_t)nread;
  c->last_activity_us = gd_now_us();
  c->pending = (const uint8_t *)buf->base;
  c->pending_len = (size_t)nread;
  c->pending_in_window = buf->base != (char *)c->rbuf;
  if (c->pending_in_window)
    c->window_read += (size_t)nread;
  c->events->data(c);
  yield_after_quantum(c);
}

void gd_conn_want_read(gd_conn *c, bool want) {
  want = want && !c->closing && c->pending_len == 0 && !c->yielded;
  if (want && !c->reading) {
    int rc = uv_read_start(&c->h.stream, on_alloc, on_read);
    if (rc != 0) {
      char why[128];
      snprintf(why, sizeof why, "cannot read: %s", uv_strerror(rc));
      gd_conn_close(c, why);
      return;
    }
    c->reading = true;
  } else if (!want && c->reading) {
    uv_read_stop(&c->h.stream);
    c->reading = false;
  }
}

void gd_conn_consumed(gd_conn *c, size_t used) {
  assert(used <= c->pending_len);
  c->pending += used;
  c->pending_len -= used;
}

void gd_conn_leave_window(gd_conn *c) {
  if (!c->pending_in_window)
    return;
  c->pending_in_window = false;
  c->pending = c->rbuf;
  c->pending_len = 0;
}

/* ---- closing ----------------------------------------------------------------- */

static void on_close(uv_handle_t *handle) {
  gd_conn *c = handle->data;
  assert(c->open_handles > 0);
  if (--c->open_handles > 0)
    return;
  gd_conn_free(c);
  c->events->closed(c);
}

void gd_conn_close(gd_conn *c, const char *why) {
  if (c->closing)
    return;
  c->closing = true;
  c->events->closing(c, why);
  /* Jobs go back to the scheduler now; records stay until the close callback because
   * cancelled writes still give their chunks back through them. */
  gd_calls_orphan_all(&c->calls);
  gd_replyq_drop(&c->out);
  if (c->reading)
    uv_read_stop(&c->h.stream);
  c->reading = false;
  if (c->open_handles == 3)
    uv_close((uv_handle_t *)&c->flush, on_close);
  if (c->open_handles >= 2) {
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, on_close);
  }
  uv_close(&c->h.handle, on_close);
}

bool gd_conn_peer_gone(gd_conn *c, uint64_t needed) {
  uv_os_fd_t fd;
  if (c->closing || uv_fileno((const uv_handle_t *)&c->h.stream, &fd) != 0)
    return false;
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  if (poll(&p, 1, 0) != 1)
    return false;
  if (p.revents & (POLLHUP | POLLERR))
    return true;
  if (!(p.revents & POLLRDHUP))
    return false;
  int avail = 0;
  if (ioctl(fd, FIONREAD, &avail) != 0 || avail < 0)
    return false;
  return (uint64_t)avail + c->pending_len < needed;
}
