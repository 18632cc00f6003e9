/*
 * gemmclient.h - libgemmclient, the C client of gemmd (wire protocol v1).
 *
 * One connection (gc_conn) carries any number of requests at once: each gets
 * its own msgid, replies are matched by msgid in whatever order the daemon
 * sends them. The blocking calls (gc_gemm, gc_ping, gc_info, gc_stats) are
 * built on the asynchronous ones (gc_submit, gc_wait, gc_poll).
 *
 * Errors: every function that can fail returns 0 or a negative GC_E_* code.
 * The code and a message saying what went wrong (the daemon's own message
 * for an error reply) are kept in the connection: gc_last_error(conn);
 * gc_progress and the gc_map_* functions (no connection to keep it in, or a
 * const one) return the code alone.
 * Local failures use the same codes as the daemon: a connection that cannot
 * be made or is lost -> GC_E_UNAVAILABLE, a client-side timeout ->
 * GC_E_DEADLINE_EXCEEDED, a reply that breaks the protocol -> GC_E_INTERNAL.
 *
 * Memory: matrices travel from and to the caller's buffers, with no copy in
 * the library: requests go out with sendmsg() straight from a, b and c, and
 * the reply's C is received straight into the caller's output buffer.
 *
 * Threads: a gc_conn is not thread-safe: use it from one thread at a time
 * (any thread, serialised by the caller). Distinct connections are
 * independent. gc_strerror, gc_code_name, gc_version and gc_gemm_opts_init
 * are thread-safe. gc_last_error(NULL) is per thread.
 *
 * Signals: the library never raises SIGPIPE (it sends with MSG_NOSIGNAL) and
 * retries calls interrupted by signals.
 */
#ifndef GEMMCLIENT_H
#define GEMMCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "gemmclient_version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(GC_BUILDING_LIBRARY)
#define GC_EXPORT __attribute__((visibility("default")))
#else
#define GC_EXPORT
#endif

/* ---- errors ------------------------------------------------------------ */

/* The codes of protocol v1 (gRPC's names), the same values as the daemon's. */
#define GC_OK 0
#define GC_E_INVALID_ARGUMENT (-1)
#define GC_E_RESOURCE_EXHAUSTED (-2)
#define GC_E_UNAVAILABLE (-3)
#define GC_E_DEADLINE_EXCEEDED (-4)
#define GC_E_CANCELLED (-5)
#define GC_E_UNAUTHENTICATED (-6)
#define GC_E_NOT_FOUND (-7)
#define GC_E_UNIMPLEMENTED (-8)
#define GC_E_INTERNAL (-9)

#define GC_ERROR_MESSAGE_MAX 256

typedef struct {
  int code;                            /* GC_OK or a GC_E_* value */
  char message[GC_ERROR_MESSAGE_MAX];  /* NUL-terminated; "" when code is GC_OK */
} gc_error;

/* Short human message for a code ("deadline exceeded"). Never NULL. Thread-safe. */
GC_EXPORT const char *gc_strerror(int code);

/* Wire name of a code ("DEADLINE_EXCEEDED"; "OK" for 0; "UNKNOWN" otherwise). Thread-safe. */
GC_EXPORT const char *gc_code_name(int code);

/* ---- connections ------------------------------------------------------- */

typedef struct gc_conn gc_conn;

/* The address used when gc_connect gets NULL and GEMMD_ADDRESS is unset or empty. */
#define GC_DEFAULT_ADDRESS "unix:/run/gemmd/gemmd.sock"

