/*
 * bench/kernels.cu - bench_kernels: our GPU kernels against cuBLAS, one table per run.
 *
 *   bench_kernels [--quick] [--markdown] [--kernel NAME[,NAME...]] [--dtype f32|tf32|f16|bf16|f64|i8|i8nn|c64|c64tf|c128]
 *                 [--seed N] [--reps N] [--variants] [--ex-only] [--small-batches]
 *                 [--shape MxNxK[xBATCH]]
 *
 * For every dtype mode (f32 exact, f32 fast = TF32, f16, bf16, f64; i8 with B n x k and i8nn
 * with B k x n, whose i32 results must equal cuBLAS's exactly) and shape (1024^3, 2048^3,
 * 4096^3, 8192^3, 1000x1200x800, skinny 8192x8192x64, batch 64 of 256^3; --shape: that one
 * instead):
 *   1. fresh random inputs (uniform in [-1, 1), drawn on the device from the seed, never zeros);
 *   2. our kernel (the selector's "auto" choice, or --kernel) writes into a NaN-poisoned C, cuBLAS
 *      into another; ||ours - cublas|| / ||cublas|| must be under the dtype's tolerance and no
 *      element may be left NaN, else the row says FAIL and its time is not reported;
 *   3. both are timed with CUDA events: 2 warm-ups, then the median of N runs, rotating among
 *      enough input sets that A and B of one set are never all still in L2 (>= 3x 50 MB);
 *   4. cuBLAS at its best: besides cublasGemmStridedBatchedEx (the "cublas" kernel: default
 *      algorithm, the handle's default workspace), cublasLt's first LT_ALGOS heuristic
 *      algorithms with a 64 MiB workspace, and for f16/bf16 also with f32 output (D in f32: a
 *      different output type, so C = D is f32); each candidate's output is checked against
 *      cublasGemmStridedBatchedEx's before it is timed, and the fastest checked candidate is
 *      the cuBLAS figure of the row ("via": ex, lt, lt-f32out).
 * With --kernel a,b,... each mode and shape gets a row per named kernel (where it takes the
 * shape; else the selector's choice), each against cuBLAS timed again in that row: e.g.
 * `--dtype f32 --kernel wgmma_f32x3,simt_f32` sets kernel 21 beside 02 (both exact f32), and
 * `--dtype f64 --kernel dmma_f64_tma,dmma16_f64` kernel 22 beside 10.
 * The last lines are the table (plain, or Markdown with --markdown for bench/RESULTS.md).
 * Exit status: 0 when every row passed its check, 1 when one failed, 2 on a setup error.
 *
 * Everything goes through gk_gpu.h: gk_select for ours, gk_kernel_by_name("cublas") for cuBLAS.
 * The complex modes (c64, c64 fast, c128; 1024^3 and 4096^3 only) time gk_gpu_gemm, which runs
 * them on the real kernels (gk_complex.cu), against cublasCgemm / cublasZgemm, checked as the
 * real pairs' relative Frobenius difference (the complex one).
 *
 * --small-batches instead times the batched small problems of the small-job lane (one launch
 * each: 8192 x 32^3, 4096 x 64^3, 1024 x 128^3, 256 x 256^3, 64 x 512^3), against
 * cublasGemmStridedBatchedEx and cublasLt in the same way.
 *
 * --variants instead times other tile configurations of the fast kernels (instantiated here from
 * their templates, or exported unregistered, as 21's; no transpose, aligned rows; 09's split
 * counts forced; with --kernel, only the variants of those names) at 1024^3,
 * 1000x1200x800 and 2048^3 to 8192^3 (--quick: up to 4096^3), with the same checks: the tuning
 * table behind each kernel's chosen configuration (bench/RESULTS.md, "Kernel history").
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#include "06_dmma_f64.cuh"
#include "04_mma_f16.cuh"
#include "02_simt_f32.cuh"
#include "09_simt_f32_splitk.cuh"
#include "05_mma_tf32.cuh"
#include "gk_gpu.h"

/* 21's registered form and its unregistered variant (kernels/21_wgmma_f32x3.cu), for --variants */
extern "C" const gk_kernel gk_kernel_wgmma_f32x3, gk_kernel_wgmma_f32x3_pipe;
/* 22's configurations one by one (kernels/22_dmma_f64_tma.cu, not registered), for --variants */
extern "C" const gk_kernel gk_kernel_dmma_f64_tma_128x128, gk_kernel_dmma_f64_tma_128x96,
    gk_kernel_dmma_f64_tma_128x64, gk_kernel_dmma_f64_tma_64x64, gk_kernel_dmma_f64_tma_128x64_k16,
    gk_kernel_dmma_f64_tma_128x128_db, gk_kernel_dmma_f64_tma_128x96_db,
    gk_kernel_dmma_f64_tma_128x128_g16, gk_kernel_dmma_f64_tma_128x128_db_g16,
    gk_kernel_dmma_f64_tma_128x80, gk_kernel_dmma_f64_tma_128x80_db, gk_kernel_dmma_f64_tma_128x128_4wg;

#ifndef GEMMD_GIT_COMMIT
#define GEMMD_GIT_COMMIT "unknown"
#endif

