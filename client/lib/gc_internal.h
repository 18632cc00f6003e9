/*
 * gc_internal.h - what the files of libgemmclient share: the connection and request
 * objects, then each layer's functions. Not installed. Names here are gc__ (internal,
 * hidden from the .so).
 *
 * The files are layers, lowest first; a file calls only its own layer and lower ones
 * (scripts/check-layers.py, CLIENT_LAYERS, keeps it so):
 *
 *   support     gc_error, gc_socket, gc_addrlist, gc_token, gc_reqtab, gc_copy, gc_map:
 *               error values, connecting one socket, address lists, the token, the msgid
 *               table, the copy threads, reading info/stats maps
 *   requests    gc_request: a request's life and the lists it moves between (send queue,
 *               park list, done list, wire count); never touches the socket
 *   io          gc_io: the pump of the current socket (send, receive, decoder events, the
 *               token's answer) and breaking it
 *   link        gc_link: sockets to the daemons one at a time (open, token, retire,
 *               reconnect), progress (replace a lost socket, then pump), starting a request
 *   connection  gc_conn: connect, close, wait, poll, cancel, progress of a request
 *   calls       gc_call: ping, info, stats and the small calls the API files make
 *   api         gc_gemm (options, gc_submit, the plain blocking gemm), gc_shm, gc_cuda, gc_put
 *   blocking    gc_scratch: gc_gemm itself, plain or through the scratch region / staging
 *
 * No layer tells a higher one anything by calling it: a lower layer changes the objects
 * below (a request's state, conn->broken) and the higher one reads them when it next runs.
 *
 * Errors: a function that can fail returns 0 (or a result >= 0: a descriptor) or a negative
 * GC_E_* code, and says what failed in a gc_error: conn->last_error (gc__conn_fail; what the
 * caller reads with gc_last_error) for the API's own calls, else the gc_error it is handed
 * (conn->broken_error for the socket, a request's error, the thread's for gc_connect). Only
 * the support layer returns a code alone (gc__reqtab_put): its caller writes the message.
 * bool and NULL answer questions (is it there? may it send?), never report a failure. A
 * static helper wrapping a system call may return -1 and an errno value inside its file
 * (connect_one, read_small_file); its caller turns that into a code before returning.
 */
#ifndef GC_INTERNAL_H
#define GC_INTERNAL_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "gemmclient.h"
#include "gp_addr.h"
#include "gp_decode.h"
#include "gp_encode.h"
#include "gp_error.h"
#include "gp_types.h"

/* ======== the objects =================================================================== */

/* ---- requests -------------------------------------------------------------------------- */

typedef enum {
  GC__KIND_GEMM,
  GC__KIND_CALL, /* ping, info, stats, shm_*: the result object is kept packed */
  GC__KIND_AUTH, /* the token, first on a TCP socket: in the send queue only, never the table */
} gc__kind;

