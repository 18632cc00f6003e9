/*
 * cuda_ipc_client.c - a client that keeps its operands in CUDA device memory and hands them to
 * gemmd by CUDA IPC handle (protocol: cuda_register), run by test_gpu_cuda_ipc.py against a
 * daemon it started: cuda_ipc_client SOCKET_PATH DEVICE.
 *
 * Built twice: over fake_cuda.c (the fake's device memory is a memfd the daemon opens through
 * /proc) against gemmd_fake, and over the real CUDA runtime against gemmd on a GPU. It speaks the
 * protocol through proto's encoder and decoder on a blocking Unix socket, allocates one device
 * buffer, registers it, and runs gemms of every dtype, with transposes, alpha and beta, A, B, C
 * and the result all in that buffer, and one tall enough for row blocks and a split (which
 * CUDA memory never takes), each checked against a float64 reference; then the
 * attacks: a bad handle, a size larger than the allocation, a range past the region's end, an
 * unknown bus id, a region used after it was unregistered, an IPC operand without an IPC
 * result, malformed params; and libgemmclient's gc_cuda_register / gc_gemm on device pointers
 * on a second connection. Prints one PASS or FAIL line per check; exits 0 when all passed,
 * 1 otherwise, 77 when no CUDA device is here.
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gemmclient.h"
#include "gp_decode.h"
#include "gp_encode.h"
#include "gp_half.h"

#define BUF_BYTES (8u << 20)

static int g_failed;
static uint32_t g_msgid;

static void check(bool ok, const char *name, const char *fmt, ...) {
  if (ok) {
    printf("PASS %s\n", name);
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL %s: ", name);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  g_failed++;
}

/* ---- the connection --------------------------------------------------------- */

typedef struct {
  int fd;
  gp_decoder *dec;
  uint8_t buf[1 << 16];
  size_t have, at;
} conn;

typedef struct {
  bool ok;               /* a reply came (else the connection failed) */
  gp_error err;          /* code != 0: an error reply */
  int64_t region;        /* a map result's "region" (-1: none) */
  bool cuda_ipc_feature; /* an info result's features list "cuda_ipc" */
  bool result_in_shm;    /* a gemm's [out_hdr, nil] */
  uint32_t msgid;
} reply;

static int conn_open(conn *c, const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof sa.sun_path)
    return -1;
  strcpy(sa.sun_path, path);
  c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0)
    return -1;
  c->dec = gp_decoder_new(GP_ROLE_CLIENT, NULL);
  c->have = c->at = 0;
  return c->dec ? 0 : -1;
}

static void conn_close(conn *c) {
  close(c->fd);
  gp_decoder_free(c->dec);
}

static bool send_all(conn *c, const void *data, size_t len) {
  const uint8_t *p = data;
  while (len > 0) {
    ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    p += n;
    len -= (size_t)n;
  }
  return true;
}

