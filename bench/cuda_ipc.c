/*
 * cuda_ipc.c - bench_cuda_ipc: a gemm whose operands and result stay in this process's GPU
 * memory, handed to gemmd by CUDA IPC handle (gc_cuda_register), timed end to end beside
 * in-process cuBLAS on the same device buffers.
 *
 *   bench_cuda_ipc --connect unix:PATH [--sizes 1024,4096,8192] [--reps 7] [--device 0]
 *
 * For each size n: one cudaMalloc of A, B and C (n x n f32 each, the whole rounded to 2 MiB so
 * that the IPC handle covers this allocation alone), registered once; then reps gemms through
 * gemmd, one at a time (gc_gemm returns when the result is in C), and the same product by
 * cublasSgemm on this process's stream, synchronised. Prints a markdown row a size: median ms of
 * each and their ratio. gemmd computes exact f32 (its `auto` kernel), as cuBLAS's default math
 * mode does. The first result through gemmd is checked against cuBLAS's (relative to the sum of
 * |a||b| of its row), so a fast wrong answer never makes a row. Needs a gemmd on this machine
 * whose info lists "cuda_ipc".
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "gemmclient.h"

#define MAX_SIZES 8
#define MAX_REPS 50
#define ALIGN_2MIB (2ull << 20)

#ifndef GEMMD_GIT_COMMIT
#define GEMMD_GIT_COMMIT "unknown"
#endif

static void die(const char *what, const char *detail) {
  fprintf(stderr, "bench_cuda_ipc: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

/* Uniform [-1, 1) f32 on the host, copied to dev (synchronously: gemmd reads it next). */
static void fill_device(float *dev, size_t n, uint64_t seed) {
  float *host = malloc(n * sizeof *host);
  if (!host)
    die("out of memory", NULL);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    host[i] = (float)((double)(seed >> 11) * 0x1p-53 * 2 - 1);
  }
  CUDA_OK(cudaMemcpy(dev, host, n * sizeof *host, cudaMemcpyHostToDevice));
  CUDA_OK(cudaDeviceSynchronize());
  free(host);
}

/* Worst |ours - ref| over the first rows, relative to n / 4 (the expected sum of |a||b| for
 * inputs in [-1, 1)): two exact f32 gemms agree within about n * 2^-24 of it; an unwritten
 * (NaN-poisoned) or zero result is off by far more. */
