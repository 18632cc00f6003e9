/* cuda_gemm.c - a matrix product on matrices that already live in this program's GPU memory:
 * gemmd computes from and into them on the device (CUDA IPC), no byte crosses the socket.
 *
 *   cc cuda_gemm.c $(pkg-config --cflags --libs gemmclient) -I/usr/local/cuda/include \
 *      -L/usr/local/cuda/lib64 -lcudart -o cuda_gemm
 *   GEMMD_ADDRESS=unix:/run/gemmd/gemmd.sock ./cuda_gemm
 *
 * Needs gemmd on this machine's GPUs (its info lists "cuda_ipc"). C = A * B for 512x512 f32
 * matrices in one cudaMalloc (a multiple of 2 MiB: the IPC handle then covers this allocation
 * alone), checked on the host against a double-precision loop. Exit status 0 when the answer is
 * right, 77 when there is no GPU here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <gemmclient.h>

enum { N = 512 };
#define GRANULE (2u << 20) /* a, b and c (3 MiB) take two of them */

static int cuda_failed(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return 1;
}

int main(void) {
  size_t elems = (size_t)N * N, bytes = 3 * elems * sizeof(float);
  size_t alloc = (bytes + GRANULE - 1) / GRANULE * GRANULE;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("no CUDA device here\n");
    return 77;
  }
  float *host = malloc(3 * elems * sizeof(float)), *dev = NULL;
  if (!host) return 1;
  for (size_t i = 0; i < 2 * elems; i++) host[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;

  /* The matrices on the GPU, as a CUDA program would have them. */
  char bus[32];
  cudaIpcMemHandle_t handle;
  if (cuda_failed(cudaMalloc((void **)&dev, alloc), "cudaMalloc") ||
      cuda_failed(cudaMemcpy(dev, host, 2 * elems * sizeof(float), cudaMemcpyHostToDevice),
                  "cudaMemcpy") ||
      /* gemmd is another process: our writes must be complete before it reads */
      cuda_failed(cudaDeviceSynchronize(), "cudaDeviceSynchronize") ||
      cuda_failed(cudaIpcGetMemHandle(&handle, dev), "cudaIpcGetMemHandle") ||
      cuda_failed(cudaDeviceGetPCIBusId(bus, (int)sizeof bus, 0), "cudaDeviceGetPCIBusId"))
    return 1;

  gc_conn *conn;
  if (gc_connect(NULL, &conn) != 0) { /* NULL: $GEMMD_ADDRESS, then the default socket */
    fprintf(stderr, "connect: %s\n", gc_last_error(NULL)->message);
    return 1;
  }
  /* From here, pointers inside [dev, dev + alloc) go to gemmd by reference. */
  if (gc_cuda_register(conn, &handle, bus, dev, alloc, 10000, NULL) != 0) {
    fprintf(stderr, "gc_cuda_register: %s\n", gc_last_error(conn)->message);
    return 1;
  }
  gc_gemm_opts opts;
  gc_gemm_opts_init(&opts);
  opts.m = opts.n = opts.k = N;
  float *a = dev, *b = dev + elems, *c = dev + 2 * elems;
  if (gc_gemm(conn, &opts, a, b, NULL, c, NULL) != 0) {
    fprintf(stderr, "gemm: %s\n", gc_last_error(conn)->message);
    return 1;
  }
  /* The result is in c on the GPU once gc_gemm returns. */
  float *got = host + 2 * elems;
  if (cuda_failed(cudaMemcpy(got, c, elems * sizeof(float), cudaMemcpyDeviceToHost),
                  "cudaMemcpy back"))
    return 1;
  (void)gc_cuda_unregister(conn, dev, 10000); /* gc_close would, too */
  gc_close(conn);
  cudaFree(dev);

  /* each error against the sum of |a||b| of its dot product: f32 stays far below 1e-4 of it */
  double worst = 0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      double want = 0, scale = 0;
      for (int l = 0; l < N; l++) {
        double p = (double)host[i * N + l] * host[elems + (size_t)l * N + j];
        want += p;
        scale += fabs(p);
      }
      double err = fabs(got[i * N + j] - want) / scale;
      if (!(err <= worst)) worst = err; /* NaN: unwritten */
    }
  printf("C = A * B (%dx%d, f32) on the GPU through gemmd: max relative error %.2e\n", N, N,
         worst);
  free(host);
  return worst <= 1e-4 ? 0 : 1;
}