namespace {

/* ---- modes and shapes ------------------------------------------------------------------- */

struct mode {
  const char *name; /* as printed and as --dtype takes it */
  gk_dtype dtype;
  bool fast;
  double tol; /* relative Frobenius difference to cuBLAS that still passes */
  bool trans_b; /* B stored n x k (the integer gemm's native layout), else k x n */
};

/* Tolerances against cuBLAS (not against exact math): f32 both exact, sums in other orders;
 * tf32 inputs truncated (ours) vs rounded (cuBLAS), ~1e-3 each; f16/bf16 outputs rounded to
 * 11/8 bits, so a one-ulp difference in some outputs is expected. */
const mode kModes[] = {
    {"f32", GK_F32, false, 1e-5, false},   {"tf32", GK_F32, true, 5e-3, false},
    {"f16", GK_F16, false, 2e-3, false},   {"bf16", GK_BF16, false, 1e-2, false},
    {"f64", GK_F64, false, 1e-12, false},
    /* the integer gemm, exact: in its native layout (B n x k: cuBLAS's TN, the one cublasLt's
     * int8 kernels take), and NN, where 17 first makes B K-major */
    {"i8", GK_I8, false, 0.0, true},  {"i8nn", GK_I8, false, 0.0, false},
    /* the fp8 gemm, against tiled16's f32 sums (cuBLAS's gemmEx has no fp8): the tensor cores'
     * fp8 accumulation keeps fewer bits than f32; B n x k is cublasLt's only fp8 layout */
    /* (H200: 1.9e-3 from our kernel and cuBLASLt alike at 8192^3, growing with k) */
    {"e4m3", GK_E4M3, false, 8e-3, true}, {"e5m2", GK_E5M2, false, 8e-3, true},
    {"e4m3nn", GK_E4M3, false, 8e-3, false},
    /* the complex gemm (bench_complex), against cublasCgemm / cublasZgemm */
    {"c64", GK_C64, false, 1e-5, false}, {"c64tf", GK_C64, true, 5e-3, false},
    {"c128", GK_C128, false, 1e-12, false},
};

struct shape {
  const char *label;
  int64_t m, n, k, batch;
  bool quick; /* part of --quick */
};

const shape kShapes[] = {
    {"1024^3", 1024, 1024, 1024, 1, true},        {"2048^3", 2048, 2048, 2048, 1, false},
    {"4096^3", 4096, 4096, 4096, 1, true},        {"8192^3", 8192, 8192, 8192, 1, false},
    {"1000x1200x800", 1000, 1200, 800, 1, true},  {"8192x8192x64", 8192, 8192, 64, 1, false},
    {"64x256^3", 256, 256, 256, 64, true},
};

/* --small-batches: what the small-job lane launches, many small problems in one launch */
const shape kSmallBatches[] = {
    {"8192x32^3", 32, 32, 32, 8192, true},    {"4096x64^3", 64, 64, 64, 4096, true},
    {"1024x128^3", 128, 128, 128, 1024, true}, {"256x256^3", 256, 256, 256, 256, true},
    {"64x512^3", 512, 512, 512, 64, true},
};

/* ---- tile-configuration variants (--variants) -------------------------------------------- */

template <class L>
cudaError_t launch_nn(gk_gpu_ctx *, const gk_problem *p, cudaStream_t stream) {
  return L::template run<false, false, true>(p, stream);
}
bool any_problem(const gk_problem *, int) { return true; }

#define SIMT_F32(BM, BN, BK, MB, ASYNC)                                                       \
  {"simt_f32_" #BM "x" #BN "x" #BK "_b" #MB "_async_" #ASYNC, "", any_problem,               \
   launch_nn<gk__simt_launcher<float, BM, BN, BK, MB, ASYNC>>, 0}
/* 8 x 16 outputs per thread (JG 4 column groups), warp tiles of 64 x 64 */
#define SIMT_F32_JG(BM, BN, BK, MB, ASYNC, JG)                                                  \
  {"simt_f32_" #BM "x" #BN "x" #BK "_b" #MB "_async_" #ASYNC "_jg" #JG, "", any_problem,      \
   launch_nn<gk__simt_launcher<float, BM, BN, BK, MB, ASYNC, JG>>, 0}
#define MMA_BF16(BM, BN, BK, WM, WN, S)                                                        \
  {"mma_bf16_" #BM "x" #BN "x" #BK "_w" #WM "x" #WN "_s" #S, "", any_problem,                   \
   launch_nn<gk__mma16_launcher<__nv_bfloat16, gk__mma16_cfg<BM, BN, BK, WM, WN, S>>>, 0}
#define TF32(BM, BN, BK, WM, WN, S)                                                            \
  {"tf32_" #BM "x" #BN "x" #BK "_w" #WM "x" #WN "_s" #S, "", any_problem,                       \
   launch_nn<gk__tf32_launcher<gk__tf32_cfg<BM, BN, BK, WM, WN, S>>>, 0}

#define DMMA_F64(BM, BN, BK, WM, WN, S)                                                        \
  {"dmma_f64_" #BM "x" #BN "x" #BK "_w" #WM "x" #WN "_s" #S, "", any_problem,                   \
   launch_nn<gk__dmma_launcher<gk__dmma_cfg<BM, BN, BK, WM, WN, S>>>, 0}

#define SIMT_F32_SPLITK(S)                                                                     \
  {"simt_f32_splitk_s" #S, "", any_problem,                                                    \
   launch_nn<gk__simt_splitk_launcher<float, 128, 128, 8, true, S>>, 0}

/* 09's kernel with one cluster-of-one per tile: a plain one-block-per-SM kernel with dynamic
 * shared memory, for tiles too big for 02's static shared memory */
#define SIMT_F32_ONE_PER_SM(BM, BN, BK)                                                        \
  {"simt_f32_1sm_" #BM "x" #BN "x" #BK, "", any_problem,                                       \
   launch_nn<gk__simt_splitk_launcher<float, BM, BN, BK, true, 1>>, 0}

#define DMMA_F64K(BM, BN, BK, WM, WN, S, K)                                                    \
  {"dmma_f64_" #BM "x" #BN "x" #BK "_w" #WM "x" #WN "_s" #S "_k" #K, "", any_problem,          \
   launch_nn<gk__dmma_launcher<gk__dmma_cfg<BM, BN, BK, WM, WN, S, K>>>, 0}

#define DMMA_F64KF(BM, BN, BK, WM, WN, S, K, FS, MB)                                            \
  {"dmma_f64_" #BM "x" #BN "x" #BK "_w" #WM "x" #WN "_s" #S "_k" #K "_f" #FS "_b" #MB, "",      \
   any_problem, launch_nn<gk__dmma_launcher<gk__dmma_cfg<BM, BN, BK, WM, WN, S, K, FS, MB>>>, 0}

struct variant {
  int mode; /* index into kModes */
  gk_kernel kernel;
};
const variant kVariants[] = {
    {0, gk_kernel_wgmma_f32x3},             {0, gk_kernel_wgmma_f32x3_pipe},
    {0, SIMT_F32(128, 128, 8, 2, false)},   {0, SIMT_F32(128, 128, 16, 2, false)},
    {0, SIMT_F32(128, 128, 16, 2, true)},   {0, SIMT_F32(128, 128, 8, 2, true)},
    {0, SIMT_F32_ONE_PER_SM(256, 128, 16)}, {0, SIMT_F32_ONE_PER_SM(128, 256, 16)},
    {0, SIMT_F32_JG(128, 128, 8, 2, true, 4)}, {0, SIMT_F32_JG(128, 128, 16, 2, true, 4)},
    {0, SIMT_F32_JG(128, 256, 8, 1, true, 4)}, {0, SIMT_F32_JG(256, 128, 8, 1, true, 4)},
    {0, SIMT_F32_JG(128, 128, 8, 3, true, 4)},
    {0, SIMT_F32_SPLITK(2)},                {0, SIMT_F32_SPLITK(3)},
    {0, SIMT_F32_SPLITK(4)},                {0, SIMT_F32_SPLITK(5)},
    {0, SIMT_F32_SPLITK(6)},                {0, SIMT_F32_SPLITK(8)},
    {3, MMA_BF16(128, 128, 32, 2, 2, 4)},   {3, MMA_BF16(128, 256, 32, 2, 4, 4)},
    {1, TF32(128, 128, 32, 2, 2, 3)},       {1, TF32(128, 256, 32, 2, 4, 3)},
    {4, gk_kernel_dmma_f64_tma_128x128},    {4, gk_kernel_dmma_f64_tma_128x96},
    {4, gk_kernel_dmma_f64_tma_128x64},     {4, gk_kernel_dmma_f64_tma_64x64},
    {4, gk_kernel_dmma_f64_tma_128x64_k16}, {4, gk_kernel_dmma_f64_tma_128x128_db},
    {4, gk_kernel_dmma_f64_tma_128x96_db},  {4, gk_kernel_dmma_f64_tma_128x128_g16},
    {4, gk_kernel_dmma_f64_tma_128x128_db_g16}, {4, gk_kernel_dmma_f64_tma_128x80},
    {4, gk_kernel_dmma_f64_tma_128x80_db},  {4, gk_kernel_dmma_f64_tma_128x128_4wg},
    {4, DMMA_F64(64, 64, 16, 2, 2, 4)},
    {4, DMMA_F64K(64, 64, 16, 2, 2, 4, 8)},  {4, DMMA_F64K(64, 64, 16, 4, 2, 4, 8)},
    {4, DMMA_F64K(128, 64, 16, 4, 2, 3, 8)}, {4, DMMA_F64K(64, 64, 32, 4, 2, 3, 16)},
    {4, DMMA_F64K(64, 64, 32, 2, 2, 3, 8)},  {4, DMMA_F64K(64, 128, 16, 2, 4, 4, 8)},
    {4, DMMA_F64K(128, 64, 16, 8, 2, 3, 8)},
    /* one fragment set, registers capped for 2 blocks (or 16 warps) per SM: 32 x 32 warp tiles */
    {4, DMMA_F64KF(128, 64, 16, 4, 2, 3, 8, 1, 2)}, {4, DMMA_F64KF(64, 128, 16, 2, 4, 3, 8, 1, 2)},
    {4, DMMA_F64KF(128, 128, 16, 4, 4, 3, 8, 1, 1)}, {4, DMMA_F64KF(64, 64, 16, 4, 2, 4, 8, 1, 2)},
    {4, DMMA_F64KF(128, 64, 16, 4, 2, 3, 8, 2, 2)}, {4, DMMA_F64KF(128, 128, 16, 4, 4, 3, 8, 2, 1)},
    {4, DMMA_F64KF(64, 64, 16, 2, 2, 4, 8, 1, 3)},
    {4, DMMA_F64KF(64, 64, 16, 2, 2, 3, 8, 1, 3)}, {4, DMMA_F64KF(64, 64, 16, 2, 2, 3, 8, 2, 3)},
    {4, DMMA_F64KF(64, 64, 32, 2, 2, 2, 8, 1, 3)}, {4, DMMA_F64KF(64, 128, 16, 2, 4, 4, 8, 1, 2)},
    {4, DMMA_F64KF(64, 64, 16, 2, 2, 4, 8, 2, 2)}, {4, DMMA_F64KF(64, 128, 16, 2, 4, 3, 8, 2, 2)},
    {4, DMMA_F64KF(64, 64, 16, 2, 2, 3, 8, 1, 2)},
    /* small tiles, for the batched small problems (--variants --small-batches) */
    {0, SIMT_F32(64, 32, 8, 16, true)},      {0, SIMT_F32(64, 64, 8, 8, true)},
    {0, SIMT_F32(64, 64, 16, 8, true)},
    {3, MMA_BF16(32, 32, 32, 1, 1, 3)},      {3, MMA_BF16(64, 64, 32, 2, 2, 3)},
    {3, MMA_BF16(64, 32, 32, 2, 1, 3)},
    {1, TF32(32, 32, 32, 1, 1, 3)},          {1, TF32(64, 64, 32, 2, 2, 3)},
    {4, DMMA_F64K(32, 32, 16, 1, 1, 4, 8)},  {4, DMMA_F64K(32, 32, 16, 2, 2, 4, 8)},
    {3, MMA_BF16(64, 64, 32, 2, 2, 4)},      {3, MMA_BF16(64, 64, 64, 2, 2, 3)},
    {3, MMA_BF16(64, 128, 32, 2, 2, 4)},     {3, MMA_BF16(128, 64, 32, 2, 2, 4)},
    {3, MMA_BF16(64, 128, 32, 2, 4, 4)},     {3, MMA_BF16(128, 128, 32, 4, 2, 4)},
    {3, MMA_BF16(64, 64, 32, 1, 2, 4)},
};
const shape kVariantShapes[] = {
    {"1024^3", 1024, 1024, 1024, 1, true},
    {"1000x1200x800", 1000, 1200, 800, 1, true},
    {"2048^3", 2048, 2048, 2048, 1, true},
    {"4096^3", 4096, 4096, 4096, 1, true},
    {"8192^3", 8192, 8192, 8192, 1, false},
    {"8192x8192x64", 8192, 8192, 64, 1, true},
};

/* ---- device helpers ---------------------------------------------------------------------- */

__device__ __forceinline__ float hash_uniform(uint64_t seed, uint64_t i) {
  uint64_t x = seed ^ (i * 0x9E3779B97F4A7C15ull);
  x ^= x >> 30, x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27, x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return (float)((double)(x >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

template <typename T>
__global__ void fill_uniform(T *out, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = T(hash_uniform(seed, (uint64_t)i));
}

/* int8 values over the whole range, [-128, 127] */
__global__ void fill_int8(int8_t *out, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = (int8_t)floorf(hash_uniform(seed, (uint64_t)i) * 128.0f);
}

template <typename T>
__device__ __forceinline__ double as_double(T v) {
  return (double)(float)v;
}
template <>
__device__ __forceinline__ double as_double<double>(double v) {
  return v;
}
template <>
__device__ __forceinline__ double as_double<int32_t>(int32_t v) {
  return (double)v;
}

/* sums[0] += (x - ref)^2, sums[1] += ref^2, sums[2] += count of non-finite x */
template <typename T, typename R>
__global__ void diff_norms(const T *x, const R *ref, int64_t count, double *sums) {
  double d2 = 0, r2 = 0, bad = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count;
       i += (int64_t)gridDim.x * blockDim.x) {
    double xv = as_double(x[i]), rv = as_double(ref[i]);
    if (!isfinite(xv)) bad += 1;
    else d2 += (xv - rv) * (xv - rv);
    r2 += rv * rv;
  }
  for (int off = 16; off > 0; off /= 2) {
    d2 += __shfl_down_sync(0xffffffffu, d2, off);
    r2 += __shfl_down_sync(0xffffffffu, r2, off);
    bad += __shfl_down_sync(0xffffffffu, bad, off);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(&sums[0], d2);
    atomicAdd(&sums[1], r2);
    atomicAdd(&sums[2], bad);
  }
}

/* ---- host plumbing ----------------------------------------------------------------------- */

#define CHECK(call)                                                                             \
  do {                                                                                          \
    cudaError_t err_ = (call);                                                                  \
    if (err_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "bench_kernels: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(err_), \
              __FILE__, __LINE__);                                                              \
      exit(2);                                                                                  \
    }                                                                                           \
  } while (0)

size_t elem_size(gk_dtype t) { return gk_dtype_size(t); }
cudaDataType_t cuda_type(gk_dtype t) {
  switch (t) {
  case GK_F64: return CUDA_R_64F;
  case GK_F32: return CUDA_R_32F;
  case GK_F16: return CUDA_R_16F;
  case GK_BF16: return CUDA_R_16BF;
  case GK_I8: return CUDA_R_8I;
  case GK_I32: return CUDA_R_32I;
  case GK_E4M3: return CUDA_R_8F_E4M3;
  case GK_E5M2: return CUDA_R_8F_E5M2;
  case GK_C64: return CUDA_C_32F;
  case GK_C128: return CUDA_C_64F;
  }
  return CUDA_R_32F;
}

void fill(gk_dtype t, void *ptr, int64_t count, uint64_t seed, cudaStream_t stream) {
  const int threads = 256, blocks = 1024;
  switch (t) {
  case GK_F32: fill_uniform<<<blocks, threads, 0, stream>>>((float *)ptr, count, seed); break;
  case GK_F64: fill_uniform<<<blocks, threads, 0, stream>>>((double *)ptr, count, seed); break;
  case GK_F16: fill_uniform<<<blocks, threads, 0, stream>>>((__half *)ptr, count, seed); break;
  case GK_BF16: fill_uniform<<<blocks, threads, 0, stream>>>((__nv_bfloat16 *)ptr, count, seed); break;
  case GK_I8: fill_int8<<<blocks, threads, 0, stream>>>((int8_t *)ptr, count, seed); break;
  case GK_E4M3: fill_uniform<<<blocks, threads, 0, stream>>>((__nv_fp8_e4m3 *)ptr, count, seed); break;
  case GK_E5M2: fill_uniform<<<blocks, threads, 0, stream>>>((__nv_fp8_e5m2 *)ptr, count, seed); break;
  case GK_I32: break; /* a result dtype only */
  case GK_C64: case GK_C128: break; /* bench_complex fills their real pairs */
  }
  CHECK(cudaGetLastError());
}

template <typename R>
void launch_diff(gk_dtype tx, const void *x, const R *ref, int64_t count, double *sums,
                 cudaStream_t stream) {
  const int threads = 256, blocks = 1024;
  switch (tx) {
  case GK_F32: diff_norms<<<blocks, threads, 0, stream>>>((const float *)x, ref, count, sums); break;
  case GK_F64: diff_norms<<<blocks, threads, 0, stream>>>((const double *)x, ref, count, sums); break;
  case GK_F16: diff_norms<<<blocks, threads, 0, stream>>>((const __half *)x, ref, count, sums); break;
  case GK_BF16: diff_norms<<<blocks, threads, 0, stream>>>((const __nv_bfloat16 *)x, ref, count, sums); break;
  case GK_I32: diff_norms<<<blocks, threads, 0, stream>>>((const int32_t *)x, ref, count, sums); break;
  case GK_I8: case GK_E4M3: case GK_E5M2: break; /* never an output */
  case GK_C64: case GK_C128: break; /* compared as their real pairs */
  }
}

/* Relative Frobenius difference of x (of type tx) to ref (of type t), and the count of
 * non-finite elements of x. */
double rel_diff(gk_dtype tx, const void *x, gk_dtype t, const void *ref, int64_t count,
                double *sums, int64_t *nonfinite, cudaStream_t stream) {
  CHECK(cudaMemsetAsync(sums, 0, 3 * sizeof(double), stream));
  switch (t) {
  case GK_F32: launch_diff(tx, x, (const float *)ref, count, sums, stream); break;
  case GK_F64: launch_diff(tx, x, (const double *)ref, count, sums, stream); break;
  case GK_F16: launch_diff(tx, x, (const __half *)ref, count, sums, stream); break;
  case GK_BF16: launch_diff(tx, x, (const __nv_bfloat16 *)ref, count, sums, stream); break;
  case GK_I32: launch_diff(tx, x, (const int32_t *)ref, count, sums, stream); break;
  case GK_I8: case GK_E4M3: case GK_E5M2: break; /* never an output */
  case GK_C64: case GK_C128: break; /* compared as their real pairs */
  }
  CHECK(cudaGetLastError());
  double host[3];
  CHECK(cudaMemcpyAsync(host, sums, sizeof(host), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  *nonfinite = (int64_t)host[2];
  return host[1] > 0 ? sqrt(host[0] / host[1]) : (host[0] > 0 ? INFINITY : 0.0);
}

struct row {
  const char *mode_name, *shape_label, *kernel;
  double ours_tflops, cublas_tflops, err, tol;
  double ex_tflops;    /* cublasGemmStridedBatchedEx alone */
  const char *via;     /* which cuBLAS path gave cublas_tflops: "ex", "lt", "lt-f32out" */
  bool pass;
  const char *why; /* failure reason, or NULL */
};

struct options {
  bool quick = false, markdown = false, variants = false;
  bool ex_only = false; /* the cuBLAS figure from cublasGemmStridedBatchedEx alone, no cublasLt */
  bool small_batches = false; /* kSmallBatches instead of kShapes */
  shape one_shape = {NULL, 0, 0, 0, 1, true}; /* --shape: this one instead of kShapes */
  const char *kernel = "auto";
  const char *only_dtype = NULL;
  uint64_t seed = 0;
  int reps = 0; /* 0: chosen from the run time */
};

/* Median milliseconds of `reps` calls of launch(set index), rotating over nsets input sets. */
template <typename F>
double time_launches(F launch, int nsets, cudaStream_t stream, int reps, bool *ok) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  *ok = true;
  for (int i = 0; i < 2; ++i) /* warm-up: module load, cuBLAS heuristics */
    if (launch(i % nsets) != cudaSuccess) *ok = false;
  std::vector<float> ms;
  for (int i = 0; i < reps && *ok; ++i) {
    CHECK(cudaEventRecord(start, stream));
    if (launch(i % nsets) != cudaSuccess) *ok = false;
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float t;
    CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  if (!*ok || ms.empty()) return NAN;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/* Median milliseconds of `reps` launches of k on problems rotating over the input sets. */
double time_kernel(gk_gpu_ctx *ctx, const gk_kernel *k, std::vector<gk_problem> &sets,
                   cudaStream_t stream, int reps, bool *ok) {
  return time_launches([&](int s) { return k->launch(ctx, &sets[s], stream); }, (int)sets.size(),
                       stream, reps, ok);
}

/* ---- cuBLAS at its best: cublasLt with a workspace and the heuristic's candidates ---------- */

#define LT_ALGOS 4
#define LT_WORKSPACE (64u << 20)

struct lt_state {
  cublasLtHandle_t handle = NULL;
  void *workspace = NULL;
};

/* One cublasLt problem: p's operands (row-major, read column-major as in 00_cublas.cu: C^T =
 * op(B)^T op(A)^T) with the output in out_type; the heuristic's first LT_ALGOS algorithms. */
struct lt_plan {
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t a = NULL, b = NULL, c = NULL;
  cublasLtMatmulHeuristicResult_t algos[LT_ALGOS];
  int count = 0;
  bool f64 = false, i32 = false; /* the scalars' type: double, int32, else float */

  ~lt_plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }

  static bool layout(cublasLtMatrixLayout_t *out, cudaDataType_t type, uint64_t rows,
                     uint64_t cols, int64_t ld, int32_t batch, int64_t stride) {
    if (cublasLtMatrixLayoutCreate(out, type, rows, cols, ld) != CUBLAS_STATUS_SUCCESS) return false;
    return cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                            sizeof(batch)) == CUBLAS_STATUS_SUCCESS &&
           cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &stride, sizeof(stride)) == CUBLAS_STATUS_SUCCESS;
  }

  bool init(const lt_state &lt, const gk_problem &p, cudaDataType_t out_type) {
    cudaDataType_t in_type = cuda_type(p.dtype);
    /* fp8: f32 compute and scalars, the scale pointers left unset (1) */
    cublasComputeType_t compute = p.dtype == GK_F64 ? CUBLAS_COMPUTE_64F
                                  : p.dtype == GK_I8 ? CUBLAS_COMPUTE_32I
                                  : (p.dtype == GK_F32 && p.fast) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                  : CUBLAS_COMPUTE_32F;
    f64 = p.dtype == GK_F64;
    i32 = p.dtype == GK_I8;
    cudaDataType_t scale = f64 ? CUDA_R_64F : i32 ? CUDA_R_32I : CUDA_R_32F;
    if (cublasLtMatmulDescCreate(&op, compute, scale) != CUBLAS_STATUS_SUCCESS)
      return false;
    cublasOperation_t op_b = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_a = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b)) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a)) != CUBLAS_STATUS_SUCCESS)
      return false;
    const int32_t batch = (int32_t)p.batch;
    /* first operand: stored B (k x n row-major = n x k column-major, or n x k when trans_b) */
    if (!layout(&a, in_type, p.trans_b ? p.k : p.n, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n,
                batch, p.k * p.n) ||
        !layout(&b, in_type, p.trans_a ? p.m : p.k, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k,
                batch, p.m * p.k) ||
        !layout(&c, out_type, p.n, p.m, p.n, batch, p.m * p.n))
      return false;
    cublasLtMatmulPreference_t pref = NULL;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return false;
    size_t ws = LT_WORKSPACE;
    bool ok = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof(ws)) == CUBLAS_STATUS_SUCCESS &&
              cublasLtMatmulAlgoGetHeuristic(lt.handle, op, a, b, c, c, pref, LT_ALGOS, algos,
                                             &count) == CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulPreferenceDestroy(pref);
    return ok && count > 0;
  }

  cudaError_t run(const lt_state &lt, int i, const gk_problem &p, void *out,
                  cudaStream_t stream) const {
    const float alpha_f = (float)p.alpha, beta_f = (float)p.beta;
    const double alpha_d = p.alpha, beta_d = p.beta;
    const int32_t alpha_i = (int32_t)p.alpha, beta_i = (int32_t)p.beta;
    const void *alpha = f64 ? (const void *)&alpha_d : i32 ? (const void *)&alpha_i : (const void *)&alpha_f;
    const void *beta = f64 ? (const void *)&beta_d : i32 ? (const void *)&beta_i : (const void *)&beta_f;
    cublasStatus_t st = cublasLtMatmul(lt.handle, op, alpha, p.b, a, p.a, b, beta, out, c, out, c,
                                       &algos[i].algo, lt.workspace, LT_WORKSPACE, stream);
    return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
  }
};