/*
 * Connects to a daemon. addr is "unix:PATH", "tcp:HOST:PORT" (HOST a name or
 * an IPv4 address, resolved with getaddrinfo) or "tcp:[IPV6]:PORT", PORT
 * 1..65535, or a comma-separated list of them (at most 64) naming daemons
 * that serve the same work. NULL means $GEMMD_ADDRESS, then
 * GC_DEFAULT_ADDRESS. The connect itself gives up after 10 seconds per
 * address (gc_connect_with sets another limit).
 *
 * A list: each connection starts at the next address of the list (round robin
 * over the process's connections) and takes the first one that answers. When
 * its socket is lost, or the daemon answers a request with GC_E_UNAVAILABLE
 * (it is draining), the connection moves to the next address that answers;
 * the gemms in flight go again there under the same gc_req (see
 * gc_connect_opts.max_retries; ping, info and stats fail with the error).
 * After an UNAVAILABLE answer the move waits until the requests still on the
 * draining daemon are answered (or cancelled). A socket the daemon closed
 * while idle is replaced on the next call. While the library reconnects, a
 * call may block for up to the connect limit per address.
 *
 * Token: a TCP socket sends the token first, when there is one:
 * gc_connect_opts.token or .token_file, else $GEMMD_TOKEN, else the file named
 * by $GEMMD_TOKEN_FILE (read whole, a trailing newline dropped). A daemon that
 * refuses it fails the requests with GC_E_UNAUTHENTICATED (never retried).
 * Unix sockets send no token.
 *
 * Returns 0 and sets *out to a connection that the caller closes with
 * gc_close(). On failure returns GC_E_INVALID_ARGUMENT (a malformed
 * address, an unreadable token file), GC_E_UNAVAILABLE (nothing answers),
 * GC_E_DEADLINE_EXCEEDED or GC_E_RESOURCE_EXHAUSTED, sets *out to NULL, and
 * records the reason for this thread: gc_last_error(NULL).
 */
GC_EXPORT int gc_connect(const char *addr, gc_conn **out);

/* The number of times a gemm goes again after a lost socket or an UNAVAILABLE answer,
 * when gc_connect_opts.max_retries is not set. */
#define GC_DEFAULT_MAX_RETRIES 2

/* Connection settings, for gc_connect_with(). Fill with gc_connect_opts_init() first (the struct
 * may grow at its end in minor versions, as gc_gemm_opts does). */
typedef struct {
  size_t struct_size;        /* set by gc_connect_opts_init; do not change */
  int64_t connect_timeout_ms; /* how long the connect to one address may take; default 10000 */
  /* The largest reply accepted, payload included (a larger one breaks the connection with
   * GC_E_INTERNAL before anything is reserved for it); default 3 GiB + 64 KiB, which fits
   * the largest result protocol v1 allows. */
  uint64_t max_reply_bytes;
  /* Since 1.1. The token for TCP sockets; NULL (the default): token_file, then $GEMMD_TOKEN,
   * then $GEMMD_TOKEN_FILE; "" sends none. At most 256 bytes (the protocol's limit). Copied by gc_connect_with. */
  const char *token;
  /* Since 1.1. A file holding the token (used when token is NULL); default NULL. */
  const char *token_file;
  /* Since 1.1. How many times a gemm may go again, on another socket, after its socket was
   * lost or the daemon answered GC_E_UNAVAILABLE (a gemm has no side effects); 0 never.
   * Other errors are never retried. Default GC_DEFAULT_MAX_RETRIES; at most 100. */
  int max_retries;
  /* Since 1.7. The automatic scratch region: nonzero (the default), a blocking gc_gemm on a
   * Unix socket whose operands and result not already in shared memory reach scratch_min_bytes
   * in all copies them, by several threads, into one shared-memory buffer of the connection
   * (made and registered as gc_shm_alloc does, kept mapped between calls, grown geometrically
   * up to scratch_max_bytes) and the result back out of it: the socket carries only headers.
   * 0 sends the bytes over the socket. A daemon without the "shm" feature, or a region it
   * refuses, turns it off for the connection. $GEMMD_COPY_THREADS sets the copy threads
   * (default the CPU count, at most 16). gc_submit never uses it. */
  int scratch;
  /* Since 1.7. Default GC_DEFAULT_SCRATCH_MIN_BYTES; 0 takes every gemm through it. */
  uint64_t scratch_min_bytes;
  /* Since 1.7. The region's largest size; a gemm needing more goes over the socket.
   * Default GC_DEFAULT_SCRATCH_MAX_BYTES. */
  uint64_t scratch_max_bytes;
} gc_connect_opts;

#define GC_DEFAULT_SCRATCH_MIN_BYTES (1024u * 1024u)
#define GC_DEFAULT_SCRATCH_MAX_BYTES (1ull << 30)

GC_EXPORT void gc_connect_opts_init_sized(gc_connect_opts *opts, size_t struct_size);
#define gc_connect_opts_init(opts) gc_connect_opts_init_sized((opts), sizeof(gc_connect_opts))

/* gc_connect with settings; opts NULL means the defaults (what gc_connect uses). */
GC_EXPORT int gc_connect_with(const char *addr, const gc_connect_opts *opts, gc_conn **out);

