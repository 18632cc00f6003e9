/* gemm_poll_loop.c - many requests in flight, driven from the caller's own poll() loop.
 *
 *   cc gemm_poll_loop.c $(pkg-config --cflags --libs gemmclient) -o gemm_poll_loop
 *   GEMMD_ADDRESS=unix:/tmp/gemmd.sock ./gemm_poll_loop
 *
 * gc_submit() queues each request and returns at once; the program then waits on gc_fd()
 * next to its own descriptors: POLLIN always, POLLOUT while gc_pending_sends() > 0. Before
 * each wait it calls gc_poll(conn, 0, ...) to collect whatever completed, in any order;
 * opts.user, handed back in gc_completion.user, says which job each one was. Each result is
 * checked. */
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
  gc_req req;
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
    opts.user = j; /* comes back in gc_completion.user */
    if (gc_submit(conn, &opts, j->a, j->b, NULL, j->c, &req) != 0) {
      fprintf(stderr, "submit: %s\n", gc_last_error(conn)->message);
      return 1;
    }
  }

  int done = 0, wrong = 0;
  for (;;) {
    /* Collect what has completed first: gc_submit and gc_poll read whatever replies have
     * arrived, so a reply can be complete with nothing left on the socket to wake poll(). */
    gc_completion completed[JOBS];
    int count = gc_poll(conn, 0, completed, JOBS); /* 0: never blocks */
    if (count < 0) {
      fprintf(stderr, "connection: %s\n", gc_last_error(conn)->message);
      return 1;
    }
    for (int i = 0; i < count; i++) {
      job *j = completed[i].user; /* opts.user of its gc_submit */
      if (completed[i].error.code != 0) {
        fprintf(stderr, "request %u: %s\n", (unsigned)completed[i].req,
                completed[i].error.message);
        return 1;
      }
      if (check(j) != 0) wrong++;
      done++;
    }
    if (done == JOBS) break;

    struct pollfd fds[1] = {{.fd = gc_fd(conn), .events = POLLIN}};
    if (gc_pending_sends(conn) > 0) fds[0].events |= POLLOUT;
    /* ... the program's own descriptors would sit beside it in fds[] ... */
    if (poll(fds, 1, 10000) <= 0) {
      fprintf(stderr, "no progress in 10 s (%zu requests in flight)\n", gc_in_flight(conn));
      return 1;
    }
  }
  gc_close(conn);
  printf("%d requests completed from the poll loop, %d wrong\n", done, wrong);
  free(jobs);
  return wrong ? 1 : 0;
}
