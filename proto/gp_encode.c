/*
 * gp_encode.c - msgpack-RPC messages of protocol v1, packed with msgpack-c.
 *
 * Each encoder packs into a caller-owned sbuffer. msgpack-c's pack functions
 * return the sbuffer write callback's result (-1 when realloc fails); every
 * one is checked and becomes GP_E_RESOURCE_EXHAUSTED.
 */
#include "gp_encode.h"

#include <assert.h>
#include <string.h>

#define GP__MSG_REQUEST 0
#define GP__MSG_RESPONSE 1
#define GP__MSG_NOTIFICATION 2

/* Evaluates a msgpack-c pack call and returns from the caller when it failed. */
#define PACK(call)                      \
  do {                                  \
    if ((call) != 0)                    \
      return GP_E_RESOURCE_EXHAUSTED;   \
  } while (0)

size_t gp_encode_bin_header(uint8_t out[GP_BIN_HEADER_MAX], uint64_t len) {
  if (len <= UINT8_MAX) {
    out[0] = 0xc4;
    out[1] = (uint8_t)len;
    return 2;
  }
  if (len <= UINT16_MAX) {
    out[0] = 0xc5;
    out[1] = (uint8_t)(len >> 8);
    out[2] = (uint8_t)len;
    return 3;
  }
  out[0] = 0xc6;
  out[1] = (uint8_t)(len >> 24);
  out[2] = (uint8_t)(len >> 16);
  out[3] = (uint8_t)(len >> 8);
  out[4] = (uint8_t)len;
  return 5;
}

static int pack_cstr(msgpack_packer *pk, const char *s) {
  size_t len = strlen(s);
  PACK(msgpack_pack_str(pk, len));
  PACK(msgpack_pack_str_body(pk, s, len));
  return GP_OK;
}

/* A str key followed by nothing: the caller packs the value. */
#define PACK_KEY(pk, key) PACK(pack_cstr((pk), (key)))

static int pack_bin_header(msgpack_packer *pk, uint64_t len) {
  if (len > UINT32_MAX)
    return GP_E_INVALID_ARGUMENT;
  PACK(msgpack_pack_bin(pk, (size_t)len));
  return GP_OK;
}

static int pack_bool(msgpack_packer *pk, bool value) {
  return value ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
}

/* key-value pairs of a map: the str key, then the value. Each returns GP_OK or
 * GP_E_RESOURCE_EXHAUSTED, like every PACK. */
static int pack_key_uint(msgpack_packer *pk, const char *key, uint64_t value) {
  PACK_KEY(pk, key);
  PACK(msgpack_pack_uint64(pk, value));
  return GP_OK;
}

static int pack_key_cstr(msgpack_packer *pk, const char *key, const char *value) {
  PACK_KEY(pk, key);
  PACK(pack_cstr(pk, value));
  return GP_OK;
}

static int pack_key_bool(msgpack_packer *pk, const char *key, bool value) {
  PACK_KEY(pk, key);
  PACK(pack_bool(pk, value));
  return GP_OK;
}

static int pack_key_double(msgpack_packer *pk, const char *key, double value) {
  PACK_KEY(pk, key);
  PACK(msgpack_pack_double(pk, value));
  return GP_OK;
}

static int pack_request_head(msgpack_packer *pk, uint32_t msgid, const char *method) {
  PACK(msgpack_pack_array(pk, 4));
  PACK(msgpack_pack_uint8(pk, GP__MSG_REQUEST));
  PACK(msgpack_pack_uint32(pk, msgid));
  PACK(pack_cstr(pk, method));
  return GP_OK;
}

/* [0, msgid, method, [ with count params to follow. */
static int pack_request_params(msgpack_packer *pk, uint32_t msgid, const char *method,
                               uint32_t count) {
  if (method == NULL)
    return GP_E_INVALID_ARGUMENT;
  PACK(pack_request_head(pk, msgid, method));
  PACK(msgpack_pack_array(pk, count));
  return GP_OK;
}

