/*
 * gp_types.h - the values wire protocol v1 carries: dtypes, methods, the gemm
 * request header, the gemm reply header, and the limits every untrusted length
 * is checked against. Pure C11; no I/O.
 */
#ifndef GP_TYPES_H
#define GP_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_error.h"

#define GP_PROTOCOL_VERSION 1

typedef enum {
  GP_DTYPE_F32 = 0,
  GP_DTYPE_F64 = 1,
  GP_DTYPE_F16 = 2,
  GP_DTYPE_BF16 = 3,
  GP_DTYPE_I8 = 4,  /* an integer gemm's operands: its result (and c) is i32 */
  GP_DTYPE_I32 = 5, /* a result dtype only (and a resident c's): no gemm takes i32 operands */
  GP_DTYPE_E4M3 = 6, /* OCP fp8 E4M3 (no inf): a scaled gemm's operands, its result f32 */
  GP_DTYPE_E5M2 = 7, /* OCP fp8 E5M2 (IEEE-like, with inf): likewise */
  GP_DTYPE_C64 = 8,  /* complex: two f32, re then im (NumPy's complex64) */
  GP_DTYPE_C128 = 9, /* complex: two f64 (NumPy's complex128) */
} gp_dtype;
#define GP_DTYPE_COUNT 10
/* The wire names in order, for the messages that list them. */
#define GP_DTYPE_NAMES "f32, f64, f16, bf16, i8, i32, e4m3, e5m2, c64, c128"

/* Bytes per element (4, 8, 2, 2, 1, 4, 1, 1, 8, 16). */
size_t gp_dtype_size(gp_dtype dtype);
/* Wire name: "f32", "f64", "f16", "bf16", "i8", "i32", "e4m3", "e5m2", "c64", "c128". */
const char *gp_dtype_name(gp_dtype dtype);
/* Parses a wire name of len bytes; 0 on success, GP_E_INVALID_ARGUMENT otherwise. */
int gp_dtype_from_name(const char *name, size_t len, gp_dtype *out);

typedef enum {
  GP_PRECISION_EXACT = 0, /* f32 runs in f32 (SIMT) */
  GP_PRECISION_FAST = 1,  /* f32 may run on TF32 tensor cores */
} gp_precision;
const char *gp_precision_name(gp_precision p);
int gp_precision_from_name(const char *name, size_t len, gp_precision *out);

typedef enum {
  GP_METHOD_UNKNOWN = 0,
  GP_METHOD_GEMM,
  GP_METHOD_PING,
  GP_METHOD_INFO,
  GP_METHOD_STATS,
  GP_METHOD_SHM_REGISTER,   /* [size], with a memfd over SCM_RIGHTS (Unix sockets only) */
  GP_METHOD_SHM_UNREGISTER, /* [region] */
  GP_METHOD_AUTH,           /* [token] */
  GP_METHOD_PUT,            /* [put_hdr, data]: a resident operand; answers {"handle": N} */
  GP_METHOD_FREE,           /* [handle] */
  GP_METHOD_CUDA_REGISTER,  /* [{"handle", "pci_bus_id", "bytes"(, "device")}] (Unix only) */
} gp_method;
#define GP_METHOD_LAST GP_METHOD_CUDA_REGISTER
/* "gemm", "ping", "info", "stats", "shm_register", "shm_unregister", "auth", "put", "free",
 * "cuda_register"; NULL for GP_METHOD_UNKNOWN. */
const char *gp_method_name(gp_method m);
gp_method gp_method_from_name(const char *name, size_t len);

/* The longest token `auth` compares: the decoder keeps this many bytes of the token; a longer
 * one can never match. */
#define GP_AUTH_TOKEN_MAX 256

/* cuda_register's params: a CUDA IPC memory handle (cudaIpcGetMemHandle's 64 bytes), the PCI
 * bus id of its device as cudaDeviceGetPCIBusId writes it ("0000:3b:00.0"), the bytes the
 * client says the allocation holds, and its CUDA ordinal as the client sees it (-1: not sent;
 * informational only: ordinals differ between processes). */
#define GP_CUDA_IPC_HANDLE_BYTES 64
#define GP_CUDA_BUS_ID_MAX 32
typedef struct {
  uint8_t handle[GP_CUDA_IPC_HANDLE_BYTES];
  char pci_bus_id[GP_CUDA_BUS_ID_MAX]; /* NUL-terminated */
  uint64_t bytes;
  int64_t device;
} gp_cuda_reg;

/* The epilogue's activation, applied to every element of the result last. GELU is the erf
 * form, 0.5 x (1 + erf(x / sqrt 2)); gelu_tanh the tanh approximation. */
