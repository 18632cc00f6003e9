/*
 * gp_types.c - dtypes, methods, the gemm header's defaults, shapes and
 * sizes, the default limits and the semantic checks of a header.
 */
#include "gp_types.h"

#include <math.h>
#include <string.h>

static bool name_equals(const char *name, size_t len, const char *want) {
  size_t want_len = strlen(want);
  return name != NULL && len == want_len && memcmp(name, want, len) == 0;
}

/* Index of the name of len bytes in names[0..count), or -1 (the wire names of an enum). */
static int name_index(const char *const *names, unsigned count, const char *name, size_t len) {
  for (unsigned i = 0; i < count; i++)
    if (name_equals(name, len, names[i]))
      return (int)i;
  return -1;
}

static const char *const dtype_names[GP_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16", "i8",
                                                        "i32", "e4m3", "e5m2", "c64", "c128"};
static const size_t dtype_sizes[GP_DTYPE_COUNT] = {4, 8, 2, 2, 1, 4, 1, 1, 8, 16};

size_t gp_dtype_size(gp_dtype dtype) {
  if ((unsigned)dtype >= GP_DTYPE_COUNT)
    return 0;
  return dtype_sizes[dtype];
}

const char *gp_dtype_name(gp_dtype dtype) {
  if ((unsigned)dtype >= GP_DTYPE_COUNT)
    return "?";
  return dtype_names[dtype];
}

int gp_dtype_from_name(const char *name, size_t len, gp_dtype *out) {
  int i = name_index(dtype_names, GP_DTYPE_COUNT, name, len);
  if (i < 0)
    return GP_E_INVALID_ARGUMENT;
  *out = (gp_dtype)i;
  return GP_OK;
}

const char *gp_precision_name(gp_precision p) {
  return p == GP_PRECISION_FAST ? "fast" : "exact";
}

int gp_precision_from_name(const char *name, size_t len, gp_precision *out) {
  if (name_equals(name, len, "exact")) {
    *out = GP_PRECISION_EXACT;
    return GP_OK;
  }
  if (name_equals(name, len, "fast")) {
    *out = GP_PRECISION_FAST;
    return GP_OK;
  }
  return GP_E_INVALID_ARGUMENT;
}

static const char *const act_names[GP_ACT_COUNT] = {"none", "relu", "gelu", "gelu_tanh"};

const char *gp_act_name(gp_act act) {
  if ((unsigned)act >= GP_ACT_COUNT)
    return "?";
  return act_names[act];
}

int gp_act_from_name(const char *name, size_t len, gp_act *out) {
  int i = name_index(act_names, GP_ACT_COUNT, name, len);
  if (i < 0)
    return GP_E_INVALID_ARGUMENT;
  *out = (gp_act)i;
  return GP_OK;
}

const char *gp_method_name(gp_method m) {
  switch (m) {
  case GP_METHOD_GEMM:
    return "gemm";
  case GP_METHOD_PING:
    return "ping";
  case GP_METHOD_INFO:
    return "info";
  case GP_METHOD_STATS:
    return "stats";
  case GP_METHOD_SHM_REGISTER:
    return "shm_register";
  case GP_METHOD_SHM_UNREGISTER:
    return "shm_unregister";
  case GP_METHOD_AUTH:
    return "auth";
  case GP_METHOD_PUT:
    return "put";
  case GP_METHOD_FREE:
    return "free";
  case GP_METHOD_CUDA_REGISTER:
    return "cuda_register";
  default:
    return NULL;
  }
}

gp_method gp_method_from_name(const char *name, size_t len) {
  for (gp_method m = GP_METHOD_GEMM; m <= GP_METHOD_LAST; m++) {
    if (name_equals(name, len, gp_method_name(m)))
      return m;
  }
  return GP_METHOD_UNKNOWN;
}

const char *gp_operand_name(gp_operand op) {
  switch (op) {
  case GP_OPERAND_A:
    return "a";
  case GP_OPERAND_B:
    return "b";
  case GP_OPERAND_C:
    return "c";
  default:
    return "?";
  }
}