int gp_encode_request(msgpack_sbuffer *out, uint32_t msgid, const char *method) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  return pack_request_params(&pk, msgid, method, 0);
}

int gp_encode_request_u64(msgpack_sbuffer *out, uint32_t msgid, const char *method,
                          uint64_t value) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  int rc = pack_request_params(&pk, msgid, method, 1);
  if (rc != GP_OK)
    return rc;
  PACK(msgpack_pack_uint64(&pk, value));
  return GP_OK;
}

int gp_encode_cuda_register(msgpack_sbuffer *out, uint32_t msgid, const gp_cuda_reg *reg) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  size_t bus_len = strnlen(reg->pci_bus_id, GP_CUDA_BUS_ID_MAX);
  if (bus_len == 0 || bus_len == GP_CUDA_BUS_ID_MAX)
    return GP_E_INVALID_ARGUMENT;
  int rc = pack_request_params(&pk, msgid, "cuda_register", 1);
  if (rc != GP_OK)
    return rc;
  PACK(msgpack_pack_map(&pk, reg->device >= 0 ? 4 : 3));
  PACK_KEY(&pk, "handle");
  PACK(msgpack_pack_bin(&pk, GP_CUDA_IPC_HANDLE_BYTES));
  PACK(msgpack_pack_bin_body(&pk, reg->handle, GP_CUDA_IPC_HANDLE_BYTES));
  PACK_KEY(&pk, "pci_bus_id");
  PACK(msgpack_pack_str(&pk, bus_len));
  PACK(msgpack_pack_str_body(&pk, reg->pci_bus_id, bus_len));
  PACK_KEY(&pk, "bytes");
  PACK(msgpack_pack_uint64(&pk, reg->bytes));
  if (reg->device >= 0) {
    PACK_KEY(&pk, "device");
    PACK(msgpack_pack_int64(&pk, reg->device));
  }
  return GP_OK;
}

int gp_encode_auth_request(msgpack_sbuffer *out, uint32_t msgid, const char *token, size_t len) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  if (token == NULL || len > UINT32_MAX)
    return GP_E_INVALID_ARGUMENT;
  PACK(pack_request_head(&pk, msgid, "auth"));
  PACK(msgpack_pack_array(&pk, 1));
  PACK(msgpack_pack_str_with_body(&pk, token, len));
  return GP_OK;
}

int gp_encode_notification(msgpack_sbuffer *out, const char *method) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  if (method == NULL)
    return GP_E_INVALID_ARGUMENT;
  PACK(msgpack_pack_array(&pk, 3));
  PACK(msgpack_pack_uint8(&pk, GP__MSG_NOTIFICATION));
  PACK(pack_cstr(&pk, method));
  PACK(msgpack_pack_array(&pk, 0));
  return GP_OK;
}

static int pack_shm_ref(msgpack_packer *pk, uint64_t region, uint64_t offset) {
  PACK(msgpack_pack_map(pk, 2));
  PACK(pack_key_uint(pk, "region", region));
  return pack_key_uint(pk, "offset", offset);
}

/* A msgpack writer into a fixed buffer that the caller sized for what it packs. */
typedef struct {
  uint8_t *p;
  size_t len, cap;
} fixed_buf;

static int fixed_write(void *data, const char *buf, size_t len) {
  fixed_buf *f = data;
  if (len > f->cap - f->len)
    return -1;
  memcpy(f->p + f->len, buf, len);
  f->len += len;
  return 0;
}

size_t gp_encode_shm_ref(uint8_t out[GP_SHM_REF_MAX], uint64_t region, uint64_t offset) {
  fixed_buf f = {out, 0, GP_SHM_REF_MAX};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &f, fixed_write);
  int rc = pack_shm_ref(&pk, region, offset);
  (void)rc;
  assert(rc == GP_OK); /* at most 1 + 7 + 9 + 7 + 9 bytes */
  return f.len;
}