/* Closes the connection and frees it. Requests still in flight are dropped: their buffers are
 * no longer touched once gc_close returns. conn may be NULL. */
GC_EXPORT void gc_close(gc_conn *conn);

/*
 * The last error of conn: the code and message of the call that last failed
 * on it (a later successful call does not clear it). With conn == NULL: the
 * last gc_connect failure of the calling thread. The pointer stays valid
 * until the connection is closed (or, for NULL, for the thread's lifetime).
 */
GC_EXPORT const gc_error *gc_last_error(const gc_conn *conn);

/* The socket, for callers that wait on it in their own event loop (POLLIN, and POLLOUT while
 * gc_pending_sends() > 0), then call gc_poll(conn, 0, ...). Call gc_poll(conn, 0, ...) also
 * before each wait: every call that drives the connection (gc_submit included) reads the
 * replies that have arrived, so requests may be complete with nothing left on the socket to
 * wake the loop (examples/gemm_poll_loop.c). Do not read, write or close it. The socket
 * changes when the library reconnects: take gc_fd() afresh before each wait. -1 while there
 * is no socket (the last one failed; the next call reconnects). */
GC_EXPORT int gc_fd(const gc_conn *conn);

/* ---- gemm -------------------------------------------------------------- */

typedef enum {
  /* Since 1.4. Only for gc_gemm_opts.out_dtype: "the gemm's dtype" (no cast). Not a dtype of
   * any buffer: gc_gemm_opts.dtype and gc_put refuse it. */
  GC_DTYPE_DEFAULT = -1,
  GC_DTYPE_F32 = 0,  /* float */
  GC_DTYPE_F64 = 1,  /* double */
  GC_DTYPE_F16 = 2,  /* IEEE binary16, as uint16_t bits */
  GC_DTYPE_BF16 = 3, /* bfloat16, as uint16_t bits */
  /* Since 1.5 (the daemon's "i8" feature). The integer gemm: a and b int8_t, its c and result
   * GC_DTYPE_I32; alpha and beta integers within int32, activation NONE or RELU at most,
   * precision ignored. The arithmetic is 32-bit two's complement and wraps (as cuBLAS's
   * CUBLAS_COMPUTE_32I): exact while the result fits. */
  GC_DTYPE_I8 = 4,
  /* Since 1.5. int32_t: the result (and c, or the bias row) of an I8 gemm, and a gc_put dtype
   * (a resident c); no gemm takes it as its dtype. */
  GC_DTYPE_I32 = 5,
  /* Since 1.6 (the daemon's "fp8" feature). The fp8 gemm: a and b are OCP fp8 bytes (uint8_t),
   * E4M3 (no infinity, largest 448) or E5M2 (IEEE-like, largest 57344), both of the one dtype;
   * c and the result GC_DTYPE_F32 (or F16 / BF16 through out_dtype); the products accumulate in
   * f32; gc_gemm_opts.scale_a and scale_b are the per-tensor scales. */
  GC_DTYPE_E4M3 = 6,
  GC_DTYPE_E5M2 = 7,
  /* Since 1.7 (the daemon's "complex" feature). Complex elements as two floats (C64: float
   * re, im, like float _Complex) or two doubles (C128); a, b, c and the result all of dtype.
   * alpha_im, beta_im, conj_a and conj_b in gc_gemm_opts; no bias, activation or out_dtype. */
  GC_DTYPE_C64 = 8,
  GC_DTYPE_C128 = 9,
} gc_dtype;

typedef enum {
  GC_PRECISION_EXACT = 0, /* f32 computed in f32 */
  GC_PRECISION_FAST = 1,  /* f32 may use TF32 tensor cores */
} gc_precision;

/* The activation applied to every element of the result last (the daemon's "epilogue"
 * feature). GELU is the erf form, 0.5 x (1 + erf(x / sqrt 2)); GELU_TANH its tanh
 * approximation. */
typedef enum {
  GC_ACT_NONE = 0,
  GC_ACT_RELU = 1,
  GC_ACT_GELU = 2,
  GC_ACT_GELU_TANH = 3,
} gc_activation;

/*
 * What one gemm computes: C = alpha * op(A) * op(B) + beta * C for `batch`
 * problems stored back to back, row-major. op(A) is m x k (A is stored k x m
 * when trans_a), op(B) is k x n (B stored n x k when trans_b), C is m x n.
 *
 * Always fill it with gc_gemm_opts_init() first, then set fields: the
 * struct may grow at its end in later minor versions; struct_size tells the
 * library which fields your build of the header has.
 */
