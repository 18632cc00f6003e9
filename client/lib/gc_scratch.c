/*
 * gc_scratch.c - the blocking gc_gemm: the plain one (gc_submit + gc_wait, gc_gemm.c) unless
 * the library moves the operands itself: the automatic scratch region (a gemm on a Unix socket
 * whose operands reach gc_connect_opts.scratch_min_bytes goes through one shared-memory buffer
 * of the connection, so that the socket carries only headers), and leading dimensions (rows
 * copied into the region, or into packed buffers for the socket, and the result's rows back).
 * The copies are gc_copy.c's, by several threads. ARCHITECTURE.md, "The automatic scratch
 * region".
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gc_internal.h"

#define SCRATCH_REGISTER_TIMEOUT_MS 10000
#define SCRATCH_PIECES_MAX 16
#define SCRATCH_PIECE_MIN_ROWS 64
#define SCRATCH_ALIGN 4096u

enum { OP_A, OP_B, OP_C, OP_OUT, OP_COUNT };

/* One matrix as the caller stores it: rows rows of cols elements, ld elements apart. */
typedef struct {
  const void *p;
  uint64_t rows, cols, ld, esize;
  bool stage;        /* the library copies it (in, or out for OP_OUT) */
  uint64_t offset;   /* its place in the staging area */
} operand;

static uint64_t row_bytes(const operand *x) { return x->cols * x->esize; }
static uint64_t packed_bytes(const operand *x) { return x->rows * row_bytes(x); }
static bool ld_packed(const operand *x) { return x->ld == 0 || x->ld == x->cols; }
/* The shapes of a, b, c and out as stored; false when opts are malformed (the plain path
 * reports that) or a size overflows. */
static bool shapes(const gc_gemm_opts *o, const void *a, const void *b, const void *c,
                   void *out, operand ops[OP_COUNT]) {
  memset(ops, 0, sizeof(operand) * OP_COUNT);
  if (o->m == 0 || o->n == 0 || o->k == 0 || o->batch == 0) return false;
  uint64_t bytes[OP_COUNT] = {gc_gemm_operand_bytes(o, 'a'), gc_gemm_operand_bytes(o, 'b'),
                              c != NULL ? gc_gemm_operand_bytes(o, 'c') : 0,
                              gc_gemm_operand_bytes(o, 'o')};
  if (bytes[OP_A] == 0 || bytes[OP_B] == 0 || bytes[OP_OUT] == 0) return false;
  ops[OP_A] = (operand){a, o->batch * (o->trans_a ? o->k : o->m), o->trans_a ? o->m : o->k,
                        o->lda, 0, false, 0};
  ops[OP_B] = (operand){b, (o->broadcast_b ? 1 : o->batch) * (o->trans_b ? o->n : o->k),
                        o->trans_b ? o->k : o->n, o->ldb, 0, false, 0};
  ops[OP_C] = (operand){c, o->bias ? 1 : o->batch * o->m, o->n, o->bias ? 0 : o->ldc, 0,
                        false, 0};
  ops[OP_OUT] = (operand){out, o->batch * o->m, o->n, o->ldc, 0, false, 0};
  for (int i = 0; i < OP_COUNT; i++) {
    if (ops[i].p == NULL || bytes[i] == 0) continue;
    ops[i].esize = bytes[i] / (ops[i].rows * ops[i].cols);
  }
  return true;
}

/* A leading dimension below its row's length. */
static int check_lds(gc_conn *conn, const operand ops[OP_COUNT]) {
  static const char *names[OP_COUNT] = {"lda", "ldb", "ldc", "ldc"};
  for (int i = 0; i < OP_COUNT; i++)
    if (ops[i].ld != 0 && ops[i].ld < ops[i].cols)
      return gc__conn_failf(conn, GC_E_INVALID_ARGUMENT, "%s %llu is below the row's %llu",
                            names[i], (unsigned long long)ops[i].ld,
                            (unsigned long long)ops[i].cols);
  return 0;
}

static void copy_in(void *dst, const operand *x) {
  uint64_t ld = ld_packed(x) ? x->cols : x->ld;
  gc__copy_rows(&(gc__copy_rows_args){dst, x->p, x->rows, row_bytes(x), row_bytes(x),
                                      ld * x->esize});
}

static void copy_out(const operand *x, const void *src) {
  uint64_t ld = ld_packed(x) ? x->cols : x->ld;
  gc__copy_rows(&(gc__copy_rows_args){(void *)x->p, src, x->rows, row_bytes(x),
                                      ld * x->esize, row_bytes(x)});
}

/* The region's pages are written once here, so that no gemm pays their faults. */
static void touch(uint8_t *base, size_t size) {
#ifdef MADV_POPULATE_WRITE
  if (madvise(base, size, MADV_POPULATE_WRITE) == 0) return;
#endif
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (size_t i = 0; i < size; i += page) ((volatile uint8_t *)base)[i] = 0;
}

/* conn's scratch region holds at least need bytes on its current socket: 0, or a code (the
 * scratch is then off for the connection). */