static bool is_str(const msgpack_object *o, const char *s) {
  return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
         memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

/* What the test needs of a generic result: "region", and "features" containing "cuda_ipc". */
static void read_result(const msgpack_object *o, reply *r) {
  if (!o || o->type != MSGPACK_OBJECT_MAP)
    return;
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    const msgpack_object_kv *kv = &o->via.map.ptr[i];
    if (is_str(&kv->key, "region") && kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
      r->region = (int64_t)kv->val.via.u64;
    if (is_str(&kv->key, "features") && kv->val.type == MSGPACK_OBJECT_ARRAY)
      for (uint32_t j = 0; j < kv->val.via.array.size; j++)
        r->cuda_ipc_feature |= is_str(&kv->val.via.array.ptr[j], "cuda_ipc");
  }
}

/* Reads the next reply (every event up to its MESSAGE_END). */
static reply read_reply(conn *c) {
  reply r = {.region = -1};
  bool need_more = c->at == c->have; /* else events may wait in the decoder: feed first */
  for (;;) {
    if (need_more) {
      ssize_t n = recv(c->fd, c->buf, sizeof c->buf, 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return r;
      c->have = (size_t)n;
      c->at = 0;
    }
    gp_event ev;
    c->at += gp_decoder_feed(c->dec, c->buf + c->at, c->have - c->at, &ev);
    need_more = ev.type == GP_EV_NEED_MORE;
    if (ev.type == GP_EV_FATAL)
      return r;
    if (ev.type == GP_EV_RESPONSE) {
      r.msgid = ev.msgid;
      r.err = ev.err;
      r.result_in_shm = ev.result_in_shm;
      if (!ev.err.code && !ev.is_gemm_result)
        read_result(ev.result, &r);
    }
    if (ev.type == GP_EV_MESSAGE_END) {
      r.ok = true;
      return r;
    }
  }
}

/* Sends the request in sb and reads its reply. */
static reply call(conn *c, msgpack_sbuffer *sb) {
  bool sent = send_all(c, sb->data, sb->size);
  msgpack_sbuffer_clear(sb);
  return sent ? read_reply(c) : (reply){.region = -1};
}

static reply cuda_register(conn *c, const void *handle, const char *bus, uint64_t bytes,
                           int device) {
  gp_cuda_reg reg = {.bytes = bytes, .device = device};
  memcpy(reg.handle, handle, GP_CUDA_IPC_HANDLE_BYTES);
  snprintf(reg.pci_bus_id, sizeof reg.pci_bus_id, "%s", bus);
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  if (gp_encode_cuda_register(&sb, ++g_msgid, &reg) != GP_OK)
    abort();
  reply r = call(c, &sb);
  msgpack_sbuffer_destroy(&sb);
  return r;
}

static reply simple(conn *c, const char *method, bool with_arg, uint64_t arg) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  int rc = with_arg ? gp_encode_request_u64(&sb, ++g_msgid, method, arg)
                    : gp_encode_request(&sb, ++g_msgid, method);
  if (rc != GP_OK)
    abort();
  reply r = call(c, &sb);
  msgpack_sbuffer_destroy(&sb);
  return r;
}

/* Encodes a gemm whose operand op lies at off[op] in region reg[op] (c absent unless with_c)
 * and whose result goes at out_off in out_region. */
static void encode_gemm(msgpack_sbuffer *sb, gp_gemm_hdr hdr, const uint64_t reg[3],
                        const uint64_t off[3], bool with_c, uint64_t out_region,
                        uint64_t out_off) {
  hdr.has_out = true;
  hdr.out_region = out_region;
  hdr.out_offset = out_off;
  if (gp_encode_gemm_request_hdr(sb, ++g_msgid, &hdr, with_c) != GP_OK)
    abort();
  for (int op = 0; op < (with_c ? 3 : 2); op++) {
    uint8_t ref[GP_SHM_REF_MAX];
    size_t n = gp_encode_shm_ref(ref, reg[op], off[op]);
    msgpack_sbuffer_write(sb, (const char *)ref, n);
  }
}

/* A gemm whose operands (c only when with_c) are all in region, at offsets. */
static reply gemm_in_region(conn *c, gp_gemm_hdr hdr, uint64_t region, const uint64_t off[3],
                            bool with_c, uint64_t out_region, uint64_t out_off) {
  const uint64_t reg[3] = {region, region, region};
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  encode_gemm(&sb, hdr, reg, off, with_c, out_region, out_off);
  reply r = call(c, &sb);
  msgpack_sbuffer_destroy(&sb);
  return r;
}

/* ---- matrices ---------------------------------------------------------------- */

static size_t elem_size(gp_dtype t) {
  return t == GP_DTYPE_F64 ? 8 : t == GP_DTYPE_F32 ? 4 : 2;
}

static void put(gp_dtype t, uint8_t *p, size_t i, double v) {
  switch (t) {
  case GP_DTYPE_F64: memcpy(p + 8 * i, &v, 8); break;
  case GP_DTYPE_F32: { float f = (float)v; memcpy(p + 4 * i, &f, 4); } break;
  case GP_DTYPE_F16: { uint16_t h = gp_f32_to_f16((float)v); memcpy(p + 2 * i, &h, 2); } break;
  default: { uint16_t h = gp_f32_to_bf16((float)v); memcpy(p + 2 * i, &h, 2); } break;
  }
}

static double get(gp_dtype t, const uint8_t *p, size_t i) {
  uint16_t h;
  float f;
  double d;
  switch (t) {
  case GP_DTYPE_F64: memcpy(&d, p + 8 * i, 8); return d;
  case GP_DTYPE_F32: memcpy(&f, p + 4 * i, 4); return f;
  case GP_DTYPE_F16: memcpy(&h, p + 2 * i, 2); return gp_f16_to_f32(h);
  default: memcpy(&h, p + 2 * i, 2); return gp_bf16_to_f32(h);
  }
}

/* Random values the dtype holds exactly (quarters in [-2, 2]). */
static void fill(gp_dtype t, uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    put(t, p, i, (double)((rand() % 17) - 8) / 4.0);
}

static double tolerance(gp_dtype t, uint64_t k) {
  double eps = t == GP_DTYPE_F64 ? 1e-15 : t == GP_DTYPE_F32 ? 1e-6 : t == GP_DTYPE_F16 ? 1e-3
                                                                                       : 8e-3;
  return eps * 4.0 * (double)k * 4.0 + eps;
}

/* The largest error of got against alpha * op(A) op(B) + beta * C in float64. */
static double max_error(const gp_gemm_hdr *h, const uint8_t *a, const uint8_t *b,
                        const uint8_t *c, const uint8_t *got, double *scale) {
  double worst = 0;
  *scale = 1;
  for (uint64_t q = 0; q < h->batch; q++)
    for (uint64_t i = 0; i < h->m; i++)
      for (uint64_t j = 0; j < h->n; j++) {
        double s = 0;
        for (uint64_t l = 0; l < h->k; l++) {
          size_t ai = q * h->m * h->k + (h->trans_a ? l * h->m + i : i * h->k + l);
          size_t bi = q * h->k * h->n + (h->trans_b ? j * h->k + l : l * h->n + j);
          s += get(h->dtype, a, ai) * get(h->dtype, b, bi);
        }
        size_t ci = q * h->m * h->n + i * h->n + j;
        double want = h->alpha * s + (c ? h->beta * get(h->dtype, c, ci) : 0.0);
        double err = fabs(get(h->dtype, got, ci) - want);
        if (isnan(err))
          err = INFINITY; /* f16's poison 0x7f7f is a NaN: never below a tolerance */
        if (fabs(want) > *scale)
          *scale = fabs(want);
        if (err > worst)
          worst = err;
      }
  return worst;
}

/* ---- the checks --------------------------------------------------------------- */

/* The client's side of the contract (PROTOCOL.md 3c): its writes to device memory must be
 * complete before a request names that memory. A cudaMemcpy from pageable memory (malloc'd, as
 * ours) to the device may return before its DMA lands; landing after gemmd wrote the result
 * into the same buffer, the poison stayed on an H100. false when CUDA reports an error. */
static bool device_writes_done(void) { return cudaDeviceSynchronize() == cudaSuccess; }

typedef struct {
  conn *c;
  uint8_t *dev;          /* the device buffer, BUF_BYTES */
  uint64_t region;
  uint8_t *host;         /* staging for cudaMemcpy */
} env;

/* One gemm of m rows with every operand and the result in the device buffer, checked. */
static void one_gemm(env *e, gp_dtype t, bool ta, bool tb, bool with_c, uint64_t batch,
                     uint64_t m) {
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.dtype = t;
  h.m = m, h.n = 23, h.k = 19, h.batch = batch;
  h.trans_a = ta, h.trans_b = tb;
  h.alpha = with_c ? -1.5 : 0.75;
  h.beta = with_c ? 0.5 : 0.0;
  size_t es = elem_size(t);
  uint64_t na = batch * h.m * h.k, nb = batch * h.k * h.n, nc = batch * h.m * h.n;
  /* odd offsets inside the buffer, 256-aligned as a kernel likes its operands */
  uint64_t off[3] = {256, 256 + ((na * es + 511) & ~255ull), 0};
  off[2] = off[1] + ((nb * es + 511) & ~255ull);
  uint64_t out = off[2] + ((nc * es + 511) & ~255ull);
  uint8_t *a = e->host, *b = a + na * es, *c = b + nb * es, *got = c + nc * es;
  fill(t, a, na);
  fill(t, b, nb);
  fill(t, c, nc);
  memset(got, 0x7f, nc * es); /* poison */
  char name[96];
  snprintf(name, sizeof name, "gemm %s m=%llu ta=%d tb=%d c=%d batch=%llu", gp_dtype_name(t),
           (unsigned long long)m, ta, tb, with_c, (unsigned long long)batch);
  if (cudaMemcpy(e->dev + off[0], a, na * es, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(e->dev + off[1], b, nb * es, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(e->dev + off[2], c, nc * es, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(e->dev + out, got, nc * es, cudaMemcpyHostToDevice) != cudaSuccess ||
      !device_writes_done()) {
    check(false, name, "cudaMemcpy to the device failed");
    return;
  }
  reply r = gemm_in_region(e->c, h, e->region, off, with_c, e->region, out);
  if (!r.ok || r.err.code) {
    check(false, name, "%s", r.ok ? r.err.message : "connection lost");
    return;
  }
  if (cudaMemcpy(got, e->dev + out, nc * es, cudaMemcpyDeviceToHost) != cudaSuccess) {
    check(false, name, "cudaMemcpy from the device failed");
    return;
  }
  double scale;
  double err = max_error(&h, a, b, with_c ? c : NULL, got, &scale);
  check(r.result_in_shm && err <= tolerance(t, h.k) * scale, name,
        "in_shm=%d max error %g (scale %g)", r.result_in_shm, err, scale);
}

/* The rows x cols elements of strided (rows ld elements apart) into packed, row after row. */
static void pack_rows(gp_dtype t, const uint8_t *strided, uint8_t *packed, uint64_t rows,
                      uint64_t cols, uint64_t ld) {
  size_t es = elem_size(t);
  for (uint64_t r = 0; r < rows; r++)
    memcpy(packed + r * cols * es, strided + r * ld * es, cols * es);
}

/* Leading dimensions in device memory (PROTOCOL.md, "Leading dimensions"): submatrices of
 * wider arrays, C updated in place, for f32 and f64 and both transposes of A: the result
 * checked against float64 and every gap element between C's rows left as it was. */
static void strided_gemm(env *e, gp_dtype t, bool ta) {
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.dtype = t;
  h.m = 41, h.n = 29, h.k = 23, h.batch = 2;
  h.trans_a = ta;
  h.alpha = -1.25, h.beta = 0.5;
  size_t es = elem_size(t);
  uint64_t ra = ta ? h.k : h.m, ca = ta ? h.m : h.k; /* A's stored rows and columns */
  h.ld[GP_OPERAND_A] = ca + 5, h.ld[GP_OPERAND_B] = h.n + 3, h.ld[GP_OPERAND_C] = h.n + 7;
  uint64_t na = h.batch * ra * ca, nb = h.batch * h.k * h.n, nc = h.batch * h.m * h.n;
  uint64_t sa = h.batch * ra * h.ld[0], sb = h.batch * h.k * h.ld[1], sc = h.batch * h.m * h.ld[2];
  uint8_t *a = e->host, *b = a + na * es, *c = b + nb * es, *got = c + nc * es;
  uint8_t *wa = got + nc * es, *wb = wa + sa * es, *wc = wb + sb * es, *wc0 = wc + sc * es;
  fill(t, wa, sa), fill(t, wb, sb), fill(t, wc, sc);
  memcpy(wc0, wc, sc * es);
  pack_rows(t, wa, a, h.batch * ra, ca, h.ld[0]);
  pack_rows(t, wb, b, h.batch * h.k, h.n, h.ld[1]);
  pack_rows(t, wc, c, h.batch * h.m, h.n, h.ld[2]);
  uint64_t off[3] = {0, (sa * es + 255) & ~255ull, 0};
  off[2] = off[1] + ((sb * es + 255) & ~255ull);
  char name[96];
  snprintf(name, sizeof name, "strided gemm %s ta=%d lda=%llu ldb=%llu ldc=%llu",
           gp_dtype_name(t), ta, (unsigned long long)h.ld[0], (unsigned long long)h.ld[1],
           (unsigned long long)h.ld[2]);
  if (cudaMemcpy(e->dev + off[0], wa, sa * es, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(e->dev + off[1], wb, sb * es, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(e->dev + off[2], wc, sc * es, cudaMemcpyHostToDevice) != cudaSuccess ||
      !device_writes_done()) {
    check(false, name, "cudaMemcpy to the device failed");
    return;
  }
  reply r = gemm_in_region(e->c, h, e->region, off, true, e->region, off[2]); /* C in place */
  if (!r.ok || r.err.code) {
    check(false, name, "%s", r.ok ? r.err.message : "connection lost");
    return;
  }
  if (cudaMemcpy(wc, e->dev + off[2], sc * es, cudaMemcpyDeviceToHost) != cudaSuccess) {
    check(false, name, "cudaMemcpy from the device failed");
    return;
  }
  bool gaps_kept = true;
  for (uint64_t row = 0; row < h.batch * h.m; row++)
    gaps_kept &= memcmp(wc + (row * h.ld[2] + h.n) * es, wc0 + (row * h.ld[2] + h.n) * es,
                        (h.ld[2] - h.n) * es) == 0;
  pack_rows(t, wc, got, h.batch * h.m, h.n, h.ld[2]);
  h.ld[0] = h.ld[1] = h.ld[2] = 0; /* max_error reads the packed copies */
  double scale;
  double err = max_error(&h, a, b, c, got, &scale);
  check(gaps_kept && err <= tolerance(t, h.k) * scale, name,
        "gaps kept %d, max error %g (scale %g)", gaps_kept, err, scale);
}

static void expect_error(reply r, int code, const char *needle, const char *name) {
  check(r.ok && r.err.code == code && strstr(r.err.message, needle) != NULL, name,
        "got %s \"%s\", want %s with \"%s\"", r.ok ? gp_code_name(r.err.code) : "no reply",
        r.err.message, gp_code_name(code), needle);
}

/* A small f32 gemm on region (its a at 0, b at 4096, result at out_off in out_region). */
static reply small_gemm(env *e, uint64_t region, uint64_t out_region, uint64_t out_off) {
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.dtype = GP_DTYPE_F32;
  h.m = h.n = h.k = 8;
  const uint64_t off[3] = {0, 4096, 0};
  return gemm_in_region(e->c, h, region, off, false, out_region, out_off);
}

static void attacks(env *e, const char *bus, int device) {
  cudaIpcMemHandle_t good;
  if (cudaIpcGetMemHandle(&good, e->dev) != cudaSuccess)
    abort();
  uint8_t junk[GP_CUDA_IPC_HANDLE_BYTES];
  for (size_t i = 0; i < sizeof junk; i++)
    junk[i] = (uint8_t)rand();
  reply r = cuda_register(e->c, junk, bus, 1 << 20, device);
  check(r.ok && !r.err.code && r.region > 0, "bad handle registers (opened on the device)",
        "%s", r.err.message);
  if (r.region > 0)
    expect_error(small_gemm(e, (uint64_t)r.region, (uint64_t)r.region, 8192),
                 GP_E_INVALID_ARGUMENT, "cannot be used", "bad handle: its gemm is refused");

  r = cuda_register(e->c, &good, bus, (uint64_t)BUF_BYTES + 4096, device);
  if (r.region > 0)
    expect_error(small_gemm(e, (uint64_t)r.region, (uint64_t)r.region, 8192),
                 GP_E_INVALID_ARGUMENT, "more than the allocation",
                 "bytes over the allocation: its gemm is refused");
  else
    check(false, "bytes over the allocation", "register failed: %s", r.err.message);

  expect_error(small_gemm(e, e->region, e->region, BUF_BYTES - 100), GP_E_INVALID_ARGUMENT,
               "do not fit", "out past the region's end");
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.dtype = GP_DTYPE_F32;
  h.m = h.n = h.k = 8;
  const uint64_t past[3] = {BUF_BYTES - 8, 0, 0};
  expect_error(gemm_in_region(e->c, h, e->region, past, false, e->region, 8192),
               GP_E_INVALID_ARGUMENT, "do not fit", "a past the region's end");
  const uint64_t huge[3] = {UINT64_MAX - 4, 0, 0};
  expect_error(gemm_in_region(e->c, h, e->region, huge, false, e->region, 8192),
               GP_E_INVALID_ARGUMENT, "do not fit", "an offset that overflows");

  expect_error(cuda_register(e->c, &good, "0000:ee:1f.0", 4096, device), GP_E_NOT_FOUND,
               "no device", "unknown bus id");
  expect_error(cuda_register(e->c, &good, "not-a-bus", 4096, device), GP_E_INVALID_ARGUMENT,
               "not a PCI address", "malformed bus id");
  expect_error(cuda_register(e->c, &good, bus, 0, device), GP_E_INVALID_ARGUMENT, "bytes",
               "zero bytes");

  /* an IPC operand needs an IPC result (there is no host copy of device memory) */
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  if (gp_encode_gemm_request_hdr(&sb, ++g_msgid, &h, false) != GP_OK)
    abort();
  uint8_t ref[GP_SHM_REF_MAX];
  size_t n = gp_encode_shm_ref(ref, e->region, 0);
  msgpack_sbuffer_write(&sb, (const char *)ref, n);
  uint8_t bin[GP_BIN_HEADER_MAX];
  size_t bh = gp_encode_bin_header(bin, 8 * 8 * 4);
  msgpack_sbuffer_write(&sb, (const char *)bin, bh);
  static const uint8_t zeros[8 * 8 * 4];
  msgpack_sbuffer_write(&sb, (const char *)zeros, sizeof zeros);
  expect_error(call(e->c, &sb), GP_E_INVALID_ARGUMENT, "\"out\" must then",
               "IPC operand without an IPC result");
  msgpack_sbuffer_destroy(&sb);

  /* unregistered: every later use is NOT_FOUND */
  r = cuda_register(e->c, &good, bus, 1 << 20, device);
  reply u = r.region > 0 ? simple(e->c, "shm_unregister", true, (uint64_t)r.region) : r;
  check(u.ok && !u.err.code, "unregister", "%s", u.err.message);
  if (r.region > 0)
    expect_error(small_gemm(e, (uint64_t)r.region, (uint64_t)r.region, 8192), GP_E_NOT_FOUND,
                 "not registered", "region used after unregister");
}

/* A region unregistered while a gemm still reads it: the daemon keeps the handle open until
 * that job is done (A in region 2, which is unregistered right behind the gemm request, without
 * waiting for its reply), and the result is right. */
static void unregister_in_flight(env *e, const char *bus, int device) {
  cudaIpcMemHandle_t h;
  if (cudaIpcGetMemHandle(&h, e->dev) != cudaSuccess)
    abort();
  reply r = cuda_register(e->c, &h, bus, BUF_BYTES, device);
  if (r.region <= 0) {
    check(false, "unregister in flight", "register: %s", r.err.message);
    return;
  }
  gp_gemm_hdr hdr;
  gp_gemm_hdr_init(&hdr);
  hdr.dtype = GP_DTYPE_F32;
  hdr.m = hdr.n = hdr.k = 192;
  size_t n = 192 * 192;
  uint8_t *a = e->host, *b = a + 4 * n, *got = b + 4 * n;
  fill(GP_DTYPE_F32, a, n);
  fill(GP_DTYPE_F32, b, n);
  const uint64_t reg[3] = {(uint64_t)r.region, e->region, 0};
  const uint64_t off[3] = {2u << 20, 3u << 20, 0};
  const uint64_t out = 4u << 20;
  if (cudaMemcpy(e->dev + off[0], a, 4 * n, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(e->dev + off[1], b, 4 * n, cudaMemcpyHostToDevice) != cudaSuccess ||
      !device_writes_done())
    abort();
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  encode_gemm(&sb, hdr, reg, off, false, e->region, out);
  uint32_t gemm_id = g_msgid;
  if (gp_encode_request_u64(&sb, ++g_msgid, "shm_unregister", (uint64_t)r.region) != GP_OK ||
      !send_all(e->c, sb.data, sb.size))
    abort();
  msgpack_sbuffer_destroy(&sb);
  reply first = read_reply(e->c), second = read_reply(e->c);
  reply g = first.msgid == gemm_id ? first : second, u = first.msgid == gemm_id ? second : first;
  check(u.ok && !u.err.code, "unregister behind a gemm that reads the region", "%s",
        u.err.message);
  double scale = 1, err = 1e9;
  if (g.ok && !g.err.code &&
      cudaMemcpy(got, e->dev + out, 4 * n, cudaMemcpyDeviceToHost) == cudaSuccess)
    err = max_error(&hdr, a, b, NULL, got, &scale);
  check(err <= tolerance(GP_DTYPE_F32, 192) * scale, "that gemm's result",
        "%s, max error %g", g.ok ? g.err.message : "no reply", err);
}

/* [0, msgid, "cuda_register", [{"bytes": 4096 and, with a handle, "handle": bin of len}]]. */
static void pack_register(msgpack_packer *pk, bool with_handle, size_t len) {
  static const uint8_t bytes[GP_CUDA_IPC_HANDLE_BYTES];
  msgpack_pack_array(pk, 4);
  msgpack_pack_uint32(pk, 0);
  msgpack_pack_uint32(pk, ++g_msgid);
  msgpack_pack_str_with_body(pk, "cuda_register", 13);
  msgpack_pack_array(pk, 1);
  msgpack_pack_map(pk, with_handle ? 2 : 1);
  if (with_handle) {
    msgpack_pack_str_with_body(pk, "handle", 6);
    msgpack_pack_bin_with_body(pk, bytes, len);
  }
  msgpack_pack_str_with_body(pk, "bytes", 5);
  msgpack_pack_uint64(pk, 4096);
}

/* Malformed params the decoder refuses before anything is done. */
static void malformed(env *e) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  pack_register(&pk, true, 5);
  expect_error(call(e->c, &sb), GP_E_INVALID_ARGUMENT, "must be 64 bytes", "short handle");
  pack_register(&pk, false, 0);
  expect_error(call(e->c, &sb), GP_E_INVALID_ARGUMENT, "missing", "missing handle");
  msgpack_sbuffer_destroy(&sb);
}

/* The daemon's backend_stats.cuda_ipc_in_bytes (-1: unknown). */
static int64_t ipc_in_bytes(gc_conn *gc) {
  void *buf = NULL;
  size_t len = 0;
  int64_t v = -1;
  if (gc_stats(gc, 30000, &buf, &len) != 0 ||
      gc_map_int(buf, len, "backend_stats.cuda_ipc_in_bytes", &v) != 0)
    v = -1;
  gc_free(buf);
  return v;
}

/* libgemmclient on a second connection: gc_cuda_register, a gc_gemm on device pointers (out
 * included: sent by reference), gc_cuda_unregister, and one registration left for gc_close. */
static void through_libgemmclient(env *e, const char *path, const char *bus) {
  char addr[256];
  snprintf(addr, sizeof addr, "unix:%s", path);
  gc_conn *gc = NULL;
  cudaIpcMemHandle_t h;
  uint64_t region = 0;
  int rc = gc_connect(addr, &gc);
  if (rc == 0 && cudaIpcGetMemHandle(&h, e->dev) != cudaSuccess)
    abort();
  if (rc == 0)
    rc = gc_cuda_register(gc, &h, bus, e->dev, BUF_BYTES, 30000, &region);
  check(rc == 0 && region > 0, "gc_cuda_register", "%s",
        gc ? gc_last_error(gc)->message : "gc_connect failed");
  if (rc != 0) {
    gc_close(gc);
    return;
  }
  gc_gemm_opts o;
  gc_gemm_opts_init(&o);
  o.m = 33, o.n = 17, o.k = 9, o.alpha = 2.0, o.timeout_ms = 60000;
  size_t na = 33 * 9, nb = 9 * 17, nc = 33 * 17;
  uint8_t *a = e->host, *b = a + 4 * na, *got = b + 4 * nb;
  fill(GP_DTYPE_F32, a, na);
  fill(GP_DTYPE_F32, b, nb);
  uint8_t *da = e->dev + (1 << 20), *db = da + 8192, *dout = db + 8192;
  if (cudaMemcpy(da, a, 4 * na, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(db, b, 4 * nb, cudaMemcpyHostToDevice) != cudaSuccess ||
      !device_writes_done())
    abort();
  int64_t in_before = ipc_in_bytes(gc);
  rc = gc_gemm(gc, &o, da, db, NULL, dout, NULL);
  /* by reference: the daemon copied a and b device to device (in the fake, device memory is
   * host memory: bytes sent on the socket would give the same result) */
  check(rc != 0 || ipc_in_bytes(gc) - in_before == (int64_t)(4 * (na + nb)),
        "gc_gemm sends device operands by reference", "cuda_ipc_in_bytes grew by %lld",
        (long long)(ipc_in_bytes(gc) - in_before));
  if (rc == 0 && cudaMemcpy(got, dout, 4 * nc, cudaMemcpyDeviceToHost) != cudaSuccess)
    abort();
  gp_gemm_hdr hdr;
  gp_gemm_hdr_init(&hdr);
  hdr.dtype = GP_DTYPE_F32, hdr.m = 33, hdr.n = 17, hdr.k = 9, hdr.alpha = 2.0;
  double scale, err = rc == 0 ? max_error(&hdr, a, b, NULL, got, &scale) : 1e9;
  check(rc == 0 && err <= tolerance(GP_DTYPE_F32, 9) * scale, "gc_gemm on device pointers",
        "rc %d (%s), max error %g", rc, gc_last_error(gc)->message, err);
  rc = gc_cuda_unregister(gc, e->dev, 30000);
  check(rc == 0, "gc_cuda_unregister", "%s", gc_last_error(gc)->message);
  check(gc_cuda_unregister(gc, e->dev, 30000) == GC_E_INVALID_ARGUMENT,
        "gc_cuda_unregister twice", "not refused");
  rc = gc_cuda_register(gc, &h, bus, e->dev, BUF_BYTES, 30000, NULL);
  check(rc == 0, "gc_cuda_register again (left for gc_close)", "%s",
        gc_last_error(gc)->message);
  gc_close(gc);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s SOCKET_PATH DEVICE\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach the runner as they come */
  int device = atoi(argv[2]), count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device) {
    printf("SKIP: no CUDA device %d here\n", device);
    return 77;
  }
  char bus[GP_CUDA_BUS_ID_MAX];
  env e = {0};
  if (cudaSetDevice(device) != cudaSuccess ||
      cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device) != cudaSuccess ||
      cudaMalloc((void **)&e.dev, BUF_BYTES) != cudaSuccess) {
    printf("FAIL setup: cannot allocate device memory on device %d\n", device);
    return 1;
  }
  e.host = malloc(BUF_BYTES);
  conn c;
  if (!e.host || conn_open(&c, argv[1]) != 0) {
    printf("FAIL setup: cannot connect to %s\n", argv[1]);
    return 1;
  }
  e.c = &c;
  srand(12345);
  reply info = simple(&c, "info", false, 0);
  check(info.ok && info.cuda_ipc_feature, "info lists cuda_ipc", "%s", info.err.message);
  cudaIpcMemHandle_t handle;
  if (cudaIpcGetMemHandle(&handle, e.dev) != cudaSuccess) {
    printf("FAIL setup: cudaIpcGetMemHandle\n");
    return 1;
  }
  reply r = cuda_register(&c, &handle, bus, BUF_BYTES, device);
  check(r.ok && !r.err.code && r.region > 0, "cuda_register", "%s", r.err.message);
  if (r.region <= 0)
    return 1;
  e.region = (uint64_t)r.region;
  /* the float dtypes: an i8 gemm's operands travel the same way (its exact checks, regions
   * included, are test_i8.py's), and its scalars would have to be integers */
  for (gp_dtype t = 0; t <= GP_DTYPE_BF16; t++)
    for (int v = 0; v < 4; v++)
      one_gemm(&e, t, v & 1, v & 2, v != 1, v == 3 ? 3 : 1, 37);
  /* Tall enough for row blocks and, with a small gpu.split_min_rows, a split across two
   * devices, which registered host regions would get: device memory takes neither (the
   * caller checks the daemon's shm_pieced_jobs and shm_split_jobs stay 0). */
  one_gemm(&e, GP_DTYPE_F32, false, false, true, 1, 4352);
  for (int v = 0; v < 4; v++)
    strided_gemm(&e, v & 1 ? GP_DTYPE_F64 : GP_DTYPE_F32, v & 2);
  attacks(&e, bus, device);
  malformed(&e);
  unregister_in_flight(&e, bus, device);
  through_libgemmclient(&e, argv[1], bus);
  /* the region stays registered: the connection's close must release it (the caller checks
   * stats afterwards) */
  conn_close(&c);
  cudaFree(e.dev);
  free(e.host);
  printf("%s: %d check(s) failed\n", g_failed ? "FAIL" : "PASS", g_failed);
  return g_failed ? 1 : 0;
}