size_t gp_encode_handle_ref(uint8_t out[GP_SHM_REF_MAX], uint64_t handle) {
  fixed_buf f = {out, 0, GP_SHM_REF_MAX};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &f, fixed_write);
  int rc = msgpack_pack_map(&pk, 1) == 0 ? pack_key_uint(&pk, "handle", handle) : GP_E_INTERNAL;
  (void)rc;
  assert(rc == GP_OK); /* at most 1 + 7 + 9 bytes */
  return f.len;
}

int gp_encode_put_request_head(msgpack_sbuffer *out, uint32_t msgid, const gp_put_hdr *hdr) {
  uint64_t bytes;
  if ((unsigned)hdr->dtype >= GP_DTYPE_COUNT || !gp_put_bytes(hdr, &bytes) || bytes > UINT32_MAX)
    return GP_E_INVALID_ARGUMENT;
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  int rc = pack_request_params(&pk, msgid, "put", 2);
  if (rc != GP_OK)
    return rc;
  PACK(msgpack_pack_map(&pk, 4));
  PACK(pack_key_cstr(&pk, "dtype", gp_dtype_name(hdr->dtype)));
  PACK(pack_key_uint(&pk, "rows", hdr->rows));
  PACK(pack_key_uint(&pk, "cols", hdr->cols));
  PACK(pack_key_uint(&pk, "batch", hdr->batch));
  return pack_bin_header(&pk, bytes);
}

int gp_pack_gemm_hdr(msgpack_packer *pk, const gp_gemm_hdr *hdr) {
  if ((unsigned)hdr->dtype >= GP_DTYPE_COUNT)
    return GP_E_INVALID_ARGUMENT;
  if ((unsigned)hdr->activation >= GP_ACT_COUNT)
    return GP_E_INVALID_ARGUMENT;
  if ((unsigned)gp_gemm_out_dtype(hdr) >= GP_DTYPE_COUNT)
    return GP_E_INVALID_ARGUMENT;
  const bool casts = gp_gemm_casts(hdr); /* out_dtype only then: older daemons refuse the key */
  const bool scale_a = hdr->scale_a != 1.0, scale_b = hdr->scale_b != 1.0; /* likewise */
  /* the complex and ld keys likewise: only when set */
  const bool alpha_im = hdr->alpha_im != 0.0, beta_im = hdr->beta_im != 0.0;
  static const char *const ld_keys[3] = {"lda", "ldb", "ldc"};
  uint32_t lds = 0;
  for (int op = 0; op < 3; op++)
    lds += hdr->ld[op] != 0;
  PACK(msgpack_pack_map(pk, 10 + (hdr->has_timeout ? 1 : 0) + (hdr->has_out ? 1 : 0) +
                               (hdr->broadcast_b ? 1 : 0) + (hdr->bias ? 1 : 0) +
                               (hdr->activation != GP_ACT_NONE ? 1 : 0) + (casts ? 1 : 0) +
                               (scale_a ? 1 : 0) + (scale_b ? 1 : 0) + (alpha_im ? 1 : 0) +
                               (beta_im ? 1 : 0) + (hdr->conj_a ? 1 : 0) +
                               (hdr->conj_b ? 1 : 0) + lds));
  PACK(pack_key_uint(pk, "m", hdr->m));
  PACK(pack_key_uint(pk, "n", hdr->n));
  PACK(pack_key_uint(pk, "k", hdr->k));
  PACK(pack_key_cstr(pk, "dtype", gp_dtype_name(hdr->dtype)));
  PACK(pack_key_bool(pk, "trans_a", hdr->trans_a));
  PACK(pack_key_bool(pk, "trans_b", hdr->trans_b));
  PACK(pack_key_double(pk, "alpha", hdr->alpha));
  PACK(pack_key_double(pk, "beta", hdr->beta));
  PACK(pack_key_uint(pk, "batch", hdr->batch));
  PACK(pack_key_cstr(pk, "precision", gp_precision_name(hdr->precision)));
  if (hdr->has_timeout)
    PACK(pack_key_uint(pk, "timeout_ms", hdr->timeout_ms));
  if (hdr->has_out) {
    PACK_KEY(pk, "out");
    PACK(pack_shm_ref(pk, hdr->out_region, hdr->out_offset));
  }
  if (hdr->broadcast_b) /* only when set: a daemon without it refuses the key */
    PACK(pack_key_bool(pk, "broadcast_b", true));
  if (hdr->bias) /* the epilogue's keys likewise */
    PACK(pack_key_bool(pk, "bias", true));
  if (hdr->activation != GP_ACT_NONE)
    PACK(pack_key_cstr(pk, "activation", gp_act_name(hdr->activation)));
  if (casts)
    PACK(pack_key_cstr(pk, "out_dtype", gp_dtype_name(hdr->out_dtype)));
  if (scale_a)
    PACK(pack_key_double(pk, "scale_a", hdr->scale_a));
  if (scale_b)
    PACK(pack_key_double(pk, "scale_b", hdr->scale_b));
  if (alpha_im)
    PACK(pack_key_double(pk, "alpha_im", hdr->alpha_im));
  if (beta_im)
    PACK(pack_key_double(pk, "beta_im", hdr->beta_im));
  if (hdr->conj_a)
    PACK(pack_key_bool(pk, "conj_a", true));
  if (hdr->conj_b)
    PACK(pack_key_bool(pk, "conj_b", true));
  for (int op = 0; op < 3; op++)
    if (hdr->ld[op] != 0)
      PACK(pack_key_uint(pk, ld_keys[op], hdr->ld[op]));
  return GP_OK;
}

