/*
 * socket.c - bench_socket: the rate one Unix stream socket moves bytes at on this machine,
 * the ceiling of gemmd's socket path (a gemm over the socket moves A and B one way and C
 * back, so 4096^3 f32 moves 192 MiB).
 *
 * A writer thread sends --mib MiB in --chunk MiB writes over a socketpair to a reader that
 * reads into one --chunk buffer, as the daemon reads a payload into staging. Each send-buffer
 * size in --sndbuf (bytes, 0 = the system default) is set on the writer with SO_SNDBUF, then
 * SO_SNDBUFFORCE where the limit net.core.wmem_max refuses it (root only); the size the kernel
 * granted is printed beside the rate. Best of --reps runs. Prints a markdown table for
 * bench/RESULTS.md.
 *
 *   bench_socket [--mib N] [--chunk MIB] [--reps N] [--sndbuf 0,1048576,4194304]
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZES 16

typedef struct {
  int fd;
  size_t total, chunk;
  int err; /* errno of a failed write, 0 */
} writer_args;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *writer_main(void *arg) {
  writer_args *w = arg;
  uint8_t *buf = malloc(w->chunk);
  if (!buf) {
    w->err = ENOMEM;
    return NULL;
  }
  memset(buf, 0x5a, w->chunk);
  for (size_t left = w->total; left > 0;) {
    ssize_t n = write(w->fd, buf, left < w->chunk ? left : w->chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      w->err = n < 0 ? errno : EPIPE;
      break;
    }
    left -= (size_t)n;
  }
  free(buf);
  return NULL;
}

/* Sets the writer's send buffer; returns the size granted (the kernel doubles the request),
 * or -1. */
static int set_sndbuf(int fd, int bytes) {
  if (bytes > 0 && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes) != 0)
    return -1;
  int granted = 0;
  socklen_t len = sizeof granted;
  if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &granted, &len) != 0)
    return -1;
  /* SO_SNDBUF is capped at net.core.wmem_max; root may go past it */
  if (bytes > 0 && granted < bytes &&
      setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) == 0 &&
      getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &granted, &len) != 0)
    return -1;
  return granted;
}

/* One transfer of total bytes; returns GB/s, or a negative value on failure. */
static double transfer(int sndbuf, size_t total, size_t chunk, int *granted) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
    perror("bench_socket: socketpair");
    return -1;
  }
  double rate = -1;
  uint8_t *buf = malloc(chunk);
  *granted = set_sndbuf(sv[0], sndbuf);
  writer_args w = {sv[0], total, chunk, 0};
  pthread_t tid;
  if (!buf || *granted < 0 || pthread_create(&tid, NULL, writer_main, &w) != 0) {
    fprintf(stderr, "bench_socket: set-up failed (%s)\n", strerror(errno));
    goto out;
  }
  double t0 = now_s();
  size_t got = 0;
  while (got < total) {
    ssize_t n = read(sv[1], buf, chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  double t1 = now_s();
  if (pthread_join(tid, NULL) != 0 || w.err || got != total)
    fprintf(stderr, "bench_socket: transfer failed (%s, %zu of %zu bytes)\n", strerror(w.err),
            got, total);
  else
    rate = (double)total / (t1 - t0) / 1e9;
out:
  free(buf);
  close(sv[0]);
  close(sv[1]);
  return rate;
}

static int parse_sizes(const char *s, int *out) {
  int n = 0;
  for (char *end; *s && n < MAX_SIZES; s = *end ? end + 1 : end) {
    long v = strtol(s, &end, 10);
    if (end == s || v < 0 || v > (1L << 30) || (*end && *end != ','))
      return -1;
    out[n++] = (int)v;
  }
  return n;
}

int main(int argc, char **argv) {
  size_t mib = 2048, chunk_mib = 8;
  int reps = 3, sizes[MAX_SIZES] = {0, 1 << 20, 4 << 20}, nsizes = 3;
  for (int i = 1; i < argc; i++) {
    bool has_value = i + 1 < argc;
    if (has_value && strcmp(argv[i], "--mib") == 0)
      mib = strtoull(argv[++i], NULL, 10);
    else if (has_value && strcmp(argv[i], "--chunk") == 0)
      chunk_mib = strtoull(argv[++i], NULL, 10);
    else if (has_value && strcmp(argv[i], "--reps") == 0)
      reps = atoi(argv[++i]);
    else if (has_value && strcmp(argv[i], "--sndbuf") == 0)
      nsizes = parse_sizes(argv[++i], sizes);
    else
      nsizes = -1;
    if (nsizes < 0 || mib == 0 || chunk_mib == 0 || chunk_mib > 1024 || reps < 1) {
      fprintf(stderr, "usage: bench_socket [--mib N] [--chunk MIB] [--reps N] "
                      "[--sndbuf 0,1048576,...]\n");
      return 2;
    }
  }
  size_t total = mib << 20, chunk = chunk_mib << 20;
  printf("| SO_SNDBUF asked | granted | GB/s (best of %d, %zu MiB in %zu MiB writes) |\n", reps,
         mib, chunk_mib);
  printf("| ---: | ---: | ---: |\n");
  int rc = 0;
  for (int s = 0; s < nsizes; s++) {
    double best = -1;
    int granted = 0;
    for (int r = 0; r < reps; r++) {
      double rate = transfer(sizes[s], total, chunk, &granted);
      best = rate > best ? rate : best;
    }
    if (best < 0)
      rc = 1;
    printf("| %d | %d | %.2f |\n", sizes[s], granted, best);
  }
  return rc;
}