typedef enum {
  GP_ACT_NONE = 0,
  GP_ACT_RELU = 1,
  GP_ACT_GELU = 2,
  GP_ACT_GELU_TANH = 3,
} gp_act;
#define GP_ACT_COUNT 4
/* "none", "relu", "gelu", "gelu_tanh" */
const char *gp_act_name(gp_act act);
int gp_act_from_name(const char *name, size_t len, gp_act *out);

typedef enum { GP_OPERAND_A = 0, GP_OPERAND_B = 1, GP_OPERAND_C = 2 } gp_operand;
/* "a", "b", "c" */
const char *gp_operand_name(gp_operand op);

/*
 * The gemm request header: C = alpha * op(A) * op(B) + beta * C, `batch`
 * problems back to back, row-major. op(A) is m x k (A stored k x m when
 * trans_a), op(B) is k x n (B stored n x k when trans_b), C is m x n.
 */
typedef struct {
  uint64_t m, n, k;         /* required, >= 1 */
  gp_dtype dtype;           /* required */
  bool trans_a, trans_b;    /* default false */
  double alpha, beta;       /* default 1.0, 0.0 */
  uint64_t batch;           /* default 1 */
  gp_precision precision;   /* default exact */
  bool has_timeout;         /* timeout_ms was sent */
  uint64_t timeout_ms;      /* reply DEADLINE_EXCEEDED if not started within this */
  bool has_out;             /* "out": the result goes into a shared-memory region */
  uint64_t out_region, out_offset;
  bool broadcast_b;         /* "broadcast_b": B is one matrix used by every batch entry */
  bool bias;                /* "bias": c is one row of n elements, added (times beta) to
                               every row of every batch entry's product */
  gp_act activation;        /* "activation": applied to each result element last */
  bool has_out_dtype;       /* "out_dtype" was sent */
  gp_dtype out_dtype;       /* the result's dtype (and c's): f16 or bf16 from an f32 or f64
                               gemm, rounded once at the end; read it with gp_gemm_out_dtype */
  double scale_a, scale_b;  /* "scale_a", "scale_b": an fp8 gemm's per-tensor scales (default
                               1.0), multiplying the product as alpha does: gp_gemm_alpha */
  double alpha_im, beta_im; /* "alpha_im", "beta_im": the imaginary parts of a complex gemm's
                               alpha and beta (default 0) */
  bool conj_a, conj_b;      /* "conj_a", "conj_b": a complex gemm conjugates op(A) / op(B) */
  uint64_t ld[3];           /* "lda", "ldb", "ldc" (indexed by gp_operand): elements from one
                               stored row of the operand to the next, for operands in place in
                               a region (ldc: c and the result); 0: packed (the row length) */
} gp_gemm_hdr;

/* Fills in the defaults; m, n, k are 0 and dtype f32 until set. */
void gp_gemm_hdr_init(gp_gemm_hdr *hdr);

/* The dtype a gemm of dtype returns uncast: i32 for i8 (32-bit accumulation), f32 for the fp8
 * dtypes, else dtype. */
gp_dtype gp_dtype_result(gp_dtype dtype);
/* True for e4m3 and e5m2: operands that take per-tensor scales, accumulated in f32. */
bool gp_dtype_is_fp8(gp_dtype dtype);
/* What multiplies op(A) * op(B): alpha * scale_a * scale_b (the scales are 1 but for fp8). */
double gp_gemm_alpha(const gp_gemm_hdr *hdr);
/* True for the integer gemm (i8): alpha and beta are integers, the arithmetic 32-bit two's
 * complement (wrapping), and the epilogue ReLU at most. */
bool gp_dtype_is_int(gp_dtype dtype);
/* The dtype of C as sent and of the result: out_dtype when sent, else gp_dtype_result. */
gp_dtype gp_gemm_out_dtype(const gp_gemm_hdr *hdr);
/* True for c64 and c128. */
bool gp_dtype_is_complex(gp_dtype dtype);
/* True when beta (both parts for a complex gemm) is 0: C is then not read. */
bool gp_gemm_beta_zero(const gp_gemm_hdr *hdr);
/* The leading dimension of an operand as stored: its ld key when sent, else its row length. */
uint64_t gp_gemm_ld(const gp_gemm_hdr *hdr, gp_operand op);
/* True when any of lda, ldb, ldc was sent. */
bool gp_gemm_has_ld(const gp_gemm_hdr *hdr);
/* True when the result is cast: its dtype is not the one the gemm returns uncast. */
bool gp_gemm_casts(const gp_gemm_hdr *hdr);
/* Whether a gemm of dtype may return out: its uncast result dtype, or f16 / bf16 from f32 /
 * f64 / e4m3 / e5m2. */
bool gp_dtype_cast_ok(gp_dtype dtype, gp_dtype out);

