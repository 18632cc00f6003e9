/*
 * gc_io.c - the connection's pump: sends queued requests with sendmsg()
 * straight from the caller's buffers, receives replies (a gemm's C straight
 * into the caller's output buffer), and turns decoder events into request
 * outcomes. Never blocks except in gc__io_wait.
 */
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gc_internal.h"

/* What a cancelled request's unsent payload goes out as (the stream must stay in step). */
static const uint8_t zeros[64 * 1024];

int64_t gc__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- breaking ---------------------------------------------------------- */

static void collect(gc__request *r, void *arg) {
  gc__request **list = arg;
  if (r->state == GC__ST_DONE || r->state == GC__ST_PARKED) return;
  r->tmp_next = *list;
  *list = r;
}

void gc__io_break(gc_conn *conn, int code, const char *message) {
  if (conn->broken) return;
  conn->broken = true;
  conn->retiring = false;
  conn->auth_waiting = false;
  gc__error_set(&conn->broken_error, code, "%s", message);
  if (conn->fd >= 0) close(conn->fd);
  conn->fd = -1;
  conn->receiving = NULL;
  conn->rbuf_start = conn->rbuf_end = 0;
  /* Nothing more goes out: empty the send queue first so that finishing does not zero-fill. */
  for (gc__request *r = conn->send_head, *next; r != NULL; r = next) {
    next = r->send_next;
    r->in_sendq = false;
    gc__request_release(r); /* frees what nothing else holds: done requests, the token */
  }
  conn->send_head = conn->send_tail = NULL;
  conn->send_count = 0;
  gc__request *list = NULL;
  gc__reqtab_each(&conn->table, collect, &list);
  /* a lost socket: each gemm may go again on the next one (gc__link_maintain) */
  bool lost = code == GC_E_UNAVAILABLE;
  for (gc__request *r = list, *next; r != NULL; r = next) {
    next = r->tmp_next;
    if (lost) gc__request_lost(conn, r, &conn->broken_error);
    else gc__request_finish(conn, r, &conn->broken_error);
  }
  assert(conn->wire_count == 0);
}

static int break_errno(gc_conn *conn, const char *what, int error) {
  char message[GC_ERROR_MESSAGE_MAX];
  snprintf(message, sizeof message, "%s: %s", what, strerror(error));
  gc__io_break(conn, GC_E_UNAVAILABLE, message);
  return GC_E_UNAVAILABLE;
}

/* ---- sending ----------------------------------------------------------- */

/* Fills iov with what is left of r; a zero-filled request sends at most one chunk of zeros
 * in place of caller memory per call. Returns the iov count. */
static int remaining_iov(const gc__request *r, struct iovec *iov) {
  int n = 0;
  for (int i = r->iov_next; i < r->iovcnt; i++) {
    size_t skip = i == r->iov_next ? r->iov_done : 0;
    size_t len = r->iov[i].iov_len - skip;
    if (len == 0) continue;
    if (r->zero_fill && r->iov_caller[i]) {
      iov[n].iov_base = (void *)zeros;
      iov[n].iov_len = len < sizeof zeros ? len : sizeof zeros;
      return n + 1;
    }
    iov[n].iov_base = (uint8_t *)r->iov[i].iov_base + skip;
    iov[n].iov_len = len;
    n++;
  }
  return n;
}

static void advance(gc__request *r, size_t sent) {
  r->sent += sent;
  while (sent > 0 && r->iov_next < r->iovcnt) {
    size_t left = r->iov[r->iov_next].iov_len - r->iov_done;
    size_t step = sent < left ? sent : left;
    r->iov_done += step;
    sent -= step;
    if (r->iov_done == r->iov[r->iov_next].iov_len) {
      r->iov_next++;
      r->iov_done = 0;
    }
  }
  while (r->iov_next < r->iovcnt && r->iov[r->iov_next].iov_len == 0) r->iov_next++;
}