int gp_encode_gemm_request_hdr(msgpack_sbuffer *out, uint32_t msgid, const gp_gemm_hdr *hdr,
                               bool with_c) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  int rc;
  if ((rc = pack_request_head(&pk, msgid, "gemm")) != GP_OK)
    return rc;
  PACK(msgpack_pack_array(&pk, with_c ? 4 : 3));
  return gp_pack_gemm_hdr(&pk, hdr);
}

int gp_encode_gemm_request_head(msgpack_sbuffer *out, uint32_t msgid, const gp_gemm_hdr *hdr,
                                bool with_c) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  uint64_t a_bytes;
  if (!gp_gemm_operand_bytes(hdr, GP_OPERAND_A, &a_bytes) || a_bytes > UINT32_MAX)
    return GP_E_INVALID_ARGUMENT;
  int rc = gp_encode_gemm_request_hdr(out, msgid, hdr, with_c);
  return rc != GP_OK ? rc : pack_bin_header(&pk, a_bytes);
}

/* [1, msgid, ...: the response array up to its error element. */
static int pack_response_prefix(msgpack_packer *pk, uint32_t msgid) {
  PACK(msgpack_pack_array(pk, 4));
  PACK(msgpack_pack_uint8(pk, GP__MSG_RESPONSE));
  PACK(msgpack_pack_uint32(pk, msgid));
  return GP_OK;
}

int gp_pack_response_head(msgpack_packer *pk, uint32_t msgid) {
  PACK(pack_response_prefix(pk, msgid));
  PACK(msgpack_pack_nil(pk));
  return GP_OK;
}

int gp_encode_error_response(msgpack_sbuffer *out, uint32_t msgid, int code, const char *message) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  if (code == GP_OK)
    return GP_E_INVALID_ARGUMENT; /* an error reply always carries an error */
  PACK(pack_response_prefix(&pk, msgid));
  PACK(msgpack_pack_map(&pk, 2));
  PACK(pack_key_cstr(&pk, "code", gp_code_name(code)));
  PACK(pack_key_cstr(&pk, "message", message != NULL ? message : gp_strerror(code)));
  PACK(msgpack_pack_nil(&pk));
  return GP_OK;
}