void gp_gemm_hdr_init(gp_gemm_hdr *hdr) {
  memset(hdr, 0, sizeof *hdr);
  hdr->dtype = GP_DTYPE_F32;
  hdr->trans_a = false;
  hdr->trans_b = false;
  hdr->alpha = 1.0;
  hdr->beta = 0.0;
  hdr->batch = 1;
  hdr->precision = GP_PRECISION_EXACT;
  hdr->has_timeout = false;
  hdr->timeout_ms = 0;
  hdr->scale_a = 1.0;
  hdr->scale_b = 1.0;
}

gp_dtype gp_dtype_result(gp_dtype dtype) {
  if (dtype == GP_DTYPE_I8)
    return GP_DTYPE_I32;
  return gp_dtype_is_fp8(dtype) ? GP_DTYPE_F32 : dtype;
}

bool gp_dtype_is_int(gp_dtype dtype) { return dtype == GP_DTYPE_I8; }

bool gp_dtype_is_fp8(gp_dtype dtype) { return dtype == GP_DTYPE_E4M3 || dtype == GP_DTYPE_E5M2; }

double gp_gemm_alpha(const gp_gemm_hdr *hdr) { return hdr->alpha * hdr->scale_a * hdr->scale_b; }

bool gp_dtype_is_complex(gp_dtype dtype) {
  return dtype == GP_DTYPE_C64 || dtype == GP_DTYPE_C128;
}

bool gp_gemm_beta_zero(const gp_gemm_hdr *hdr) { return hdr->beta == 0.0 && hdr->beta_im == 0.0; }

gp_dtype gp_gemm_out_dtype(const gp_gemm_hdr *hdr) {
  return hdr->has_out_dtype ? hdr->out_dtype : gp_dtype_result(hdr->dtype);
}

bool gp_gemm_casts(const gp_gemm_hdr *hdr) {
  return gp_gemm_out_dtype(hdr) != gp_dtype_result(hdr->dtype);
}

bool gp_dtype_cast_ok(gp_dtype dtype, gp_dtype out) {
  gp_dtype result = gp_dtype_result(dtype); /* i8's i32, fp8's f32, else dtype */
  if (out == result)
    return true;
  return (result == GP_DTYPE_F32 || result == GP_DTYPE_F64) &&
         (out == GP_DTYPE_F16 || out == GP_DTYPE_BF16);
}

void gp_gemm_operand_shape(const gp_gemm_hdr *hdr, gp_operand op, uint64_t *rows, uint64_t *cols) {
  switch (op) {
  case GP_OPERAND_A: /* op(A) is m x k; A itself k x m when transposed */
    *rows = hdr->trans_a ? hdr->k : hdr->m;
    *cols = hdr->trans_a ? hdr->m : hdr->k;
    break;
  case GP_OPERAND_B: /* op(B) is k x n; B itself n x k when transposed */
    *rows = hdr->trans_b ? hdr->n : hdr->k;
    *cols = hdr->trans_b ? hdr->k : hdr->n;
    break;
  default: /* C is m x n; with bias, c carries one row of it */
    *rows = hdr->bias ? 1 : hdr->m;
    *cols = hdr->n;
    break;
  }
}

/* *out = a * b; false on overflow. */
static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  if (a != 0 && b > UINT64_MAX / a)
    return false;
  *out = a * b;
  return true;
}

uint64_t gp_gemm_ld(const gp_gemm_hdr *hdr, gp_operand op) {
  uint64_t rows, cols;
  gp_gemm_operand_shape(hdr, op, &rows, &cols);
  return hdr->ld[op] != 0 ? hdr->ld[op] : cols;
}

bool gp_gemm_has_ld(const gp_gemm_hdr *hdr) {
  return hdr->ld[GP_OPERAND_A] != 0 || hdr->ld[GP_OPERAND_B] != 0 || hdr->ld[GP_OPERAND_C] != 0;
}

/* Bytes of `count` rows of cols elements, ld elements apart: ((count - 1) * ld + cols) * size
 * (count * cols * size when packed); false on overflow. ld >= cols is checked by the caller. */
static bool strided_bytes(uint64_t count, uint64_t cols, uint64_t ld, size_t size,
                          uint64_t *bytes) {
  uint64_t n;
  if (ld == 0 || ld == cols) {
    if (!mul_u64(count, cols, &n))
      return false;
  } else if (count == 0) {
    n = 0;
  } else {
    if (!mul_u64(count - 1, ld, &n) || n > UINT64_MAX - cols)
      return false;
    n += cols;
  }
  if (!mul_u64(n, size, &n))
    return false;
  *bytes = n;
  return true;
}