/* The fastest checked cublasLt candidate for `sets` (output in out_type into out, of type tout
 * for the check against ref of type md.dtype): its TFLOP/s into *best when faster. */
void lt_candidates(const lt_state &lt, const mode &md, std::vector<gk_problem> &sets,
                   cudaDataType_t out_type, gk_dtype tout, void *out, const void *ref,
                   int64_t c_elems, double flops, int reps, double *sums, cudaStream_t stream,
                   double *best, const char **via, const char *label) {
  lt_plan plan;
  if (!plan.init(lt, sets[0], out_type)) {
    printf("    cublasLt %s: no algorithm\n", label);
    return;
  }
  for (int i = 0; i < plan.count; ++i) {
    CHECK(cudaMemsetAsync(out, 0xFF, (size_t)c_elems * gk_dtype_size(tout), stream));
    if (plan.run(lt, i, sets[0], out, stream) != cudaSuccess) continue;
    int64_t nonfinite = 0;
    double err = rel_diff(tout, out, gk_dtype_result(md.dtype), ref, c_elems, sums, &nonfinite,
                          stream);
    if (nonfinite > 0 || !(err <= md.tol)) {
      printf("    cublasLt %s algo %d: check failed (%.1e, %lld non-finite)\n", label, i, err,
             (long long)nonfinite);
      continue;
    }
    bool ok;
    double ms = time_launches([&](int s) { return plan.run(lt, i, sets[s], out, stream); },
                              (int)sets.size(), stream, reps, &ok);
    if (!ok) continue;
    double tflops = flops / (ms * 1e-3) / 1e12;
    if (isnan(*best) || tflops > *best) *best = tflops, *via = label;
  }
}

