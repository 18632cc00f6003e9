/*
 * hostbw.c - bench_hostbw: the host bus each GPU has, alone and all at once, and the links
 * between GPUs: what bounds a multi-GPU run (bench/RESULTS.md, "Multi-GPU runs left to make").
 *
 * One thread per GPU, bound to the CPUs next to it (sysfs local_cpulist of its PCI function, as
 * the daemon's workers are), allocates --bytes of pinned host memory there (so it lands on that
 * NUMA node) and as much device memory, then:
 *   alone     each GPU in turn: host->device and device->host GB/s (cudaMemcpyAsync, --reps
 *             copies, the best);
 *   together  every GPU at once (a barrier before each direction): each one's GB/s, the sum per
 *             NUMA node and the sum of all: the host memory bandwidth a box-wide run can use;
 *   peer      for each pair that cudaDeviceCanAccessPeer allows: device->device GB/s
 *             (cudaMemcpyPeerAsync with peer access enabled), "-" where it is not allowed.
 * Prints markdown tables and RESULT lines.
 *
 *   bench_hostbw [--bytes MiB] [--reps N]
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define MAX_GPUS 64

static void die(const char *what, const char *detail) {
  fprintf(stderr, "bench_hostbw: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

typedef struct {
  int dev;
  int node;                 /* NUMA node of its PCI function (-1: unknown) */
  void *host, *dbuf;
  cudaStream_t stream;
  double alone_h2d, alone_d2h, all_h2d, all_d2h; /* GB/s */
} gpu_t;

static size_t g_bytes;
static int g_reps, g_ngpu;
static gpu_t g_gpu[MAX_GPUS];
static pthread_barrier_t g_barrier;

/* The first line of a sysfs file of the device's PCI function into buf; false without one. */
static bool pci_file(int dev, const char *name, char *buf, size_t len) {
  char bus[32], path[160];
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess)
    return false;
  for (char *p = bus; *p; p++) /* sysfs spells it in lower case */
    if (*p >= 'A' && *p <= 'F')
      *p = (char)(*p - 'A' + 'a');
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/%s", bus, name);
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  bool ok = fgets(buf, (int)len, f) != NULL;
  fclose(f);
  return ok;
}