uint64_t gp_gemm_operand_batch(const gp_gemm_hdr *hdr, gp_operand op) {
  return (op == GP_OPERAND_B && hdr->broadcast_b) || (op == GP_OPERAND_C && hdr->bias)
             ? 1
             : hdr->batch;
}

bool gp_gemm_operand_bytes(const gp_gemm_hdr *hdr, gp_operand op, uint64_t *bytes) {
  uint64_t rows, cols, count;
  gp_gemm_operand_shape(hdr, op, &rows, &cols);
  uint64_t batch = gp_gemm_operand_batch(hdr, op);
  gp_dtype dtype = op == GP_OPERAND_C ? gp_gemm_out_dtype(hdr) : hdr->dtype;
  return mul_u64(rows, batch, &count) &&
         strided_bytes(count, cols, hdr->ld[op], gp_dtype_size(dtype), bytes);
}

bool gp_gemm_result_bytes(const gp_gemm_hdr *hdr, uint64_t *bytes) {
  uint64_t count;
  return mul_u64(hdr->m, hdr->batch, &count) &&
         strided_bytes(count, hdr->n, hdr->ld[GP_OPERAND_C],
                       gp_dtype_size(gp_gemm_out_dtype(hdr)), bytes);
}

double gp_gemm_flops(const gp_gemm_hdr *hdr) {
  double per = gp_dtype_is_complex(hdr->dtype) ? 8.0 : 2.0;
  return per * (double)hdr->m * (double)hdr->n * (double)hdr->k * (double)hdr->batch;
}

void gp_limits_default(gp_limits *limits) {
  memset(limits, 0, sizeof *limits);
  limits->max_operand_bytes = UINT64_C(1) << 30;
  limits->max_header_bytes = 64 * 1024;
  limits->max_message_bytes = 3 * limits->max_operand_bytes + limits->max_header_bytes;
  limits->max_depth = 8;
  limits->max_items = 4096;
  limits->max_string_bytes = 4096;
  limits->max_dim = 65536;
  limits->max_batch = 65536;
  limits->max_work = UINT64_C(1) << 46;
}

static int check_dim(const char *name, uint64_t value, uint64_t max, gp_error *err) {
  if (value < 1)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "%s: must be >= 1", name);
  if (value > max)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "%s: %llu is over the limit %llu", name,
                        (unsigned long long)value, (unsigned long long)max);
  return GP_OK;
}

static int check_work(const gp_gemm_hdr *hdr, const gp_limits *limits, gp_error *err) {
  uint64_t work;
  if (!mul_u64(hdr->m, hdr->n, &work) || !mul_u64(work, hdr->k, &work) ||
      !mul_u64(work, hdr->batch, &work) || work > limits->max_work)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "m*n*k*batch: %llux%llux%llux%llu is over the limit %llu",
                        (unsigned long long)hdr->m, (unsigned long long)hdr->n,
                        (unsigned long long)hdr->k, (unsigned long long)hdr->batch,
                        (unsigned long long)limits->max_work);
  return GP_OK;
}

/* Every operand within max_operand_bytes (and bin32), the sent ones' sum within
 * max_message_bytes. The result is checked too, whatever c carried: it goes back as a bin of
 * its size, and k = 1 would otherwise let tiny a and b ask for an m x n result of any size. */
static int check_operands(const gp_gemm_hdr *hdr, bool has_c, const gp_limits *limits,
                          gp_error *err) {
  uint64_t max_operand = limits->max_operand_bytes;
  if (max_operand > UINT32_MAX)
    max_operand = UINT32_MAX; /* a msgpack bin holds at most 2^32-1 bytes */
  uint64_t total = 0;
  for (gp_operand op = GP_OPERAND_A; op <= GP_OPERAND_C; op++) {
    uint64_t bytes;
    if (!gp_gemm_operand_bytes(hdr, op, &bytes) || bytes > max_operand)
      return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "%s: over the limit of %llu bytes%s",
                          gp_operand_name(op), (unsigned long long)max_operand,
                          op == GP_OPERAND_C && !has_c ? " (the result c)" : "");
    if (op != GP_OPERAND_C || has_c)
      total += bytes; /* cannot wrap: three values <= 2^32 each */
  }
  uint64_t result;
  if (!gp_gemm_result_bytes(hdr, &result) || result > max_operand)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "c: over the limit of %llu bytes (the result c)",
                        (unsigned long long)max_operand);
  if (total > limits->max_message_bytes)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED,
                        "message: %llu payload bytes are over the limit %llu",
                        (unsigned long long)total, (unsigned long long)limits->max_message_bytes);
  return GP_OK;
}

