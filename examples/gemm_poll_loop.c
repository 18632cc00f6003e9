/* gemm_poll_loop.c - many requests in flight, driven from the caller's own poll() loop.
 *
 *   cc gemm_poll_loop.c $(pkg-config --cflags --libs gemmclient) -o gemm_poll_loop
 *   GEMMD_ADDRESS=unix:/tmp/gemmd.sock ./gemm_poll_loop
 *
 * gc_submit() queues each request and returns at once; the program then waits on gc_fd()
 * next to its own descriptors (here a timer pipe stands in for them): POLLIN always, POLLOUT
 * while gc_pending_sends() > 0, and calls gc_poll(conn, 0, ...) when the socket is ready to
 * collect whatever completed, in any order. Each result is checked. */
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include <gemmclient.h>

enum { JOBS = 16, M = 64, N = 48, K = 80 };

typedef struct {
  float a[M * K], b[K * N], c[M * N];
  double alpha;
} job;

static int check(const job *j) {
  for (int i = 0; i < M; i++)
    for (int n = 0; n < N; n++) {
      double want = 0, scale = 0;
      for (int l = 0; l < K; l++) {
        want += (double)j->a[i * K + l] * j->b[l * N + n];
        scale += fabs((double)j->a[i * K + l] * j->b[l * N + n]);
      }
      want *= j->alpha;
      if (fabs(j->c[i * N + n] - want) > 1e-5 * (fabs(j->alpha) * scale + 1.0)) return -1;
    }
  return 0;
}

int main(void) {
  job *jobs = calloc(JOBS, sizeof(job));
  if (jobs == NULL) return 1;
  gc_conn *conn;
  if (gc_connect(NULL, &conn) != 0) {
    fprintf(stderr, "connect: %s\n", gc_last_error(NULL)->message);
    return 1;
  }
  gc_req ids[JOBS];
  for (int t = 0; t < JOBS; t++) {
    job *j = &jobs[t];
    for (int i = 0; i < M * K; i++) j->a[i] = (float)((i + t) % 17) / 17.0f - 0.5f;
    for (int i = 0; i < K * N; i++) j->b[i] = (float)((i * 3 + t) % 19) / 19.0f - 0.5f;
    j->alpha = 1.0 + t;
    gc_gemm_opts opts;
    gc_gemm_opts_init(&opts);
    opts.m = M;
    opts.n = N;
    opts.k = K;
    opts.alpha = j->alpha;
    if (gc_submit(conn, &opts, j->a, j->b, NULL, j->c, &ids[t]) != 0) {
      fprintf(stderr, "submit: %s\n", gc_last_error(conn)->message);
      return 1;
    }
  }

  int done = 0, wrong = 0;
  while (done < JOBS) {
    struct pollfd fds[1] = {{.fd = gc_fd(conn), .events = POLLIN}};
    if (gc_pending_sends(conn) > 0) fds[0].events |= POLLOUT;
    /* ... the program's own descriptors would sit beside it in fds[] ... */
    if (poll(fds, 1, 10000) <= 0) {
      fprintf(stderr, "no progress in 10 s\n");
      return 1;
    }
    gc_completion completed[JOBS];
    int count = gc_poll(conn, 0, completed, JOBS); /* 0: never blocks */
    if (count < 0) {
      fprintf(stderr, "connection: %s\n", gc_last_error(conn)->message);
      return 1;
    }
    for (int i = 0; i < count; i++) {
      int t = 0;
      while (t < JOBS && ids[t] != completed[i].req) t++;
      if (t == JOBS || completed[i].error.code != 0) {
        fprintf(stderr, "request %u: %s\n", (unsigned)completed[i].req,
                completed[i].error.message);
        return 1;
      }
      if (check(&jobs[t]) != 0) wrong++;
      done++;
    }
  }
  gc_close(conn);
  printf("%d requests completed from the poll loop, %d wrong\n", done, wrong);
  free(jobs);
  return wrong ? 1 : 0;
}