static int scratch_ensure(gc_conn *conn, uint64_t need) {
  uint64_t region, offset;
  if (conn->scratch != NULL && !gc__shm_find(conn, conn->scratch, 1, &region, &offset)) {
    gc_shm_free(conn, conn->scratch, SCRATCH_REGISTER_TIMEOUT_MS); /* its socket is gone */
    conn->scratch = NULL;
    conn->scratch_size = 0;
  }
  if (conn->scratch != NULL && conn->scratch_size >= need) return 0;
  uint64_t size = conn->scratch_size * 2 > need ? conn->scratch_size * 2 : need;
  if (size > conn->scratch_max) size = conn->scratch_max;
  if (conn->scratch != NULL) {
    gc_shm_free(conn, conn->scratch, SCRATCH_REGISTER_TIMEOUT_MS);
    conn->scratch = NULL;
    conn->scratch_size = 0;
  }
  void *p = NULL;
  int rc = gc_shm_alloc(conn, (size_t)size, SCRATCH_REGISTER_TIMEOUT_MS, &p);
  if (rc != 0) {
    conn->scratch_on = false; /* no "shm" feature, or no memory for it: the socket from now */
    return rc;
  }
  touch(p, (size_t)size);
  conn->scratch = p;
  conn->scratch_size = (size_t)size;
  return 0;
}

/* Whether x lies whole, packed, in a shared-memory buffer already (then it goes by
 * reference as it is). */
static bool in_shm(gc_conn *conn, const operand *x) {
  uint64_t region, offset;
  return ld_packed(x) && gc__shm_find(conn, x->p, packed_bytes(x), &region, &offset);
}