static void sendq_pop(gc_conn *conn) {
  gc__request *r = conn->send_head;
  conn->send_head = r->send_next;
  if (conn->send_head == NULL) conn->send_tail = NULL;
  conn->send_count--;
  r->in_sendq = false;
  if (r->retry_pending) { /* its zeros are out: now it may go on another socket */
    gc__request_park(conn, r);
    return;
  }
  if (r->state == GC__ST_SENDING) r->state = GC__ST_WAITING;
  gc__request_release(r);
}

/* While the daemon has not accepted the token, only the token goes out. */
bool gc__io_may_send(const gc_conn *conn) {
  return conn->send_head != NULL && (!conn->auth_waiting || conn->send_head->kind == GC__KIND_AUTH);
}

static int send_some(gc_conn *conn) {
  while (gc__io_may_send(conn)) {
    gc__request *r = conn->send_head;
    struct iovec iov[GC__IOV_MAX];
    int n = remaining_iov(r, iov);
    if (n == 0) {
      sendq_pop(conn);
      continue;
    }
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)n;
    union { /* aligned for struct cmsghdr */
      char buf[CMSG_SPACE(sizeof(int))];
      struct cmsghdr align;
    } control;
    if (r->pass_fd >= 0 && r->sent == 0) { /* the descriptor rides on the first byte */
      memset(&control, 0, sizeof control);
      mh.msg_control = control.buf;
      mh.msg_controllen = sizeof control.buf;
      struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(cm), &r->pass_fd, sizeof(int));
    }
    ssize_t sent = sendmsg(conn->fd, &mh, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return break_errno(conn, "send to daemon", errno);
    }
    advance(r, (size_t)sent);
  }
  return 0;
}

/* ---- decoder events ---------------------------------------------------- */

static bool reply_matches(const gc__request *r, const gp_event *ev) {
  const gp_gemm_result_hdr *h = &ev->result_hdr;
  return h->m == r->expect.m && h->n == r->expect.n && h->batch == r->expect.batch &&
         h->dtype == gp_gemm_out_dtype(&r->expect) && ev->result_in_shm == r->out_in_shm &&
         (r->out_in_shm || ev->result_bytes == r->out_bytes);
}

static void copy_result_hdr(gc_gemm_result *out, const gp_gemm_result_hdr *h) {
  out->m = h->m;
  out->n = h->n;
  out->batch = h->batch;
  out->dtype = (gc_dtype)h->dtype;
  snprintf(out->device, sizeof out->device, "%s", h->device);
  snprintf(out->kernel, sizeof out->kernel, "%s", h->kernel);
  out->queue_us = h->queue_us;
  out->transfer_in_us = h->transfer_in_us;
  out->compute_us = h->compute_us;
  out->transfer_out_us = h->transfer_out_us;
}

/* The reply cannot be used: finish r with INTERNAL and drop the rest of the message. */
static void reply_invalid(gc_conn *conn, gc__request *r, const char *why) {
  gc_error err;
  gc__error_set(&err, GC_E_INTERNAL, "reply to request %u: %s", r->msgid, why);
  gp_decoder_skip_message(conn->decoder);
  gc__request_finish(conn, r, &err);
}

static void on_gemm_response(gc_conn *conn, gc__request *r, const gp_event *ev) {
  if (!ev->is_gemm_result) {
    reply_invalid(conn, r, "a gemm reply is not [out_hdr, c]");
    return;
  }
  if (!reply_matches(r, ev)) {
    reply_invalid(conn, r, "the reply's shape, dtype or size differs from the request");
    return;
  }
  copy_result_hdr(&r->result, &ev->result_hdr);
  r->state = GC__ST_RECEIVING;
  conn->receiving = r;
}

static void on_call_response(gc_conn *conn, gc__request *r, const gp_event *ev) {
  if (ev->is_gemm_result || ev->result == NULL) {
    reply_invalid(conn, r, "a gemm result in reply to a call");
    return;
  }
  msgpack_packer pk;
  msgpack_packer_init(&pk, &r->packed, msgpack_sbuffer_write);
  if (msgpack_pack_object(&pk, *ev->result) != 0) {
    gc_error err;
    gc__error_set(&err, GC_E_RESOURCE_EXHAUSTED, "out of memory for the reply to request %u",
                  r->msgid);
    gp_decoder_skip_message(conn->decoder);
    gc__request_finish(conn, r, &err);
    return;
  }
  r->state = GC__ST_RECEIVING;
  conn->receiving = r;
}

