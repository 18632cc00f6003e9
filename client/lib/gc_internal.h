/*
 * gc_internal.h - what the files of libgemmclient share: the connection and
 * request objects, connecting a socket, the request table and the I/O pump.
 * Not installed. Names here are gc__ (internal, hidden from the .so).
 */
#ifndef GC_INTERNAL_H
#define GC_INTERNAL_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "gemmclient.h"
#include "gp_addr.h"
#include "gp_decode.h"
#include "gp_encode.h"
#include "gp_error.h"
#include "gp_types.h"

/* ---- sockets (gc_socket.c) ---------------------------------------------- */

/* Opens a non-blocking, close-on-exec stream socket connected to addr (parsed by
 * gp_addr_parse with GP_ADDR_CONNECT), waiting at most timeout_ms. Returns the fd, or a
 * negative code with err filled. */
int gc__socket_connect(const gp_addr *addr, int timeout_ms, gc_error *err);

/* ---- errors (gc_error.c) ----------------------------------------------- */

int gc__error_set(gc_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void gc__error_clear(gc_error *err);
/* The calling thread's last gc_connect failure. */
gc_error *gc__thread_error(void);

/* ---- requests ---------------------------------------------------------- */

typedef enum {
  GC__KIND_GEMM,
  GC__KIND_CALL, /* ping, info, stats, shm_*: the result object is kept packed */
} gc__kind;

typedef enum {
  GC__ST_SENDING,   /* in the send queue */
  GC__ST_WAITING,   /* all sent; no reply yet */
  GC__ST_RECEIVING, /* the reply's head arrived; payload or MESSAGE_END to come */
  GC__ST_DONE,      /* complete; in the done list until reported */
} gc__state;

#define GC__IOV_MAX 7 /* head, then per operand: bin header and bytes, or a reference */

typedef struct gc__request {
  uint32_t msgid;
  gc__kind kind;
  gp_method method;
  gc__state state;
  bool abandoned;   /* cancelled: caller memory is off-limits, the outcome is not reported */
  bool zero_fill;   /* caller memory is off-limits but the stream still owes its bytes */
  /* the request is freed when all three are false (gc__request_release) */
  bool in_sendq;    /* bytes still to send */
  bool in_table;    /* known by msgid: from submit until reported (or an abandoned one ends) */
  bool in_done;     /* complete, in the done list, not yet reported to the caller */

  /* sending: iov[i] with iov_caller[i] true points into the caller's memory */
  msgpack_sbuffer head;
  uint8_t op_hdr[3][GP_SHM_REF_MAX];   /* each operand's bin header, or its reference */
  int pass_fd;         /* >= 0: passed with SCM_RIGHTS on the first byte (not owned) */
  struct iovec iov[GC__IOV_MAX];
  bool iov_caller[GC__IOV_MAX];
  int iovcnt;
  int iov_next;        /* first iov not completely sent */
  size_t iov_done;     /* bytes of iov[iov_next] already sent */
  uint64_t sent, send_total;
  struct gc__request *send_next;

  /* receiving */
  gp_gemm_hdr expect;  /* gemm: what the reply must match */
  uint8_t *out;        /* gemm: the caller's C buffer; NULL when abandoned */
  bool out_in_shm;     /* gemm: the daemon writes C into a shared-memory buffer itself */
  void *user;          /* gemm: gc_gemm_opts.user, for gc_completion */
  uint64_t out_bytes;
  uint64_t received;
  msgpack_sbuffer packed; /* call: the result object, packed */

  /* outcome */
  gc_error error;
  gc_gemm_result result;
  struct gc__request *done_prev, *done_next;
  struct gc__request *tmp_next; /* gc__io_break's list */
} gc__request;

/* ---- request table (gc_reqtab.c): msgid -> request ---------------------- */

typedef struct {
  gc__request **slots; /* open addressing, linear probing; NULL = empty */
  size_t capacity;     /* a power of two, or 0 */
  size_t count;
} gc__reqtab;

void gc__reqtab_init(gc__reqtab *t);
void gc__reqtab_free(gc__reqtab *t); /* frees the slots, not the requests */
/* 0, or GC_E_RESOURCE_EXHAUSTED. The msgid must not be present. */
int gc__reqtab_put(gc__reqtab *t, gc__request *r);
gc__request *gc__reqtab_get(const gc__reqtab *t, uint32_t msgid);
/* Removes and returns the request, or NULL. */
gc__request *gc__reqtab_del(gc__reqtab *t, uint32_t msgid);
/* Calls fn on every request (fn must not change the table). */
void gc__reqtab_each(const gc__reqtab *t, void (*fn)(gc__request *r, void *arg), void *arg);

/* ---- shared-memory buffers (gc_shm.c) ----------------------------------- */

typedef struct gc__shm {
  uint64_t region;     /* the daemon's id */
  uint8_t *base;
  size_t size;
  struct gc__shm *next;
} gc__shm;

/* The region holding [ptr, ptr + len) whole: true with *region and *offset. */
bool gc__shm_find(const gc_conn *conn, const void *ptr, uint64_t len, uint64_t *region,
                  uint64_t *offset);
/* Unmaps every buffer (gc_close). */
void gc__shm_free_all(gc_conn *conn);

/* ---- the connection ---------------------------------------------------- */

#define GC__READ_BUF_BYTES (256u * 1024u)

struct gc_conn {
  int fd;
  bool broken;           /* the stream failed; broken_error says how */
  gc_error broken_error;
  gc_error last_error;
  gp_decoder *decoder;
  gp_limits limits;      /* for replies (gc_connect_opts.max_reply_bytes) */
  uint32_t next_msgid;
  gc__reqtab table;      /* every request not yet reported, and abandoned ones not ended */
  size_t abandoned_count;
  gc__request *send_head, *send_tail;
  size_t send_count;
  gc__request *done_head, *done_tail;
  gc__request *receiving; /* the request whose reply is being decoded, or NULL */
  bool skipping;          /* the reply being decoded has no request: drop its payload */
  uint8_t *rbuf;          /* bytes read but not yet fed to the decoder */
  size_t rbuf_start, rbuf_end;
  gc__shm *shm;           /* shared-memory buffers registered on this connection */
};

/* Requests (gc_request.c) */
gc__request *gc__request_new(gc_conn *conn, gc__kind kind);
/* Puts a built request into the table and the send queue, then sends what it can. */
int gc__request_start(gc_conn *conn, gc__request *r);
/* Marks r complete with err (NULL: success): into the done list, or out of the table and
 * freed when abandoned; a request still sending finishes its bytes with zeros. */
void gc__request_finish(gc_conn *conn, gc__request *r, const gc_error *err);
/* Frees r once nothing holds it any more (see in_sendq, in_table, in_done). */
void gc__request_release(gc__request *r);
/* Takes r out of the done list and the table (it is being reported) and releases it. */
void gc__request_reported(gc_conn *conn, gc__request *r);

/* A small call (ping, info, stats, shm_register, shm_unregister): sends it (with [arg] when
 * has_arg; pass_fd >= 0 rides on its first byte), waits for the reply; on success *packed
 * (when not NULL) takes the result object's msgpack bytes. */
int gc__call(gc_conn *conn, gp_method method, bool has_arg, uint64_t arg, int pass_fd,
             int64_t timeout_ms, msgpack_sbuffer *packed);

/* Drives conn until r is done or deadline_ms (gc__now_ms clock; < 0: none) passes. 0 when
 * done, GC_E_DEADLINE_EXCEEDED when not. */
int gc__drive_until_done(gc_conn *conn, gc__request *r, int64_t deadline_ms);
/* Turns a caller's timeout (< 0: none) into a deadline on the gc__now_ms clock. */
int64_t gc__deadline(int64_t timeout_ms);

/* I/O (gc_io.c) */
/* Sends and receives whatever is possible without blocking. 0, or the code of a broken
 * connection (every request then finished with it). */
int gc__io_progress(gc_conn *conn);
/* Blocks in poll(2) until the socket is ready for what the connection needs or until
 * deadline_ms (gc__now_ms clock; < 0: none) passes. 1 ready, 0 timed out, < 0 error. */
int gc__io_wait(gc_conn *conn, int64_t deadline_ms);
/* Fails the connection: every request in flight finishes with code and message. */
void gc__io_break(gc_conn *conn, int code, const char *message);
int64_t gc__now_ms(void);

/* Sets conn->last_error from err and returns err->code. */
int gc__conn_fail(gc_conn *conn, const gc_error *err);
int gc__conn_failf(gc_conn *conn, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* GC_INTERNAL_H */