/* Places the operands to stage one after another from 0; the bytes in all. */
static uint64_t layout(operand ops[OP_COUNT]) {
  uint64_t at = 0;
  for (int i = 0; i < OP_COUNT; i++) {
    if (!ops[i].stage) continue;
    ops[i].offset = at;
    at += (packed_bytes(&ops[i]) + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN;
  }
  return at;
}

/* The gemm on the staged copies at base, then the result copied out. */
static int run_staged(gc_conn *conn, const gc_gemm_opts *o, uint8_t *base,
                      operand ops[OP_COUNT], gc_gemm_result *result) {
  const void *p[OP_COUNT];
  for (int i = 0; i < OP_COUNT; i++) {
    p[i] = ops[i].stage ? base + ops[i].offset : ops[i].p;
    if (ops[i].stage && i != OP_OUT) copy_in(base + ops[i].offset, &ops[i]);
  }
  gc_gemm_opts packed = *o;
  packed.struct_size = sizeof packed;
  packed.lda = packed.ldb = packed.ldc = 0;
  int rc = gc__gemm_plain(conn, &packed, p[OP_A], p[OP_B], p[OP_C], (void *)p[OP_OUT], result);
  if (rc == 0 && ops[OP_OUT].stage) copy_out(&ops[OP_OUT], p[OP_OUT]);
  return rc;
}

/* $GEMMD_SCRATCH_PIECES (default 1, at most SCRATCH_PIECES_MAX): an experiment for the GPU box,
 * see run_pieces. */
static unsigned pieces_wanted(void) {
  const char *env = getenv("GEMMD_SCRATCH_PIECES");
  long n = env != NULL ? strtol(env, NULL, 10) : 1;
  return n < 1 ? 1 : n > SCRATCH_PIECES_MAX ? SCRATCH_PIECES_MAX : (unsigned)n;
}

/* The rows r0 .. r0 + rows of x (a view of the same storage). */
static operand rows_of(const operand *x, uint64_t r0, uint64_t rows) {
  operand v = *x;
  uint64_t ld = ld_packed(x) ? x->cols : x->ld;
  v.p = (const uint8_t *)x->p + r0 * ld * x->esize;
  v.rows = rows;
  v.offset = x->offset + r0 * row_bytes(x);
  return v;
}

/* The gemm as separate gemms on bands of C's rows (A's rows, untransposed, batch 1), so that
 * the copy of A's next band overlaps the daemon's work on this one, and the copy out of a
 * finished band the work on the later ones. Each band reads all of B from the region. */
static int run_pieces(gc_conn *conn, const gc_gemm_opts *o, uint8_t *base,
                      operand ops[OP_COUNT], unsigned pieces, gc_gemm_result *result) {
  if (ops[OP_B].stage) copy_in(base + ops[OP_B].offset, &ops[OP_B]);
  const void *b = ops[OP_B].stage ? base + ops[OP_B].offset : ops[OP_B].p;
  uint64_t band = (o->m + pieces - 1) / pieces;
  gc_req reqs[SCRATCH_PIECES_MAX];
  unsigned sent = 0;
  int rc = 0;
  for (unsigned j = 0; j < pieces && rc == 0 && (uint64_t)j * band < o->m; j++) {
    uint64_t r0 = (uint64_t)j * band, n = o->m - r0 < band ? o->m - r0 : band;
    operand a = rows_of(&ops[OP_A], r0, n), out = rows_of(&ops[OP_OUT], r0, n), c = {0};
    copy_in(base + a.offset, &a);
    if (ops[OP_C].p != NULL) {
      c = rows_of(&ops[OP_C], r0, n);
      copy_in(base + c.offset, &c);
    }
    gc_gemm_opts po = *o;
    po.struct_size = sizeof po;
    po.lda = po.ldb = po.ldc = 0;
    po.m = n;
    rc = gc_submit(conn, &po, base + a.offset, b, ops[OP_C].p != NULL ? base + c.offset : NULL,
                   base + out.offset, &reqs[j]);
    if (rc == 0) sent++;
  }
  for (unsigned j = 0; j < sent; j++) {
    if (rc != 0) {
      gc_cancel(conn, reqs[j]);
      continue;
    }
    rc = gc_wait(conn, reqs[j], o->timeout_ms < 0 ? -1 : o->timeout_ms, j == 0 ? result : NULL);
    if (rc == GC_E_DEADLINE_EXCEEDED) gc_cancel(conn, reqs[j]);
    if (rc == 0) {
      uint64_t r0 = (uint64_t)j * band, n = o->m - r0 < band ? o->m - r0 : band;
      operand out = rows_of(&ops[OP_OUT], r0, n);
      copy_out(&out, base + out.offset);
    }
  }
  if (rc == 0 && result != NULL) result->m = o->m;
  return rc;
}

/* Whether the gemm may go as bands of rows (run_pieces). */
static bool pieces_fit(const gc_gemm_opts *o, const operand ops[OP_COUNT], unsigned pieces) {
  return pieces > 1 && o->batch == 1 && !o->trans_a && !o->bias && ops[OP_A].stage &&
         ops[OP_OUT].stage && (ops[OP_C].p == NULL || ops[OP_C].stage) &&
         o->m >= (uint64_t)pieces * SCRATCH_PIECE_MIN_ROWS;
}

/* gc_gemm for the options that need the library to move the operands itself: leading
 * dimensions other than packed, or operands large enough for the scratch region. o is the
 * caller's opts over the defaults. Returns 1 when it did not take the gemm (plain path), else
 * the gemm's result code. */
static int gemm_staged(gc_conn *conn, const gc_gemm_opts *o, const void *a, const void *b,
                       const void *c, void *out, gc_gemm_result *result) {
  operand ops[OP_COUNT];
  if (conn == NULL || !shapes(o, a, b, c, out, ops)) return 1;
  if (o->a_handle != 0) ops[OP_A].p = NULL;
  if (o->b_handle != 0) ops[OP_B].p = NULL;
  if (o->c_handle != 0) ops[OP_C].p = NULL;
  int rc = check_lds(conn, ops);
  if (rc != 0) return rc;
  bool strided = false;
  uint64_t unshared = 0; /* bytes that would cross the socket */
  for (int i = 0; i < OP_COUNT; i++) {
    if (ops[i].p == NULL) continue;
    strided |= !ld_packed(&ops[i]);
    if (!in_shm(conn, &ops[i])) unshared += packed_bytes(&ops[i]);
  }
  if (conn->scratch_on && unshared > 0 && unshared >= conn->scratch_min &&
      gc__shm_link_ready(conn) == 0 && gc__shm_is_unix(conn)) {
    for (int i = 0; i < OP_COUNT; i++) ops[i].stage = ops[i].p != NULL && !in_shm(conn, &ops[i]);
    uint64_t need = layout(ops);
    unsigned pieces = pieces_wanted();
    if (need <= conn->scratch_max && scratch_ensure(conn, need) == 0)
      return pieces_fit(o, ops, pieces) ? run_pieces(conn, o, conn->scratch, ops, pieces, result)
                                        : run_staged(conn, o, conn->scratch, ops, result);
  }
  if (!strided) return 1;
  /* Over the socket: the strided ones packed into a buffer of their own first. */
  for (int i = 0; i < OP_COUNT; i++) ops[i].stage = ops[i].p != NULL && !ld_packed(&ops[i]);
  uint64_t need = layout(ops);
  uint8_t *tmp = need <= SIZE_MAX ? malloc((size_t)need) : NULL;
  if (tmp == NULL)
    return gc__conn_failf(conn, GC_E_RESOURCE_EXHAUSTED,
                          "no memory to pack %llu bytes of strided operands",
                          (unsigned long long)need);
  rc = run_staged(conn, o, tmp, ops, result);
  free(tmp);
  return rc;
}

int gc_gemm(gc_conn *conn, const gc_gemm_opts *opts, const void *a, const void *b,
            const void *c, void *out, gc_gemm_result *result) {
  if (opts != NULL && opts->struct_size >= GC__GEMM_OPTS_V1_SIZE) {
    gc_gemm_opts o;
    gc_gemm_opts_init(&o);
    memcpy(&o, opts, opts->struct_size < sizeof o ? opts->struct_size : sizeof o);
    int rc = gemm_staged(conn, &o, a, b, c, out, result);
    if (rc != 1) return rc;
  }
  return gc__gemm_plain(conn, opts, a, b, c, out, result);
}