typedef struct {
  size_t struct_size;     /* set by gc_gemm_opts_init; do not change */
  uint64_t m, n, k;       /* >= 1; required */
  gc_dtype dtype;         /* default GC_DTYPE_F32; GC_DTYPE_I8, E4M3, E5M2: see gc_dtype */
  int trans_a, trans_b;   /* default 0 */
  double alpha, beta;     /* default 1.0, 0.0; beta != 0 needs c */
  uint64_t batch;         /* default 1 */
  gc_precision precision; /* default GC_PRECISION_EXACT */
  /* Whole-call limit in milliseconds, < 0 for none (the default). The
   * blocking gc_gemm gives up after it (GC_E_DEADLINE_EXCEEDED); it is also
   * sent to the daemon as the request's timeout_ms, so the daemon does not
   * start work the caller no longer waits for. */
  int64_t timeout_ms;
  /* Yours: handed back unchanged in gc_completion.user when gc_poll reports the request
   * (e.g. the job it belongs to). Default NULL. */
  void *user;
  /* Since 1.2. Resident operands (gc_put): a handle other than 0 names that operand, which
   * is then not sent (its pointer argument may be NULL); it must have the operand's dtype and
   * stored shape. c_handle also counts as c for beta. Default 0 (none). A gemm naming a
   * handle is never sent again on a new connection: handles stay with the connection. */
  uint64_t a_handle, b_handle, c_handle;
  /* Since 1.2. Nonzero: b is one matrix (k x n, n x k with trans_b) for every batch entry
   * (the daemon's "broadcast_b" feature). Default 0. */
  int broadcast_b;
  /* Since 1.3 (the daemon's "epilogue" feature). Nonzero: c is one bias row of n elements,
   * added to every row of every batch entry's product, times beta (set beta to 1): the result
   * is act(alpha * op(A) * op(B) + beta * bias). out still receives all of C. Default 0. */
  int bias;
  /* Since 1.3. Applied to each result element last. Default GC_ACT_NONE. */
  gc_activation activation;
  /* Since 1.4 (the daemon's "out_dtype" feature). The dtype of the result and of c (beta's
   * input, or the bias row): GC_DTYPE_F16 or GC_DTYPE_BF16 from an F32 or F64 gemm, which is
   * computed in dtype (epilogue included) and each result element rounded once, last (to
   * nearest even). out then receives m x n x batch elements of out_dtype, c and a c_handle
   * hold out_dtype elements too. Default GC_DTYPE_DEFAULT, the gemm's dtype (the same as
   * naming dtype itself); any other pair fails with GC_E_INVALID_ARGUMENT before sending.
   * An I8 gemm returns GC_DTYPE_I32 (its default; naming I32 is the same) and nothing else.
   * An E4M3 or E5M2 gemm returns GC_DTYPE_F32 (its default), or F16 / BF16 cast from it. */
  gc_dtype out_dtype;
  /* Since 1.6 (the daemon's "fp8" feature). An E4M3 or E5M2 gemm's per-tensor scales: the true
   * values of a and b are their fp8 values times scale_a and scale_b, so the product is
   * alpha * scale_a * scale_b * op(A) * op(B) (+ beta * C). Finite, and alpha * scale_a *
   * scale_b finite too. Default 1.0; any other value on another dtype fails with
   * GC_E_INVALID_ARGUMENT before sending (fold a scale into alpha there). */
  double scale_a, scale_b;
  /* Since 1.7. Leading dimensions of the caller's a, b, and of c and out, in elements: the
   * distance between the starts of two rows of the operand as stored (row-major; a stored
   * k x m with trans_a has rows of m). 0 (the default) or the row's length: packed. A larger
   * one is honoured by the blocking gc_gemm, which copies the rows (never a byte past a row's
   * end) into the scratch region or a packed buffer for the socket, and the result's rows
   * back into out; batch entries are then rows x ld elements apart. gc_submit refuses them
   * (INVALID_ARGUMENT), as it does one below the row's length. */
  uint64_t lda, ldb, ldc;
  /* Since 1.7 (the daemon's "complex" feature). A C64 or C128 gemm's alpha is alpha + i
   * alpha_im and its beta beta + i beta_im (c is read unless both parts of beta are 0);
   * nonzero conj_a / conj_b conjugate op(A) / op(B) (BLAS's 'C' is trans and conj). Default 0;
   * set on another dtype, the daemon refuses the gemm (GC_E_INVALID_ARGUMENT). */
  double alpha_im, beta_im;
  int conj_a, conj_b;
} gc_gemm_opts;