/* Rows and columns of an operand as stored (after the transpose flags; C with bias: 1 x n). */
void gp_gemm_operand_shape(const gp_gemm_hdr *hdr, gp_operand op, uint64_t *rows, uint64_t *cols);
/* How many matrices of that shape the operand holds: the batch, but one for B when broadcast_b
 * and for C's bias row. */
uint64_t gp_gemm_operand_batch(const gp_gemm_hdr *hdr, gp_operand op);

/* Bytes of one operand for all batches: batch * rows * cols * dtype size (B: one matrix
 * when broadcast_b; C: one row of n when bias; C in the out dtype). With a leading dimension
 * ld (gp_gemm_ld), the strided extent: the batch entries' rows are batch * rows rows, ld
 * elements apart, the last of them cols long: ((batch * rows - 1) * ld + cols) * size.
 * Returns false (and leaves *bytes alone) when that overflows uint64_t. */
bool gp_gemm_operand_bytes(const gp_gemm_hdr *hdr, gp_operand op, uint64_t *bytes);

/* Bytes of the result: batch * m * n * out dtype size, whatever c carried in (with ldc the
 * strided extent, as for c); false on overflow. */
bool gp_gemm_result_bytes(const gp_gemm_hdr *hdr, uint64_t *bytes);

/* Floating-point operations of the whole request: 2 * m * n * k * batch (as a double); 8 * m *
 * n * k * batch for a complex gemm (a complex multiply-add is 8 real operations). */
double gp_gemm_flops(const gp_gemm_hdr *hdr);

/* The header of put: a matrix (or batch of them) kept in the daemon and named by a handle in
 * later gemms. Its bytes are batch * rows * cols * dtype size, row-major. */
typedef struct {
  gp_dtype dtype;           /* required */
  uint64_t rows, cols;      /* required, >= 1 */
  uint64_t batch;           /* default 1 */
} gp_put_hdr;

/* Bytes of the put's data; false on overflow. */
bool gp_put_bytes(const gp_put_hdr *hdr, uint64_t *bytes);

/* Where a gemm ran and how long each stage took; sent as the first element of the result. */
#define GP_NAME_MAX 64
typedef struct {
  uint64_t m, n, batch;
  gp_dtype dtype;
  char device[GP_NAME_MAX];  /* "cpu", or "cuda:N" */
  char kernel[GP_NAME_MAX];  /* e.g. "openblas", "tiled16", "cublas" */
  uint64_t queue_us;         /* admitted -> started */
  uint64_t transfer_in_us;   /* payload landed -> inputs on the device (0 on the CPU) */
  uint64_t compute_us;
  uint64_t transfer_out_us;  /* result back in host memory (0 on the CPU) */
} gp_gemm_result_hdr;

/*
 * Limits that every untrusted length is checked against before memory is
 * reserved. The daemon fills them from its config; the client from its own
 * defaults. All are inclusive maxima.
 */
typedef struct {
  uint64_t max_message_bytes;   /* one whole message, payloads included */
  uint32_t max_header_bytes;    /* one message less its streamed bin payloads */
  uint32_t max_depth;           /* nesting of arrays and maps (the envelope is 1; the decoder
                                   honours at most 64) */
  uint32_t max_items;           /* elements of one array, or pairs of one map */
  uint32_t max_string_bytes;    /* one str or non-payload bin */
  uint64_t max_dim;             /* m, n and k each */
  uint64_t max_batch;
  uint64_t max_work;            /* m * n * k * batch */
  uint64_t max_operand_bytes;   /* one of a, b, c; at most UINT32_MAX (msgpack bin32) */
} gp_limits;

/* Defaults: message 3 GiB + 64 KiB, header 64 KiB, depth 8, items 4096, string 4 KiB,
 * dim 65536, batch 65536, work 2^46, operand 1 GiB. */
void gp_limits_default(gp_limits *limits);

/* Semantic checks of a parsed header against limits: dims >= 1, dims, batch and work within
 * limits (overflow-safe), every operand within max_operand_bytes (c too when not sent: the result
 * comes back as a bin of that size) and the payloads sent within max_message_bytes, has_c
 * required when beta != 0, alpha and beta finite. On failure fills err
 * with GP_E_INVALID_ARGUMENT (or GP_E_RESOURCE_EXHAUSTED for a size over a limit) naming the
 * field, and returns the code. */
int gp_gemm_hdr_validate(const gp_gemm_hdr *hdr, bool has_c, const gp_limits *limits, gp_error *err);

/* Dims within max_dim, batch within max_batch, bytes within max_operand_bytes (and bin32).
 * GP_OK, or the code with err naming the field. */
int gp_put_hdr_validate(const gp_put_hdr *hdr, const gp_limits *limits, gp_error *err);

#endif /* GP_TYPES_H */