/* True when name is one of list's comma-separated names. */
bool listed(const char *list, const char *name) {
  const size_t len = strlen(name);
  for (const char *at = list; at != NULL; at = strchr(at, ',')) {
    at += *at == ',';
    if (strncmp(at, name, len) == 0 && (at[len] == ',' || at[len] == '\0')) return true;
  }
  return false;
}

/* Device buffers of one row, freed together when it goes. */
struct device_buffers {
  std::vector<void *> held;
  void *alloc(size_t bytes) {
    void *p = NULL;
    CHECK(cudaMalloc(&p, bytes));
    held.push_back(p);
    return p;
  }
  ~device_buffers() {
    for (void *p : held) CHECK(cudaFree(p));
  }
};

/* ---- the complex gemm ----------------------------------------------------------------- */

/* Ours: gk_gpu_gemm (the complex problem on the real kernels); cuBLAS: cublasCgemm / Zgemm of
 * the same row-major problem (C^T = B^T A^T column-major). */
cudaError_t complex_ours(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  return gk_gpu_gemm(ctx, p, "auto", stream, NULL);
}

cudaError_t complex_cublas(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  cublasHandle_t h = (cublasHandle_t)gk_gpu_ctx_cublas(ctx);
  if (h == NULL || cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
  if (cublasSetMathMode(h, p->fast ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) !=
      CUBLAS_STATUS_SUCCESS)
    return cudaErrorUnknown;
  const int m = (int)p->m, n = (int)p->n, k = (int)p->k;
  cublasStatus_t st;
  if (p->dtype == GK_C64) {
    const cuComplex alpha = {(float)p->alpha, (float)p->alpha_im}, beta = {0.0f, 0.0f};
    st = cublasCgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, (const cuComplex *)p->b, n,
                     (const cuComplex *)p->a, k, &beta, (cuComplex *)p->c, n);
  } else {
    const cuDoubleComplex alpha = {p->alpha, p->alpha_im}, beta = {0.0, 0.0};
    st = cublasZgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, (const cuDoubleComplex *)p->b,
                     n, (const cuDoubleComplex *)p->a, k, &beta, (cuDoubleComplex *)p->c, n);
  }
  cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
  return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

