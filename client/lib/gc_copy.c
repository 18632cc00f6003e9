/*
 * gc_copy.c - the library's copy threads: strided row copies into and out of the automatic
 * scratch region (gc_scratch.c), split into pieces that a small pool of threads and the
 * calling thread share. One copy at 6 GB/s per thread is what made the scratch path slower
 * than the socket; a box's memory system gives several times that to a few threads.
 *
 * The pool is global to the process, started on the first large copy, bounded (the CPU
 * count, at most GC__COPY_THREADS_MAX, or $GEMMD_COPY_THREADS), and serves any number of
 * callers at once: each copy is a job in a queue whose pieces any idle thread takes. After
 * fork() the child has none of the parent's threads: pthread_atfork resets the pool there
 * and the child starts its own on its first large copy.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gc_internal.h"

#define GC__COPY_THREADS_MAX 16
/* Below this a copy is done by the caller alone: waking threads costs more than it saves. */
#define GC__COPY_PARALLEL_MIN (1u << 20)
/* Pieces are at least this large (and at most 4 per thread). */
#define GC__COPY_PIECE_MIN (256u * 1024u)

typedef struct gc__copy_job {
  gc__copy_rows_args args;
  uint64_t pieces, rows_per_piece;
  uint64_t next;  /* the next piece to hand out */
  uint64_t done;  /* pieces finished */
  struct gc__copy_job *queue_next;
} gc__copy_job;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t work;   /* a job was queued */
  pthread_cond_t done;   /* a piece finished */
  gc__copy_job *head, *tail;
  unsigned threads;      /* workers started (the caller is one more) */
  unsigned want;         /* copying threads in all, caller included; 0 until sized */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
          NULL, NULL, 0, 0};
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void copy_piece(const gc__copy_rows_args *a, uint64_t row0, uint64_t rows) {
  const uint8_t *src = (const uint8_t *)a->src + row0 * a->src_stride;
  uint8_t *dst = (uint8_t *)a->dst + row0 * a->dst_stride;
  if (a->src_stride == a->row_bytes && a->dst_stride == a->row_bytes) {
    memcpy(dst, src, (size_t)(rows * a->row_bytes));
    return;
  }
  for (uint64_t r = 0; r < rows; r++)
    memcpy(dst + r * a->dst_stride, src + r * a->src_stride, (size_t)a->row_bytes);
}

/* Takes the next piece of the queue's first job (lock held): false when none is left. */
static bool claim(gc__copy_job **job, uint64_t *piece) {
  gc__copy_job *j = pool.head;
  if (j == NULL) return false;
  *job = j;
  *piece = j->next++;
  if (j->next == j->pieces) { /* all handed out: off the queue */
    pool.head = j->queue_next;
    if (pool.head == NULL) pool.tail = NULL;
  }
  return true;
}

static void run_piece(gc__copy_job *j, uint64_t piece) {
  uint64_t row0 = piece * j->rows_per_piece;
  uint64_t rows = j->args.rows - row0 < j->rows_per_piece ? j->args.rows - row0
                                                          : j->rows_per_piece;
  copy_piece(&j->args, row0, rows);
}

static void *worker(void *arg) {
  (void)arg;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    gc__copy_job *j;
    uint64_t piece;
    while (!claim(&j, &piece)) pthread_cond_wait(&pool.work, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    run_piece(j, piece);
    pthread_mutex_lock(&pool.lock);
    if (++j->done == j->pieces) pthread_cond_broadcast(&pool.done);
  }
  return NULL;
}

/* The child of a fork has no workers and maybe a lock some other thread of the parent held. */
static void atfork_child(void) {
  pthread_mutex_t fresh_lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
  pool.lock = fresh_lock;
  pool.work = fresh_cond;
  pool.done = fresh_cond;
  pool.head = pool.tail = NULL;
  pool.threads = 0;
}
static void atfork_prepare(void) { pthread_mutex_lock(&pool.lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&pool.lock); }
static void register_atfork(void) {
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

unsigned gc__copy_threads(void) {
  const char *env = getenv("GEMMD_COPY_THREADS");
  long n = 0;
  if (env != NULL && env[0] != '\0') {
    char *end;
    n = strtol(env, &end, 10);
    if (*end != '\0' || n < 1) n = 0; /* malformed: the default */
  }
  if (n == 0) n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  return n > GC__COPY_THREADS_MAX ? GC__COPY_THREADS_MAX : (unsigned)n;
}

/* Starts workers up to the pool's size (lock held). A thread that cannot start leaves the
 * pool smaller: the caller copies whatever no worker takes. */
static void start_workers(void) {
  if (pool.want == 0) pool.want = gc__copy_threads();
  while (pool.threads + 1 < pool.want) {
    pthread_t t;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64u * 1024u);
    int rc = pthread_create(&t, &attr, worker, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) return;
    pool.threads++;
  }
}

void gc__copy_rows(const gc__copy_rows_args *args) {
  uint64_t total = args->rows * args->row_bytes;
  if (args->rows == 0 || args->row_bytes == 0) return;
  if (total < GC__COPY_PARALLEL_MIN) {
    copy_piece(args, 0, args->rows);
    return;
  }
  pthread_once(&atfork_once, register_atfork);
  gc__copy_job job;
  memset(&job, 0, sizeof job);
  job.args = *args;
  pthread_mutex_lock(&pool.lock);
  start_workers();
  uint64_t threads = pool.threads + 1;
  uint64_t pieces = total / GC__COPY_PIECE_MIN;
  if (pieces > threads * 4) pieces = threads * 4;
  if (pieces > args->rows) pieces = args->rows;
  if (pieces < 1) pieces = 1;
  job.rows_per_piece = (args->rows + pieces - 1) / pieces;
  job.pieces = (args->rows + job.rows_per_piece - 1) / job.rows_per_piece;
  if (pool.tail != NULL)
    pool.tail->queue_next = &job;
  else
    pool.head = &job;
  pool.tail = &job;
  pthread_cond_broadcast(&pool.work);
  /* The caller works on its own job's pieces while any are left, then waits for the rest. */
  while (job.next < job.pieces) {
    uint64_t piece = job.next++;
    if (job.next == job.pieces) { /* take the job off the queue (it may not be the head) */
      gc__copy_job **link = &pool.head, *prev = NULL;
      while (*link != &job) {
        prev = *link;
        link = &(*link)->queue_next;
      }
      *link = job.queue_next;
      if (pool.tail == &job) pool.tail = prev;
    }
    pthread_mutex_unlock(&pool.lock);
    run_piece(&job, piece);
    pthread_mutex_lock(&pool.lock);
    job.done++;
  }
  while (job.done < job.pieces) pthread_cond_wait(&pool.done, &pool.lock);
  pthread_mutex_unlock(&pool.lock);
}