/* The daemon's answer to the token: true lets the other requests go; else the socket fails. */
static int on_auth_reply(gc_conn *conn, const gp_event *ev) {
  assert(conn->auth_waiting && ev->msgid == conn->auth_msgid);
  conn->auth_waiting = false;
  bool accepted = ev->err.code == GC_OK && !ev->is_gemm_result && ev->result != NULL &&
                  ev->result->type == MSGPACK_OBJECT_BOOLEAN && ev->result->via.boolean;
  gp_decoder_skip_message(conn->decoder);
  if (accepted) return 0;
  char message[GC_ERROR_MESSAGE_MAX];
  int code = ev->err.code != GC_OK ? ev->err.code : GC_E_INTERNAL;
  snprintf(message, sizeof message, "auth: %.200s",
           ev->err.code != GC_OK ? ev->err.message : "the daemon's answer is not true");
  gc__io_break(conn, code, message);
  return code;
}

static int on_response(gc_conn *conn, const gp_event *ev) {
  if (conn->auth_waiting && ev->msgid == conn->auth_msgid) return on_auth_reply(conn, ev);
  gc__request *r = gc__reqtab_get(&conn->table, ev->msgid);
  if (r == NULL || !r->on_wire || r->state == GC__ST_DONE || r->state == GC__ST_RECEIVING) {
    /* a reply to nothing we asked on this socket, or a second reply: drop it */
    gp_decoder_skip_message(conn->decoder);
    return 0;
  }
  if (ev->err.code != GC_OK) { /* the daemon's error: its MESSAGE_END finishes r */
    gc__error_set(&r->error, ev->err.code, "%s", ev->err.message);
    r->state = GC__ST_RECEIVING;
    conn->receiving = r;
    return 0;
  }
  if (r->kind == GC__KIND_GEMM) on_gemm_response(conn, r, ev);
  else on_call_response(conn, r, ev);
  return 0;
}

/* The end of r's reply: done, or (answered UNAVAILABLE) tried again on another socket. */
static void on_message_end(gc_conn *conn, gc__request *r) {
  conn->receiving = NULL;
  if (r->error.code != GC_E_UNAVAILABLE) {
    gc__request_finish(conn, r, &r->error);
    return;
  }
  conn->retiring = true; /* this daemon is going away: new requests wait for the next one */
  gc_error err = r->error;
  gc__request_lost(conn, r, &err);
}

static int on_payload(gc_conn *conn, const gp_event *ev) {
  gc__request *r = conn->receiving;
  if (r == NULL) return 0;
  if (ev->operand != GP_OPERAND_C || ev->offset > r->out_bytes ||
      ev->len > r->out_bytes - ev->offset) {
    gc__io_break(conn, GC_E_INTERNAL, "reply payload outside the result buffer");
    return GC_E_INTERNAL;
  }
  /* Bytes received straight into the destination are already where they belong. */
  if (r->out != NULL && ev->data != r->out + ev->offset)
    memcpy(r->out + ev->offset, ev->data, ev->len);
  r->received += ev->len;
  return 0;
}

static void on_reject(gc_conn *conn, const gp_event *ev) {
  gc__request *r = ev->has_msgid ? gc__reqtab_get(&conn->table, ev->msgid) : conn->receiving;
  if (r == NULL || r->state == GC__ST_DONE || !r->on_wire) r = conn->receiving;
  if (r != NULL) {
    gc_error err;
    gc__error_set(&err, GC_E_INTERNAL, "invalid reply from daemon: %s", ev->err.message);
    gc__request_finish(conn, r, &err);
  }
  conn->receiving = NULL;
}