/* One complex row: random a and b (their real pairs uniform in [-1, 1)), C = (1 - 0.5i) A B
 * into poisoned outputs, ours against cuBLAS, then both timed (8 m n k flops each). */
row bench_complex(gk_gpu_ctx *ctx, const mode &md, const shape &sh, const options &opt,
                  cudaStream_t stream, double *sums) {
  row r = {md.name, sh.label, "-", NAN, NAN, NAN, md.tol, NAN, "-", false, NULL};
  const gk_dtype part = md.dtype == GK_C64 ? GK_F32 : GK_F64;
  const size_t es = elem_size(md.dtype);
  const int64_t a_elems = sh.m * sh.k * sh.batch, b_elems = sh.k * sh.n * sh.batch;
  const int64_t c_elems = sh.m * sh.n * sh.batch;
  device_buffers buffers; /* freed when the row returns */
  auto dalloc = [&](size_t bytes) { return buffers.alloc(bytes); };
  gk_problem p;
  memset(&p, 0, sizeof(p));
  p.dtype = md.dtype, p.fast = md.fast, p.m = sh.m, p.n = sh.n, p.k = sh.k, p.batch = sh.batch;
  p.alpha = 1.0, p.alpha_im = -0.5, p.beta = 0.0;
  p.a = dalloc((size_t)a_elems * es);
  p.b = dalloc((size_t)b_elems * es);
  fill(part, (void *)p.a, 2 * a_elems, opt.seed * 7919u + 1u, stream);
  fill(part, (void *)p.b, 2 * b_elems, opt.seed * 7919u + 2u, stream);
  std::vector<gk_problem> ours(1, p), ref(1, p);
  ours[0].c = dalloc((size_t)c_elems * es);
  ref[0].c = dalloc((size_t)c_elems * es);
  CHECK(cudaMemsetAsync(ours[0].c, 0xFF, (size_t)c_elems * es, stream));
  CHECK(cudaMemsetAsync(ref[0].c, 0xFF, (size_t)c_elems * es, stream));
  const gk_kernel *used = NULL;
  cudaError_t e1 = gk_gpu_gemm(ctx, &ours[0], "auto", stream, &used);
  cudaError_t e2 = complex_cublas(ctx, &ref[0], stream);
  cudaError_t e3 = cudaStreamSynchronize(stream);
  r.kernel = used ? used->name : "?"; /* the real kernel the complex gemm ran on */
  if (e1 != cudaSuccess || e2 != cudaSuccess || e3 != cudaSuccess) {
    fprintf(stderr, "bench_kernels: %s %s: ours %s / cublas %s / sync %s\n", md.name, sh.label,
            cudaGetErrorString(e1), cudaGetErrorString(e2), cudaGetErrorString(e3));
    r.why = "launch error";
    if (e3 != cudaSuccess) exit(2);
  } else {
    int64_t nonfinite = 0;
    r.err = rel_diff(part, ours[0].c, part, ref[0].c, 2 * c_elems, sums, &nonfinite, stream);
    if (nonfinite > 0) r.why = "unwritten/NaN outputs";
    else if (!(r.err <= md.tol)) r.why = "error over tolerance";
    else r.pass = true;
  }
  if (r.pass) {
    const double flops = 8.0 * (double)sh.m * (double)sh.n * (double)sh.k * (double)sh.batch;
    const int reps = opt.reps > 0 ? opt.reps : 10;
    const gk_kernel k_ours = {"complex", "", NULL, complex_ours, 0};
    const gk_kernel k_ref = {"cublas_complex", "", NULL, complex_cublas, 0};
    bool ok_ours, ok_ref;
    const double ms_ours = time_kernel(ctx, &k_ours, ours, stream, reps, &ok_ours);
    const double ms_ref = time_kernel(ctx, &k_ref, ref, stream, reps, &ok_ref);
    if (ok_ours) r.ours_tflops = flops / (ms_ours * 1e-3) / 1e12;
    if (ok_ref) r.cublas_tflops = r.ex_tflops = flops / (ms_ref * 1e-3) / 1e12, r.via = "gemm";
    if (!ok_ours) r.pass = false, r.why = "launch error while timing";
  }
  return r;
}

