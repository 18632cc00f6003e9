/*
 * gb_remote.c - connections to gemmd for the calls the library sends. BLAS is called from
 * many threads at once: each call takes a connection of its own from a small idle list (a new
 * one when the list is empty), so every thread may hold a call in flight; at most IDLE_MAX
 * stay open between calls. After fork() the child never touches the parent's connections:
 * the list belongs to a pid, and a child finds it is not its own and starts afresh (closing
 * its copies, which leaves the parent's sockets open). A failure closes the connection, says
 * so once on stderr, and keeps the library on the CPU for retry_ms before it connects again.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "gb_internal.h"

#define IDLE_MAX 16

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static gc_conn *idle[IDLE_MAX];
static size_t idle_count;
static pid_t owner;
static int64_t retry_after_ms;
static atomic_int warned;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Another thread of the parent may hold the lock at fork(): the child gets a fresh one. */
static void atfork_prepare(void) { pthread_mutex_lock(&lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&lock); }
static void atfork_child(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  lock = fresh;
}
static void register_atfork(void) {
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* The list is this process's (lock held): a child drops its parent's copies. */
static void own_list(void) {
  pid_t me = getpid();
  if (owner == me) return;
  for (size_t i = 0; i < idle_count; i++) gc_close(idle[i]); /* the parent's socket stays */
  idle_count = 0;
  retry_after_ms = 0;
  owner = me;
}

gc_conn *gb_remote_get(void) {
  pthread_once(&atfork_once, register_atfork);
  const gb_settings *s = gb_env();
  pthread_mutex_lock(&lock);
  own_list();
  gc_conn *conn = idle_count > 0 ? idle[--idle_count] : NULL;
  int64_t wait_until = retry_after_ms;
  pthread_mutex_unlock(&lock);
  if (conn != NULL) return conn;
  if (wait_until != 0 && now_ms() < wait_until) return NULL;
  gc_connect_opts opts;
  gc_connect_opts_init(&opts);
  opts.connect_timeout_ms = s->connect_timeout_ms;
  opts.max_retries = 1;
  if (gc_connect_with(s->address, &opts, &conn) != 0) {
    gb_remote_fail(NULL, gc_last_error(NULL)->code, gc_last_error(NULL)->message);
    return NULL;
  }
  return conn;
}

void gb_remote_put(gc_conn *conn) {
  pthread_mutex_lock(&lock);
  own_list();
  if (idle_count < IDLE_MAX) {
    idle[idle_count++] = conn;
    conn = NULL;
  }
  pthread_mutex_unlock(&lock);
  gc_close(conn);
}

void gb_remote_fail(gc_conn *conn, int code, const char *what) {
  const gb_settings *s = gb_env();
  if (s->strict) {
    fprintf(stderr, "libgemmd_blas: gemmd failed a call (%s: %s) and GEMMD_BLAS_STRICT=1\n",
            gc_code_name(code), what);
    abort();
  }
  if (atomic_exchange(&warned, 1) == 0)
    fprintf(stderr,
            "libgemmd_blas: warning: gemmd failed a call (%s: %s); such calls run on the CPU "
            "BLAS (this warning is not repeated)\n",
            gc_code_name(code), what);
  gc_close(conn);
  pthread_mutex_lock(&lock);
  own_list();
  retry_after_ms = now_ms() + s->retry_ms;
  pthread_mutex_unlock(&lock);
}