/* An integer scalar within int32, as the 32-bit arithmetic takes it. */
static bool is_int32(double v) {
  return v >= -2147483648.0 && v <= 2147483647.0 && v == (double)(int32_t)v; /* no libm */
}

/* What only the integer gemm asks: integer alpha and beta (the result is exact, wrapping in 32
 * bits), and no activation but ReLU (GELU of an integer has no integer answer). */
static int check_int_gemm(const gp_gemm_hdr *hdr, gp_error *err) {
  if (!is_int32(hdr->alpha) || !is_int32(hdr->beta))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "alpha, beta: an %s gemm takes integers within int32 (got %g, %g)",
                        gp_dtype_name(hdr->dtype), hdr->alpha, hdr->beta);
  if (hdr->activation != GP_ACT_NONE && hdr->activation != GP_ACT_RELU)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "activation: an %s gemm takes none or relu", gp_dtype_name(hdr->dtype));
  return GP_OK;
}

/* The per-tensor scales: an fp8 gemm's alone, finite, and with alpha a finite product. */
static int check_scales(const gp_gemm_hdr *hdr, gp_error *err) {
  if (!gp_dtype_is_fp8(hdr->dtype) && (hdr->scale_a != 1.0 || hdr->scale_b != 1.0))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "scale_a, scale_b: only an e4m3 or e5m2 gemm takes per-tensor scales "
                        "(this one is %s; fold a scale into alpha)",
                        gp_dtype_name(hdr->dtype));
  if (!isfinite(hdr->scale_a) || !isfinite(hdr->scale_b) || !isfinite(gp_gemm_alpha(hdr)))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "scale_a, scale_b: must be finite, and so must alpha * scale_a * scale_b");
  return GP_OK;
}

/* The complex keys: a complex gemm's alone, finite; and what a complex gemm does not take
 * (no epilogue, no cast: the result is the dtype). */
static int check_complex(const gp_gemm_hdr *hdr, gp_error *err) {
  if (!gp_dtype_is_complex(hdr->dtype)) {
    if (hdr->alpha_im != 0.0 || hdr->beta_im != 0.0 || hdr->conj_a || hdr->conj_b)
      return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                          "alpha_im, beta_im, conj_a, conj_b: only a c64 or c128 gemm takes "
                          "them (this one is %s)", gp_dtype_name(hdr->dtype));
    return GP_OK;
  }
  if (!isfinite(hdr->alpha_im) || !isfinite(hdr->beta_im))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "alpha_im, beta_im: must be finite");
  if (hdr->bias || hdr->activation != GP_ACT_NONE)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "bias, activation: a %s gemm takes no epilogue",
                        gp_dtype_name(hdr->dtype));
  return GP_OK;
}

/* lda, ldb, ldc: each at least its operand's row length as stored (0: not sent, packed). */
static int check_ld(const gp_gemm_hdr *hdr, gp_error *err) {
  static const char *const names[3] = {"lda", "ldb", "ldc"};
  for (gp_operand op = GP_OPERAND_A; op <= GP_OPERAND_C; op++) {
    uint64_t rows, cols;
    gp_gemm_operand_shape(hdr, op, &rows, &cols);
    if (hdr->ld[op] != 0 && hdr->ld[op] < cols)
      return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                          "%s: %llu is less than the row length %llu of %s as stored",
                          names[op], (unsigned long long)hdr->ld[op], (unsigned long long)cols,
                          gp_operand_name(op));
  }
  if (!gp_gemm_has_ld(hdr))
    return GP_OK;
  bool plain = hdr->dtype == GP_DTYPE_F32 || hdr->dtype == GP_DTYPE_F64 ||
               gp_dtype_is_complex(hdr->dtype);
  if (!plain || hdr->bias || hdr->activation != GP_ACT_NONE || gp_gemm_casts(hdr))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "lda, ldb, ldc: only an f32, f64, c64 or c128 gemm without bias, "
                        "activation or out_dtype takes leading dimensions");
  if (hdr->ld[GP_OPERAND_C] != 0 && !hdr->has_out)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "ldc: needs out (the result in a shared-memory region or CUDA memory)");
  return GP_OK;
}