/* One row: `forced` (a variant) or the selector's choice, against cuBLAS. */
row bench_one(gk_gpu_ctx *ctx, const mode &md, const shape &sh, const options &opt,
              cudaStream_t stream, double *sums, const gk_kernel *forced, const lt_state *lt) {
  if (gk_dtype_is_complex(md.dtype)) return bench_complex(ctx, md, sh, opt, stream, sums);
  row r = {md.name, sh.label, "-", NAN, NAN, NAN, md.tol, NAN, "-", false, NULL};
  const int cc = gk_gpu_ctx_cc(ctx);
  const size_t es = elem_size(md.dtype);
  const gk_dtype c_dtype = gk_dtype_result(md.dtype); /* i8 gives i32, fp8 f32 */
  const bool fp8 = gk_dtype_is_fp8(md.dtype); /* checked against tiled16, timed against Lt */
  const size_t ces = elem_size(c_dtype);
  const int64_t a_elems = sh.m * sh.k * sh.batch, b_elems = sh.k * sh.n * sh.batch;
  const int64_t c_elems = sh.m * sh.n * sh.batch;
  const size_t set_bytes = (size_t)(a_elems + b_elems) * es;
  /* enough sets that consecutive runs never find their inputs in a 50-60 MB L2 */
  const size_t min_rotation = 192u << 20;
  int nsets = (int)std::min<size_t>(8, std::max<size_t>(1, (min_rotation + set_bytes - 1) / set_bytes));
  if (nsets > 1 && nsets < 3) nsets = 3;

  gk_problem proto;
  memset(&proto, 0, sizeof(proto));
  proto.dtype = md.dtype, proto.fast = md.fast, proto.trans_a = false, proto.trans_b = md.trans_b;
  proto.m = sh.m, proto.n = sh.n, proto.k = sh.k, proto.batch = sh.batch;
  proto.alpha = 1.0, proto.beta = 0.0;

  const gk_kernel *ours = forced ? forced : gk_select(&proto, cc, opt.kernel);
  const gk_kernel *ref = gk_kernel_by_name(fp8 ? "tiled16" : "cublas");
  if (ours == NULL || ref == NULL) {
    r.why = "no kernel";
    return r;
  }
  r.kernel = ours->name;

  device_buffers buffers; /* freed when the row returns */
  auto dalloc = [&](size_t bytes) { return buffers.alloc(bytes); };
  std::vector<gk_problem> sets(nsets, proto), ref_sets(nsets, proto);
  void *c_ours = dalloc((size_t)c_elems * ces), *c_ref = dalloc((size_t)c_elems * ces);
  for (int s = 0; s < nsets; ++s) {
    void *a = dalloc((size_t)a_elems * es), *b = dalloc((size_t)b_elems * es);
    fill(md.dtype, a, a_elems, opt.seed * 7919u + 2u * (uint64_t)s + 1u, stream);
    fill(md.dtype, b, b_elems, opt.seed * 7919u + 2u * (uint64_t)s + 2u, stream);
    sets[s].a = ref_sets[s].a = a;
    sets[s].b = ref_sets[s].b = b;
    sets[s].c = c_ours;
    ref_sets[s].c = c_ref;
  }

  /* correctness first: poisoned outputs (0xFF bytes: NaN in every float dtype; i32's -1 is a
   * value, but its check is exact, so an unwritten element shows unless -1 is its result) */
  /* everything runs on `stream` (non-blocking: it does not wait for the legacy default stream) */
  CHECK(cudaMemsetAsync(c_ours, 0xFF, (size_t)c_elems * ces, stream));
  CHECK(cudaMemsetAsync(c_ref, 0xFF, (size_t)c_elems * ces, stream));
  cudaError_t e1 = ours->launch(ctx, &sets[0], stream);
  cudaError_t e2 = ref->launch(ctx, &ref_sets[0], stream);
  cudaError_t e3 = cudaStreamSynchronize(stream);
  if (e1 != cudaSuccess || e2 != cudaSuccess || e3 != cudaSuccess) {
    fprintf(stderr, "bench_kernels: %s %s %s: launch %s / cublas %s / sync %s\n", md.name,
            sh.label, ours->name, cudaGetErrorString(e1), cudaGetErrorString(e2),
            cudaGetErrorString(e3));
    r.why = "launch error";
    if (e3 != cudaSuccess) exit(2); /* a fault leaves the context unusable */
  } else {
    int64_t nonfinite = 0;
    r.err = rel_diff(c_dtype, c_ours, c_dtype, c_ref, c_elems, sums, &nonfinite, stream);
    if (nonfinite > 0) r.why = "unwritten/NaN outputs";
    else if (!(r.err <= md.tol)) r.why = "error over tolerance";
    else r.pass = true;
  }

  if (r.pass) {
    const double flops = 2.0 * (double)sh.m * (double)sh.n * (double)sh.k * (double)sh.batch;
    /* run count: about 0.2 s of our kernel, between 5 and 50 (unless --reps) */
    int reps = opt.reps;
    if (reps <= 0) {
      bool ok;
      double one = time_kernel(ctx, ours, sets, stream, 1, &ok);
      reps = ok && one > 0 ? (int)std::min(50.0, std::max(5.0, 200.0 / one)) : 5;
    }
    bool ok_ours, ok_ref;
    double ms_ours = time_kernel(ctx, ours, sets, stream, reps, &ok_ours);
    double ms_ref = fp8 ? (ok_ref = false, NAN) : time_kernel(ctx, ref, ref_sets, stream, reps, &ok_ref);
    CHECK(cudaStreamSynchronize(stream));
    if (ok_ours) r.ours_tflops = flops / (ms_ours * 1e-3) / 1e12;
    if (ok_ref) r.cublas_tflops = r.ex_tflops = flops / (ms_ref * 1e-3) / 1e12, r.via = "ex";
    if (!ok_ours) r.pass = false, r.why = "launch error while timing";
    if (lt != NULL) {
      /* the check reference again: timing left another input set's product in c_ref */
      CHECK(ref->launch(ctx, &ref_sets[0], stream));
      std::vector<gk_problem> lt_sets(ref_sets);
      void *c_lt = dalloc((size_t)c_elems * std::max<size_t>(ces, 4));
      lt_candidates(*lt, md, lt_sets, cuda_type(c_dtype), c_dtype, c_lt, c_ref, c_elems, flops,
                    reps, sums, stream, &r.cublas_tflops, &r.via, "lt");
      if (md.dtype == GK_F16 || md.dtype == GK_BF16)
        lt_candidates(*lt, md, lt_sets, CUDA_R_32F, GK_F32, c_lt, c_ref, c_elems, flops, reps,
                      sums, stream, &r.cublas_tflops, &r.via, "lt-f32out");
    }
  }
  return r;
}