/* Runs the calling thread on the CPUs sysfs lists next to dev (best effort). */
static void bind_near(int dev) {
  char list[4096];
  if (!pci_file(dev, "local_cpulist", list, sizeof list))
    return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (char *p = list; *p && *p != '\n';) {
    char *end;
    long lo = strtol(p, &end, 10), hi = lo;
    if (end == p)
      return;
    if (*end == '-')
      hi = strtol(end + 1, &end, 10);
    for (long c = lo; c <= hi && c < CPU_SETSIZE; c++)
      CPU_SET((int)c, &set);
    p = *end == ',' ? end + 1 : end;
  }
  if (CPU_COUNT(&set) > 0)
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Best GB/s of --reps copies of g_bytes in one direction on gpu's stream. */
static double copy_rate(gpu_t *g, bool h2d) {
  double best = 0;
  for (int r = 0; r < g_reps; r++) {
    double t0 = bench_now_ms();
    CUDA_OK(h2d ? cudaMemcpyAsync(g->dbuf, g->host, g_bytes, cudaMemcpyHostToDevice, g->stream)
                : cudaMemcpyAsync(g->host, g->dbuf, g_bytes, cudaMemcpyDeviceToHost, g->stream));
    CUDA_OK(cudaStreamSynchronize(g->stream));
    double gbs = (double)g_bytes / ((bench_now_ms() - t0) / 1e3) / 1e9;
    if (gbs > best)
      best = gbs;
  }
  return best;
}

static void *gpu_thread(void *arg) {
  gpu_t *g = arg;
  bind_near(g->dev);
  CUDA_OK(cudaSetDevice(g->dev));
  CUDA_OK(cudaHostAlloc(&g->host, g_bytes, cudaHostAllocPortable));
  memset(g->host, 1, g_bytes); /* its pages on this thread's node */
  CUDA_OK(cudaMalloc(&g->dbuf, g_bytes));
  CUDA_OK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
  (void)copy_rate(g, true); /* warm-up */
  /* alone: GPU i goes in round i, the others wait at the barriers */
  for (int i = 0; i < g_ngpu; i++) {
    pthread_barrier_wait(&g_barrier);
    if (g == &g_gpu[i]) {
      g->alone_h2d = copy_rate(g, true);
      g->alone_d2h = copy_rate(g, false);
    }
  }
  pthread_barrier_wait(&g_barrier);
  g->all_h2d = copy_rate(g, true);
  pthread_barrier_wait(&g_barrier);
  g->all_d2h = copy_rate(g, false);
  pthread_barrier_wait(&g_barrier);
  return NULL;
}

/* Device->device GB/s from i to j (best of --reps), or -1 where peer access is not allowed. */
static double peer_rate(int i, int j) {
  int can = 0;
  if (i == j || cudaDeviceCanAccessPeer(&can, j, i) != cudaSuccess || !can) {
    (void)cudaGetLastError();
    return -1;
  }
  CUDA_OK(cudaSetDevice(j));
  cudaError_t e = cudaDeviceEnablePeerAccess(i, 0);
  if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
    die("cudaDeviceEnablePeerAccess", cudaGetErrorString(e));
  (void)cudaGetLastError();
  double best = 0;
  for (int r = 0; r < g_reps; r++) {
    double t0 = bench_now_ms();
    CUDA_OK(cudaMemcpyPeerAsync(g_gpu[j].dbuf, j, g_gpu[i].dbuf, i, g_bytes, g_gpu[j].stream));
    CUDA_OK(cudaStreamSynchronize(g_gpu[j].stream));
    double gbs = (double)g_bytes / ((bench_now_ms() - t0) / 1e3) / 1e9;
    best = gbs > best ? gbs : best;
  }
  return best;
}

static void peer_table(void) {
  static double rate[MAX_GPUS][MAX_GPUS];
  for (int i = 0; i < g_ngpu; i++)
    for (int j = 0; j < g_ngpu; j++)
      rate[i][j] = peer_rate(i, j);
  printf("\n| peer GB/s (row: from) |");
  for (int j = 0; j < g_ngpu; j++)
    printf(" cuda:%d |", j);
  printf("\n|---|");
  for (int j = 0; j < g_ngpu; j++)
    printf("---|");
  printf("\n");
  for (int i = 0; i < g_ngpu; i++) {
    printf("| cuda:%d |", i);
    for (int j = 0; j < g_ngpu; j++) {
      if (rate[i][j] < 0)
        printf(" - |");
      else
        printf(" %.0f |", rate[i][j]);
    }
    printf("\n");
  }
  for (int i = 0; i < g_ngpu; i++)
    for (int j = 0; j < g_ngpu; j++)
      if (rate[i][j] >= 0)
        printf("RESULT peer from=%d to=%d gbs=%.1f\n", i, j, rate[i][j]);
}

int main(int argc, char **argv) {
  size_t mib = 1024;
  g_reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--bytes") == 0)
      mib = strtoull(argv[i + 1], NULL, 10);
    else if (strcmp(argv[i], "--reps") == 0)
      g_reps = atoi(argv[i + 1]);
    else
      die("unknown option", argv[i]);
  }
  if (mib == 0 || g_reps <= 0)
    die("usage", "bench_hostbw [--bytes MiB] [--reps N]");
  g_bytes = mib << 20;
  CUDA_OK(cudaGetDeviceCount(&g_ngpu));
  if (g_ngpu > MAX_GPUS)
    g_ngpu = MAX_GPUS;
  if (pthread_barrier_init(&g_barrier, NULL, (unsigned)g_ngpu) != 0)
    die("pthread_barrier_init", strerror(errno));
  pthread_t th[MAX_GPUS];
  for (int i = 0; i < g_ngpu; i++) {
    char node[32];
    g_gpu[i].dev = i;
    g_gpu[i].node = pci_file(i, "numa_node", node, sizeof node) ? atoi(node) : -1;
    if (pthread_create(&th[i], NULL, gpu_thread, &g_gpu[i]) != 0)
      die("pthread_create", strerror(errno));
  }
  for (int i = 0; i < g_ngpu; i++)
    pthread_join(th[i], NULL);
  printf("Pinned host memory on each GPU's NUMA node, %zu MiB copies, best of %d.\n\n", mib,
         g_reps);
  printf("| GPU | NUMA node | H2D alone GB/s | D2H alone | H2D all at once | D2H all at once |\n");
  printf("|---|---|---|---|---|---|\n");
  double sum_h2d = 0, sum_d2h = 0;
  for (int i = 0; i < g_ngpu; i++) {
    gpu_t *g = &g_gpu[i];
    printf("| cuda:%d | %d | %.1f | %.1f | %.1f | %.1f |\n", i, g->node, g->alone_h2d,
           g->alone_d2h, g->all_h2d, g->all_d2h);
    printf("RESULT hostbw gpu=%d node=%d alone_h2d=%.1f alone_d2h=%.1f all_h2d=%.1f "
           "all_d2h=%.1f\n", i, g->node, g->alone_h2d, g->alone_d2h, g->all_h2d, g->all_d2h);
    sum_h2d += g->all_h2d;
    sum_d2h += g->all_d2h;
  }
  for (int node = -1; node < 64; node++) {
    double h = 0, d = 0;
    int n = 0;
    for (int i = 0; i < g_ngpu; i++)
      if (g_gpu[i].node == node) {
        h += g_gpu[i].all_h2d;
        d += g_gpu[i].all_d2h;
        n++;
      }
    if (n)
      printf("RESULT hostbw node=%d gpus=%d all_h2d=%.1f all_d2h=%.1f\n", node, n, h, d);
  }
  printf("RESULT hostbw all gpus=%d all_h2d=%.1f all_d2h=%.1f\n", g_ngpu, sum_h2d, sum_d2h);
  peer_table();
  return 0;
}