static int on_event(gc_conn *conn, const gp_event *ev) {
  switch (ev->type) {
    case GP_EV_RESPONSE:
      return on_response(conn, ev);
    case GP_EV_PAYLOAD:
      return on_payload(conn, ev);
    case GP_EV_MESSAGE_END:
      if (conn->receiving != NULL) on_message_end(conn, conn->receiving);
      return 0;
    case GP_EV_REJECT:
      on_reject(conn, ev);
      return 0;
    case GP_EV_FATAL: {
      char message[GC_ERROR_MESSAGE_MAX];
      snprintf(message, sizeof message, "protocol error from daemon: %.200s", ev->err.message);
      gc__io_break(conn, GC_E_INTERNAL, message);
      return GC_E_INTERNAL;
    }
    default: /* requests and notifications are not for a client: the decoder skips them */
      return 0;
  }
}

static int feed(gc_conn *conn, const uint8_t *data, size_t len) {
  for (;;) {
    gp_event ev;
    size_t used = gp_decoder_feed(conn->decoder, data, len, &ev);
    data += used;
    len -= used;
    if (ev.type == GP_EV_NEED_MORE) return 0;
    int rc = on_event(conn, &ev);
    if (rc != 0) return rc;
  }
}

/* ---- receiving --------------------------------------------------------- */

/* Where the next bytes can be received straight to: the output buffer of the gemm whose C
 * is arriving. False when they must go through the read buffer. */
static bool direct_window(gc_conn *conn, uint8_t **dst, size_t *cap) {
  gc__request *r = conn->receiving;
  gp_operand operand;
  uint64_t offset, remaining;
  if (r == NULL || r->out == NULL) return false;
  if (!gp_decoder_payload_window(conn->decoder, &operand, &offset, &remaining)) return false;
  if (operand != GP_OPERAND_C || offset > r->out_bytes || remaining > r->out_bytes - offset ||
      remaining == 0)
    return false;
  *dst = r->out + offset;
  *cap = remaining > (SIZE_MAX >> 1) ? (SIZE_MAX >> 1) : (size_t)remaining;
  return true;
}

static int recv_some(gc_conn *conn) {
  while (!conn->broken) {
    if (conn->rbuf_start < conn->rbuf_end) {
      size_t start = conn->rbuf_start, end = conn->rbuf_end;
      conn->rbuf_start = conn->rbuf_end = 0;
      int rc = feed(conn, conn->rbuf + start, end - start);
      if (rc != 0) return rc;
      continue;
    }
    uint8_t *dst;
    size_t cap;
    bool direct = direct_window(conn, &dst, &cap);
    if (!direct) {
      dst = conn->rbuf;
      cap = GC__READ_BUF_BYTES;
    }
    ssize_t got = recv(conn->fd, dst, cap, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      return break_errno(conn, "receive from daemon", errno);
    }
    if (got == 0) {
      gc__io_break(conn, GC_E_UNAVAILABLE, "the daemon closed the connection");
      return GC_E_UNAVAILABLE;
    }
    if (direct) {
      int rc = feed(conn, dst, (size_t)got);
      if (rc != 0) return rc;
    } else {
      conn->rbuf_end = (size_t)got;
    }
  }
  return conn->broken_error.code;
}

int gc__io_pump(gc_conn *conn) {
  if (conn->broken) return conn->broken_error.code;
  int rc = send_some(conn);
  if (rc == 0) rc = recv_some(conn);
  /* receiving may have made room for more sending (a refusal zero-fills its rest) */
  if (rc == 0) rc = send_some(conn);
  return rc;
}

int gc__io_wait(gc_conn *conn, int64_t deadline_ms) {
  if (conn->broken) return conn->broken_error.code;
  struct pollfd pfd = {.fd = conn->fd, .events = POLLIN};
  if (gc__io_may_send(conn)) pfd.events |= POLLOUT;
  for (;;) {
    int timeout = -1;
    if (deadline_ms >= 0) {
      int64_t left = deadline_ms - gc__now_ms();
      if (left <= 0) return 0;
      timeout = left > 1000000 ? 1000000 : (int)left;
    }
    int ready = poll(&pfd, 1, timeout);
    if (ready > 0) return 1;
    if (ready == 0) {
      if (deadline_ms >= 0 && gc__now_ms() >= deadline_ms) return 0;
      continue;
    }
    if (errno != EINTR) return break_errno(conn, "poll", errno);
  }
}