void print_table(const std::vector<row> &rows, bool markdown, const char *device) {
  if (markdown) {
    printf("\nDevice: %s; commit %s; median of N CUDA-event timings, inputs rotated past L2.\n\n",
           device, GEMMD_GIT_COMMIT);
    printf("| kernel | dtype | shape (m×n×k) | ours TFLOP/s | cuBLAS TFLOP/s (best) | via | cublasGemmEx TFLOP/s | ratio | rel. diff | check |\n");
    printf("| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- |\n");
  } else {
    printf("\n%-28s %-5s %-14s %10s %10s %-9s %10s %7s %9s  %s\n", "kernel", "dtype", "shape",
           "ours", "cublas", "via", "gemmex", "ratio", "rel.diff", "check");
  }
  for (const row &r : rows) {
    char ours[32], ref[32], ratio[32], err[32];
    snprintf(ours, sizeof(ours), r.pass ? "%.1f" : "-", r.ours_tflops);
    snprintf(ref, sizeof(ref), isnan(r.cublas_tflops) ? "-" : "%.1f", r.cublas_tflops);
    snprintf(ratio, sizeof(ratio), r.pass && !isnan(r.cublas_tflops) ? "%.0f%%" : "-",
             100.0 * r.ours_tflops / r.cublas_tflops);
    snprintf(err, sizeof(err), isnan(r.err) ? "-" : "%.1e", r.err);
    char check[96];
    snprintf(check, sizeof(check), "%s%s%s", r.pass ? "PASS" : "FAIL", r.why ? ": " : "",
             r.why ? r.why : "");
    char ex[32];
    snprintf(ex, sizeof(ex), isnan(r.ex_tflops) ? "-" : "%.1f", r.ex_tflops);
    if (markdown)
      printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.kernel, r.mode_name,
             r.shape_label, ours, ref, r.via, ex, ratio, err, check);
    else
      printf("%-28s %-5s %-14s %10s %10s %-9s %10s %7s %9s  %s\n", r.kernel, r.mode_name,
             r.shape_label, ours, ref, r.via, ex, ratio, err, check);
  }
}