GC_EXPORT void gc_gemm_opts_init_sized(gc_gemm_opts *opts, size_t struct_size);
#define gc_gemm_opts_init(opts) gc_gemm_opts_init_sized((opts), sizeof(gc_gemm_opts))

/* Bytes of one operand ('a', 'b' or 'c' as sent: with bias, the one row) for all batches, or
 * of the result ('o': m x n x batch elements), or 0 when opts is malformed or the size
 * overflows. 'c' and 'o' count elements of out_dtype (when set), of I32 (4 bytes) for an I8
 * gemm, of F32 (4 bytes) for an E4M3 or E5M2 gemm; 'a' and 'b' of an fp8 gemm 1 byte each. */
GC_EXPORT uint64_t gc_gemm_operand_bytes(const gc_gemm_opts *opts, char operand);

/* Where and how fast a gemm ran, as the daemon reports it. */
typedef struct {
  uint64_t m, n, batch;
  gc_dtype dtype;
  char device[64];          /* "cpu" or "cuda:N" */
  char kernel[64];          /* e.g. "openblas" */
  uint64_t queue_us, transfer_in_us, compute_us, transfer_out_us;
} gc_gemm_result;

/*
 * Blocking gemm. a and b hold the operands (gc_gemm_operand_bytes bytes
 * each), c the input C or NULL (required when beta != 0), out receives the
 * result C (m x n x batch elements) and may be the same buffer as c.
 * result, when not NULL, gets the daemon's report.
 * Returns 0, the daemon's error code (details in gc_last_error), or a local
 * code (see the top of this file). On any failure out may hold part of a
 * result; on a timeout the library lets go of all four buffers before it
 * returns.
 */
GC_EXPORT int gc_gemm(gc_conn *conn, const gc_gemm_opts *opts, const void *a, const void *b,
                      const void *c, void *out, gc_gemm_result *result);

/* ---- asynchronous requests -------------------------------------------- */

/* A request in flight on one connection (its msgid). Never 0. */
typedef uint32_t gc_req;

/*
 * Queues a gemm and returns at once with its id in *req; as much of it is
 * sent as the socket takes without blocking, the rest by later gc_wait /
 * gc_poll calls. a, b, c and out must stay valid and unchanged (out
 * untouched) until the request completes (gc_wait returns for it or gc_poll
 * reports it) or is cancelled. opts->timeout_ms is only sent to the daemon
 * here; the client-side limit is the one given to gc_wait / gc_poll.
 * Returns 0, GC_E_INVALID_ARGUMENT (bad opts: checked before anything is
 * sent) or GC_E_RESOURCE_EXHAUSTED. A connection that cannot be (re)made fails the request:
 * gc_wait / gc_poll report its GC_E_UNAVAILABLE.
 */
GC_EXPORT int gc_submit(gc_conn *conn, const gc_gemm_opts *opts, const void *a, const void *b,
                        const void *c, void *out, gc_req *req);

/*
 * Timeouts: every timeout_ms in this header is an int64_t count of milliseconds;
 * < 0 means no limit and 0 means only what is ready now.
 *
 * Drives the connection until request req completes or timeout_ms passes
 * (< 0: no limit; 0: only what is ready now). On completion returns the
 * request's result (0 or an error code, details in gc_last_error), fills
 * *result when not NULL (gemm requests), and forgets req. When the time runs
 * out first returns GC_E_DEADLINE_EXCEEDED and req stays in flight (wait
 * again, or gc_cancel it). GC_E_NOT_FOUND when req is not in flight (already
 * reported, cancelled, or never submitted).
 */
GC_EXPORT int gc_wait(gc_conn *conn, gc_req req, int64_t timeout_ms, gc_gemm_result *result);

/* One completed request, as gc_poll reports it. */
typedef struct {
  gc_req req;
  gc_error error;          /* error.code 0 on success */
  gc_gemm_result result;   /* gemm requests that succeeded */
  void *user;              /* the request's gc_gemm_opts.user (NULL for other requests) */
} gc_completion;

