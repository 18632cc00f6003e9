/*
 * gb_internal.h - what the files of libgemmd_blas share: the settings read from the
 * environment, the CPU BLAS found at run time, the connections to gemmd, and the one gemm
 * that every entry point (Fortran, CBLAS, batched) ends in. Names gb_, hidden.
 */
#ifndef GB_INTERNAL_H
#define GB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gemmclient.h"

#define GB_API __attribute__((visibility("default")))

/* ---- settings (gb_env.c): read once, from the environment ---------------- */
typedef struct {
  const char *address;       /* GEMMD_ADDRESS; NULL: libgemmclient's default */
  double offload_min;        /* GEMMD_BLAS_OFFLOAD_MIN: the smallest m*n*k sent */
  gc_precision precision;    /* GEMMD_BLAS_PRECISION: exact (default) or fast */
  int stats;                 /* GEMMD_BLAS_STATS=1 */
  int strict;                /* GEMMD_BLAS_STRICT=1 */
  int64_t connect_timeout_ms; /* GEMMD_BLAS_CONNECT_TIMEOUT_MS */
  int64_t call_timeout_ms;   /* GEMMD_BLAS_TIMEOUT_MS */
  int64_t retry_ms;          /* GEMMD_BLAS_RETRY_MS: no new connect for this long after a failure */
  const char *cpu_library;   /* GEMMD_BLAS_CPU_LIBRARY; NULL: RTLD_NEXT, then the defaults */
} gb_settings;
const gb_settings *gb_env(void);

/* ---- the CPU BLAS (gb_cpu.c) -------------------------------------------- */
/* The CPU BLAS's function name (never one of ours); aborts with a message when no CPU BLAS
 * has it (a program calling a BLAS function that no BLAS provides). */
void *gb_cpu_sym(const char *name);

/* ---- gemmd (gb_remote.c) ------------------------------------------------ */
/* A connection for this thread's call (NULL: gemmd is not reachable now, or backing off
 * after a failure); give it back with gb_remote_put, or gb_remote_fail on failure. */
gc_conn *gb_remote_get(void);
void gb_remote_put(gc_conn *conn);
/* The call failed: the connection is closed, one warning goes to stderr (or the process
 * ends under GEMMD_BLAS_STRICT=1), and no new connection is tried for retry_ms. */
void gb_remote_fail(gc_conn *conn, int code, const char *what);

/* ---- counters (gb_stats.c) ----------------------------------------------- */
void gb_stats_count(int offloaded, double flops);

/* ---- the gemm (gb_gemm.c) ------------------------------------------------ */
/* One BLAS gemm type: s, d, c, z. remote_dtype < 0 would keep it on the CPU. */
typedef struct {
  const char *f77;      /* the CPU BLAS's routine: "sgemm_" */
  const char *xname;    /* xerbla's name: "SGEMM " */
  const char *cblas;    /* "cblas_sgemm" */
  size_t esize;         /* bytes of one element */
  int complex;
  int remote_dtype;     /* a gc_dtype, or -1 */
} gb_kind;
extern const gb_kind gb_kind_s, gb_kind_d, gb_kind_c, gb_kind_z;

/* The reference's argument check in its order: 0, or the position (in the Fortran routine's
 * arguments) of the first bad one. */
int gb_gemm_check(char transa, char transb, int m, int n, int k, int lda, int ldb, int ldc);
/* Column-major C = alpha op(A) op(B) + beta C with arguments already checked, alpha and beta
 * pointing to one element (two reals for complex). */
void gb_gemm(const gb_kind *kd, char transa, char transb, int m, int n, int k, const void *alpha,
             const void *a, int lda, const void *b, int ldb, const void *beta, void *c, int ldc);

/* The reference's Fortran error handler (the program's own, when it has one). */
void xerbla_(const char *name, const int *info, size_t len);

#endif
