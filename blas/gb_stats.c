/*
 * gb_stats.c - GEMMD_BLAS_STATS=1: calls and flops sent to gemmd and kept on the CPU, one
 * line on stderr at exit (each process its own: a forked child counts from 0).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gb_internal.h"

static atomic_ullong calls[2];
static _Atomic double flops[2];
static atomic_int registered;
static pid_t counting_pid;

static void report(void) {
  if (getpid() != counting_pid) return;
  fprintf(stderr,
          "libgemmd_blas: %llu calls (%.6g flop) offloaded to gemmd, %llu calls (%.6g flop) "
          "kept on the CPU\n",
          (unsigned long long)atomic_load(&calls[1]), atomic_load(&flops[1]),
          (unsigned long long)atomic_load(&calls[0]), atomic_load(&flops[0]));
}

static void reset_in_child(void) {
  atomic_store(&calls[0], 0);
  atomic_store(&calls[1], 0);
  atomic_store(&flops[0], 0.0);
  atomic_store(&flops[1], 0.0);
  counting_pid = getpid();
}

void gb_stats_count(int offloaded, double f) {
  if (!gb_env()->stats) return;
  if (atomic_exchange(&registered, 1) == 0) {
    counting_pid = getpid();
    pthread_atfork(NULL, NULL, reset_in_child);
    atexit(report);
  }
  int i = offloaded != 0;
  atomic_fetch_add(&calls[i], 1);
  double old = atomic_load(&flops[i]);
  while (!atomic_compare_exchange_weak(&flops[i], &old, old + f)) {
  }
}