/* How many blocks and clusters of 09's kernel fit on the device at once. */
void print_splitk_occupancy() {
  using launcher = gk__simt_splitk_launcher<float, 128, 128, 8, true>;
  auto kernel = gk__simt_splitk_gemm<float, 128, 128, 8, true, false, false, true>;
  size_t smem = 0;
  CHECK(launcher::prepare(kernel, &smem));
  int per_sm = 0, clusters[GK_SPLITK_MAX + 1];
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, smem));
  CHECK(launcher::clusters_at_once(clusters));
  printf("simt_f32_splitk: %zu B shared memory, %d blocks per SM; clusters at once:", smem, per_sm);
  for (int s = 1; s <= GK_SPLITK_MAX; ++s) printf(" S=%d: %d", s, clusters[s]);
  printf("\n");
}

int usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--quick] [--markdown] [--kernel NAME[,NAME...]] [--dtype f32|tf32|f16|bf16|f64|i8|i8nn|e4m3|e5m2|e4m3nn|c64|c64tf|c128] "
          "[--seed N] [--reps N] [--variants] [--ex-only] [--small-batches] [--shape MxNxK[xBATCH]]\n",
          argv0);
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  options opt;
  opt.seed = (uint64_t)time(NULL);
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) opt.quick = true;
    else if (strcmp(argv[i], "--markdown") == 0) opt.markdown = true;
    else if (strcmp(argv[i], "--variants") == 0) opt.variants = true;
    else if (strcmp(argv[i], "--ex-only") == 0) opt.ex_only = true;
    else if (strcmp(argv[i], "--small-batches") == 0) opt.small_batches = true;
    else if (strcmp(argv[i], "--kernel") == 0 && i + 1 < argc) opt.kernel = argv[++i];
    else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) opt.only_dtype = argv[++i];
    else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) opt.seed = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) opt.reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
      shape &sh = opt.one_shape;
      sh.label = argv[++i];
      long long m = 0, n = 0, k = 0, batch = 1;
      if (sscanf(sh.label, "%lldx%lldx%lldx%lld", &m, &n, &k, &batch) < 3 || m < 1 || n < 1 ||
          k < 1 || batch < 1)
        return usage(argv[0]);
      sh.m = m, sh.n = n, sh.k = k, sh.batch = batch;
    }
    else return usage(argv[0]);
  }

  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    fprintf(stderr, "bench_kernels: no CUDA device\n");
    return 2;
  }
  gk_gpu_ctx *ctx = NULL;
  CHECK(gk_gpu_ctx_create(0, &ctx));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  char device[320];
  snprintf(device, sizeof(device), "%s (sm_%d%d, %d SMs)", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
  printf("bench_kernels: %s, commit %s, seed %llu%s\n", device, GEMMD_GIT_COMMIT,
         (unsigned long long)opt.seed, opt.quick ? ", --quick" : "");

  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  double *sums = NULL;
  CHECK(cudaMalloc(&sums, 3 * sizeof(double)));
  lt_state lt_storage;
  const lt_state *lt = NULL;
  if (!opt.ex_only) {
    if (cublasLtCreate(&lt_storage.handle) != CUBLAS_STATUS_SUCCESS) {
      fprintf(stderr, "bench_kernels: cublasLtCreate failed\n");
      return 2;
    }
    CHECK(cudaMalloc(&lt_storage.workspace, LT_WORKSPACE));
    lt = &lt_storage;
  }

  std::vector<row> rows;
  bool all_pass = true;
  auto record = [&](const row &r) {
    printf("  %-28s %-5s %-14s ours %8.1f  cublas %8.1f (%s; gemmex %.1f) TFLOP/s  diff %.1e  %s\n",
           r.kernel, r.mode_name, r.shape_label, r.ours_tflops, r.cublas_tflops, r.via,
           r.ex_tflops, r.err, r.pass ? "PASS" : "FAIL");
    fflush(stdout);
    all_pass = all_pass && r.pass;
    rows.push_back(r);
  };
  if (opt.variants) {
    print_splitk_occupancy();
    for (const variant &v : kVariants) {
      const mode &md = kModes[v.mode];
      if (strcmp(opt.kernel, "auto") != 0 && !listed(opt.kernel, v.kernel.name)) continue;
      if (opt.only_dtype && strcmp(opt.only_dtype, md.name) != 0) continue;
      if (opt.small_batches) {
        for (const shape &sh : kSmallBatches)
          record(bench_one(ctx, md, sh, opt, stream, sums, &v.kernel, lt));
        continue;
      }
      for (const shape &sh : kVariantShapes)
        if (!opt.quick || sh.quick) record(bench_one(ctx, md, sh, opt, stream, sums, &v.kernel, lt));
    }
  } else {
    for (const mode &md : kModes) {
      if (opt.only_dtype && strcmp(opt.only_dtype, md.name) != 0) continue;
      if (opt.small_batches) {
        for (const shape &sh : kSmallBatches)
          record(bench_one(ctx, md, sh, opt, stream, sums, NULL, lt));
        continue;
      }
      const bool one = opt.one_shape.label != NULL;
      for (const shape &sh : one ? std::vector<shape>{opt.one_shape}
                                 : std::vector<shape>(std::begin(kShapes), std::end(kShapes))) {
        if (opt.quick && !sh.quick) continue;
        /* complex: 1024^3 and the issue's target shape, 4096^3 (or the one --shape) */
        if (!one && gk_dtype_is_complex(md.dtype) &&
            (sh.batch != 1 || (sh.m != 1024 && sh.m != 4096)))
          continue;
        /* one row per name of --kernel's list */
        for (const char *name = opt.kernel; name != NULL; name = strchr(name, ',')) {
          name += *name == ',';
          char one[64];
          snprintf(one, sizeof(one), "%.*s", (int)strcspn(name, ","), name);
          options named = opt;
          named.kernel = one;
          record(bench_one(ctx, md, sh, named, stream, sums, NULL, lt));
        }
      }
    }
  }
  print_table(rows, opt.markdown, device);
  CHECK(cudaFree(sums));
  if (lt != NULL) {
    CHECK(cudaFree(lt_storage.workspace));
    cublasLtDestroy(lt_storage.handle);
  }
  CHECK(cudaStreamDestroy(stream));
  gk_gpu_ctx_destroy(ctx);
  return all_pass ? 0 : 1;
}