/*
 * Makes progress on every request (sends what the socket takes, receives what
 * has arrived), waiting up to timeout_ms (0: not at all; < 0: no limit) for
 * at least one completion, then reports up to max completed requests in
 * done[] and forgets them. Returns how many (0 when none completed in time),
 * or a negative code when the connection has no socket (it failed and could
 * not be made again: every request in flight is then completed with that
 * error and reported by later calls; the next gc_submit tries again).
 */
GC_EXPORT int gc_poll(gc_conn *conn, int64_t timeout_ms, gc_completion *done, size_t max);

/* Requests submitted and not yet reported by gc_wait / gc_poll. */
GC_EXPORT size_t gc_in_flight(const gc_conn *conn);

/* Requests whose bytes are not all sent yet; 0 while nothing can go out before the daemon
 * answers the token (a TCP connection's first request). */
GC_EXPORT size_t gc_pending_sends(const gc_conn *conn);

/*
 * Gives up on req: from return on, the library no longer reads or writes its
 * buffers. A request partly sent is completed on the wire with zero bytes
 * (the stream stays in step) and its reply is read and thrown away.
 * Returns 0, or GC_E_NOT_FOUND.
 */
GC_EXPORT int gc_cancel(gc_conn *conn, gc_req req);

/* Bytes of req sent and to send, received and to receive (the gemm reply's C), for progress
 * display. Returns 0, or GC_E_NOT_FOUND. Any pointer may be NULL. */
GC_EXPORT int gc_progress(const gc_conn *conn, gc_req req, uint64_t *sent, uint64_t *send_total,
                          uint64_t *received, uint64_t *receive_total);

/* ---- ping, info, stats ------------------------------------------------- */

/* Round trip; 0 when the daemon answered "pong". timeout_ms < 0: no limit. */
GC_EXPORT int gc_ping(gc_conn *conn, int64_t timeout_ms);

/*
 * The daemon's info / stats maps (version, backend, devices, limits /
 * counters, queues, latencies: proto/PROTOCOL.md) as one msgpack-encoded
 * object in a buffer the caller frees with gc_free(). Read it with the
 * gc_map_* functions below (no msgpack library needed), or unpack it with
 * any msgpack library. On failure *buf is NULL.
 */
GC_EXPORT int gc_info(gc_conn *conn, int64_t timeout_ms, void **buf, size_t *len);
GC_EXPORT int gc_stats(gc_conn *conn, int64_t timeout_ms, void **buf, size_t *len);
GC_EXPORT void gc_free(void *buf);

/*
 * Reading an info or stats buffer (buf, len as gc_info / gc_stats gave them)
 * by path: map keys and array indexes joined by dots, e.g. "backend",
 * "limits.max_dim", "devices.0.name", "errors.INVALID_ARGUMENT"; "" is the
 * top level. Each returns 0, GC_E_NOT_FOUND (no such key or index),
 * GC_E_INVALID_ARGUMENT (the value has another type, or buf is not one
 * msgpack object) or GC_E_RESOURCE_EXHAUSTED (a string longer than size - 1:
 * out then holds its first size - 1 bytes). Thread-safe; buf is not changed.
 */
/* An integer that fits int64_t. */
GC_EXPORT int gc_map_int(const void *buf, size_t len, const char *path, int64_t *out);
/* A number (float or integer) as a double. */
GC_EXPORT int gc_map_double(const void *buf, size_t len, const char *path, double *out);
/* A string (or bin), NUL-terminated into out[size]; booleans read as "true" / "false". */
GC_EXPORT int gc_map_string(const void *buf, size_t len, const char *path, char *out,
                            size_t size);
/* The number of elements of an array, or of keys of a map. */
GC_EXPORT int gc_map_count(const void *buf, size_t len, const char *path, size_t *count);
/* The index-th key (from 0, in the daemon's order) of the map at path. */
GC_EXPORT int gc_map_key(const void *buf, size_t len, const char *path, size_t index, char *out,
                         size_t size);

/* ---- shared memory (Unix sockets) -------------------------------------- */