static double worst_error(const float *ours_dev, const float *ref_dev, size_t n) {
  size_t rows = n < 64 ? n : 64, count = rows * n;
  float *ours = malloc(count * sizeof *ours), *ref = malloc(count * sizeof *ref);
  if (!ours || !ref)
    die("out of memory", NULL);
  /* column-major cuBLAS C^T = B^T A^T is row-major C = A B: the same layout */
  CUDA_OK(cudaMemcpy(ours, ours_dev, count * sizeof *ours, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(ref, ref_dev, count * sizeof *ref, cudaMemcpyDeviceToHost));
  double worst = 0, scale = (double)n / 4;
  for (size_t i = 0; i < count; i++) {
    double e = fabs((double)ours[i] - (double)ref[i]) / scale;
    if (!(e <= worst))
      worst = e; /* NaN wins */
  }
  free(ours);
  free(ref);
  return worst;
}

static void run_size(gc_conn *conn, cublasHandle_t blas, const char *bus, size_t n, int reps) {
  size_t elems = n * n, bytes = 3 * elems * sizeof(float);
  size_t alloc = (bytes + ALIGN_2MIB - 1) & ~(size_t)(ALIGN_2MIB - 1);
  float *base = NULL, *ref = NULL;
  CUDA_OK(cudaMalloc((void **)&base, alloc));
  CUDA_OK(cudaMalloc((void **)&ref, elems * sizeof(float)));
  float *a = base, *b = base + elems, *c = base + 2 * elems;
  fill_device(a, elems, 1);
  fill_device(b, elems, 2);
  CUDA_OK(cudaMemset(c, 0xff, elems * sizeof(float))); /* NaN: an unwritten result shows */
  CUDA_OK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t handle;
  CUDA_OK(cudaIpcGetMemHandle(&handle, base));
  if (gc_cuda_register(conn, &handle, bus, base, alloc, 30000, NULL) != 0)
    die("gc_cuda_register", gc_last_error(conn)->message);

  gc_gemm_opts o;
  gc_gemm_opts_init(&o);
  o.m = o.n = o.k = n;
  o.dtype = GC_DTYPE_F32;
  const float one = 1, zero = 0;
  double through[MAX_REPS], local[MAX_REPS], err = 0;
  for (int r = -1; r < reps; r++) { /* r = -1: warm-up (kernel choice, first use of the handle) */
    double t0 = bench_now_ms();
    if (gc_gemm(conn, &o, a, b, NULL, c, NULL) != 0)
      die("gc_gemm", gc_last_error(conn)->message);
    double t1 = bench_now_ms();
    if (cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n, (int)n, &one, b, (int)n, a,
                    (int)n, &zero, ref, (int)n) != CUBLAS_STATUS_SUCCESS)
      die("cublasSgemm", NULL);
    CUDA_OK(cudaDeviceSynchronize());
    double t2 = bench_now_ms();
    if (r == -1) {
      err = worst_error(c, ref, n);
      continue;
    }
    through[r] = t1 - t0;
    local[r] = t2 - t1;
  }
  if (gc_cuda_unregister(conn, base, 30000) != 0)
    die("gc_cuda_unregister", gc_last_error(conn)->message);
  double tm = bench_median(through, reps), lm = bench_median(local, reps);
  bool ok = err <= 2.0 * (double)n * 0x1p-24;
  printf("| %zu | %.2f | %.2f | %.2fx | %.1f | %s (%.1e) |\n", n, tm, lm, tm / lm,
         2.0 * (double)n * (double)n * (double)n / (tm * 1e9), ok ? "right" : "WRONG", err);
  CUDA_OK(cudaFree(ref));
  CUDA_OK(cudaFree(base));
  if (!ok)
    exit(1);
}

int main(int argc, char **argv) {
  const char *addr = getenv("GEMMD_ADDRESS");
  int reps = 7, device = 0, nsizes = 3;
  size_t sizes[MAX_SIZES] = {1024, 4096, 8192};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--connect") && i + 1 < argc) {
      addr = argv[++i];
    } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      device = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
      nsizes = 0;
      for (char *tok = strtok(argv[++i], ","); tok && nsizes < MAX_SIZES; tok = strtok(NULL, ","))
        sizes[nsizes++] = strtoull(tok, NULL, 10);
    } else {
      fprintf(stderr, "usage: %s --connect unix:PATH [--sizes 1024,4096] [--reps N] "
                      "[--device D]\n", argv[0]);
      return 2;
    }
  }
  if (!addr)
    die("no daemon: --connect unix:PATH or GEMMD_ADDRESS", NULL);
  if (reps < 1 || reps > MAX_REPS)
    die("--reps must be 1..50", NULL);
  for (int i = 0; i < nsizes; i++)
    if (sizes[i] < 1 || sizes[i] > 32768)
      die("a size must be 1..32768", NULL);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device) {
    printf("SKIP: no CUDA device %d here\n", device);
    return 77;
  }
  CUDA_OK(cudaSetDevice(device));
  char bus[32];
  CUDA_OK(cudaDeviceGetPCIBusId(bus, (int)sizeof bus, device));
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, device));
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS)
    die("cublasCreate", NULL);
  gc_conn *conn = NULL;
  if (gc_connect(addr, &conn) != 0)
    die("gc_connect", gc_last_error(NULL)->message);
  printf("bench_cuda_ipc: %s, commit %s, %d reps (median), f32, operands and result in this "
         "process's GPU memory\n\n", prop.name, GEMMD_GIT_COMMIT, reps);
  printf("| n | through gemmd, CUDA IPC (ms) | in-process cuBLAS, same buffers (ms) | gemmd / "
         "cuBLAS | gemmd TFLOP/s | result |\n| --- | ---: | ---: | ---: | ---: | --- |\n");
  for (int i = 0; i < nsizes; i++)
    run_size(conn, blas, bus, sizes[i], reps);
  gc_close(conn);
  cublasDestroy(blas);
  return 0;
}