int gp_encode_pong_response(msgpack_sbuffer *out, uint32_t msgid) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  PACK(gp_pack_response_head(&pk, msgid));
  PACK(pack_cstr(&pk, "pong"));
  return GP_OK;
}

int gp_encode_true_response(msgpack_sbuffer *out, uint32_t msgid) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  PACK(gp_pack_response_head(&pk, msgid));
  PACK(msgpack_pack_true(&pk));
  return GP_OK;
}

static int pack_timings(msgpack_packer *pk, const gp_gemm_result_hdr *rh) {
  PACK(msgpack_pack_map(pk, 4));
  PACK(pack_key_uint(pk, "queue_us", rh->queue_us));
  PACK(pack_key_uint(pk, "transfer_in_us", rh->transfer_in_us));
  PACK(pack_key_uint(pk, "compute_us", rh->compute_us));
  PACK(pack_key_uint(pk, "transfer_out_us", rh->transfer_out_us));
  return GP_OK;
}

/* Length of a fixed-size name field, which may lack its NUL when full. */
static size_t bounded_len(const char name[GP_NAME_MAX]) {
  const char *end = memchr(name, '\0', GP_NAME_MAX);
  return end != NULL ? (size_t)(end - name) : GP_NAME_MAX;
}

static int pack_name(msgpack_packer *pk, const char name[GP_NAME_MAX]) {
  size_t len = bounded_len(name);
  PACK(msgpack_pack_str(pk, len));
  PACK(msgpack_pack_str_body(pk, name, len));
  return GP_OK;
}

/* [1, msgid, nil, [out_hdr with extra more pairs to follow: the caller packs them. */
static int pack_result_head(msgpack_packer *pk, uint32_t msgid, const gp_gemm_result_hdr *rh,
                            uint32_t extra) {
  if ((unsigned)rh->dtype >= GP_DTYPE_COUNT)
    return GP_E_INVALID_ARGUMENT;
  PACK(gp_pack_response_head(pk, msgid));
  PACK(msgpack_pack_array(pk, 2));
  PACK(msgpack_pack_map(pk, 7 + extra));
  PACK(pack_key_uint(pk, "m", rh->m));
  PACK(pack_key_uint(pk, "n", rh->n));
  PACK(pack_key_cstr(pk, "dtype", gp_dtype_name(rh->dtype)));
  PACK(pack_key_uint(pk, "batch", rh->batch));
  PACK_KEY(pk, "device");
  PACK(pack_name(pk, rh->device));
  PACK_KEY(pk, "kernel");
  PACK(pack_name(pk, rh->kernel));
  PACK_KEY(pk, "timings");
  return pack_timings(pk, rh);
}

int gp_encode_gemm_response_head(msgpack_sbuffer *out, uint32_t msgid,
                                 const gp_gemm_result_hdr *rh, uint64_t c_bytes) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  if (c_bytes > UINT32_MAX)
    return GP_E_INVALID_ARGUMENT;
  PACK(pack_result_head(&pk, msgid, rh, 0));
  return pack_bin_header(&pk, c_bytes);
}

int gp_encode_gemm_response_shm(msgpack_sbuffer *out, uint32_t msgid,
                                const gp_gemm_result_hdr *rh, uint64_t region, uint64_t offset,
                                uint64_t c_bytes) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
  PACK(pack_result_head(&pk, msgid, rh, 1));
  PACK_KEY(&pk, "out");
  PACK(msgpack_pack_map(&pk, 3));
  PACK(pack_key_uint(&pk, "region", region));
  PACK(pack_key_uint(&pk, "offset", offset));
  PACK(pack_key_uint(&pk, "bytes", c_bytes));
  return msgpack_pack_nil(&pk) == 0 ? GP_OK : GP_E_RESOURCE_EXHAUSTED;
}
