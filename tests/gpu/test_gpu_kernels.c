/*
 * test_gpu_kernels.c - every registered GPU kernel, every dtype it supports,
 * against a float64 CPU reference and against cuBLAS.
 *
 *   test_gpu_kernels [--quick] [--seed N] [--kernel NAME] [--bench [--size N]] [--registry]
 *                    [--probe] [--f32x3] [--f64]
 *
 * Default: the full matrix (sizes 1 to 2048^3, plus 8192^3 f32 and bf16
 * against cuBLAS only), all four transpose combinations, plain and with
 * alpha/beta/C/batch 3. Inputs are fresh random numbers (the seed is printed
 * first; --seed repeats a run). Outputs are poisoned with NaN when beta == 0,
 * so an element a kernel never writes fails the check.
 *   --quick     small shapes only, no cuBLAS: the compute-sanitizer mode.
 *   --kernel    test only that kernel (cuBLAS still gives the comparison).
 *   --bench     times every kernel at --size (default 4096) per dtype with CUDA
 *               events (median of 10 after 2 warm-ups) beside cuBLAS.
 *   --registry  checks the registry and selector; needs no GPU.
 *   --probe     only says whether a CUDA device is there (exit 0 or 77).
 *   --f32x3     only kernel 21's section (wgmma_f32x3: its shapes, IEEE specials and, unless
 *               --quick, the accuracy table against cuBLAS's SGEMM), which the full run has too.
 *   --f64       only kernel 22's section (dmma_f64_tma: f64 shapes with even leading
 *               dimensions, every transpose, alpha/beta, batches, on the registered kernels
 *               and on each of 22's configurations), which the full run has too.
 * The complex gemm (c64, c128: gk_gpu_gemm over the real kernels) runs every trans / conj
 * combination with complex alpha and beta against zgemm (float64 complex) and, where cuBLAS has
 * the op (conj only with trans), cublasCgemm / cublasZgemm.
 * A case with no result after 300 s (a kernel that never returns; GEMMD_TEST_CASE_TIMEOUT sets
 * the seconds, 0 none) is named on stderr, exit 1.
 * Exit: 0 all passed, 1 a failure, 77 no CUDA device (ctest SKIP_RETURN_CODE).
 */
#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gk_gpu.h"
#include "gp_fp8.h"
#include "gp_half.h"

#define SKIP_CODE 77
#define REF64_MAX_WORK (1200LL * 1000 * 1200 * 3) /* m*n*k*batch up to which the CPU reference runs */