typedef enum {
  GC__ST_PARKED,    /* waiting for a socket (reconnecting, or the current one is retiring) */
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
  bool on_wire;     /* sent (or sending) on the current socket: counted in conn->wire_count */
  bool retry_pending; /* answered UNAVAILABLE while still sending: parked once its bytes
                         (zeros) are out */
  unsigned retries; /* times re-sent after a lost connection or an UNAVAILABLE answer */

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
  struct gc__request *send_next; /* the send queue, or the park list while PARKED */

  /* receiving */
  gp_gemm_hdr expect;  /* gemm: what the reply must match */
  uint8_t *out;        /* gemm: the caller's C buffer; NULL when abandoned */
  bool out_in_shm;     /* gemm: the daemon writes C into a shared-memory buffer itself */
  bool uses_shm;       /* gemm: names a region (operand or out) or a resident handle: valid
                          on its socket only */
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

/* ---- the request table (gc_reqtab.c): msgid -> request --------------------------------- */

typedef struct {
  gc__request **slots; /* open addressing, linear probing; NULL = empty */
  size_t capacity;     /* a power of two, or 0 */
  size_t count;
} gc__reqtab;

/* ---- shared-memory buffers (gc_shm.c) -------------------------------------------------- */

typedef struct gc__shm {
  uint64_t region;     /* the daemon's id */
  uint64_t link_serial; /* the socket it was registered on (regions go with their socket) */
  uint8_t *base;
  size_t size;
  bool device;         /* CUDA memory (gc_cuda_register): base is the caller's device
                        * pointer, never mapped nor touched here */
  struct gc__shm *next;
} gc__shm;

/* ---- copies (gc_copy.c) ---------------------------------------------------------------- */

/* rows rows of row_bytes each, from src (rows src_stride bytes apart) to dst (dst_stride
 * apart); only the rows' bytes are read and written, never the gaps. */
typedef struct {
  void *dst;
  const void *src;
  uint64_t rows, row_bytes, dst_stride, src_stride;
} gc__copy_rows_args;

/* ---- the connection -------------------------------------------------------------------- */

#define GC__READ_BUF_BYTES (256u * 1024u)

struct gc_conn {
  int fd;                /* the current socket, -1 while there is none */
  bool broken;           /* no usable socket: the last one failed, broken_error says how */
  gc_error broken_error;
  /* the daemons and how to reach them (gc_link.c) */
  gp_addr *addrs;
  size_t addr_count;
  size_t addr_next;      /* the next socket is tried at this address first */
  int connect_ms;
  unsigned max_retries;
  char *token;           /* sent first on each TCP socket; NULL: none */
  bool auth_waiting;     /* the token is out, the daemon's answer is not: nothing else is sent */
  uint32_t auth_msgid;
  bool retiring;         /* the daemon answered UNAVAILABLE: no new requests on this socket,
                            which is closed once idle (a fresh one takes the parked requests) */
  size_t wire_count;     /* requests on the current socket, not finished or parked */
  gc__request *park_head, *park_tail;
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
  uint64_t link_serial;   /* counts the sockets opened: which one a region belongs to */
  /* the automatic scratch region (gc_scratch.c), from gc_connect_opts */
  bool scratch_on;        /* gc_connect_opts.scratch, and no failure to make one yet */
  uint64_t scratch_min, scratch_max;
  uint8_t *scratch;       /* a gc_shm_alloc buffer, or NULL */
  size_t scratch_size;
};

/* ======== the layers' functions, lowest first =========================================== */

/* ---- support: errors (gc_error.c) ------------------------------------------------------ */

int gc__error_set(gc_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void gc__error_clear(gc_error *err);
/* The calling thread's last gc_connect failure. */
gc_error *gc__thread_error(void);
/* Sets conn->last_error from err and returns err->code. */
int gc__conn_fail(gc_conn *conn, const gc_error *err);
int gc__conn_failf(gc_conn *conn, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- support: sockets (gc_socket.c) ---------------------------------------------------- */

/* Opens a non-blocking, close-on-exec stream socket connected to addr (parsed by
 * gp_addr_parse with GP_ADDR_CONNECT), waiting at most timeout_ms. Returns the fd, or a
 * negative code with err filled. */
int gc__socket_connect(const gp_addr *addr, int timeout_ms, gc_error *err);

/* ---- support: the request table (gc_reqtab.c): msgid -> request ------------------------ */

void gc__reqtab_init(gc__reqtab *t);
void gc__reqtab_free(gc__reqtab *t); /* frees the slots, not the requests */
/* 0, or GC_E_RESOURCE_EXHAUSTED. The msgid must not be present. */
int gc__reqtab_put(gc__reqtab *t, gc__request *r);
gc__request *gc__reqtab_get(const gc__reqtab *t, uint32_t msgid);
/* Removes and returns the request, or NULL. */
gc__request *gc__reqtab_del(gc__reqtab *t, uint32_t msgid);
/* Calls fn on every request (fn must not change the table). */
void gc__reqtab_each(const gc__reqtab *t, void (*fn)(gc__request *r, void *arg), void *arg);

/* ---- support: addresses and the token (gc_addrlist.c, gc_token.c) ---------------------- */

#define GC__ADDRS_MAX 64        /* addresses in one comma-separated list */
#define GC__TOKEN_MAX 256       /* bytes of a token: the protocol's limit (PROTOCOL.md, auth) */

/* Parses a comma-separated list of addresses (spaces around items ignored) into a new array
 * (*out, caller frees). 0, or a negative code with err filled. */
int gc__addrlist_parse(const char *text, gp_addr **out, size_t *count, gc_error *err);
/* Where a new connection starts in a list of count addresses: round robin over the
 * process's connections. */
size_t gc__addrlist_first(size_t count);

/* The token to send, by precedence: token (an empty string: none), token_file, $GEMMD_TOKEN,
 * the file named by $GEMMD_TOKEN_FILE. *out is NULL (none) or a new NUL-terminated copy
 * (caller frees). 0, or GC_E_INVALID_ARGUMENT / GC_E_RESOURCE_EXHAUSTED with err filled. */
int gc__token_resolve(const char *token, const char *token_file, char **out, gc_error *err);

/* ---- support: copies (gc_copy.c) ------------------------------------------------------- */

/* Copies by the library's copy threads and the caller (alone below 1 MiB). Thread-safe. */
void gc__copy_rows(const gc__copy_rows_args *args);
/* The number of threads a large copy uses: the CPU count, at most 16, or $GEMMD_COPY_THREADS. */
unsigned gc__copy_threads(void);

/* ---- requests (gc_request.c): a request's life and the lists it moves between ---------- */

/* A new request of conn with a fresh msgid: 0 with *out, or GC_E_RESOURCE_EXHAUSTED with err
 * filled (the caller's conn->last_error, or broken_error for the token). */
int gc__request_new(gc_conn *conn, gc__kind kind, gc__request **out, gc_error *err);
/* Frees r once nothing holds it any more (see in_sendq, in_table, in_done). */
void gc__request_release(gc__request *r);
/* r is off the current socket (finished, parked): wire_count follows. */
void gc__request_wire_leave(gc_conn *conn, gc__request *r);
/* Appends r to the send queue (the token does, and every dispatched request). */
void gc__request_sendq_append(gc_conn *conn, gc__request *r);
/* r goes out on the current socket (which is not broken) from its first byte. */
void gc__request_dispatch(gc_conn *conn, gc__request *r);
/* Parks r for the next socket (not counted as a retry). */
void gc__request_park(gc_conn *conn, gc__request *r);
/* Takes r off a list linked through send_next (the send queue, the park list); false when it
 * is not there. */
bool gc__list_unlink(gc__request **head, gc__request **tail, gc__request *r);
/* Takes r off the park list (it is cancelled or the connection closes). */
void gc__request_unpark(gc_conn *conn, gc__request *r);
/* A request new on conn: on the socket now, or parked until there is one. */
void gc__request_submit(gc_conn *conn, gc__request *r);
/* r's attempt failed with err (a lost socket, an UNAVAILABLE answer): parked for another
 * attempt while its retries last, else finished with err. */
void gc__request_lost(gc_conn *conn, gc__request *r, const gc_error *err);
/* Marks r complete with err (NULL: success): into the done list, or out of the table and
 * freed when abandoned; a request still sending finishes its bytes with zeros. r is not
 * parked. */
void gc__request_finish(gc_conn *conn, gc__request *r, const gc_error *err);
/* Takes r out of the done list and the table (it is being reported) and releases it. */
void gc__request_reported(gc_conn *conn, gc__request *r);

/* ---- I/O (gc_io.c): the pump of the current socket ------------------------------------- */

/* Sends and receives whatever is possible on the current socket without blocking. 0, or the
 * code of the failed socket. */
int gc__io_pump(gc_conn *conn);
/* Blocks in poll(2) until the socket is ready for what the connection needs or until
 * deadline_ms (gc__now_ms clock; < 0: none) passes. 1 ready, 0 timed out, < 0 error. */
int gc__io_wait(gc_conn *conn, int64_t deadline_ms);
/* Fails the socket: with GC_E_UNAVAILABLE (lost) every request on it is parked for a retry
 * (gc__request_lost), with any other code finished with code and message. */
void gc__io_break(gc_conn *conn, int code, const char *message);
int64_t gc__now_ms(void);
/* Whether anything queued may go out now (not while the token's answer is awaited). */
bool gc__io_may_send(const gc_conn *conn);

/* ---- the link (gc_link.c): sockets to the daemons, one at a time ----------------------- */

/* Opens a socket to the first address that answers, from addr_next on, each tried once;
 * queues the token on a TCP socket. 0, or the last failure's code (broken_error says). */
int gc__link_open(gc_conn *conn);
/* Closes a retiring socket once idle, then opens a fresh one for parked requests (failing
 * them with the connect error when no address answers). 0, or broken_error's code. */
int gc__link_maintain(gc_conn *conn);
/* Sends and receives whatever is possible without blocking (a lost socket is replaced
 * first, which may block in connect). 0, or the code of a socket that failed and could not
 * be replaced. */
int gc__link_progress(gc_conn *conn);
/* Puts a built request into the table and the send queue, then sends what it can. */
int gc__link_start(gc_conn *conn, gc__request *r);

/* ---- the connection (gc_conn.c) -------------------------------------------------------- */

/* Drives conn until r is done or deadline_ms (gc__now_ms clock; < 0: none) passes. 0 when
 * done, GC_E_DEADLINE_EXCEEDED when not. */
int gc__drive_until_done(gc_conn *conn, gc__request *r, int64_t deadline_ms);
/* Turns a caller's timeout (< 0: none) into a deadline on the gc__now_ms clock. */
int64_t gc__deadline(int64_t timeout_ms);

/* ---- the small calls (gc_call.c) ------------------------------------------------------- */

/* A small call (ping, info, stats, shm_register, shm_unregister): sends it (with [arg] when
 * has_arg; pass_fd >= 0 rides on its first byte), waits for the reply; on success *packed
 * (when not NULL) takes the result object's msgpack bytes. */
int gc__call(gc_conn *conn, gp_method method, bool has_arg, uint64_t arg, int pass_fd,
             int64_t timeout_ms, msgpack_sbuffer *packed);
/* The rest of gc__call for a request whose iovs are set up (put: head and the caller's data):
 * starts it, waits for its reply, hands the result over as gc__call does. */
int gc__call_run(gc_conn *conn, gc__request *r, int64_t timeout_ms, msgpack_sbuffer *packed);
/* The same for cuda_register with its params. */
int gc__call_cuda_register(gc_conn *conn, const gp_cuda_reg *reg, int64_t timeout_ms,
                           msgpack_sbuffer *packed);

/* ---- api: shared-memory buffers (gc_shm.c) --------------------------------------------- */
/* The region holding [ptr, ptr + len) whole: true with *region and *offset. */
bool gc__shm_find(const gc_conn *conn, const void *ptr, uint64_t len, uint64_t *region,
                  uint64_t *offset);
/* Before registering a region: conn has a socket (reopened after an idle close). 0, or the
 * error of the failed reopen. */
int gc__shm_link_ready(gc_conn *conn);
/* Whether conn's socket is a Unix one (descriptors pass only there). */
bool gc__shm_is_unix(const gc_conn *conn);
/* Enters s (region, size and base set) as registered on conn's socket now. */
void gc__shm_add(gc_conn *conn, gc__shm *s);

/* ---- api: gemm requests (gc_gemm.c) ---------------------------------------------------- */
/* The first layout of gc_gemm_opts ends with timeout_ms: anything shorter was not made by
 * gc_gemm_opts_init. Fields added later are read only when struct_size covers them. */
#define GC__GEMM_OPTS_V1_SIZE (offsetof(gc_gemm_opts, timeout_ms) + sizeof(int64_t))

/* The plain gc_gemm: gc_submit + gc_wait. */
int gc__gemm_plain(gc_conn *conn, const gc_gemm_opts *opts, const void *a, const void *b,
                   const void *c, void *out, gc_gemm_result *result);

#endif /* GC_INTERNAL_H */
