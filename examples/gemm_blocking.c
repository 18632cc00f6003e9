/* gemm_blocking.c - one blocking matrix product through libgemmclient.
 *
 *   cc gemm_blocking.c $(pkg-config --cflags --libs gemmclient) -o gemm_blocking
 *   GEMMD_ADDRESS=unix:/tmp/gemmd.sock ./gemm_blocking
 *
 * C = 2 * A * B^T + 0.5 * C for a 300x200 A and a 100x200 B (B stored transposed), checked
 * against a double-precision loop. Exit status 0 when the answer is right. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <gemmclient.h>

enum { M = 300, N = 100, K = 200 };

int main(void) {
  float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * N * K);
  float *c = malloc(sizeof(float) * M * N), *c0 = malloc(sizeof(float) * M * N);
  if (!a || !b || !c || !c0) return 1;
  for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
  for (int i = 0; i < N * K; i++) b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
  for (int i = 0; i < M * N; i++) c0[i] = c[i] = (float)(i % 3);

  gc_conn *conn;
  if (gc_connect(NULL, &conn) != 0) { /* NULL: $GEMMD_ADDRESS, then the default socket */
    fprintf(stderr, "connect: %s\n", gc_last_error(NULL)->message);
    return 1;
  }
  gc_gemm_opts opts;
  gc_gemm_opts_init(&opts);
  opts.m = M;
  opts.n = N;
  opts.k = K;
  opts.trans_b = 1; /* B is stored N x K */
  opts.alpha = 2.0;
  opts.beta = 0.5;
  opts.timeout_ms = 60000;
  gc_gemm_result result;
  int rc = gc_gemm(conn, &opts, a, b, c, c, &result); /* in place: out may be c */
  if (rc != 0) {
    fprintf(stderr, "gemm: %s: %s\n", gc_code_name(rc), gc_last_error(conn)->message);
    gc_close(conn);
    return 1;
  }
  gc_close(conn);

  int bad = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double want = 0, scale = 0;
      for (int l = 0; l < K; l++) {
        want += (double)a[i * K + l] * b[j * K + l];
        scale += fabs((double)a[i * K + l] * b[j * K + l]);
      }
      want = 2.0 * want + 0.5 * c0[i * N + j];
      if (fabs(c[i * N + j] - want) > 1e-5 * (2.0 * scale + 1.0) && bad++ < 5)
        fprintf(stderr, "C[%d][%d] = %g, expected %g\n", i, j, c[i * N + j], want);
    }
  printf("%dx%dx%d f32 on %s (%s): %s\n", M, N, K, result.device, result.kernel,
         bad ? "WRONG" : "right");
  free(a);
  free(b);
  free(c);
  free(c0);
  return bad ? 1 : 0;
}