/* ---- small helpers ------------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng_next(void) /* splitmix64 */
{
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static double rng_uniform(void) { return (double)(rng_next() >> 11) * 0x1.0p-52 - 1.0; }

static size_t dtype_size(gk_dtype t) { return t == GK_F64 ? 8 : t == GK_F32 ? 4 : 2; }

static const char *dtype_label(gk_dtype t, bool fast)
{
  switch (t) {
  case GK_F32: return fast ? "f32fast" : "f32";
  case GK_F64: return "f64";
  case GK_F16: return "f16";
  case GK_BF16: return "bf16";
  case GK_I8: return "i8";
  case GK_I32: return "i32";
  case GK_E4M3: return "e4m3";
  case GK_E5M2: return "e5m2";
  case GK_C64: return fast ? "c64fast" : "c64";
  case GK_C128: return "c128";
  }
  return "?";
}

static double load(const void *buf, gk_dtype t, int64_t i)
{
  switch (t) {
  case GK_F32: return ((const float *)buf)[i];
  case GK_F64: return ((const double *)buf)[i];
  case GK_F16: return gp_f16_to_f32(((const uint16_t *)buf)[i]);
  case GK_BF16: return gp_bf16_to_f32(((const uint16_t *)buf)[i]);
  case GK_I8: return ((const int8_t *)buf)[i];
  case GK_I32: return ((const int32_t *)buf)[i];
  case GK_E4M3: return gp_e4m3_to_f32(((const uint8_t *)buf)[i]);
  case GK_E5M2: return gp_e5m2_to_f32(((const uint8_t *)buf)[i]);
  case GK_C64:
  case GK_C128: break; /* run_complex has its own */
  }
  return NAN;
}

static void fill_random(void *buf, gk_dtype t, int64_t count)
{
  for (int64_t i = 0; i < count; i++) {
    const double v = rng_uniform();
    switch (t) {
    case GK_F32: ((float *)buf)[i] = (float)v; break;
    case GK_F64: ((double *)buf)[i] = v; break;
    case GK_F16: ((uint16_t *)buf)[i] = gp_f32_to_f16((float)v); break;
    case GK_BF16: ((uint16_t *)buf)[i] = gp_f32_to_bf16((float)v); break;
    case GK_I8: ((int8_t *)buf)[i] = (int8_t)(rng_next() >> 56); break;
    case GK_I32: ((int32_t *)buf)[i] = (int32_t)(rng_next() >> 32); break;
    case GK_E4M3: ((uint8_t *)buf)[i] = gp_f64_to_e4m3(2 * v); break; /* e4m3 subnormals too */
    case GK_E5M2: ((uint8_t *)buf)[i] = gp_f64_to_e5m2(2 * v); break;
    case GK_C64:
    case GK_C128: break; /* fill_complex: as their parts */
    }
  }
}

static void *xmalloc(size_t bytes)
{
  void *p = malloc(bytes ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "FATAL: out of host memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

#define CUDA_OR_DIE(call)                                                                          \
  do {                                                                                             \
    cudaError_t err_ = (call);                                                                     \
    if (err_ != cudaSuccess) {                                                                     \
      fprintf(stderr, "FATAL: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* ---- the watchdog -------------------------------------------------------------------------- */

/* A case still running after watch_timeout_s seconds is taken for a hang (a kernel that never
 * returns: CUDA has no timeout of its own) and named on stderr before the test exits 1, where
 * ctest's timeout would only kill it and leave the log at the last case that passed. The slowest
 * case takes seconds on an H200, its CPU reference included; the default leaves room for the
 * sanitizers (--quick) and still fires before gpu-run.sh's 420 s per test.
 * GEMMD_TEST_CASE_TIMEOUT (seconds, 0: none) sets it. */
static unsigned watch_timeout_s = 300;
static char watch_label[240];
static size_t watch_len;

static void watchdog_fired(int sig)
{
  (void)sig;
  static const char head[] = "\nFATAL: a case still running (a kernel that never returns?) after ";
  ssize_t ignored = write(STDERR_FILENO, head, sizeof(head) - 1);
  ignored = write(STDERR_FILENO, watch_label, watch_len);
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
  _exit(1);
}

/* The case about to run, for the watchdog; restarts its clock. */
static void watch(const char *fmt, ...)
{
  if (watch_timeout_s == 0)
    return;
  alarm(0);
  const int head = snprintf(watch_label, sizeof(watch_label), "%u s: ", watch_timeout_s);
  va_list ap;
  va_start(ap, fmt);
  const int len = head + vsnprintf(watch_label + head, sizeof(watch_label) - (size_t)head, fmt, ap);
  va_end(ap);
  watch_len = (size_t)len < sizeof(watch_label) ? (size_t)len : sizeof(watch_label) - 1;
  signal(SIGALRM, watchdog_fired);
  alarm(watch_timeout_s);
}

/* ---- one case ------------------------------------------------------------------------------ */

typedef struct {
  gk_dtype dtype;
  bool fast;
  int64_t m, n, k, batch;
  bool trans_a, trans_b;
  double alpha, beta;
  bool ref64;     /* compare against the float64 CPU reference */
  bool vs_cublas; /* compare against cuBLAS */
} test_case;

typedef struct {
  gk_gpu_ctx *ctx;
  cudaStream_t stream;
  const char *only_kernel; /* --kernel, or NULL */
  /* unregistered kernels run_case runs beside the registered ones (NULL-terminated; NULL: none),
   * under --kernel those whose names extend it: 22's configurations one by one in --f64 */
  const gk_kernel *const *extra;
  bool use_cublas;
  int cases, failures;
} test_env;

/* The watchdog's name for a case of `section`. */
static void watch_case(const char *section, const test_case *tc)
{
  watch("%s %s %lldx%lldx%lld b%lld %s%s a=%g b=%g", section, dtype_label(tc->dtype, tc->fast),
        (long long)tc->m, (long long)tc->n, (long long)tc->k, (long long)tc->batch,
        tc->trans_a ? "T" : "N", tc->trans_b ? "T" : "N", tc->alpha, tc->beta);
}

static double tolerance(const test_case *tc)
{
  switch (tc->dtype) {
  case GK_I8:
  case GK_I32: return 0; /* exact */
  case GK_E4M3:
  case GK_E5M2: return 0x1p-9; /* of each element's magnitude: fp8 tensor-core sums */
  case GK_F64: return 1e-12;
  case GK_F32: return tc->fast ? 5e-3 : 1e-5 * fmax(1.0, sqrt((double)tc->k / 1024.0));
  case GK_F16: return 5e-3;
  case GK_BF16: return 2e-2;
  case GK_C64:
  case GK_C128: break; /* run_complex_case has its own */
  }
  return 0;
}

/* Elements of out that are NaN or infinite: a kernel must write every element, finitely. */
static int64_t count_nonfinite(const void *out, gk_dtype t, int64_t count)
{
  int64_t bad = 0;
  for (int64_t i = 0; i < count; i++)
    bad += !isfinite(load(out, t, i));
  return bad;
}

/* ||out - ref|| / ||ref|| over count elements, non-finite outputs left out (they fail on their
 * own). ref is either float64 (ref64) or a buffer of the same dtype (ref_t). */
static double rel_error(const void *out, gk_dtype t, const double *ref64, const void *ref_t,
                        int64_t count)
{
  double num = 0, den = 0;
  for (int64_t i = 0; i < count; i++) {
    const double o = load(out, t, i);
    const double r = ref64 ? ref64[i] : load(ref_t, t, i);
    if (!isfinite(o))
      continue;
    num += (o - r) * (o - r);
    den += r * r;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* C64 = alpha op(A) op(B) + beta C64 in float64, through OpenBLAS on upcast inputs; with
 * magnitude, of every value's absolute value instead (|alpha| |op(A)| |op(B)| + |beta| |C0|: the
 * scale of each element's rounding errors). */
static double *reference64_of(const test_case *tc, const void *a, const void *b, const void *c0,
                              bool magnitude)
{
  const int64_t ae = tc->m * tc->k, be = tc->k * tc->n, ce = tc->m * tc->n;
  double *a64 = xmalloc((size_t)(ae * tc->batch) * sizeof(double));
  double *b64 = xmalloc((size_t)(be * tc->batch) * sizeof(double));
  double *c64 = xmalloc((size_t)(ce * tc->batch) * sizeof(double));
  for (int64_t i = 0; i < ae * tc->batch; i++)
    a64[i] = load(a, tc->dtype, i);
  for (int64_t i = 0; i < be * tc->batch; i++)
    b64[i] = load(b, tc->dtype, i);
  for (int64_t i = 0; i < ce * tc->batch; i++)
    c64[i] = c0 ? load(c0, gk_dtype_result(tc->dtype), i) : 0.0;
  if (magnitude) {
    for (int64_t i = 0; i < ae * tc->batch; i++)
      a64[i] = fabs(a64[i]);
    for (int64_t i = 0; i < be * tc->batch; i++)
      b64[i] = fabs(b64[i]);
    for (int64_t i = 0; i < ce * tc->batch; i++)
      c64[i] = fabs(c64[i]);
  }
  const double alpha = magnitude ? fabs(tc->alpha) : tc->alpha;
  for (int64_t z = 0; z < tc->batch; z++)
    cblas_dgemm(CblasRowMajor, tc->trans_a ? CblasTrans : CblasNoTrans,
                tc->trans_b ? CblasTrans : CblasNoTrans, (int)tc->m, (int)tc->n, (int)tc->k,
                alpha, a64 + z * ae, (int)(tc->trans_a ? tc->m : tc->k), b64 + z * be,
                (int)(tc->trans_b ? tc->k : tc->n), magnitude ? fabs(tc->beta) : tc->beta,
                c64 + z * ce, (int)tc->n);
  free(a64);
  free(b64);
  return c64;
}

static double *reference64(const test_case *tc, const void *a, const void *b, const void *c0)
{
  return reference64_of(tc, a, b, c0, false);
}

/* max |out - ref| / mag over the finite outputs: each element's error against the scale of its
 * own rounding errors, where a normwise error would flag a small problem whose few results
 * cancel (1 x 1 x 1: one element near 0). */
static double scaled_error(const void *out, gk_dtype t, const double *ref, const double *mag,
                           int64_t count)
{
  double worst = 0;
  for (int64_t i = 0; i < count; i++) {
    const double o = load(out, t, i);
    if (isfinite(o) && mag[i] > 0)
      worst = fmax(worst, fabs(o - ref[i]) / mag[i]);
  }
  return worst;
}

/* p through gk_gpu_gemm ("auto"), then its C (c_bytes) to out; the first error. */
static cudaError_t run_auto(test_env *env, const gk_problem *p, void *out, size_t c_bytes,
                            const gk_kernel **used)
{
  cudaError_t err = gk_gpu_gemm(env->ctx, p, "auto", env->stream, used);
  if (err == cudaSuccess)
    err = cudaStreamSynchronize(env->stream);
  if (err == cudaSuccess)
    err = cudaMemcpy(out, p->c, c_bytes, cudaMemcpyDeviceToHost);
  return err;
}

/* p on `kernel` as it is, or (NULL) through gk_gpu_gemm "auto"; C's first c_bytes back to out
 * and the kernel that ran into *used. */
static cudaError_t run_on(test_env *env, const gk_kernel *kernel, const gk_problem *p, void *out,
                          size_t c_bytes, const gk_kernel **used)
{
  if (kernel == NULL)
    return run_auto(env, p, out, c_bytes, used);
  *used = kernel;
  cudaError_t err = kernel->launch(env->ctx, p, env->stream);
  if (err == cudaSuccess)
    err = cudaStreamSynchronize(env->stream);
  if (err == cudaSuccess)
    err = cudaMemcpy(out, p->c, c_bytes, cudaMemcpyDeviceToHost);
  return err;
}

/* Runs one kernel into d_c (poisoned or reset to C0 first) and brings the result back to out.
 * Returns the launch or execution error. */
static cudaError_t run_kernel(test_env *env, const gk_kernel *kernel, const gk_problem *p,
                              const void *d_c0, size_t c_bytes, void *out)
{
  if (p->beta != 0.0)
    CUDA_OR_DIE(cudaMemcpyAsync(p->c, d_c0, c_bytes, cudaMemcpyDeviceToDevice, env->stream));
  else /* all-ones bytes are NaN in every dtype: an unwritten element cannot pass */
    CUDA_OR_DIE(cudaMemsetAsync(p->c, 0xFF, c_bytes, env->stream));
  const gk_kernel *used = NULL;
  return run_on(env, kernel, p, out, c_bytes, &used);
}

static void print_result(test_env *env, const test_case *tc, const char *kernel, double err64,
                         double errcb, int64_t bad, const char *failure)
{
  const double tol = tolerance(tc);
  const bool ok = failure == NULL && bad == 0 && !(err64 > tol) && !(errcb > tol);
  char e64[32] = "-", ecb[32] = "-";
  if (err64 >= 0)
    snprintf(e64, sizeof(e64), "%.2e", err64);
  if (errcb >= 0)
    snprintf(ecb, sizeof(ecb), "%.2e", errcb);
  printf("%-14s %-7s %5lldx%-5lldx%-5lld b%-2lld %s%s a=%-5g b=%-5g  vs_f64 %-9s vs_cublas %-9s tol %.0e "
         "%s%s%s\n",
         kernel, dtype_label(tc->dtype, tc->fast), (long long)tc->m, (long long)tc->n,
         (long long)tc->k, (long long)tc->batch, tc->trans_a ? "T" : "N", tc->trans_b ? "T" : "N",
         tc->alpha, tc->beta, e64, ecb, tol, ok ? "PASS" : "FAIL", failure ? ": " : "",
         failure ? failure : "");
  if (bad > 0)
    printf("    %lld non-finite outputs\n", (long long)bad);
  env->cases++;
  if (!ok)
    env->failures++;
  fflush(stdout);
}

/* One kernel on p (tc's case) into its poisoned or reset C, checked against the float64
 * reference ref and cuBLAS's output cb (either may be NULL); out: C's host copy. */
static void check_kernel(test_env *env, const test_case *tc, const gk_kernel *kernel,
                         const gk_problem *p, const void *d_c0, void *out, const double *ref,
                         const void *cb)
{
  const int64_t c_elems = tc->m * tc->n * tc->batch;
  const size_t c_bytes = (size_t)c_elems * dtype_size(tc->dtype);
  watch_case(kernel->name, tc);
  const cudaError_t err = run_kernel(env, kernel, p, d_c0, c_bytes, out);
  if (err != cudaSuccess) {
    print_result(env, tc, kernel->name, -1, -1, 0, cudaGetErrorString(err));
    if (cudaGetLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
      fprintf(stderr, "FATAL: sticky device error after %s; stopping\n", kernel->name);
      exit(1);
    }
    return;
  }
  const double e64 = ref ? rel_error(out, tc->dtype, ref, NULL, c_elems) : -1;
  const double ecb = cb ? rel_error(out, tc->dtype, NULL, cb, c_elems) : -1;
  print_result(env, tc, kernel->name, e64, ecb, count_nonfinite(out, tc->dtype, c_elems), NULL);
}

static void run_case(test_env *env, const test_case *tc)
{
  watch_case("case", tc);
  const size_t es = dtype_size(tc->dtype);
  const int64_t a_elems = tc->m * tc->k * tc->batch, b_elems = tc->k * tc->n * tc->batch;
  const int64_t c_elems = tc->m * tc->n * tc->batch;
  const size_t a_bytes = (size_t)a_elems * es, b_bytes = (size_t)b_elems * es;
  const size_t c_bytes = (size_t)c_elems * es;

  void *a = xmalloc(a_bytes), *b = xmalloc(b_bytes), *c0 = NULL;
  fill_random(a, tc->dtype, a_elems);
  fill_random(b, tc->dtype, b_elems);
  if (tc->beta != 0.0) {
    c0 = xmalloc(c_bytes);
    fill_random(c0, tc->dtype, c_elems);
  }
  double *ref = tc->ref64 ? reference64(tc, a, b, c0) : NULL;

  void *d_a, *d_b, *d_c, *d_c0 = NULL;
  CUDA_OR_DIE(cudaMalloc(&d_a, a_bytes));
  CUDA_OR_DIE(cudaMalloc(&d_b, b_bytes));
  CUDA_OR_DIE(cudaMalloc(&d_c, c_bytes));
  CUDA_OR_DIE(cudaMemcpy(d_a, a, a_bytes, cudaMemcpyHostToDevice));
  CUDA_OR_DIE(cudaMemcpy(d_b, b, b_bytes, cudaMemcpyHostToDevice));
  if (c0 != NULL) {
    CUDA_OR_DIE(cudaMalloc(&d_c0, c_bytes));
    CUDA_OR_DIE(cudaMemcpy(d_c0, c0, c_bytes, cudaMemcpyHostToDevice));
  }
  /* A cudaMemcpy from pageable memory may return before its DMA has landed, and the test's
   * non-blocking stream is not ordered after the legacy default stream: without this wait the
   * first kernel can read a half-uploaded A, B or C (seen on the H200: the first kernel run,
   * cuBLAS, disagreed with float64 on a few beta != 0 cases while every later one agreed). */
  CUDA_OR_DIE(cudaDeviceSynchronize());
  const gk_problem p = {.dtype = tc->dtype, .fast = tc->fast, .trans_a = tc->trans_a,
                        .trans_b = tc->trans_b, .m = tc->m, .n = tc->n, .k = tc->k,
                        .batch = tc->batch, .alpha = tc->alpha, .beta = tc->beta,
                        .a = d_a, .b = d_b, .c = d_c};
  const int cc = gk_gpu_ctx_cc(env->ctx);
  void *out = xmalloc(c_bytes);

  /* cuBLAS first: its output is the second reference. */
  void *cb = NULL;
  if (tc->vs_cublas && env->use_cublas && gk_kernel_cublas.supports(&p, cc)) {
    cb = xmalloc(c_bytes);
    watch_case("cublas", tc);
    const cudaError_t err = run_kernel(env, &gk_kernel_cublas, &p, d_c0, c_bytes, cb);
    if (err != cudaSuccess) {
      print_result(env, tc, "cublas", -1, -1, 0, cudaGetErrorString(err));
      free(cb);
      cb = NULL;
    } else if (env->only_kernel == NULL || strcmp(env->only_kernel, "cublas") == 0) {
      const double e64 = ref ? rel_error(cb, tc->dtype, ref, NULL, c_elems) : -1;
      print_result(env, tc, "cublas", e64, -1, count_nonfinite(cb, tc->dtype, c_elems), NULL);
    }
  }

  size_t count;
  const gk_kernel *const *kernels = gk_kernels(&count);
  for (size_t i = 0; i < count; i++) {
    const gk_kernel *kernel = kernels[i];
    if (kernel == &gk_kernel_cublas || !kernel->supports(&p, cc))
      continue;
    if (env->only_kernel != NULL && strcmp(env->only_kernel, kernel->name) != 0)
      continue;
    check_kernel(env, tc, kernel, &p, d_c0, out, ref, cb);
  }
  for (const gk_kernel *const *x = env->extra; x != NULL && *x != NULL; x++)
    if ((*x)->supports(&p, cc) &&
        (env->only_kernel == NULL || strncmp(env->only_kernel, (*x)->name, strlen(env->only_kernel)) == 0))
      check_kernel(env, tc, *x, &p, d_c0, out, ref, cb);

  CUDA_OR_DIE(cudaFree(d_a));
  CUDA_OR_DIE(cudaFree(d_b));
  CUDA_OR_DIE(cudaFree(d_c));
  if (d_c0)
    CUDA_OR_DIE(cudaFree(d_c0));
  free(a);
  free(b);
  free(c0);
  free(ref);
  free(out);
  free(cb);
}

/* ---- the case matrix ----------------------------------------------------------------------- */

typedef struct {
  gk_dtype dtype;
  bool fast;
} dtype_mode;

static const dtype_mode all_modes[] = {
    {GK_F32, false}, {GK_F32, true}, {GK_F64, false}, {GK_F16, false}, {GK_BF16, false}};
#define MODE_COUNT (sizeof(all_modes) / sizeof(all_modes[0]))

static void run_matrix(test_env *env, bool quick)
{
  static const int64_t small[][3] = {{1, 1, 1}, {7, 7, 7}, {1, 1000, 3}, {33, 17, 65}, {127, 129, 63},
                                     /* rows of 16 bytes in f16/bf16: small shapes the TMA kernels take */
                                     {40, 24, 48}, {9, 16, 24}, {200, 136, 72},
                                     /* f32 split-K over clusters (09): S = 8; S = 3 on 6x6 tiles; 72
                                      * tiles as 66 2-clusters, then 6 8-clusters (two launches) */
                                     {40, 35, 200}, {700, 650, 488}, {1100, 1000, 400}};
  static const int64_t quick_shapes[][3] = {{1, 1, 1}, {7, 7, 7}, {33, 17, 65}, {40, 35, 33}, {40, 24, 48}, {9, 16, 24},
                                            {40, 35, 200}, {33, 17, 123}};
  for (size_t mi = 0; mi < MODE_COUNT; mi++) {
    const dtype_mode mode = all_modes[mi];
    const size_t nshapes = quick ? sizeof(quick_shapes) / sizeof(quick_shapes[0])
                                 : sizeof(small) / sizeof(small[0]);
    for (size_t s = 0; s < nshapes; s++) {
      const int64_t *shape = quick ? quick_shapes[s] : small[s];
      for (int t = 0; t < 4; t++) {
        for (int variant = 0; variant < 2; variant++) {
          test_case tc = {mode.dtype, mode.fast, shape[0], shape[1], shape[2], 1, t & 1, (t >> 1) & 1,
                          1.0, 0.0, true, !quick};
          if (variant == 1) { /* alpha, beta with C, a batch */
            tc.alpha = -0.75;
            tc.beta = 1.5;
            tc.batch = 3;
          }
          run_case(env, &tc);
        }
      }
    }
    if (quick)
      continue;
    /* A mid-sized odd shape (1000 x 800 x 1200): every transpose, then alpha/beta/batch. */
    for (int t = 0; t < 5; t++) {
      test_case tc = {mode.dtype, mode.fast, 1000, 800, 1200, 1, t & 1, (t >> 1) & 1,
                      1.0, 0.0, true, true};
      if (t == 4) {
        tc.trans_a = tc.trans_b = false;
        tc.alpha = 0.5;
        tc.beta = -2.0;
        tc.batch = 3;
      }
      run_case(env, &tc);
    }
    /* 2048^3: against cuBLAS only (a float64 reference would cost 17 GFLOP on the host). */
    for (int t = 0; t < 2; t++) {
      const test_case tc = {mode.dtype, mode.fast, 2048, 2048, 2048, 1, t, t, 1.0, 0.0, false, true};
      run_case(env, &tc);
    }
  }
  { /* more tiles than SMs, so persistent CTAs (15, 16) walk several, the operand ring runs on
     * across tiles and each staging tile is stored from more than once: rows of 16 bytes, odd
     * m and k tails, a batch past the 65535 launch chunk */
    const test_case walks[] = {
        {GK_BF16, false, 24, 16, 8, 200, false, false, -0.75, 1.5, true, true},
        {GK_F32, true, 24, 16, 8, 200, false, false, -0.75, 1.5, true, true}, /* tf32: D = C^T */
        {GK_F32, true, 328, 264, 104, 40, false, true, 0.5, -2.0, true, true},
        {GK_F32, true, 200, 128, 72, 150, true, true, 1.0, 0.0, true, true},
        {GK_F16, false, 328, 264, 104, 40, true, false, 1.0, 0.0, true, true},
        {GK_BF16, false, 328, 264, 104, 40, false, true, 0.5, -2.0, true, true},
        {GK_BF16, false, 200, 128, 72, 150, false, false, 1.0, 0.0, true, true}, /* narrow */
        {GK_F16, false, 24, 16, 8, 66000, true, true, 1.0, 0.0, true, true},
    };
    const size_t count = quick ? 2 : sizeof(walks) / sizeof(walks[0]);
    for (size_t i = 0; i < count; i++)
      run_case(env, &walks[i]);
  }
  if (!quick) { /* past the 65535 limit of grid.y and grid.z: launches split into chunks */
    const test_case chunked[] = {
        {GK_F32, false, 3, 5, 7, 66000, false, true, -0.75, 1.5, true, true},     /* batch */
        {GK_F16, false, 3, 5, 7, 66000, true, false, 1.0, 0.0, true, true},
        {GK_F32, false, 1048577, 1, 2, 1, false, false, 1.0, 0.0, true, true},    /* 65537 row tiles */
        {GK_BF16, false, 1048577, 3, 1, 1, true, false, 1.0, 0.0, true, true},
    };
    for (size_t i = 0; i < sizeof(chunked) / sizeof(chunked[0]); i++)
      run_case(env, &chunked[i]);
  }
  if (!quick) { /* 02's wide tile (two waves of 128 x 256 tiles, k >= 1024): every transpose,
                 * ragged m, n and k, alpha and beta with C; against cuBLAS only */
    for (int t = 0; t < 4; t++) {
      const test_case tc = {GK_F32, false, 2500, 4100, 1030, 1, t & 1, (t >> 1) & 1,
                            t ? -0.75 : 1.0, t ? 1.5 : 0.0, false, true};
      run_case(env, &tc);
    }
  }
  if (!quick) { /* one 8192^3 per dtype for f32 and bf16, against cuBLAS only */
    const gk_dtype big[] = {GK_F32, GK_BF16};
    for (int i = 0; i < 2; i++) {
      const test_case tc = {big[i], false, 8192, 8192, 8192, 1, false, false, 1.0, 0.0, false, true};
      run_case(env, &tc);
    }
  }
}

/* ---- the epilogue (gk_gpu_gemm's passes: gk_epilogue.cu) ------------------------------------ */

/* The activation in double, as PROTOCOL.md defines it. */
static double act_ref(gk_act act, double x)
{
  switch (act) {
  case GK_ACT_RELU: return x < 0.0 ? 0.0 : x;
  case GK_ACT_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
  case GK_ACT_GELU_TANH: return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  default: return x;
  }
}

/* One problem through gk_gpu_gemm (auto) with a bias row and an activation, against float64: the
 * bias in a buffer of its own (one row for every batch entry), or in C's own first row of each
 * entry (bias_stride m * n, as the daemon's small lane places it); C poisoned where not read. */
static void run_epilogue_case(test_env *env, const test_case *tc, gk_act act, int bias_mode)
{
  watch_case("epilogue", tc);
  const size_t es = dtype_size(tc->dtype);
  const int64_t ce = tc->m * tc->n, c_elems = ce * tc->batch;
  const int64_t a_elems = tc->m * tc->k * tc->batch, b_elems = tc->k * tc->n * tc->batch;
  void *a = xmalloc((size_t)a_elems * es), *b = xmalloc((size_t)b_elems * es);
  void *rows = xmalloc((size_t)(tc->n * tc->batch) * es), *c0 = xmalloc((size_t)c_elems * es);
  fill_random(a, tc->dtype, a_elems);
  fill_random(b, tc->dtype, b_elems);
  fill_random(rows, tc->dtype, tc->n * tc->batch);
  memset(c0, 0xFF, (size_t)c_elems * es); /* NaN: what is not the bias must not be read */
  for (int64_t z = 0; z < tc->batch; z++) /* each entry's C starts with its row (bias_mode 2) */
    memcpy((char *)c0 + (size_t)(z * ce) * es, (char *)rows + (size_t)(bias_mode == 2 ? z * tc->n : 0) * es,
           (size_t)tc->n * es);
  /* the reference: C0 = the rows repeated, then act(alpha A B + beta C0) */
  void *full = xmalloc((size_t)c_elems * es);
  for (int64_t z = 0; z < tc->batch; z++)
    for (int64_t i = 0; i < tc->m; i++)
      memcpy((char *)full + (size_t)(z * ce + i * tc->n) * es,
             (char *)rows + (size_t)(bias_mode == 2 ? z * tc->n : 0) * es, (size_t)tc->n * es);
  test_case ref_tc = *tc;
  if (bias_mode == 0)
    ref_tc.beta = 0.0;
  double *ref = reference64(&ref_tc, a, b, bias_mode ? full : NULL);
  for (int64_t i = 0; i < c_elems; i++)
    ref[i] = act_ref(act, ref[i]);

  void *d_a, *d_b, *d_c, *d_row = NULL;
  CUDA_OR_DIE(cudaMalloc(&d_a, (size_t)a_elems * es));
  CUDA_OR_DIE(cudaMalloc(&d_b, (size_t)b_elems * es));
  CUDA_OR_DIE(cudaMalloc(&d_c, (size_t)c_elems * es));
  CUDA_OR_DIE(cudaMemcpy(d_a, a, (size_t)a_elems * es, cudaMemcpyHostToDevice));
  CUDA_OR_DIE(cudaMemcpy(d_b, b, (size_t)b_elems * es, cudaMemcpyHostToDevice));
  CUDA_OR_DIE(cudaMemcpy(d_c, c0, (size_t)c_elems * es, cudaMemcpyHostToDevice));
  if (bias_mode == 1) {
    CUDA_OR_DIE(cudaMalloc(&d_row, (size_t)tc->n * es));
    CUDA_OR_DIE(cudaMemcpy(d_row, rows, (size_t)tc->n * es, cudaMemcpyHostToDevice));
  }
  CUDA_OR_DIE(cudaDeviceSynchronize());
  gk_problem p = {.dtype = tc->dtype, .fast = tc->fast, .trans_a = tc->trans_a,
                  .trans_b = tc->trans_b, .m = tc->m, .n = tc->n, .k = tc->k, .batch = tc->batch,
                  .alpha = tc->alpha, .beta = bias_mode ? tc->beta : 0.0, .a = d_a, .b = d_b,
                  .c = d_c, .act = act};
  if (bias_mode == 1)
    p.bias = d_row; /* bias_stride 0: one row for all */
  else if (bias_mode == 2)
    p.bias = d_c, p.bias_stride = ce;
  const gk_kernel *used = NULL;
  void *out = xmalloc((size_t)c_elems * es);
  cudaError_t err = run_auto(env, &p, out, (size_t)c_elems * es, &used);
  char label[64];
  snprintf(label, sizeof label, "%s+%s/%s", used ? used->name : "?", gk_act_name(act),
           bias_mode == 0 ? "nobias" : bias_mode == 1 ? "bias" : "bias-in-c");
  if (err != cudaSuccess)
    print_result(env, tc, label, -1, -1, 0, cudaGetErrorString(err));
  else
    print_result(env, tc, label, rel_error(out, tc->dtype, ref, NULL, c_elems), -1,
                 count_nonfinite(out, tc->dtype, c_elems), NULL);
  CUDA_OR_DIE(cudaFree(d_a));
  CUDA_OR_DIE(cudaFree(d_b));
  CUDA_OR_DIE(cudaFree(d_c));
  if (d_row)
    CUDA_OR_DIE(cudaFree(d_row));
  free(a), free(b), free(rows), free(c0), free(full), free(ref), free(out);
}

static void run_epilogue(test_env *env)
{
  /* the last two: rows of 16 bytes and more than 128 rows, so that f16/bf16 and TF32 go to the
   * persistent kernels (15, 16), which fuse the epilogue into their store */
  static const int64_t shapes[][4] = {{37, 29, 13, 3}, {64, 64, 64, 5}, {130, 70, 40, 1},
                                      {200, 136, 72, 2}, {264, 128, 100, 3}};
  static const gk_act acts[] = {GK_ACT_RELU, GK_ACT_GELU, GK_ACT_GELU_TANH, GK_ACT_NONE};
  for (size_t mi = 0; mi < MODE_COUNT; mi++)
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
      for (int bias_mode = 0; bias_mode < 3; bias_mode++) {
        const gk_act act = acts[(s + (size_t)bias_mode) % 4];
        if (act == GK_ACT_NONE && bias_mode == 0)
          continue; /* no epilogue: run_matrix's */
        test_case tc = {all_modes[mi].dtype, all_modes[mi].fast, shapes[s][0], shapes[s][1],
                        shapes[s][2], shapes[s][3], s == 1, s == 2, 0.75, 0.5, true, false};
        run_epilogue_case(env, &tc, act, bias_mode);
      }
}

/* ---- the output cast (gk_gpu_gemm's cast passes around the plain problem) ------------------ */

static void *to_device(const void *host, size_t bytes)
{
  void *d;
  CUDA_OR_DIE(cudaMalloc(&d, bytes ? bytes : 1));
  CUDA_OR_DIE(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  return d;
}

/* The out dtype's rounding of x (once, from double). */
static uint16_t round_out(gk_dtype out, double x)
{
  return out == GK_F16 ? gp_f64_to_f16(x) : gp_f64_to_bf16(x);
}

/* One f32 / f64 problem whose C, C0 and bias are f16 / bf16, against float64: each element
 * within the out dtype's tolerance of its magnitude (scaled_error), and for f64 every element the out dtype's rounding of the float64
 * result (a float in between, or a lost rounding, would show). form: 0 beta 0 (C poisoned),
 * 1 beta with C0, 2 a bias row of its own + ReLU, 3 each entry's bias row at its C's start +
 * GELU. */
static void run_cast_case(test_env *env, const test_case *tc, gk_dtype out, int form)
{
  watch_case("cast", tc);
  const size_t es = dtype_size(tc->dtype), os = dtype_size(out);
  const int64_t ce = tc->m * tc->n, c_elems = ce * tc->batch;
  const int64_t a_elems = tc->m * tc->k * tc->batch, b_elems = tc->k * tc->n * tc->batch;
  void *a = xmalloc((size_t)a_elems * es), *b = xmalloc((size_t)b_elems * es);
  uint16_t *c0 = xmalloc((size_t)c_elems * os), *rows = xmalloc((size_t)(tc->n * tc->batch) * os);
  fill_random(a, tc->dtype, a_elems);
  fill_random(b, tc->dtype, b_elems);
  fill_random(rows, out, tc->n * tc->batch);
  if (form == 1)
    fill_random(c0, out, c_elems);
  else
    memset(c0, 0xFF, (size_t)c_elems * os); /* NaN: not read */
  for (int64_t z = 0; form == 3 && z < tc->batch; z++)
    memcpy(c0 + z * ce, rows + z * tc->n, (size_t)tc->n * os);
  /* the reference's C0 in the compute dtype (exact), then act(alpha A B + beta C0) */
  void *wide = xmalloc((size_t)c_elems * es);
  for (int64_t e = 0; e < c_elems; e++) {
    const int64_t z = e / ce, j = e % tc->n;
    const double v = form == 1 ? load(c0, out, e) : form == 2 ? load(rows, out, j)
                                                              : load(rows, out, z * tc->n + j);
    if (tc->dtype == GK_F64)
      ((double *)wide)[e] = v;
    else
      ((float *)wide)[e] = (float)v;
  }
  test_case ref_tc = *tc;
  ref_tc.beta = form == 0 ? 0.0 : form == 1 ? tc->beta : 1.0;
  const gk_act act = form == 2 ? GK_ACT_RELU : form == 3 ? GK_ACT_GELU : GK_ACT_NONE;
  double *ref = reference64(&ref_tc, a, b, form ? wide : NULL);
  double *mag = reference64_of(&ref_tc, a, b, form ? wide : NULL, true);
  for (int64_t i = 0; i < c_elems; i++)
    ref[i] = act_ref(act, ref[i]);

  void *d_a = to_device(a, (size_t)a_elems * es), *d_b = to_device(b, (size_t)b_elems * es);
  void *d_c = to_device(c0, (size_t)c_elems * os), *d_row = to_device(rows, (size_t)tc->n * os);
  void *d_work;
  CUDA_OR_DIE(cudaMalloc(&d_work, (size_t)c_elems * es));
  CUDA_OR_DIE(cudaMemset(d_work, 0xFF, (size_t)c_elems * es));
  CUDA_OR_DIE(cudaDeviceSynchronize()); /* the memset is on the legacy stream, which the test's
                                           non-blocking stream does not wait for */
  gk_problem p = {.dtype = tc->dtype, .fast = tc->fast, .trans_a = tc->trans_a,
                  .trans_b = tc->trans_b, .m = tc->m, .n = tc->n, .k = tc->k, .batch = tc->batch,
                  .alpha = tc->alpha, .beta = ref_tc.beta, .a = d_a, .b = d_b, .c = d_c,
                  .act = act, .cast = true, .out_dtype = out, .work = d_work};
  if (form == 2)
    p.bias = d_row; /* one row for every entry */
  else if (form == 3)
    p.bias = d_c, p.bias_stride = ce;
  const gk_kernel *used = NULL;
  uint16_t *got = xmalloc((size_t)c_elems * os);
  cudaError_t err = run_auto(env, &p, got, (size_t)c_elems * os, &used);
  /* f64: elements not the out dtype's rounding of the float64 result. Not those below 1e-6:
   * GELU's left tail, 0.5 x (1 + erf(x / sqrt 2)) for x < -8, cancels to a few ulps of 1, where
   * the device's erf and libm's may differ by one (k = 520 reaches it) */
  int64_t off = 0;
  for (int64_t i = 0; tc->dtype == GK_F64 && err == cudaSuccess && i < c_elems; i++)
    off += fabs(ref[i]) > 1e-6 && got[i] != round_out(out, ref[i]);
  char label[64], why[96];
  snprintf(label, sizeof label, "%s+%s>%s/%d", used ? used->name : "?",
           dtype_label(tc->dtype, tc->fast), dtype_label(out, false), form);
  snprintf(why, sizeof why, "%lld elements not rounded once from the f64 result",
           (long long)off);
  test_case shown = *tc;
  shown.dtype = out; /* the tolerance of the out dtype */
  if (err != cudaSuccess)
    print_result(env, &shown, label, -1, -1, 0, cudaGetErrorString(err));
  else
    print_result(env, &shown, label, scaled_error(got, out, ref, mag, c_elems), -1,
                 count_nonfinite(got, out, c_elems), off > c_elems / 1000 ? why : NULL);
  CUDA_OR_DIE(cudaFree(d_a));
  CUDA_OR_DIE(cudaFree(d_b));
  CUDA_OR_DIE(cudaFree(d_c));
  CUDA_OR_DIE(cudaFree(d_row));
  CUDA_OR_DIE(cudaFree(d_work));
  free(a), free(b), free(c0), free(rows), free(wide), free(ref), free(mag), free(got);
}

static void run_cast(test_env *env)
{
  /* from the third: rows of whole 16 bytes in f16/bf16 and more than 128 rows, so that TF32
   * reaches 16, which casts in its store (NN and TN, then NT and TT; the fifth on its wide tile
   * and more tiles than SMs); the last two, k > 512, reach 08, which casts in its store too
   * (forms 0 and 1), by four-element groups and, with n % 4 != 0, element by element */
  static const int64_t shapes[][4] = {{1, 1, 1, 1},       {37, 29, 41, 3},    {200, 136, 72, 2},
                                      {264, 128, 100, 3}, {2048, 1024, 64, 2}, {300, 264, 600, 1},
                                      {129, 131, 520, 2}};
  static const gk_dtype outs[] = {GK_F16, GK_BF16};
  for (size_t mi = 0; mi < MODE_COUNT; mi++) {
    if (all_modes[mi].dtype != GK_F32 && all_modes[mi].dtype != GK_F64)
      continue;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
      for (int form = 0; form < 4; form++) {
        test_case tc = {all_modes[mi].dtype, all_modes[mi].fast, shapes[s][0], shapes[s][1],
                        shapes[s][2], shapes[s][3], form & 1, s % 2 == 1, -0.75, 0.5, true, false};
        run_cast_case(env, &tc, outs[(s + (size_t)form) % 2], form);
      }
  }
}

/* ---- the integer gemm (i8 x i8 -> i32, 32-bit wrapping arithmetic) ------------------------- */

/* The exact result of one i8 problem: int64 dot products, alpha and beta wrapped to 32 bits
 * (uint64 arithmetic wraps mod 2^64, so mod 2^32 too), C0 from c0 or the bias rows, ReLU. */
static int32_t *reference_i8(const test_case *tc, const int8_t *a, const int8_t *b,
                             const int32_t *c0, const int32_t *rows, bool relu)
{
  const int64_t m = tc->m, n = tc->n, k = tc->k;
  int32_t *ref = xmalloc((size_t)(m * n * tc->batch) * 4);
  for (int64_t z = 0; z < tc->batch; z++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        int64_t acc = 0;
        for (int64_t l = 0; l < k; l++)
          acc += (int64_t)a[z * m * k + (tc->trans_a ? l * m + i : i * k + l)] *
                 b[z * k * n + (tc->trans_b ? j * k + l : l * n + j)];
        const int64_t e = z * m * n + i * n + j;
        const int32_t from = rows != NULL ? rows[j] : tc->beta != 0.0 ? c0[e] : 0;
        const uint64_t v = (uint64_t)(int64_t)tc->alpha * (uint64_t)acc +
                           (uint64_t)(int64_t)tc->beta * (uint64_t)(int64_t)from;
        const int32_t r = (int32_t)(uint32_t)v;
        ref[e] = relu && r < 0 ? 0 : r;
      }
  return ref;
}

/* One i8 problem on `kernel` (NULL: through gk_gpu_gemm "auto", with form's epilogue), bit for
 * bit against the exact result. form: 0 beta 0 over a poisoned C, 1 beta with C0, 2 a bias
 * row of its own + ReLU, 3 each entry's bias row at its C's start, 4 beta with C0 and one B
 * for every entry (b_shared: gk_gpu_gemm launches pieces, the batch folded into m). */
static void run_i8_case(test_env *env, const test_case *tc, const gk_kernel *kernel, int form)
{
  watch_case(kernel ? kernel->name : "i8 auto", tc);
  const int64_t ce = tc->m * tc->n, c_elems = ce * tc->batch;
  const int64_t a_elems = tc->m * tc->k * tc->batch, b_elems = tc->k * tc->n * tc->batch;
  int8_t *a = xmalloc((size_t)a_elems), *b = xmalloc((size_t)b_elems);
  int32_t *c0 = xmalloc((size_t)c_elems * 4), *rows = xmalloc((size_t)(tc->n * tc->batch) * 4);
  fill_random(a, GK_I8, a_elems);
  fill_random(b, GK_I8, b_elems);
  fill_random(c0, GK_I32, c_elems);
  fill_random(rows, GK_I32, tc->n * tc->batch);
  if (form == 0) /* not read: a pattern no result is likely to equal, in every element */
    memset(c0, 0x5A, (size_t)c_elems * 4);
  const bool shared = form == 4; /* one B for every entry: the reference sees it repeated */
  for (int64_t z = 1; shared && z < tc->batch; z++)
    memcpy(b + z * tc->k * tc->n, b, (size_t)(tc->k * tc->n));
  for (int64_t z = 0; form == 3 && z < tc->batch; z++)
    memcpy(c0 + z * ce, rows + z * tc->n, (size_t)tc->n * 4);
  test_case ref_tc = *tc;
  if (form == 0)
    ref_tc.beta = 0.0;
  int32_t *ref = NULL;
  if (form == 3) { /* each entry its own row */
    ref = xmalloc((size_t)c_elems * 4);
    for (int64_t z = 0; z < tc->batch; z++) {
      test_case one = ref_tc;
      one.batch = 1;
      int32_t *part = reference_i8(&one, a + z * tc->m * tc->k, b + z * tc->k * tc->n, NULL,
                                   rows + z * tc->n, true);
      memcpy(ref + z * ce, part, (size_t)ce * 4);
      free(part);
    }
  } else {
    ref = reference_i8(&ref_tc, a, b, c0, form == 2 ? rows : NULL, form == 2);
  }
  void *d_a = to_device(a, (size_t)a_elems);
  void *d_b = to_device(b, (size_t)(shared ? tc->k * tc->n : b_elems));
  void *d_c = to_device(c0, (size_t)c_elems * 4), *d_row = to_device(rows, (size_t)tc->n * 4);
  CUDA_OR_DIE(cudaDeviceSynchronize());
  gk_problem p = {.dtype = GK_I8, .trans_a = tc->trans_a, .trans_b = tc->trans_b, .m = tc->m,
                  .n = tc->n, .k = tc->k, .batch = tc->batch, .b_shared = shared,
                  .alpha = tc->alpha, .beta = ref_tc.beta, .a = d_a, .b = d_b, .c = d_c,
                  .act = form == 2 || form == 3 ? GK_ACT_RELU : GK_ACT_NONE};
  if (form == 2)
    p.bias = d_row;
  else if (form == 3)
    p.bias = d_c, p.bias_stride = ce;
  int32_t *got = xmalloc((size_t)c_elems * 4);
  const gk_kernel *used = NULL;
  const cudaError_t err = run_on(env, kernel, &p, got, (size_t)c_elems * 4, &used);
  int64_t off = 0;
  for (int64_t i = 0; err == cudaSuccess && i < c_elems; i++)
    off += got[i] != ref[i];
  const bool unsupported = kernel == &gk_kernel_cublas && err == cudaErrorNotSupported;
  /* cuBLAS scales some int8 results in float (H100, 17 x 30 x 100 with alpha 2^31 - 1: every
   * element off): with scalars past 2^24 its answer is not the exact one we check */
  const bool inexact = kernel == &gk_kernel_cublas && err == cudaSuccess && off > 0 &&
                       (fabs(tc->alpha) > 0x1p24 || fabs(tc->beta) > 0x1p24);
  char label[64], why[64];
  snprintf(label, sizeof label, "%s/%d", used ? used->name : "?", form);
  snprintf(why, sizeof why, "%lld of %lld elements not exact", (long long)off, (long long)c_elems);
  if (unsupported || inexact) /* cuBLAS's own limits: not ours to pass or fail */
    printf("%-14s i8 %lldx%lldx%lld %s%s: %s, skipped\n", label, (long long)tc->m,
           (long long)tc->n, (long long)tc->k, tc->trans_a ? "T" : "N", tc->trans_b ? "T" : "N",
           unsupported ? "not supported by cuBLAS" : "cuBLAS inexact with scalars past 2^24");
  else
    print_result(env, tc, label, -1, -1, 0,
                 err != cudaSuccess ? cudaGetErrorString(err) : off > 0 ? why : NULL);
  CUDA_OR_DIE(cudaFree(d_a));
  CUDA_OR_DIE(cudaFree(d_b));
  CUDA_OR_DIE(cudaFree(d_c));
  CUDA_OR_DIE(cudaFree(d_row));
  free(a), free(b), free(c0), free(rows), free(ref), free(got);
}

/* The shapes of the 8-bit gemms' tests: from one element to more tiles than SMs (17's and
 * 19's persistent walk, both their tiles, k tails of the 128-wide k tile, batches). The first
 * five are 18's and 20's (m, n <= 64; the third and fourth their 32 x 32 tile, batched as the
 * small lane sends them), the rest 17's and 19's where they apply, 18's and 20's where not. */
static const int64_t k8_shapes[][4] = {{1, 1, 16, 1},      {37, 29, 53, 2},     {32, 32, 32, 300},
                                       {17, 30, 100, 7},   {64, 64, 64, 200},   {64, 128, 128, 1},
                                       {200, 136, 144, 3}, {264, 516, 1040, 2}, {600, 520, 400, 1},
                                       {48, 256, 96, 40},  {130, 70, 77, 2}};

typedef void (*k8_run_fn)(test_env *env, const test_case *tc, const gk_kernel *kernel, int form);

/* Every kernel that takes dtype (cuBLAS too where it does, unless --quick), every transpose, on
 * k8_shapes with scalars[3] (form 1 where beta is not 0, else 0); then forms 2 .. last_form
 * through gk_gpu_gemm with alpha `alpha`. */
static void run_8bit(test_env *env, bool quick, gk_dtype dtype, const double (*scalars)[2],
                     double alpha, int last_form, k8_run_fn run)
{
  const size_t nshapes = quick ? 7 : sizeof(k8_shapes) / sizeof(k8_shapes[0]);
  size_t count = 0;
  const gk_kernel *const *kernels = gk_kernels(&count);
  for (size_t ki = 0; ki < count; ki++) {
    const gk_kernel *kernel = kernels[ki];
    if ((env->only_kernel && strcmp(kernel->name, env->only_kernel) != 0) ||
        (kernel == &gk_kernel_cublas && !env->use_cublas))
      continue;
    for (size_t s = 0; s < nshapes; s++)
      for (int t = 0; t < 4; t++) {
        const double *ab = scalars[(s + (size_t)t) % 3];
        const int64_t *sh = k8_shapes[s];
        test_case tc = {dtype, false, sh[0], sh[1], sh[2], sh[3], t & 1, (t >> 1) & 1, ab[0],
                        ab[1], false, false};
        gk_problem probe = {.dtype = dtype, .trans_a = tc.trans_a, .trans_b = tc.trans_b,
                            .m = tc.m, .n = tc.n, .k = tc.k, .batch = tc.batch, .alpha = 1,
                            .a = (void *)(uintptr_t)256, .b = (void *)(uintptr_t)256,
                            .c = (void *)(uintptr_t)256};
        if (kernel->supports(&probe, gk_gpu_ctx_cc(env->ctx)))
          run(env, &tc, kernel, ab[1] != 0 ? 1 : 0);
      }
  }
  for (size_t s = 0; s < nshapes; s++)
    for (int form = 2; form <= last_form; form++) {
      const int64_t *sh = k8_shapes[s];
      test_case tc = {dtype, false, sh[0], sh[1], sh[2], sh[3],
                      form == 3 || (form == 4 && s % 2 == 0), s % 2 == 1, alpha, 1, false, false};
      run(env, &tc, NULL, form);
    }
}

/* i8: alpha/beta that wrap; the epilogue, and one B for every entry. */
static void run_int8(test_env *env, bool quick)
{
  static const double scalars[][2] = {{1, 0}, {-3, 2}, {2147483647, -2147483648.0}};
  run_8bit(env, quick, GK_I8, scalars, -3, 4, run_i8_case);
}

/* ---- the fp8 gemm (e4m3 / e5m2, f32 accumulate, f32 C) ------------------------------------- */

/* The float64 result of one fp8 problem and each element's magnitude (sum |alpha a b| +
 * |beta c0|), C0 given per element (c0e: C, or the bias rows spread out; NULL: none), act last. */
static void reference_fp8(const test_case *tc, const uint8_t *a, const uint8_t *b,
                          const double *c0e, gk_act act, double *ref, double *mag)
{
  const int64_t m = tc->m, n = tc->n, k = tc->k;
  for (int64_t z = 0; z < tc->batch; z++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double sum = 0, abs_sum = 0;
        for (int64_t l = 0; l < k; l++) {
          const double av = load(a, tc->dtype, z * m * k + (tc->trans_a ? l * m + i : i * k + l));
          const double bv = load(b, tc->dtype, z * k * n + (tc->trans_b ? j * k + l : l * n + j));
          sum += av * bv;
          abs_sum += fabs(av * bv);
        }
        const int64_t e = z * m * n + i * n + j;
        const double from = c0e != NULL ? c0e[e] : 0.0, x = tc->alpha * sum + tc->beta * from;
        ref[e] = act == GK_ACT_RELU ? (x < 0 ? 0 : x)
                 : act == GK_ACT_GELU ? 0.5 * x * (1 + erf(x / sqrt(2.0)))
                                      : x;
        mag[e] = fabs(tc->alpha) * abs_sum + fabs(tc->beta * from) + 1e-30;
      }
}

/* One fp8 problem on `kernel` (NULL: through gk_gpu_gemm "auto", with form's epilogue) against
 * float64, each element within tolerance() of its magnitude. form: 0 beta 0 over a poisoned C,
 * 1 beta with C0, 2 a bias row of its own + GELU, 3 each entry's bias row at its C's start +
 * ReLU, 4 beta with C0 and one B for every entry, 5 the result cast to bf16 (C poisoned; the
 * bf16 rounding added to the tolerance). */
static void run_fp8_case(test_env *env, const test_case *tc, const gk_kernel *kernel, int form)
{
  watch_case(kernel ? kernel->name : "fp8 auto", tc);
  const int64_t ce = tc->m * tc->n, c_elems = ce * tc->batch;
  const int64_t a_elems = tc->m * tc->k * tc->batch, b_elems = tc->k * tc->n * tc->batch;
  uint8_t *a = xmalloc((size_t)a_elems), *b = xmalloc((size_t)b_elems);
  float *c0 = xmalloc((size_t)c_elems * 4), *rows = xmalloc((size_t)(tc->n * tc->batch) * 4);
  double *c0e = xmalloc((size_t)c_elems * 8), *ref = xmalloc((size_t)c_elems * 8);
  double *mag = xmalloc((size_t)c_elems * 8);
  fill_random(a, tc->dtype, a_elems);
  fill_random(b, tc->dtype, b_elems);
  fill_random(c0, GK_F32, c_elems);
  fill_random(rows, GK_F32, tc->n * tc->batch);
  const bool shared = form == 4, cast = form == 5;
  for (int64_t z = 1; shared && z < tc->batch; z++)
    memcpy(b + z * tc->k * tc->n, b, (size_t)(tc->k * tc->n));
  for (int64_t e = 0; e < c_elems; e++) /* what beta multiplies, element by element */
    c0e[e] = form == 2 ? rows[e % tc->n] : form == 3 ? rows[(e / ce) * tc->n + e % tc->n] : c0[e];
  for (int64_t z = 0; form == 3 && z < tc->batch; z++)
    memcpy(c0 + z * ce, rows + z * tc->n, (size_t)tc->n * 4);
  if (form == 0 || cast)
    memset(c0, 0xFF, (size_t)c_elems * 4); /* NaN: not read */
  test_case ref_tc = *tc;
  if (form == 0 || cast)
    ref_tc.beta = 0.0;
  const gk_act act = form == 2 ? GK_ACT_GELU : form == 3 ? GK_ACT_RELU : GK_ACT_NONE;
  reference_fp8(&ref_tc, a, b, ref_tc.beta != 0.0 ? c0e : NULL, act, ref, mag);
  void *d_a = to_device(a, (size_t)a_elems);
  void *d_b = to_device(b, (size_t)(shared ? tc->k * tc->n : b_elems));
  void *d_c = to_device(c0, (size_t)c_elems * 4), *d_row = to_device(rows, (size_t)tc->n * 4);
  void *d_work = NULL;
  CUDA_OR_DIE(cudaMalloc(&d_work, (size_t)c_elems * 4));
  CUDA_OR_DIE(cudaDeviceSynchronize());
  gk_problem p = {.dtype = tc->dtype, .trans_a = tc->trans_a, .trans_b = tc->trans_b, .m = tc->m,
                  .n = tc->n, .k = tc->k, .batch = tc->batch, .b_shared = shared,
                  .alpha = tc->alpha, .beta = ref_tc.beta, .a = d_a, .b = d_b, .c = d_c, .act = act};
  if (form == 2)
    p.bias = d_row;
  else if (form == 3)
    p.bias = d_c, p.bias_stride = ce;
  else if (cast) /* C holds bf16: the first half of the poisoned buffer */
    p.cast = true, p.out_dtype = GK_BF16, p.work = d_work;
  const gk_dtype out_t = cast ? GK_BF16 : GK_F32;
  const size_t out_bytes = (size_t)c_elems * (cast ? 2 : 4);
  void *got = xmalloc(out_bytes);
  const gk_kernel *used = NULL;
  const cudaError_t err = run_on(env, kernel, &p, got, out_bytes, &used);
  if (cast) /* bf16's rounding of each result on top of the sum's error */
    for (int64_t e = 0; e < c_elems; e++)
      mag[e] += fabs(ref[e]) * (0x1p-8 / tolerance(tc));
  const double worst = err == cudaSuccess ? scaled_error(got, out_t, ref, mag, c_elems) : -1;
  const int64_t bad = err == cudaSuccess ? count_nonfinite(got, out_t, c_elems) : 0;
  char label[64];
  snprintf(label, sizeof label, "%s/%d", used ? used->name : "?", form);
  print_result(env, tc, label, worst, -1, bad, err != cudaSuccess ? cudaGetErrorString(err) : NULL);
  CUDA_OR_DIE(cudaFree(d_a));
  CUDA_OR_DIE(cudaFree(d_b));
  CUDA_OR_DIE(cudaFree(d_c));
  CUDA_OR_DIE(cudaFree(d_row));
  CUDA_OR_DIE(cudaFree(d_work));
  free(a), free(b), free(c0), free(rows), free(c0e), free(ref), free(mag), free(got);
}

/* Both formats (cuBLAS's gemmEx takes neither): scales folded into alpha; the epilogue, one B
 * for every entry and the cast. */
static void run_fp8(test_env *env, bool quick)
{
  static const double scalars[][2] = {{1, 0}, {-0.75, 0.5}, {0.0625 * 3, -2}};
  run_8bit(env, quick, GK_E4M3, scalars, -0.5, 5, run_fp8_case);
  run_8bit(env, quick, GK_E5M2, scalars, -0.5, 5, run_fp8_case);
}

/* ---- kernel 21 (wgmma_f32x3): f32 exact from three TF32 products -------------------------- */

/* --quick, the sanitizers' run (which slows kernels 10-100 times): one small case for each of
 * 21's tile widths and transposes, 132 x 136 x 40 (ragged tiles, a k tail): alone, 4 tiles of
 * 128 x 128, which 21 runs on its narrow tile (128 x 64), and in a batch of SMs / 8 + 1, more
 * than half the SMs' tiles, on its wide one; plain and with alpha/beta in turn, so that each
 * width and each transpose has both. */
static void run_f32x3_quick(test_env *env)
{
  static const int trans[3] = {0, 2, 3}; /* NN, NT, TT (t & 1: A transposed; t >> 1: B) */
  const int64_t wide_batch = gk_gpu_ctx_props(env->ctx)->multiProcessorCount / 8 + 1;
  for (int w = 0; w < 2; w++)
    for (int i = 0; i < 3; i++) {
      const bool ab = (w + i) % 2 == 1;
      const test_case tc = {GK_F32, false, 132, 136, 40, w ? wide_batch : 1, trans[i] & 1,
                            trans[i] >> 1, ab ? -0.75 : 1.0, ab ? 1.5 : 0.0, true, false};
      run_case(env, &tc);
    }
  /* k >= 2048 on the narrow tile (36 tiles): its two-level sum, NT with alpha/beta */
  const test_case deep = {GK_F32, false, 132, 136, 2052, 9, false, true, -0.75, 1.5, true, false};
  run_case(env, &deep);
}

/* Shapes 21 takes in NN, NT and TT (every stored row a multiple of 4 floats), ragged against its
 * 128 x 128 x 32 tile: k tails, a thin m, more tiles than SMs (the persistent walk), batches;
 * every kernel that takes them against float64 and cuBLAS, plain and with alpha/beta; two on
 * the narrow tile with a long k (its two-level sum), one of them a batch. Where k
 * is 512 or more, more than 33 tiles, or 21 hands the problem to simt_f32_splitk. */
static void run_f32x3_cases(test_env *env, bool quick)
{
  static const int64_t shapes[][4] = {{132, 260, 100, 1}, {264, 136, 72, 40}, {300, 196, 1028, 8},
                                      {516, 388, 36, 2},  {4, 516, 260, 3},   {1000, 1200, 800, 1},
                                      {1000, 900, 2052, 1}, {520, 260, 2084, 4}, /* narrow, k
                                      >= 2048: the two-level sum */
                                      {136, 128, 1536, 1}}; /* the last: 21 hands it to 09 */
  if (quick) {
    run_f32x3_quick(env);
    return;
  }
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
    for (int t = 0; t < 4; t++)
      for (int variant = 0; variant < 2; variant++) {
        const int64_t *sh = shapes[s];
        const test_case tc = {GK_F32, false, sh[0], sh[1], sh[2], sh[3], t & 1, (t >> 1) & 1,
                              variant ? -0.75 : 1.0, variant ? 1.5 : 0.0, true, true};
        run_case(env, &tc);
      }
}

/* The input kinds of the accuracy table (as bench/f32x3_accuracy.py makes them). */
enum { KIND_UNIFORM, KIND_NORMAL, KIND_WIDE, KIND_CANCEL, KIND_COUNT };
static const char *const kind_names[KIND_COUNT] = {"uniform", "normal", "wide", "cancel"};

static double rng_normal(void) /* Box-Muller */
{
  const double u1 = ((double)(rng_next() >> 11) + 1.0) * 0x1.0p-53, u2 = rng_uniform();
  return sqrt(-2.0 * log(u1)) * cos(3.14159265358979323846 * u2);
}

/* One value of a kind (cancellation: uniform, the structure is fill_kind's). */
static double kind_draw(int kind)
{
  if (kind == KIND_NORMAL)
    return rng_normal();
  if (kind == KIND_WIDE)
    return (rng_next() & 1 ? -1.0 : 1.0) * exp2(30.0 * rng_uniform());
  return rng_uniform();
}

/* A (m x k) and B (k x n), row-major: uniform [-1, 1), normal, random signs with exponents
 * spread evenly over 2^-30 .. 2^30, or cancellation-heavy (the second half of k repeats the
 * first with A negated and perturbed by ~2^-10: each output ~2^-10 of its terms). */
static void fill_kind(int kind, float *a, float *b, int64_t m, int64_t n, int64_t k)
{
  const int64_t h = kind == KIND_CANCEL ? k / 2 : k; /* l >= h: the repeated half */
  for (int64_t i = 0; i < m; i++)
    for (int64_t l = 0; l < k; l++)
      a[i * k + l] = l < h ? (float)kind_draw(kind)
                           : (float)(-a[i * k + l - h] * (1.0 + rng_uniform() * 0x1p-10));
  for (int64_t l = 0; l < k; l++)
    for (int64_t j = 0; j < n; j++)
      b[l * n + j] = l < h ? (float)kind_draw(kind) : b[(l - h) * n + j];
}

/* max and mean over the outputs of |out - ref| / mag */
static void error_stats(const float *out, const double *ref, const double *mag, int64_t count,
                        double *max, double *mean)
{
  double worst = 0, sum = 0;
  for (int64_t i = 0; i < count; i++) {
    const double e = isfinite(out[i]) ? fabs(out[i] - ref[i]) / mag[i] : INFINITY;
    worst = fmax(worst, e);
    sum += e;
  }
  *max = worst, *mean = sum / (double)count;
}

/* Slack on cuBLAS's figures: the max over the outputs of a heavy-tailed error moves by +-20%
 * from one draw to the next (bench/f32x3_accuracy.py, seeds 1-5), the mean by a few per cent;
 * 21 must be within these of cuBLAS's SGEMM on the same inputs, or better. */
#define F32X3_MAX_SLACK 1.25
#define F32X3_MEAN_SLACK 1.05

/* The accuracy table: 21, cuBLAS's SGEMM and simt_f32 on the same inputs of each kind, NN,
 * against float64; 21's max and mean of |err| / (|A| |B|) no worse than cuBLAS's (the slack
 * above). */
static void run_f32x3_accuracy(test_env *env)
{
  /* tiles enough (> 33) that 21 keeps the problem (see run_f32x3_cases): 256 of 128 x 128;
   * 64, which 21 runs as 128 of 128 x 64 with its two-level sum (the short grid where cuBLAS
   * runs split-k); 1024 of 128 x 128 with a long k (one level: cuBLAS's grid is full too) */
  static const int64_t shapes[][3] = {{2048, 2048, 1024}, {1024, 1024, 4096}, {4096, 4096, 4096}};
  const gk_kernel *ours = gk_kernel_by_name("wgmma_f32x3"), *simt = gk_kernel_by_name("simt_f32");
  printf("\nf32x3 accuracy: |err| / (|A| |B|), max / mean over the outputs, against float64\n");
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
    for (int kind = 0; kind < KIND_COUNT; kind++) {
      const test_case tc = {GK_F32, false, shapes[s][0], shapes[s][1], shapes[s][2], 1, false,
                            false, 1.0, 0.0, true, true};
      watch_case(kind_names[kind], &tc);
      const int64_t ae = tc.m * tc.k, be = tc.k * tc.n, ce = tc.m * tc.n;
      float *a = xmalloc((size_t)ae * 4), *b = xmalloc((size_t)be * 4), *out = xmalloc((size_t)ce * 4);
      fill_kind(kind, a, b, tc.m, tc.n, tc.k);
      double *ref = reference64(&tc, a, b, NULL), *mag = reference64_of(&tc, a, b, NULL, true);
      void *d_a = to_device(a, (size_t)ae * 4), *d_b = to_device(b, (size_t)be * 4), *d_c;
      CUDA_OR_DIE(cudaMalloc(&d_c, (size_t)ce * 4));
      CUDA_OR_DIE(cudaDeviceSynchronize());
      const gk_problem p = {.dtype = GK_F32, .m = tc.m, .n = tc.n, .k = tc.k, .batch = 1,
                            .alpha = 1.0, .a = d_a, .b = d_b, .c = d_c};
      const gk_kernel *runs[3] = {ours, &gk_kernel_cublas, simt};
      double max[3] = {NAN, NAN, NAN}, mean[3] = {NAN, NAN, NAN};
      const char *failure = NULL;
      for (int r = 0; r < 3; r++) {
        if (runs[r] == NULL || !runs[r]->supports(&p, gk_gpu_ctx_cc(env->ctx)))
          continue;
        watch_case(runs[r]->name, &tc);
        const cudaError_t err = run_kernel(env, runs[r], &p, NULL, (size_t)ce * 4, out);
        if (err != cudaSuccess) {
          failure = cudaGetErrorString(err);
          continue;
        }
        error_stats(out, ref, mag, ce, &max[r], &mean[r]);
      }
      const bool ok = failure == NULL && max[0] <= F32X3_MAX_SLACK * max[1] &&
                      mean[0] <= F32X3_MEAN_SLACK * mean[1];
      printf("| %-7s | %lldx%lldx%lld | 21 %.2e / %.2e | cublas %.2e / %.2e | simt_f32 %.2e / %.2e | "
             "21/cublas %.2f / %.2f | %s%s%s\n",
             kind_names[kind], (long long)tc.m, (long long)tc.n, (long long)tc.k, max[0], mean[0],
             max[1], mean[1], max[2], mean[2], max[0] / max[1], mean[0] / mean[1],
             ok ? "PASS" : "FAIL", failure ? ": " : "", failure ? failure : "");
      fflush(stdout);
      env->cases++;
      env->failures += !ok;
      CUDA_OR_DIE(cudaFree(d_a));
      CUDA_OR_DIE(cudaFree(d_b));
      CUDA_OR_DIE(cudaFree(d_c));
      free(a), free(b), free(out), free(ref), free(mag);
    }
}

/* An element of op(A) (i, l) / op(B) (l, j) in its stored place. */
static float *at_a(float *a, const test_case *tc, int64_t i, int64_t l)
{
  return a + (tc->trans_a ? l * tc->m + i : i * tc->k + l);
}
static float *at_b(float *b, const test_case *tc, int64_t l, int64_t j)
{
  return b + (tc->trans_b ? j * tc->k + l : l * tc->n + j);
}

/* The specials' reference: each element's sum of op(A) (i, l) op(B) (l, j) in float64, l in
 * order, as IEEE gives it (a loop: BLAS may skip zeros), and the sum of their magnitudes; then
 * alpha and beta C0 as SGEMM applies them, rounded to f32. Where the same sum in f32 (an FFMA
 * chain, SGEMM's) ends infinite or NaN, its class is the reference's: a partial sum that
 * overflows f32 stays infinite, and an infinity of the other sign later makes it NaN, where
 * float64's partial sum never overflowed (FLT_MAX / 2 and 3/4 FLT_MAX, then -inf: NaN in
 * SGEMM, -inf in float64; about one case in 50 failed on it, by its random signs). op(A) and
 * op(B) are unpacked into row-major copies first and the sums run i, l, j (a row of sums at a
 * time), where a loop element by element read B a column at a time: 40% less time for the
 * same sums. */
static void specials_reference(const test_case *tc, float *a, float *b, const float *c0,
                               double *ref, double *mag)
{
  const int64_t m = tc->m, n = tc->n, k = tc->k;
  double *a64 = xmalloc((size_t)(m * k) * 8), *b64 = xmalloc((size_t)(k * n) * 8);
  double *sum = xmalloc((size_t)n * 8), *abs_sum = xmalloc((size_t)n * 8);
  float *chain = xmalloc((size_t)n * 4);
  for (int64_t i = 0; i < m; i++)
    for (int64_t l = 0; l < k; l++)
      a64[i * k + l] = *at_a(a, tc, i, l);
  for (int64_t l = 0; l < k; l++)
    for (int64_t j = 0; j < n; j++)
      b64[l * n + j] = *at_b(b, tc, l, j);
  for (int64_t i = 0; i < m; i++) {
    for (int64_t j = 0; j < n; j++)
      sum[j] = 0, abs_sum[j] = 0, chain[j] = 0.0f;
    for (int64_t l = 0; l < k; l++) {
      const double av = a64[i * k + l], abs_av = fabs(av);
      const double *b_row = b64 + l * n;
      for (int64_t j = 0; j < n; j++) {
        sum[j] += av * b_row[j];
        abs_sum[j] += abs_av * fabs(b_row[j]);
        chain[j] = fmaf((float)av, (float)b_row[j], chain[j]);
      }
    }
    for (int64_t j = 0; j < n; j++) {
      const double from = tc->beta != 0.0 ? c0[i * n + j] : 0.0;
      /* the sum in f32 first (it overflows there, before alpha scales it), then f32's result */
      const float in_f32 = isfinite(chain[j]) ? (float)sum[j] : chain[j];
      ref[i * n + j] = (float)(tc->alpha * in_f32 + tc->beta * from);
      mag[i * n + j] = fabs(tc->alpha) * abs_sum[j] + fabs(tc->beta * from);
    }
  }
  free(a64), free(b64), free(sum), free(abs_sum), free(chain);
}

/* 0 NaN, 1 +inf, 2 -inf, 3 finite */
static int fp_class(double v) { return isnan(v) ? 0 : isinf(v) ? (v > 0 ? 1 : 2) : 3; }

/* IEEE special values through 21 (and auto, and cuBLAS for comparison), against an IEEE float64
 * loop (BLAS may skip zeros) rounded to f32: each element's class (NaN, +inf, -inf, finite) as
 * SGEMM gives it, the finite ones within 1e-5 of their magnitude. form 0: +inf against a zero of
 * B, a NaN, a NaN whose payload is in TF32's cut bits only, CUDA's NaN (0x7fffffff), -inf in B
 * against a zero of A, FLT_MAX / 2 beside 3/4 FLT_MAX (overflow or not, by B's signs), FLT_MAX
 * / 4 (21 recomputes such rows as FFMA chains), rows of ~2^50 and ~2^-110 (21's tensor-core
 * path, near the ends of its range), beta over a C0 holding +inf and a NaN; form 1: A subnormal
 * throughout against B of ~2^110 (products ~2^-20; 21 recomputes them all as FFMA chains). */
static void run_f32x3_special_case(test_env *env, const gk_kernel *kernel, test_case tc, int form)
{
  watch("%s specials%d %s%s %lldx%lldx%lld", kernel ? kernel->name : "auto", form, tc.trans_a ? "T" : "N",
        tc.trans_b ? "T" : "N", (long long)tc.m, (long long)tc.n, (long long)tc.k);
  const int64_t m = tc.m, n = tc.n, k = tc.k, ce = m * n;
  float *a = xmalloc((size_t)(m * k) * 4), *b = xmalloc((size_t)(k * n) * 4);
  float *c0 = xmalloc((size_t)ce * 4), *out = xmalloc((size_t)ce * 4);
  fill_random(a, GK_F32, m * k);
  fill_random(b, GK_F32, k * n);
  fill_random(c0, GK_F32, ce);
  if (form == 0) {
    *at_a(a, &tc, 1, 3) = INFINITY;
    *at_b(b, &tc, 3, 5) = 0.0f;
    *at_a(a, &tc, 2, 7) = NAN;
    *at_b(b, &tc, 11, 9) = -INFINITY;
    *at_a(a, &tc, 4, 11) = 0.0f;
    *at_a(a, &tc, 6, 0) = FLT_MAX * 0.5f;
    *at_a(a, &tc, 6, 1) = FLT_MAX * 0.75f;
    *at_a(a, &tc, 8, 2) = FLT_MAX * 0.25f;
    const uint32_t low_nan = 0x7f800001u; /* a NaN that TF32's truncation would make +inf */
    const uint32_t cuda_nan = 0x7fffffffu; /* CUDA's own NaN: a rounding add carries it over */
    memcpy(at_b(b, &tc, 13, 15), &low_nan, 4);
    memcpy(at_a(a, &tc, 12, 20), &cuda_nan, 4);
    for (int64_t l = 0; l < k; l++) {
      *at_a(a, &tc, 9, l) *= 0x1p50f;
      *at_a(a, &tc, 10, l) *= 0x1p-110f;
    }
    c0[0] = INFINITY;
    c0[3 * n + 3] = NAN;
  } else {
    for (int64_t i = 0; i < m * k; i++)
      a[i] *= 0x1p-130f;
    for (int64_t i = 0; i < k * n; i++)
      b[i] *= 0x1p110f;
  }
  double *ref = xmalloc((size_t)ce * 8), *mag = xmalloc((size_t)ce * 8);
  specials_reference(&tc, a, b, c0, ref, mag);
  void *d_a = to_device(a, (size_t)(m * k) * 4), *d_b = to_device(b, (size_t)(k * n) * 4);
  void *d_c0 = to_device(c0, (size_t)ce * 4), *d_c;
  CUDA_OR_DIE(cudaMalloc(&d_c, (size_t)ce * 4));
  CUDA_OR_DIE(cudaDeviceSynchronize());
  const gk_problem p = {.dtype = GK_F32, .trans_a = tc.trans_a, .trans_b = tc.trans_b, .m = m,
                        .n = n, .k = k, .batch = 1, .alpha = tc.alpha, .beta = tc.beta, .a = d_a,
                        .b = d_b, .c = d_c};
  const gk_kernel *used = kernel;
  if (tc.beta != 0.0)
    CUDA_OR_DIE(cudaMemcpyAsync(d_c, d_c0, (size_t)ce * 4, cudaMemcpyDeviceToDevice, env->stream));
  else
    CUDA_OR_DIE(cudaMemsetAsync(d_c, 0xFF, (size_t)ce * 4, env->stream));
  const cudaError_t err = run_on(env, kernel, &p, out, (size_t)ce * 4, &used);
  int64_t wrong_class = 0, wrong_value = 0;
  for (int64_t e = 0; err == cudaSuccess && e < ce; e++) {
    if (fp_class(out[e]) != fp_class(ref[e]))
      wrong_class++;
    else if (isfinite(ref[e]) && !(fabs(out[e] - ref[e]) <= 1e-5 * mag[e]))
      wrong_value++;
  }
  char label[64], why[96];
  snprintf(label, sizeof label, "%s/specials%d", used ? used->name : "?", form);
  snprintf(why, sizeof why, "%lld elements of the wrong class, %lld off in value",
           (long long)wrong_class, (long long)wrong_value);
  if (kernel == &gk_kernel_cublas) /* the comparison, not ours to pass or fail */
    printf("%-22s %s%s: %s\n", label, tc.trans_a ? "T" : "N", tc.trans_b ? "T" : "N",
           err != cudaSuccess ? cudaGetErrorString(err) : wrong_class + wrong_value ? why : "as IEEE");
  else
    print_result(env, &tc, label, -1, -1, 0,
                 err != cudaSuccess ? cudaGetErrorString(err) : wrong_class + wrong_value ? why : NULL);
  CUDA_OR_DIE(cudaFree(d_a));
  CUDA_OR_DIE(cudaFree(d_b));
  CUDA_OR_DIE(cudaFree(d_c0));
  CUDA_OR_DIE(cudaFree(d_c));
  free(a), free(b), free(c0), free(out), free(ref), free(mag);
}

/* The specials on 21 itself in NN, NT and TT, through auto in every transpose (TN: the kernel
 * auto gives it), and on cuBLAS for comparison (not --quick); on 21's narrow tile (2 tiles of
 * 128 x 128), then its wide one (110; not --quick). */
static void run_f32x3_specials(test_env *env, bool quick)
{
  static const int64_t shapes[][3] = {{72, 136, 40}, {1160, 1288, 40}};
  const gk_kernel *ours = gk_kernel_by_name("wgmma_f32x3");
  const gk_kernel *kernels[3] = {ours, NULL, env->use_cublas ? &gk_kernel_cublas : NULL};
  for (int sh = 0; sh < (quick ? 1 : 2); sh++)
    for (int form = 0; form < 2; form++)
      for (int t = 0; t < 4; t++)
        for (int r = 0; r < 3; r++) {
          const test_case tc = {GK_F32, false, shapes[sh][0], shapes[sh][1], shapes[sh][2], 1, t & 1,
                                (t >> 1) & 1, -0.75, form == 0 && t % 2 ? 0.5 : 0.0, true, false};
          if ((r == 0 && (t == 1 || ours == NULL)) || (r == 2 && kernels[2] == NULL) || (quick && r > 0))
            continue; /* t == 1: TN, not 21's; --quick: 21 alone */
          run_f32x3_special_case(env, kernels[r], tc, form);
        }
}

/* Kernel 21's section: its cases, the specials, and (not --quick) the accuracy table. */
static void run_f32x3(test_env *env, bool quick)
{
  const gk_problem probe = {.dtype = GK_F32, .m = 256, .n = 256, .k = 256, .batch = 1, .alpha = 1};
  const gk_kernel *ours = gk_kernel_by_name("wgmma_f32x3");
  if (ours == NULL || !ours->supports(&probe, gk_gpu_ctx_cc(env->ctx))) {
    printf("wgmma_f32x3: not on this device (cc %d); its section skipped\n", gk_gpu_ctx_cc(env->ctx));
    return;
  }
  run_f32x3_cases(env, quick);
  run_f32x3_specials(env, quick);
  if (!quick)
    run_f32x3_accuracy(env);
}

/* ---- kernel 22 (dmma_f64_tma) ---------------------------------------------------------------- */

/* 22's configurations one by one (kernels/22_dmma_f64_tma.cu; not registered): the registered
 * form picks one by the grid's size, so the shapes alone would leave some unreached. */
extern const gk_kernel gk_kernel_dmma_f64_tma_128x128, gk_kernel_dmma_f64_tma_128x96,
    gk_kernel_dmma_f64_tma_128x64, gk_kernel_dmma_f64_tma_64x64, gk_kernel_dmma_f64_tma_128x64_k16,
    gk_kernel_dmma_f64_tma_128x128_db, gk_kernel_dmma_f64_tma_128x96_db,
    gk_kernel_dmma_f64_tma_128x128_g16, gk_kernel_dmma_f64_tma_128x128_db_g16,
    gk_kernel_dmma_f64_tma_128x80, gk_kernel_dmma_f64_tma_128x80_db, gk_kernel_dmma_f64_tma_128x128_4wg;

/* f64 shapes 22 takes in every layout (TMA needs even leading dimensions: m, n and k even),
 * ragged against its 128 x 128 x 16, 128 x 96, 128 x 64 and 64 x 64 tiles: k tails and k shorter than a
 * tile, thin m or n, a long k (the ring wraps many times per tile), more tiles than SMs (the
 * persistent walk, with the ring running on across tiles), batches; every transpose, plain and
 * with alpha/beta (C read and poisoned otherwise), each configuration beside every registered
 * kernel that takes the shape, against float64 and cuBLAS. --quick (the sanitizers'): two
 * small shapes, the second with the ring wrapping (19 k tiles) over two problems, each
 * transpose once, plain or with alpha/beta in turn. */
static void run_f64_cases(test_env *env, bool quick)
{
  static const int64_t shapes[][4] = {{34, 18, 66, 1},     {130, 66, 18, 2},  {2, 2, 2, 1},
                                      {200, 136, 1030, 1}, {2, 2050, 34, 3},  {1030, 2050, 70, 1},
                                      {258, 130, 16, 40},  {1000, 1200, 800, 1}};
  static const int64_t quick_shapes[][4] = {{34, 18, 66, 1}, {130, 66, 290, 2}};
  const size_t nshapes = quick ? 2 : sizeof(shapes) / sizeof(shapes[0]);
  for (size_t s = 0; s < nshapes; s++)
    for (int t = 0; t < 4; t++)
      for (int variant = 0; variant < 2; variant++) {
        if (quick && variant != (t + (int)s) % 2)
          continue;
        const int64_t *sh = quick ? quick_shapes[s] : shapes[s];
        const test_case tc = {GK_F64, false, sh[0], sh[1], sh[2], sh[3], t & 1, (t >> 1) & 1,
                              variant ? -0.75 : 1.0, variant ? 1.5 : 0.0, true, !quick};
        run_case(env, &tc);
      }
  if (!quick) { /* a batch past one launch's 65535 problems */
    const test_case chunked = {GK_F64, false, 2, 4, 6, 66000, true, false, 0.5, -2.0, true, true};
    run_case(env, &chunked);
  }
}

/* Kernel 22's section: its cases on the registered kernels and on each of its configurations. */
static void run_f64(test_env *env, bool quick)
{
  static const gk_kernel *const configs[] = {
      &gk_kernel_dmma_f64_tma_128x128, &gk_kernel_dmma_f64_tma_128x96, &gk_kernel_dmma_f64_tma_128x64,
      &gk_kernel_dmma_f64_tma_64x64, &gk_kernel_dmma_f64_tma_128x64_k16,
      &gk_kernel_dmma_f64_tma_128x128_db, &gk_kernel_dmma_f64_tma_128x96_db,
      &gk_kernel_dmma_f64_tma_128x128_g16, &gk_kernel_dmma_f64_tma_128x128_db_g16,
      &gk_kernel_dmma_f64_tma_128x80, &gk_kernel_dmma_f64_tma_128x80_db,
      &gk_kernel_dmma_f64_tma_128x128_4wg, NULL};
  const gk_problem probe = {.dtype = GK_F64, .m = 256, .n = 256, .k = 256, .batch = 1, .alpha = 1};
  const gk_kernel *ours = gk_kernel_by_name("dmma_f64_tma");
  if (ours == NULL || !ours->supports(&probe, gk_gpu_ctx_cc(env->ctx))) {
    printf("dmma_f64_tma: not on this device (cc %d); its section skipped\n", gk_gpu_ctx_cc(env->ctx));
    return;
  }
  env->extra = configs;
  run_f64_cases(env, quick);
  env->extra = NULL;
}

/* ---- the registry (no GPU needed) ---------------------------------------------------------- */

static int check_registry(bool verbose)
{
  int failures = 0;
#define EXPECT(cond)                                                                               \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL: registry: %s\n", #cond);                                                       \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)
  size_t count = 0;
  const gk_kernel *const *kernels = gk_kernels(&count);
  EXPECT(kernels != NULL && count >= 2);
  for (size_t i = 0; i < count; i++) {
    EXPECT(kernels[i]->name != NULL && kernels[i]->description != NULL);
    EXPECT(kernels[i]->supports != NULL && kernels[i]->launch != NULL);
    EXPECT(gk_kernel_by_name(kernels[i]->name) == kernels[i]); /* names are unique */
    if (verbose)
      printf("registered: %-14s %s\n", kernels[i]->name, kernels[i]->description);
  }
  EXPECT(gk_kernel_by_name("tiled16") == &gk_kernel_tiled16);
  EXPECT(gk_kernel_by_name("cublas") == &gk_kernel_cublas);
  EXPECT(gk_kernel_by_name("no-such-kernel") == NULL);
  EXPECT(gk_kernel_by_name(NULL) == NULL);

  const int ccs[] = {80, 90};
  for (size_t mi = 0; mi < MODE_COUNT; mi++) {
    for (int c = 0; c < 2; c++) {
      gk_problem p = {.dtype = all_modes[mi].dtype, .fast = all_modes[mi].fast, .trans_b = true,
                      .m = 33, .n = 17, .k = 65, .batch = 2, .alpha = 1.0};
      const gk_kernel *chosen = gk_select(&p, ccs[c], "auto");
      EXPECT(chosen != NULL && chosen != &gk_kernel_cublas); /* auto never picks the reference */
      EXPECT(gk_select(&p, ccs[c], NULL) == chosen);
      EXPECT(gk_select(&p, ccs[c], "cublas") == &gk_kernel_cublas);
      EXPECT(gk_select(&p, ccs[c], "tiled16") == &gk_kernel_tiled16);
      EXPECT(gk_select(&p, ccs[c], "no-such-kernel") == chosen);
      if (verbose)
        printf("auto for %-7s cc %d: %s\n", dtype_label(p.dtype, p.fast), ccs[c],
               chosen ? chosen->name : "(none)");
    }
  }
  /* i8: 17 on Hopper where TMA reads it, 18 for small problems and the rest; what the integer
   * gemm refuses */
  gk_problem p8 = {.dtype = GK_I8, .m = 130, .n = 132, .k = 144, .batch = 2, .alpha = 3.0};
  const gk_kernel *i8_small = gk_kernel_by_name("mma_i8_small");
  EXPECT(gk_select(&p8, 90, "auto") == gk_kernel_by_name("wgmma_i8_persist"));
  EXPECT(gk_select(&p8, 80, "auto") == i8_small);
  p8.k = 145; /* rows of A that TMA cannot read */
  EXPECT(gk_select(&p8, 90, "auto") == i8_small);
  p8.m = p8.n = 64, p8.k = 144;
  EXPECT(gk_select(&p8, 90, "auto") == i8_small);
  EXPECT(gk_select(&p8, 75, "auto") == &gk_kernel_tiled16);
  p8.m = 130, p8.n = 132;
  int8_t i8_dummy[4];
  p8.a = p8.b = p8.c = i8_dummy;
  EXPECT(gk_problem_check(&p8) == cudaSuccess);
  p8.alpha = 0.5;
  EXPECT(gk_problem_check(&p8) == cudaErrorInvalidValue);
  p8.alpha = 4294967296.0;
  EXPECT(gk_problem_check(&p8) == cudaErrorInvalidValue);
  p8.alpha = 1.0, p8.act = GK_ACT_GELU;
  EXPECT(gk_problem_check(&p8) == cudaErrorInvalidValue);
  p8.act = GK_ACT_RELU;
  EXPECT(gk_problem_check(&p8) == cudaSuccess);
  p8.dtype = GK_I32;
  EXPECT(gk_problem_check(&p8) == cudaErrorInvalidValue);
  /* fp8: 19 on Hopper where TMA reads it, 20 for small problems, the rest and Ada */
  gk_problem pf = {.dtype = GK_E4M3, .m = 130, .n = 132, .k = 144, .batch = 2, .alpha = 0.25};
  const gk_kernel *fp8_small = gk_kernel_by_name("mma_fp8_small");
  EXPECT(gk_select(&pf, 90, "auto") == gk_kernel_by_name("wgmma_fp8_persist"));
  EXPECT(gk_select(&pf, 89, "auto") == fp8_small);
  EXPECT(gk_select(&pf, 80, "auto") == &gk_kernel_tiled16);
  pf.k = 145, pf.dtype = GK_E5M2;
  EXPECT(gk_select(&pf, 90, "auto") == fp8_small);
  pf.m = pf.n = 64, pf.k = 144;
  EXPECT(gk_select(&pf, 90, "auto") == fp8_small);
  /* f32 exact: 21 on Hopper where TMA reads the operands and the transposes are not TN, and
   * where the grid is long enough or k short; 09 / 02 for the rest */
  gk_problem px = {.dtype = GK_F32, .m = 2048, .n = 2048, .k = 2048, .batch = 1, .alpha = 1.0};
  const gk_kernel *f32x3 = gk_kernel_by_name("wgmma_f32x3");
  EXPECT(f32x3 != NULL && gk_select(&px, 90, "auto") == f32x3);
  EXPECT(gk_select(&px, 80, "auto") != f32x3);
  px.fast = true;
  EXPECT(gk_select(&px, 90, "auto") != f32x3);
  px.fast = false, px.trans_a = true;
  EXPECT(gk_select(&px, 90, "auto") != f32x3); /* TN */
  px.trans_b = true;
  EXPECT(gk_select(&px, 90, "auto") == f32x3); /* TT */
  px.k = 2047;                                 /* rows TMA cannot read */
  EXPECT(gk_select(&px, 90, "auto") != f32x3);
  /* f64 on Hopper: 22 where it is named, or by auto once registered before 10 (kernels/fast.cmake
   * says which, by the order), and TMA reads the operands (even leading dimensions); 10 for the
   * rest; never 22 off Hopper */
  gk_problem pd = {.dtype = GK_F64, .m = 2048, .n = 2048, .k = 2048, .batch = 1, .alpha = 1.0};
  const gk_kernel *dmma16 = gk_kernel_by_name("dmma16_f64"), *f64_tma = gk_kernel_by_name("dmma_f64_tma");
  EXPECT(dmma16 != NULL && f64_tma != NULL);
  size_t at_dmma16 = count, at_f64_tma = count;
  for (size_t i = 0; i < count; i++) {
    if (kernels[i] == dmma16)
      at_dmma16 = i;
    if (kernels[i] == f64_tma)
      at_f64_tma = i;
  }
  EXPECT(gk_select(&pd, 90, "auto") == (at_f64_tma < at_dmma16 ? f64_tma : dmma16));
  EXPECT(gk_select(&pd, 90, "dmma_f64_tma") == f64_tma);
  EXPECT(gk_select(&pd, 80, "dmma_f64_tma") != f64_tma && gk_select(&pd, 80, "auto") != f64_tma);
  pd.trans_a = pd.trans_b = true;
  EXPECT(gk_select(&pd, 90, "dmma_f64_tma") == f64_tma);
  pd.k = 2047; /* A's rows: an odd number of doubles */
  EXPECT(gk_select(&pd, 90, "dmma_f64_tma") == dmma16 && gk_select(&pd, 90, "auto") == dmma16);
  pd.k = 2048, pd.m = 1001; /* A stored k x m, rows of an odd number of doubles */
  EXPECT(gk_select(&pd, 90, "dmma_f64_tma") == dmma16 && gk_select(&pd, 90, "auto") == dmma16);
  /* Malformed problems are refused before anything is launched. */
  int dummy;
  gk_problem bad = {.dtype = GK_F32, .m = 0, .n = 4, .k = 4, .batch = 1, .alpha = 1.0,
                    .a = &dummy, .b = &dummy, .c = &dummy};
  EXPECT(gk_problem_check(&bad) == cudaErrorInvalidValue);
  bad.m = 4;
  EXPECT(gk_problem_check(&bad) == cudaSuccess);
  bad.alpha = NAN;
  EXPECT(gk_problem_check(&bad) == cudaErrorInvalidValue);
  bad.alpha = 1.0;
  bad.m = bad.n = bad.k = INT64_C(1) << 31;
  EXPECT(gk_problem_check(&bad) == cudaErrorInvalidValue); /* m*k*8 overflows int64 */
  bad.m = bad.n = bad.k = 4;
  bad.c = NULL;
  EXPECT(gk_problem_check(&bad) == cudaErrorInvalidValue);
  const gk_kernel *used = &gk_kernel_cublas;
  EXPECT(gk_gpu_gemm(NULL, &bad, "auto", NULL, &used) == cudaErrorInvalidValue && used == NULL);
#undef EXPECT
  if (verbose || failures)
    printf("registry: %s\n", failures ? "FAIL" : "PASS");
  return failures;
}

/* ---- --bench: TFLOP/s per kernel beside cuBLAS --------------------------------------------- */

static int cmp_float(const void *x, const void *y)
{
  const float a = *(const float *)x, b = *(const float *)y;
  return (a > b) - (a < b);
}

/* Median milliseconds of `reps` timed launches after two warm-ups; -1 on error. */
static double time_kernel(test_env *env, const gk_kernel *kernel, const gk_problem *p)
{
  enum { reps = 10 };
  float ms[reps];
  cudaEvent_t start, stop;
  CUDA_OR_DIE(cudaEventCreate(&start));
  CUDA_OR_DIE(cudaEventCreate(&stop));
  double median = -1;
  for (int i = 0; i < 2; i++)
    if (kernel->launch(env->ctx, p, env->stream) != cudaSuccess)
      goto out;
  for (int i = 0; i < reps; i++) {
    CUDA_OR_DIE(cudaEventRecord(start, env->stream));
    if (kernel->launch(env->ctx, p, env->stream) != cudaSuccess)
      goto out;
    CUDA_OR_DIE(cudaEventRecord(stop, env->stream));
    CUDA_OR_DIE(cudaEventSynchronize(stop));
    CUDA_OR_DIE(cudaEventElapsedTime(&ms[i], start, stop));
  }
  qsort(ms, reps, sizeof(ms[0]), cmp_float);
  median = (ms[reps / 2 - 1] + ms[reps / 2]) / 2.0;
out:
  CUDA_OR_DIE(cudaStreamSynchronize(env->stream));
  CUDA_OR_DIE(cudaEventDestroy(start));
  CUDA_OR_DIE(cudaEventDestroy(stop));
  return median;
}

static void run_bench(test_env *env, int64_t size)
{
  const int cc = gk_gpu_ctx_cc(env->ctx);
  const double flops = 2.0 * (double)size * (double)size * (double)size;
  printf("\nbench: %lld^3, median of 10 (CUDA events), on %s\n", (long long)size,
         gk_gpu_ctx_props(env->ctx)->name);
  printf("%-14s %-7s %10s %10s %8s %10s\n", "kernel", "dtype", "ms", "TFLOP/s", "vs_cublas",
         "rel_err");
  for (size_t mi = 0; mi < MODE_COUNT; mi++) {
    const dtype_mode mode = all_modes[mi];
    const size_t es = dtype_size(mode.dtype);
    const int64_t elems = size * size;
    const size_t bytes = (size_t)elems * es;
    void *h = xmalloc(bytes), *d_a, *d_b, *d_c, *d_ref;
    CUDA_OR_DIE(cudaMalloc(&d_a, bytes));
    CUDA_OR_DIE(cudaMalloc(&d_b, bytes));
    CUDA_OR_DIE(cudaMalloc(&d_c, bytes));
    CUDA_OR_DIE(cudaMalloc(&d_ref, bytes));
    fill_random(h, mode.dtype, elems);
    CUDA_OR_DIE(cudaMemcpy(d_a, h, bytes, cudaMemcpyHostToDevice));
    fill_random(h, mode.dtype, elems);
    CUDA_OR_DIE(cudaMemcpy(d_b, h, bytes, cudaMemcpyHostToDevice));
    CUDA_OR_DIE(cudaDeviceSynchronize()); /* the uploads landed before the timing stream reads */
    gk_problem p = {.dtype = mode.dtype, .fast = mode.fast, .m = size, .n = size, .k = size,
                    .batch = 1, .alpha = 1.0, .a = d_a, .b = d_b, .c = d_ref};
    void *ref = xmalloc(bytes);
    const double cublas_ms = time_kernel(env, &gk_kernel_cublas, &p);
    CUDA_OR_DIE(cudaMemcpy(ref, d_ref, bytes, cudaMemcpyDeviceToHost));
    printf("%-14s %-7s %10.3f %10.2f %8s %10s\n", "cublas", dtype_label(mode.dtype, mode.fast),
           cublas_ms, flops / cublas_ms / 1e9, "1.00", "-");
    p.c = d_c;
    size_t count;
    const gk_kernel *const *kernels = gk_kernels(&count);
    for (size_t i = 0; i < count; i++) {
      const gk_kernel *kernel = kernels[i];
      if (kernel == &gk_kernel_cublas || !kernel->supports(&p, cc))
        continue;
      if (env->only_kernel != NULL && strcmp(env->only_kernel, kernel->name) != 0)
        continue;
      CUDA_OR_DIE(cudaMemset(d_c, 0xFF, bytes));
      const double ms = time_kernel(env, kernel, &p);
      CUDA_OR_DIE(cudaMemcpy(h, d_c, bytes, cudaMemcpyDeviceToHost));
      const double err = rel_error(h, mode.dtype, NULL, ref, elems);
      const int64_t bad = count_nonfinite(h, mode.dtype, elems);
      printf("%-14s %-7s %10.3f %10.2f %8.2f %10.2e%s\n", kernel->name,
             dtype_label(mode.dtype, mode.fast), ms, flops / ms / 1e9, cublas_ms / ms, err,
             bad ? " NON-FINITE" : "");
    }
    free(h);
    free(ref);
    CUDA_OR_DIE(cudaFree(d_a));
    CUDA_OR_DIE(cudaFree(d_b));
    CUDA_OR_DIE(cudaFree(d_c));
    CUDA_OR_DIE(cudaFree(d_ref));
    fflush(stdout);
  }
}


/* ---- the complex gemm ---------------------------------------------------------------------- */

/* Complex elements as double pairs, from c64 (float pairs) or c128. */
static void widen_complex(const void *src, gk_dtype t, double *dst, int64_t count)
{
  for (int64_t i = 0; i < 2 * count; i++)
    dst[i] = t == GK_C64 ? ((const float *)src)[i] : ((const double *)src)[i];
}

static void fill_complex(void *buf, gk_dtype t, int64_t count)
{
  fill_random(buf, t == GK_C64 ? GK_F32 : GK_F64, 2 * count); /* the parts */
}

static enum CBLAS_TRANSPOSE cblas_op(bool trans, bool conj)
{
  if (conj)
    return trans ? CblasConjTrans : CblasConjNoTrans;
  return trans ? CblasTrans : CblasNoTrans;
}

/* cuBLAS on the same problem (row-major as C^T = op(B)^T op(A)^T in column-major); false when
 * cuBLAS has no such op (conj without trans). */
static bool cublas_complex(test_env *env, const gk_problem *p, void *d_c)
{
  if ((p->conj_a && !p->trans_a) || (p->conj_b && !p->trans_b) || p->batch != 1)
    return false;
  cublasHandle_t h = (cublasHandle_t)gk_gpu_ctx_cublas(env->ctx);
  if (h == NULL || cublasSetStream(h, env->stream) != CUBLAS_STATUS_SUCCESS)
    return false;
  const cublasOperation_t ob = p->trans_b ? (p->conj_b ? CUBLAS_OP_C : CUBLAS_OP_T) : CUBLAS_OP_N;
  const cublasOperation_t oa = p->trans_a ? (p->conj_a ? CUBLAS_OP_C : CUBLAS_OP_T) : CUBLAS_OP_N;
  const int m = (int)p->m, n = (int)p->n, k = (int)p->k;
  const int lda = p->trans_a ? m : k, ldb = p->trans_b ? k : n;
  cublasStatus_t st;
  if (p->dtype == GK_C64) {
    const cuComplex alpha = {(float)p->alpha, (float)p->alpha_im};
    const cuComplex beta = {(float)p->beta, (float)p->beta_im};
    st = cublasCgemm(h, ob, oa, n, m, k, &alpha, (const cuComplex *)p->b, ldb,
                     (const cuComplex *)p->a, lda, &beta, (cuComplex *)d_c, n);
  } else {
    const cuDoubleComplex alpha = {p->alpha, p->alpha_im}, beta = {p->beta, p->beta_im};
    st = cublasZgemm(h, ob, oa, n, m, k, &alpha, (const cuDoubleComplex *)p->b, ldb,
                     (const cuDoubleComplex *)p->a, lda, &beta, (cuDoubleComplex *)d_c, n);
  }
  return st == CUBLAS_STATUS_SUCCESS;
}

/* Largest |got - ref| / (bound * tol) over the elements: <= 1 passes. */
static double complex_error(const double *got, const double *ref, const double *bound,
                            int64_t count, double tol)
{
  double worst = 0.0;
  for (int64_t i = 0; i < count; i++) {
    const double dr = got[2 * i] - ref[2 * i], di = got[2 * i + 1] - ref[2 * i + 1];
    const double err = sqrt(dr * dr + di * di) / (bound[i] * tol + 1e-300);
    if (!(err <= worst))
      worst = err; /* NaN too */
  }
  return worst;
}

/* One complex problem: our result (C poisoned with NaN when beta is 0) against zgemm on the
 * float64 values, within 8 (k + 4) u of sum |alpha a b| + |beta c| (u of f32, or of TF32 inputs
 * when fast; of f64 for c128), and beside cuBLAS where it has the op. b_shared: one B. */
static void run_complex_case(test_env *env, const test_case *tc, bool conj_a, bool conj_b,
                             double alpha_im, double beta_im, bool b_shared)
{
  const gk_dtype t = tc->dtype;
  const size_t es = t == GK_C64 ? 8 : 16;
  const int64_t m = tc->m, n = tc->n, k = tc->k, batch = tc->batch;
  const int64_t na = m * k * batch, nb = k * n * (b_shared ? 1 : batch), nc = m * n * batch;
  void *a = xmalloc((size_t)na * es), *b = xmalloc((size_t)nb * es), *c = xmalloc((size_t)nc * es);
  fill_complex(a, t, na);
  fill_complex(b, t, nb);
  const bool beta_zero = tc->beta == 0.0 && beta_im == 0.0;
  if (beta_zero)
    memset(c, 0xFF, (size_t)nc * es); /* NaN: must not be read */
  else
    fill_complex(c, t, nc);
  double *a64 = xmalloc((size_t)na * 16), *b64 = xmalloc((size_t)nb * 16);
  double *ref = xmalloc((size_t)nc * 16), *got = xmalloc((size_t)nc * 16);
  double *abs_a = xmalloc((size_t)na * 8), *abs_b = xmalloc((size_t)nb * 8);
  double *bound = xmalloc((size_t)nc * 8);
  widen_complex(a, t, a64, na);
  widen_complex(b, t, b64, nb);
  if (beta_zero)
    memset(ref, 0, (size_t)nc * 16);
  else
    widen_complex(c, t, ref, nc);
  for (int64_t i = 0; i < na; i++)
    abs_a[i] = hypot(a64[2 * i], a64[2 * i + 1]);
  for (int64_t i = 0; i < nb; i++)
    abs_b[i] = hypot(b64[2 * i], b64[2 * i + 1]);
  const double alpha[2] = {tc->alpha, alpha_im}, beta[2] = {tc->beta, beta_im};
  const double abs_alpha = hypot(tc->alpha, alpha_im), abs_beta = hypot(tc->beta, beta_im);
  for (int64_t z = 0; z < batch; z++) {
    const int64_t bz = b_shared ? 0 : z;
    double *cz = ref + 2 * z * m * n, *bd = bound + z * m * n;
    for (int64_t e = 0; e < m * n; e++)
      bd[e] = abs_beta * hypot(cz[2 * e], cz[2 * e + 1]);
    cblas_zgemm(CblasRowMajor, cblas_op(tc->trans_a, conj_a), cblas_op(tc->trans_b, conj_b),
                (int)m, (int)n, (int)k, alpha, a64 + 2 * z * m * k, tc->trans_a ? (int)m : (int)k,
                b64 + 2 * bz * k * n, tc->trans_b ? (int)k : (int)n, beta, cz, (int)n);
    cblas_dgemm(CblasRowMajor, tc->trans_a ? CblasTrans : CblasNoTrans,
                tc->trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, abs_alpha,
                abs_a + z * m * k, tc->trans_a ? (int)m : (int)k, abs_b + bz * k * n,
                tc->trans_b ? (int)k : (int)n, 1.0, bd, (int)n);
  }
  void *d_a = to_device(a, (size_t)na * es), *d_b = to_device(b, (size_t)nb * es);
  void *d_c = to_device(c, (size_t)nc * es);
  gk_problem p;
  memset(&p, 0, sizeof p);
  p.dtype = t;
  p.fast = tc->fast;
  p.trans_a = tc->trans_a, p.trans_b = tc->trans_b;
  p.conj_a = conj_a, p.conj_b = conj_b;
  p.m = m, p.n = n, p.k = k, p.batch = batch, p.b_shared = b_shared;
  p.alpha = tc->alpha, p.alpha_im = alpha_im, p.beta = tc->beta, p.beta_im = beta_im;
  p.a = d_a, p.b = d_b, p.c = d_c;
  const gk_kernel *used = NULL;
  CUDA_OR_DIE(gk_gpu_gemm(env->ctx, &p, NULL, env->stream, &used));
  CUDA_OR_DIE(cudaStreamSynchronize(env->stream));
  void *h = xmalloc((size_t)nc * es);
  CUDA_OR_DIE(cudaMemcpy(h, d_c, (size_t)nc * es, cudaMemcpyDeviceToHost));
  widen_complex(h, t, got, nc);
  /* the sums' rounding, and TF32's of the inputs (2^-11 each) when fast */
  const double u = t == GK_C128 ? 0x1p-53 : 0x1p-24;
  const double tol = 8.0 * ((double)(k + 4) * u + (tc->fast ? 0x1p-10 : 0.0));
  const double err = complex_error(got, ref, bound, nc, tol);
  double err_cublas = -1.0;
  if (env->use_cublas) {
    CUDA_OR_DIE(cudaMemcpy(d_c, c, (size_t)nc * es, cudaMemcpyHostToDevice));
    if (!tc->fast && cublas_complex(env, &p, d_c)) {
      CUDA_OR_DIE(cudaStreamSynchronize(env->stream));
      CUDA_OR_DIE(cudaMemcpy(h, d_c, (size_t)nc * es, cudaMemcpyDeviceToHost));
      widen_complex(h, t, got, nc);
      err_cublas = complex_error(got, ref, bound, nc, tol);
    }
  }
  env->cases++;
  const bool ok = err <= 1.0;
  if (!ok)
    env->failures++;
  printf("%-4s %s%-5s %5lldx%5lldx%5lld b%lld %c%c%s%s alpha %g%+gi beta %g%+gi  %-18s err %.2e "
         "of tol\n",
         ok ? "ok" : "FAIL", t == GK_C64 ? "c64" : "c128", tc->fast ? "/fast" : "",
         (long long)m, (long long)n, (long long)k, (long long)batch, tc->trans_a ? 'T' : 'N',
         tc->trans_b ? 'T' : 'N', conj_a ? " conj_a" : "", conj_b ? " conj_b" : "", tc->alpha,
         alpha_im, tc->beta, beta_im, used ? used->name : "?", err);
  if (err_cublas >= 0)
    printf("       cuBLAS on the same inputs: %.2e of tol\n", err_cublas);
  free(a), free(b), free(c), free(a64), free(b64), free(ref), free(got), free(abs_a);
  free(abs_b), free(bound), free(h);
  CUDA_OR_DIE(cudaFree(d_a));
  CUDA_OR_DIE(cudaFree(d_b));
  CUDA_OR_DIE(cudaFree(d_c));
}

static void run_complex(test_env *env, bool quick)
{
  static const int64_t shapes[][3] = {{1, 1, 1}, {17, 33, 9}, {96, 128, 200}, {257, 130, 383},
                                      {1024, 1024, 1024}};
  const size_t shape_count = quick ? 3 : sizeof shapes / sizeof shapes[0];
  const gk_dtype dtypes[3] = {GK_C64, GK_C64, GK_C128};
  const bool fast[3] = {false, true, false};
  for (int d = 0; d < 3; d++)
    for (size_t s = 0; s < shape_count; s++)
      for (int form = 0; form < 16; form++) {
        const bool ta = form & 1, tb = form & 2, ca = form & 4, cb = form & 8;
        if (s + 1 == shape_count && !quick && form % 5 != 0)
          continue; /* the largest shape: a few forms */
        test_case tc = {dtypes[d], fast[d], shapes[s][0], shapes[s][1], shapes[s][2], 1, ta, tb,
                        0.75, form % 3 == 0 ? 0.0 : -0.5, true, true};
        run_complex_case(env, &tc, ca, cb, -1.25, form % 3 == 0 ? 0.0 : 0.5, false);
      }
  /* batches, and a batch by one B */
  for (int d = 0; d < 3; d += 2)
    for (int shared = 0; shared < 2; shared++) {
      test_case tc = {dtypes[d], false, 37, 29, 45, 3, shared != 0, false, 1.0, 0.25, true, false};
      run_complex_case(env, &tc, true, false, 0.5, -1.0, shared != 0);
    }
  fflush(stdout);
}

/* ---- main ---------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
  bool quick = false, bench = false, registry_only = false, probe_only = false, f32x3_only = false;
  bool f64_only = false;
  int64_t bench_size = 4096;
  uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
  const char *only_kernel = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (strcmp(argv[i], "--bench") == 0)
      bench = true;
    else if (strcmp(argv[i], "--registry") == 0)
      registry_only = true;
    else if (strcmp(argv[i], "--probe") == 0)
      probe_only = true;
    else if (strcmp(argv[i], "--f32x3") == 0)
      f32x3_only = true;
    else if (strcmp(argv[i], "--f64") == 0)
      f64_only = true;
    else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
      seed = strtoull(argv[++i], NULL, 0);
    else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc)
      bench_size = strtoll(argv[++i], NULL, 0);
    else if (strcmp(argv[i], "--kernel") == 0 && i + 1 < argc)
      only_kernel = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--quick] [--seed N] [--kernel NAME] [--bench [--size N]] "
                      "[--registry] [--probe] [--f32x3] [--f64]\n", argv[0]);
      return 2;
    }
  }
  const char *case_timeout = getenv("GEMMD_TEST_CASE_TIMEOUT");
  if (case_timeout != NULL) {
    char *end;
    const unsigned long v = strtoul(case_timeout, &end, 10);
    if (end == case_timeout || *end != '\0' || v > 86400) {
      fprintf(stderr, "GEMMD_TEST_CASE_TIMEOUT: seconds, 0 to 86400\n");
      return 2;
    }
    watch_timeout_s = (unsigned)v;
  }
  if (bench_size < 1 || bench_size > 65536) {
    fprintf(stderr, "--size: 1 to 65536\n");
    return 2;
  }
  if (only_kernel != NULL && gk_kernel_by_name(only_kernel) == NULL) {
    fprintf(stderr, "--kernel: no kernel named %s\n", only_kernel);
    return 2;
  }

  if (!probe_only && check_registry(!bench) != 0)
    return 1;
  if (registry_only)
    return 0;

  int devices = 0;
  const cudaError_t probe = cudaGetDeviceCount(&devices);
  if (probe != cudaSuccess || devices == 0) {
    printf("SKIP: no CUDA device found (%s)\n",
           probe != cudaSuccess ? cudaGetErrorString(probe) : "0 devices");
    return SKIP_CODE;
  }
  if (probe_only)
    return 0;

  test_env env = {0};
  env.only_kernel = only_kernel;
  env.use_cublas = !quick; /* the sanitizer runs look at our kernels, not at cuBLAS */
  CUDA_OR_DIE(gk_gpu_ctx_create(0, &env.ctx));
  CUDA_OR_DIE(cudaStreamCreateWithFlags(&env.stream, cudaStreamNonBlocking));
  const struct cudaDeviceProp *props = gk_gpu_ctx_props(env.ctx);
  printf("device 0: %s, cc %d, %d SMs; seed %llu (--seed to repeat)\n", props->name,
         gk_gpu_ctx_cc(env.ctx), props->multiProcessorCount, (unsigned long long)seed);
  rng_state = seed;

  if (bench)
    run_bench(&env, bench_size);
  else if (f32x3_only)
    run_f32x3(&env, quick);
  else if (f64_only)
    run_f64(&env, quick);
  else {
    run_matrix(&env, quick);
    run_f32x3(&env, quick);
    run_f64(&env, quick);
    run_epilogue(&env);
    run_cast(&env);
    run_int8(&env, quick);
    run_fp8(&env, quick);
    run_complex(&env, quick);
  }

  alarm(0); /* the watchdog's: every case is done */
  CUDA_OR_DIE(cudaStreamDestroy(env.stream));
  gk_gpu_ctx_destroy(env.ctx);
  if (!bench)
    printf("\n%d cases, %d failed: %s\n", env.cases, env.failures, env.failures ? "FAIL" : "PASS");
  return env.failures ? 1 : 0;
}