/*
 * Buffers the daemon reads and writes in place. gc_shm_alloc makes a memfd of at least bytes
 * (sealed against shrinking), maps it and registers it with the daemon over conn; *ptr is
 * page-aligned and zeroed. A gc_gemm / gc_submit whose a, b, c or out (each whole) lies
 * inside such a buffer names it by reference instead of sending or receiving its bytes:
 * nothing else changes for the caller. Needs a Unix-socket connection to a daemon whose
 * info lists the "shm" feature: otherwise the daemon's INVALID_ARGUMENT comes back. Each
 * buffer is one region (the daemon's shm.max_regions_per_connection): allocate few, large
 * ones and place matrices inside. The output may not overlap an input of the same gemm.
 * gc_shm_free unregisters and unmaps ptr (a pointer gc_shm_alloc returned); gc_close frees
 * every buffer of the connection. timeout_ms < 0: no limit.
 */
GC_EXPORT int gc_shm_alloc(gc_conn *conn, size_t bytes, int64_t timeout_ms, void **ptr);
GC_EXPORT int gc_shm_free(gc_conn *conn, void *ptr, int64_t timeout_ms);

/* ---- resident operands --------------------------------------------------- */

/*
 * gc_put uploads batch matrices of rows x cols (row-major, dtype, batch * rows * cols elements
 * at data) once; the daemon keeps them for this connection and *handle names them in later
 * gemms (gc_gemm_opts.a_handle, b_handle, c_handle) instead of sending their bytes. Needs a
 * daemon whose info lists the "resident" feature (else UNIMPLEMENTED); its quotas answer
 * RESOURCE_EXHAUSTED. gc_put_free lets the daemon drop one (NOT_FOUND for a handle this
 * connection does not hold). Handles go with the connection: after the library reconnected
 * they are NOT_FOUND; put again. timeout_ms < 0: no limit.
 */
GC_EXPORT int gc_put(gc_conn *conn, gc_dtype dtype, uint64_t batch, uint64_t rows,
                     uint64_t cols, const void *data, int64_t timeout_ms, uint64_t *handle);
GC_EXPORT int gc_put_free(gc_conn *conn, uint64_t handle, int64_t timeout_ms);
/* ---- CUDA memory (Unix sockets, the daemon's GPU backend) ------------- */

/*
 * A device allocation of this process that the daemon reads and writes on the GPU itself,
 * without a host copy. gc_cuda_register hands the daemon ipc_handle (the 64 bytes of a
 * cudaIpcMemHandle_t from cudaIpcGetMemHandle(&h, dev_ptr)), pci_bus_id (from
 * cudaDeviceGetPCIBusId for dev_ptr's device: the daemon finds its own device by it, whatever
 * CUDA_VISIBLE_DEVICES says) and the allocation's size; *region (may be NULL) gets the daemon's
 * id. dev_ptr is what cudaMalloc returned: the handle opens at the allocation's base (best an
 * allocation of a multiple of 2 MiB: CUDA may share a smaller one's whole block). From then on
 * a gc_gemm / gc_submit whose a, b, c or out lies whole inside [dev_ptr, dev_ptr + bytes)
 * names it by reference: give out inside one too (the daemon refuses device operands with a
 * result sent back as bytes), on the same device. The library never dereferences dev_ptr and
 * links no CUDA library; a device pointer outside every registered range would be read as
 * host memory: never pass one. Needs a daemon whose info lists "cuda_ipc". A bad handle or a
 * size over the allocation is refused by the first gemm that names it (INVALID_ARGUMENT).
 * gc_cuda_unregister lets the daemon close it; gc_close does for every one of the connection.
 *
 * Ordering is the caller's (the daemon is another process; the library makes no CUDA call):
 * before a gc_gemm or gc_submit naming that memory, the caller's writes to it must be complete
 * (cudaStreamSynchronize, cudaDeviceSynchronize: a cudaMemcpy from pageable memory may return
 * before its bytes land), and until the result is back (gc_gemm returned, gc_wait or gc_poll
 * gave it) the caller neither writes its operands nor touches out. The daemon's writes into
 * out are complete when the result is back: any CUDA call may read it then.
 */
GC_EXPORT int gc_cuda_register(gc_conn *conn, const void *ipc_handle, const char *pci_bus_id,
                               void *dev_ptr, size_t bytes, int64_t timeout_ms,
                               uint64_t *region);
GC_EXPORT int gc_cuda_unregister(gc_conn *conn, void *dev_ptr, int64_t timeout_ms);

/* ---- version ----------------------------------------------------------- */

/* GC_VERSION_NUM of the library actually loaded (compare with the header's to detect a
 * mismatch between the header you built with and the library you run with). */
GC_EXPORT unsigned gc_version(void);

#ifdef __cplusplus
}
#endif
#endif /* GEMMCLIENT_H */