int gp_gemm_hdr_validate(const gp_gemm_hdr *hdr, bool has_c, const gp_limits *limits,
                         gp_error *err) {
  int rc;
  if ((unsigned)hdr->dtype >= GP_DTYPE_COUNT)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "dtype: unknown");
  if ((rc = check_dim("m", hdr->m, limits->max_dim, err)) != GP_OK ||
      (rc = check_dim("n", hdr->n, limits->max_dim, err)) != GP_OK ||
      (rc = check_dim("k", hdr->k, limits->max_dim, err)) != GP_OK ||
      (rc = check_dim("batch", hdr->batch, limits->max_batch, err)) != GP_OK)
    return rc;
  if (hdr->dtype == GP_DTYPE_I32)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "dtype: i32 is a result dtype only (an i8 gemm returns i32)");
  if (!isfinite(hdr->alpha))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "alpha: must be finite");
  if (!isfinite(hdr->beta))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "beta: must be finite");
  if (gp_dtype_is_int(hdr->dtype) && (rc = check_int_gemm(hdr, err)) != GP_OK)
    return rc;
  if ((rc = check_scales(hdr, err)) != GP_OK || (rc = check_complex(hdr, err)) != GP_OK ||
      (rc = check_ld(hdr, err)) != GP_OK)
    return rc;
  if (!gp_gemm_beta_zero(hdr) && !has_c)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "c: required when beta != 0");
  if (hdr->bias && (hdr->beta == 0.0 || !has_c))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "bias: needs c (the bias row of n elements) and beta != 0 (beta scales "
                        "it: send 1)");
  if ((unsigned)hdr->activation >= GP_ACT_COUNT)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "activation: unknown");
  if (hdr->has_out_dtype && (unsigned)hdr->out_dtype >= GP_DTYPE_COUNT)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "out_dtype: unknown");
  if (!gp_dtype_cast_ok(hdr->dtype, gp_gemm_out_dtype(hdr)))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT,
                        "out_dtype: a %s gemm cannot return %s (an f32, f64, e4m3 or e5m2 "
                        "gemm's result may be cast to f16 or bf16; an i8 gemm returns i32; a "
                        "complex gemm its own dtype)",
                        gp_dtype_name(hdr->dtype), gp_dtype_name(hdr->out_dtype));
  if ((rc = check_work(hdr, limits, err)) != GP_OK ||
      (rc = check_operands(hdr, has_c, limits, err)) != GP_OK)
    return rc;
  gp_error_clear(err);
  return GP_OK;
}

bool gp_put_bytes(const gp_put_hdr *hdr, uint64_t *bytes) {
  uint64_t n;
  if (!mul_u64(hdr->rows, hdr->cols, &n) || !mul_u64(n, hdr->batch, &n) ||
      !mul_u64(n, gp_dtype_size(hdr->dtype), &n))
    return false;
  *bytes = n;
  return true;
}

int gp_put_hdr_validate(const gp_put_hdr *hdr, const gp_limits *limits, gp_error *err) {
  int rc;
  if ((unsigned)hdr->dtype >= GP_DTYPE_COUNT)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "dtype: unknown");
  if ((rc = check_dim("rows", hdr->rows, limits->max_dim, err)) != GP_OK ||
      (rc = check_dim("cols", hdr->cols, limits->max_dim, err)) != GP_OK ||
      (rc = check_dim("batch", hdr->batch, limits->max_batch, err)) != GP_OK)
    return rc;
  uint64_t max_operand = limits->max_operand_bytes;
  if (max_operand > UINT32_MAX)
    max_operand = UINT32_MAX; /* a msgpack bin holds at most 2^32-1 bytes */
  uint64_t bytes;
  if (!gp_put_bytes(hdr, &bytes) || bytes > max_operand)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "data: over the limit of %llu bytes",
                        (unsigned long long)max_operand);
  gp_error_clear(err);
  return GP_OK;
}
