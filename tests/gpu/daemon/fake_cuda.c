/*
 * fake_cuda.c - just enough of the CUDA runtime, and of gk_gpu.h, to run the GPU backend's
 * host code on a machine without a GPU (test_gpu_backend_fake.c).
 *
 * Devices are host memory; each stream is a thread that executes its queue in order (copies,
 * event records, event waits, host funcs, a naive f32/f64 GEMM), so the backend's threads,
 * host funcs and completions interleave as they do on a real GPU. Faults can be injected
 * through alpha: 777 makes the launch fail (not sticky), 666 makes the kernel "fault" when it
 * runs (sticky: every later call on that device fails and nothing queued after it runs, as with
 * cudaErrorIllegalAddress), and 555 does so only on the last device. FAKE_CUDA_DEVICES sets the
 * device count (default 2), FAKE_CUDA_SMS their SM counts (default 132 each). Device
 * memory from cudaMalloc can be shared with another process by CUDA IPC (fake_cuda_ipc.c).
 * FAKE_CUDA_FAST=1 skips the GEMM arithmetic and the copies' random delays, so a profile of the
 * daemon's host threads is not drowned by the fake device (results are then wrong: benches
 * with --ref none only).
 *
 * Stream-ordered memory pools keep CUDA's accounting: a pool reserves device memory in 2 MiB
 * steps as allocations need it (failing when the device's FAKE_FREE_BYTES, less what other
 * pools and fake_cuda_hold() take, runs out), cudaFreeAsync returns a block when its stream
 * reaches it, and cudaMemPoolTrimTo gives unused reserved memory back.
 */
#include <complex.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gk_epilogue.h"
#include "gk_gpu.h"

#define FAKE_MAX_DEV 8
#define FAKE_FREE_BYTES (256ull << 20)

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* events, devices, host allocations */
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static cudaError_t g_dead[FAKE_MAX_DEV];                  /* sticky error per device */
static _Thread_local int t_device;
static _Thread_local cudaError_t t_last;

typedef struct hostalloc {
  uint8_t *p;
  size_t n;
  bool registered;      /* cudaHostRegister'd (not ours to free) */
  struct hostalloc *next;
} hostalloc;
static hostalloc *g_host;

struct CUevent_st {
  uint64_t gen, done_gen;
  double t_ms;
  int device;
};

enum { OP_COPY, OP_RECORD, OP_WAIT, OP_HOSTFN, OP_GEMM, OP_ROWS, OP_FAULT, OP_FREE };
/* A pass over a problem's C, row runs of each batch entry (gk_epilogue.h's host functions). */
typedef void (*rows_fn)(const gk_problem *p, int64_t i, int64_t r0, int64_t rows);
typedef struct op {
  int kind;
  void *dst;
  const void *src;
  void *tmp;
  size_t n;
  struct CUevent_st *ev;
  uint64_t gen;
  cudaHostFn_t fn;
  void *arg;
  gk_problem p;
  rows_fn rows; /* OP_ROWS */
  struct op *next;
} op;

struct CUstream_st {
  int device;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  op *head, *tail;
  bool running_op, stop;
};

static int fake_count(void) {
  const char *s = getenv("FAKE_CUDA_DEVICES");
  int n = s ? atoi(s) : 2;
  return n < 0 ? 0 : n > FAKE_MAX_DEV ? FAKE_MAX_DEV : n;
}

/* FAKE_CUDA_SMS="132,66,...": each device's SM count (132 for those not listed), so that a
 * split's rows by device speed can be seen. */
static int fake_sms(int device) {
  const char *s = getenv("FAKE_CUDA_SMS");
  for (int i = 0; s && *s; i++) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s)
      break;
    if (i == device)
      return v > 0 && v < 100000 ? (int)v : 132;
    s = *end == ',' ? end + 1 : end;
  }
  return 132;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess)
    t_last = e;
  return e;
}

static cudaError_t dead_of(int dev) {
  pthread_mutex_lock(&g_mu);
  cudaError_t e = g_dead[dev];
  pthread_mutex_unlock(&g_mu);
  return e;
}

/* ---- devices and memory ---- */

cudaError_t cudaGetDeviceCount(int *count) {
  *count = fake_count();
  return *count ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  if (device < 0 || device >= fake_count())
    return ret(cudaErrorInvalidDevice);
  memset(prop, 0, sizeof(*prop));
  snprintf(prop->name, sizeof(prop->name), "Fake GPU %d", device);
  prop->totalGlobalMem = 1ull << 30;
  prop->multiProcessorCount = fake_sms(device);
  prop->major = 9;
  prop->minor = 0;
  prop->pciBusID = 0x10 + device; /* as fake_cuda_ipc.c's cudaDeviceGetPCIBusId says */
  return cudaSuccess;
}

/* The clock every fake device reports (an H200's boost, in kHz). */
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= fake_count())
    return ret(cudaErrorInvalidDevice);
  switch (attr) {
  case cudaDevAttrClockRate: *value = 1980000; return cudaSuccess;
  case cudaDevAttrMultiProcessorCount: *value = fake_sms(device); return cudaSuccess;
  default: return ret(cudaErrorInvalidValue);
  }
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= fake_count())
    return ret(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

/* ---- memory pools (see the top) ---- */

#define FAKE_POOL_STEP (2ull << 20)

struct CUmemPoolHandle_st {
  int device;
  size_t reserved, used; /* g_mu */
  uint64_t threshold;
};

typedef struct fblock { /* a block handed out by a pool */
  void *p;
  size_t n;
  bool freed; /* cudaFreeAsync was called: its bytes serve later allocations in stream order */
  cudaMemPool_t pool;
  struct fblock *next;
} fblock;
static fblock *g_blocks; /* g_mu */

static size_t g_pool_reserved[FAKE_MAX_DEV]; /* g_mu: every pool's reserve per device */
static size_t g_held[FAKE_MAX_DEV];          /* g_mu: memory "other processes" hold */

/* Test hooks: memory another process holds on device; what the pools of device reserve. */
void fake_cuda_hold(int device, size_t bytes);
size_t fake_cuda_reserved(int device);

void fake_cuda_hold(int device, size_t bytes) {
  pthread_mutex_lock(&g_mu);
  g_held[device] = bytes;
  pthread_mutex_unlock(&g_mu);
}

/* Test hook: every device usable again, as in a new process (call with no backend running). */
void fake_cuda_revive(void);
void fake_cuda_revive(void) {
  pthread_mutex_lock(&g_mu);
  memset(g_dead, 0, sizeof g_dead);
  pthread_mutex_unlock(&g_mu);
}

size_t fake_cuda_reserved(int device) {
  pthread_mutex_lock(&g_mu);
  size_t n = g_pool_reserved[device];
  pthread_mutex_unlock(&g_mu);
  return n;
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *props) {
  if (props->allocType != cudaMemAllocationTypePinned ||
      props->location.type != cudaMemLocationTypeDevice || props->location.id < 0 ||
      props->location.id >= fake_count())
    return ret(cudaErrorInvalidValue);
  *pool = calloc(1, sizeof(**pool));
  if (!*pool)
    return ret(cudaErrorMemoryAllocation);
  (*pool)->device = props->location.id;
  return cudaSuccess;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  pthread_mutex_lock(&g_mu);
  for (fblock **pp = &g_blocks; *pp;) {
    fblock *b = *pp;
    if (b->pool != pool) {
      pp = &b->next;
      continue;
    }
    *pp = b->next;
    free(b->p);
    free(b);
  }
  g_pool_reserved[pool->device] -= pool->reserved;
  pthread_mutex_unlock(&g_mu);
  free(pool);
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
  if (attr != cudaMemPoolAttrReleaseThreshold)
    return ret(cudaErrorInvalidValue);
  pool->threshold = *(uint64_t *)value;
  return cudaSuccess;
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
  pthread_mutex_lock(&g_mu);
  cudaError_t e = cudaSuccess;
  switch (attr) {
  case cudaMemPoolAttrReleaseThreshold: *(uint64_t *)value = pool->threshold; break;
  case cudaMemPoolAttrReservedMemCurrent: *(uint64_t *)value = pool->reserved; break;
  case cudaMemPoolAttrUsedMemCurrent: *(uint64_t *)value = pool->used; break;
  default: e = cudaErrorInvalidValue; break;
  }
  pthread_mutex_unlock(&g_mu);
  return e == cudaSuccess ? e : ret(e);
}

cudaError_t cudaMallocFromPoolAsync(void **p, size_t n, cudaMemPool_t pool, cudaStream_t s) {
  cudaError_t d = dead_of(s->device);
  if (d)
    return ret(d);
  fblock *b = calloc(1, sizeof(*b));
  void *mem = malloc(n ? n : 1);
  if (!b || !mem)
    abort();
  memset(mem, 0xA5, n); /* garbage, like fresh device memory */
  pthread_mutex_lock(&g_mu);
  size_t spare = pool->reserved - pool->used;
  if (spare < n) {
    size_t grow = (n - spare + FAKE_POOL_STEP - 1) / FAKE_POOL_STEP * FAKE_POOL_STEP;
    if (g_pool_reserved[pool->device] + g_held[pool->device] + grow > FAKE_FREE_BYTES) {
      pthread_mutex_unlock(&g_mu);
      free(b);
      free(mem);
      return ret(cudaErrorMemoryAllocation);
    }
    pool->reserved += grow;
    g_pool_reserved[pool->device] += grow;
  }
  pool->used += n;
  b->p = mem;
  b->n = n;
  b->pool = pool;
  b->next = g_blocks;
  g_blocks = b;
  pthread_mutex_unlock(&g_mu);
  *p = mem;
  return cudaSuccess;
}

/* OP_FREE, when its stream reaches it: the block goes back to its pool. */
static void pool_free(fblock *b) {
  bool found = false;
  pthread_mutex_lock(&g_mu);
  for (fblock **pp = &g_blocks; *pp; pp = &(*pp)->next) {
    if (*pp == b) { /* else its pool was destroyed first, and the block with it */
      *pp = b->next;
      found = true;
      break;
    }
  }
  pthread_mutex_unlock(&g_mu);
  if (found) {
    free(b->p);
    free(b);
  }
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  pthread_mutex_lock(&g_mu);
  size_t floor = pool->used > keep ? pool->used : keep;
  if (pool->reserved > floor) {
    g_pool_reserved[pool->device] -= pool->reserved - floor;
    pool->reserved = floor;
  }
  pthread_mutex_unlock(&g_mu);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  pthread_mutex_lock(&g_mu);
  *free_bytes = FAKE_FREE_BYTES - g_pool_reserved[t_device] - g_held[t_device];
  pthread_mutex_unlock(&g_mu);
  *total = 1ull << 30;
  return cudaSuccess;
}

/* cudaMalloc, cudaFree and CUDA IPC: fake_cuda_ipc.c (memory other processes can open). */

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
  (void)flags;
  hostalloc *h = malloc(sizeof(*h));
  *p = malloc(n);
  if (!*p || !h) {
    free(*p);
    free(h);
    return ret(cudaErrorMemoryAllocation);
  }
  h->p = *p;
  h->n = n;
  h->registered = false; /* ours: cudaFreeHost frees it */
  pthread_mutex_lock(&g_mu);
  h->next = g_host;
  g_host = h;
  pthread_mutex_unlock(&g_mu);
  return cudaSuccess;
}

/* Forgets the pinned range starting at p of that kind; false when there is none. */
static bool host_forget(const void *p, bool registered) {
  pthread_mutex_lock(&g_mu);
  for (hostalloc **pp = &g_host; *pp; pp = &(*pp)->next) {
    if ((*pp)->p == p && (*pp)->registered == registered) {
      hostalloc *h = *pp;
      *pp = h->next;
      pthread_mutex_unlock(&g_mu);
      free(h);
      return true;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return false;
}

cudaError_t cudaFreeHost(void *p) {
  (void)host_forget(p, false);
  free(p);
  return cudaSuccess;
}

/* cudaHostRegister as CUDA checks it: a null pointer or an empty range is invalid, a range
 * overlapping one already pinned (registered or cudaHostAlloc'd) is "already registered".
 * FAKE_CUDA_HOST_REGISTER=fail makes every registration fail (cudaErrorNotSupported), as a
 * kernel that refuses to pin would. */
cudaError_t cudaHostRegister(void *p, size_t n, unsigned int flags) {
  (void)flags;
  const char *mode = getenv("FAKE_CUDA_HOST_REGISTER");
  if (mode && strcmp(mode, "fail") == 0)
    return ret(cudaErrorNotSupported);
  if (!p || n == 0)
    return ret(cudaErrorInvalidValue);
  hostalloc *h = malloc(sizeof(*h));
  if (!h)
    return ret(cudaErrorMemoryAllocation);
  pthread_mutex_lock(&g_mu);
  for (hostalloc *o = g_host; o; o = o->next) {
    if ((uint8_t *)p < o->p + o->n && o->p < (uint8_t *)p + n) {
      pthread_mutex_unlock(&g_mu);
      free(h);
      return ret(cudaErrorHostMemoryAlreadyRegistered);
    }
  }
  *h = (hostalloc){.p = p, .n = n, .registered = true, .next = g_host};
  g_host = h;
  pthread_mutex_unlock(&g_mu);
  return cudaSuccess;
}

/* Only the start of a registered range unregisters it. */
cudaError_t cudaHostUnregister(void *p) {
  return host_forget(p, true) ? cudaSuccess : ret(cudaErrorHostMemoryNotRegistered);
}

static bool is_pinned(const void *p) {
  bool pinned = false;
  pthread_mutex_lock(&g_mu);
  for (hostalloc *h = g_host; h; h = h->next)
    if ((const uint8_t *)p >= h->p && (const uint8_t *)p < h->p + h->n)
      pinned = true;
  pthread_mutex_unlock(&g_mu);
  return pinned;
}

/* ---- errors ---- */

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorNotReady: return "device not ready";
  default: return "fake cuda error";
  }
}

const char *cudaGetErrorName(cudaError_t e) {
  return e == cudaErrorIllegalAddress ? "cudaErrorIllegalAddress" : "cudaErrorFake";
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last;
  t_last = cudaSuccess;
  cudaError_t d = dead_of(t_device);
  return d ? d : e;
}

cudaError_t cudaPeekAtLastError(void) { return t_last; }

/* ---- events ---- */

cudaError_t cudaEventCreate(cudaEvent_t *ev) {
  *ev = calloc(1, sizeof(struct CUevent_st));
  if (*ev)
    (*ev)->device = t_device;
  return *ev ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

/* Done when its last record ran; a device's sticky error shows here too, as on a GPU. */
cudaError_t cudaEventQuery(cudaEvent_t ev) {
  cudaError_t d = dead_of(ev->device);
  if (d)
    return ret(d);
  pthread_mutex_lock(&g_mu);
  bool done = ev->done_gen >= ev->gen;
  pthread_mutex_unlock(&g_mu);
  return done ? cudaSuccess : cudaErrorNotReady;
}

/* CUDA lets an event be destroyed while a record of it is still queued (its resources go once
 * the record completes); the fake keeps destroyed events reachable until exit instead. */
static struct graveyard {
  cudaEvent_t ev;
  struct graveyard *next;
} *g_graves;

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  struct graveyard *g = malloc(sizeof(*g));
  if (!g)
    abort();
  pthread_mutex_lock(&g_mu);
  g->ev = ev;
  g->next = g_graves;
  g_graves = g;
  pthread_mutex_unlock(&g_mu);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  pthread_mutex_lock(&g_mu);
  bool ready = a->gen && b->gen && a->done_gen == a->gen && b->done_gen == b->gen;
  double d = b->t_ms - a->t_ms;
  pthread_mutex_unlock(&g_mu);
  if (!ready)
    return ret(cudaErrorNotReady);
  *ms = (float)d;
  return cudaSuccess;
}

/* ---- streams ---- */

static void gemm_run(const gk_problem *p);

static bool g_fast;
static pthread_once_t g_fast_once = PTHREAD_ONCE_INIT;

static void fast_init(void) {
  const char *v = getenv("FAKE_CUDA_FAST");
  g_fast = v && strcmp(v, "1") == 0;
}

static bool fast_mode(void) {
  pthread_once(&g_fast_once, fast_init);
  return g_fast;
}

static void exec(struct CUstream_st *s, op *o) {
  switch (o->kind) {
  case OP_COPY:
    if (!fast_mode() && rand() % 4 == 0)
      usleep(rand() % 300); /* shuffle the interleavings a little */
    memcpy(o->dst, o->tmp ? o->tmp : o->src, o->n);
    break;
  case OP_RECORD:
    pthread_mutex_lock(&g_mu);
    o->ev->t_ms = now_ms();
    if (o->gen > o->ev->done_gen)
      o->ev->done_gen = o->gen;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    break;
  case OP_WAIT:
    pthread_mutex_lock(&g_mu);
    while (o->ev->done_gen < o->gen && !g_dead[s->device])
      pthread_cond_wait(&g_cv, &g_mu);
    pthread_mutex_unlock(&g_mu);
    break;
  case OP_HOSTFN:
    o->fn(o->arg);
    break;
  case OP_GEMM:
    if (!fast_mode())
      gemm_run(&o->p);
    break;
  case OP_ROWS: /* the epilogue's and the cast's passes, as gk_epilogue.cu's on a device */
    for (int64_t i = 0; i < o->p.batch; i++)
      o->rows(&o->p, i, 0, o->p.m);
    break;
  case OP_FREE:
    pool_free(o->arg);
    break;
  case OP_FAULT:
    pthread_mutex_lock(&g_mu);
    g_dead[s->device] = cudaErrorIllegalAddress;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    break;
  }
}

static void *stream_main(void *arg) {
  struct CUstream_st *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop)
      pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head && s->stop)
      break;
    op *o = s->head;
    s->running_op = true;
    pthread_mutex_unlock(&s->mu);
    if (!dead_of(s->device))
      exec(s, o); /* after a fault nothing queued runs, host funcs included */
    pthread_mutex_lock(&s->mu);
    s->head = o->next;
    if (!s->head)
      s->tail = NULL;
    s->running_op = false;
    free(o->tmp);
    free(o);
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags) {
  (void)flags;
  struct CUstream_st *s = calloc(1, sizeof(*s));
  if (!s)
    return ret(cudaErrorMemoryAllocation);
  s->device = t_device;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  pthread_create(&s->thread, NULL, stream_main, s);
  *out = s;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  pthread_mutex_lock(&s->mu);
  s->stop = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
  return cudaSuccess;
}

static cudaError_t push(cudaStream_t s, op *o) {
  cudaError_t d = dead_of(s->device);
  if (d) {
    free(o->tmp);
    free(o);
    return ret(d);
  }
  pthread_mutex_lock(&s->mu);
  o->next = NULL;
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return cudaSuccess;
}

static op *new_op(int kind) {
  op *o = calloc(1, sizeof(*o));
  if (!o)
    abort();
  o->kind = kind;
  return o;
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
  cudaError_t d = dead_of(s->device);
  if (d)
    return ret(d);
  pthread_mutex_lock(&s->mu);
  bool busy = s->head != NULL;
  pthread_mutex_unlock(&s->mu);
  return busy ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  pthread_mutex_lock(&s->mu);
  while (s->head && !dead_of(s->device))
    pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  cudaError_t d = dead_of(s->device);
  return d ? ret(d) : cudaSuccess;
}

/* Test hooks: while a device is stalled, a cudaEventRecord for it waits (the caller, such as
 * its worker, is held there); how many callers wait now. */
static bool g_stall[FAKE_MAX_DEV];
static int g_stalled[FAKE_MAX_DEV];
void fake_cuda_stall(int device, bool on);
int fake_cuda_stalled(int device);

void fake_cuda_stall(int device, bool on) {
  pthread_mutex_lock(&g_mu);
  g_stall[device] = on;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

int fake_cuda_stalled(int device) {
  pthread_mutex_lock(&g_mu);
  int n = g_stalled[device];
  pthread_mutex_unlock(&g_mu);
  return n;
}

static void stall_point(int device) {
  pthread_mutex_lock(&g_mu);
  g_stalled[device]++;
  while (g_stall[device])
    pthread_cond_wait(&g_cv, &g_mu);
  g_stalled[device]--;
  pthread_mutex_unlock(&g_mu);
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
  stall_point(s->device);
  op *o = new_op(OP_RECORD);
  pthread_mutex_lock(&g_mu);
  o->gen = ++ev->gen;
  pthread_mutex_unlock(&g_mu);
  o->ev = ev;
  return push(s, o);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned int flags) {
  (void)flags;
  op *o = new_op(OP_WAIT);
  pthread_mutex_lock(&g_mu);
  o->gen = ev->gen;
  pthread_mutex_unlock(&g_mu);
  o->ev = ev;
  return push(s, o);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
  (void)kind;
  op *o = new_op(OP_COPY);
  o->dst = dst;
  o->src = src;
  o->n = n;
  if (kind == cudaMemcpyHostToDevice && !is_pinned(src)) {
    /* pageable: CUDA stages the source before returning */
    o->tmp = malloc(n ? n : 1);
    if (!o->tmp)
      abort();
    memcpy(o->tmp, src, n);
  }
  return push(s, o);
}

/* Row by row, in stream order (the sources are pinned: no staging). */
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t s) {
  if (width > dpitch || width > spitch)
    return ret(cudaErrorInvalidPitchValue);
  for (size_t r = 0; r < height; r++) {
    cudaError_t e = cudaMemcpyAsync((uint8_t *)dst + r * dpitch, (const uint8_t *)src + r * spitch,
                                    width, kind, s);
    if (e != cudaSuccess)
      return e;
  }
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
  /* Every allocation of the backend is on the copy-in stream, where it frees too: an
   * allocation queued after this free may reuse its bytes, so they count as free at once. The
   * host memory itself goes when the stream reaches the free. */
  fblock *block = NULL;
  pthread_mutex_lock(&g_mu);
  for (fblock *b = g_blocks; b && !block; b = b->next)
    if (b->p == p && !b->freed)
      block = b;
  if (block) {
    block->freed = true;
    block->pool->used -= block->n;
  }
  pthread_mutex_unlock(&g_mu);
  if (!block)
    return ret(cudaErrorInvalidValue);
  op *o = new_op(OP_FREE);
  o->arg = block;
  return push(s, o);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg) {
  op *o = new_op(OP_HOSTFN);
  o->fn = fn;
  o->arg = arg;
  return push(s, o);
}

/* ---- the kernels' interface ---- */

struct gk_gpu_ctx {
  int device;
};

cudaError_t gk_gpu_ctx_create(int device, gk_gpu_ctx **out) {
  *out = calloc(1, sizeof(**out));
  if (!*out)
    return cudaErrorMemoryAllocation;
  (*out)->device = device;
  return cudaSuccess;
}

void gk_gpu_ctx_destroy(gk_gpu_ctx *ctx) { free(ctx); }

/* The fake's kernels take no passing copies: there is no pool to size. */
void gk_gpu_ctx_set_pool_keep(gk_gpu_ctx *ctx, uint64_t bytes) {
  (void)ctx;
  (void)bytes;
}
int gk_gpu_ctx_cc(const gk_gpu_ctx *ctx) {
  (void)ctx;
  return 90;
}

static bool fake_supports(const gk_problem *p, int cc) {
  (void)cc;
  (void)p;
  return true;
}
static cudaError_t fake_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t s) {
  (void)ctx;
  if (p->alpha == 777.0)
    return cudaErrorInvalidValue;
  /* 555 faults only the last device: one part of a split job failing while the others run */
  bool fault = p->alpha == 666.0 || (p->alpha == 555.0 && s->device == fake_count() - 1);
  op *o = new_op(fault ? OP_FAULT : OP_GEMM);
  o->p = *p;
  return push(s, o);
}
static const gk_kernel fake_kernel = {"fake", "naive host loop", fake_supports, fake_launch, 0};
static const gk_kernel *const fake_registry[] = {&fake_kernel};

const gk_kernel *const *gk_kernels(size_t *count) {
  *count = 1;
  return fake_registry;
}
const gk_kernel *gk_kernel_by_name(const char *name) {
  return strcmp(name, "fake") == 0 ? &fake_kernel : NULL;
}
const gk_kernel *gk_select(const gk_problem *p, int cc, const char *preference) {
  (void)p;
  (void)cc;
  (void)preference;
  return &fake_kernel;
}
/* A pass of rows over p's C on stream. */
static cudaError_t push_rows(cudaStream_t stream, const gk_problem *p, rows_fn rows) {
  op *o = new_op(OP_ROWS);
  o->p = *p;
  o->rows = rows;
  return push(stream, o);
}

/* The output cast around the plain problem, as the real gk_gpu_gemm: C0 into the work area
 * (here every row takes its own bias copy), the plain gemm there, the rounding into C. */
static cudaError_t gemm_cast(gk_gpu_ctx *ctx, const gk_problem *p, const char *preference,
                             cudaStream_t stream, const gk_kernel **used) {
  if (!gk_problem_cast_ok(p))
    return cudaErrorInvalidValue;
  cudaError_t e = push_rows(stream, p, gk_host_cast_in);
  gk_problem plain = gk_problem_uncast(p);
  plain.bias = NULL;
  plain.bias_stride = 0;
  if (e == cudaSuccess)
    e = gk_gpu_gemm(ctx, &plain, preference, stream, used);
  if (e == cudaSuccess)
    e = push_rows(stream, p, gk_host_cast_out);
  return e;
}

cudaError_t gk_gpu_gemm(gk_gpu_ctx *ctx, const gk_problem *p, const char *preference,
                        cudaStream_t stream, const gk_kernel **used) {
  if (p->cast)
    return gemm_cast(ctx, p, preference, stream, used);
  const gk_kernel *k = gk_select(p, 90, preference);
  if (used)
    *used = k;
  cudaError_t e = cudaSuccess;
  if (p->bias && p->beta != 0.0) /* as the real one: the bias rows, the kernel, the activation */
    e = push_rows(stream, p, gk_host_bias_rows);
  for (int64_t i = 0; i < gk_problem_pieces(p) && e == cudaSuccess; i++) {
    gk_problem q = gk_problem_piece(p, i);
    e = k->launch(ctx, &q, stream);
  }
  if (e == cudaSuccess && p->act != GK_ACT_NONE)
    e = push_rows(stream, p, gk_host_act_rows);
  return e;
}

/* Element i of a complex array, as a double complex. */
static double _Complex cload(const gk_problem *p, const void *base, int64_t i) {
  if (p->dtype == GK_C64)
    return ((const float *)base)[2 * i] + I * ((const float *)base)[2 * i + 1];
  return ((const double *)base)[2 * i] + I * ((const double *)base)[2 * i + 1];
}

/* The complex gemm, naively in double complex (leading dimensions honoured), as the real
 * kernels' embedding computes it. */
static void gemm_run_complex(const gk_problem *p) {
  int64_t lda = gk_problem_lda(p), ldb = gk_problem_ldb(p), ldc = gk_problem_ldc(p);
  double _Complex alpha = p->alpha + I * p->alpha_im, beta = p->beta + I * p->beta_im;
  bool beta_zero = p->beta == 0.0 && p->beta_im == 0.0;
  for (int64_t b = 0; b < p->batch; b++)
    for (int64_t i = 0; i < p->m; i++)
      for (int64_t j = 0; j < p->n; j++) {
        double _Complex acc = 0;
        for (int64_t l = 0; l < p->k; l++) {
          int64_t ia = p->trans_a ? l * lda + i : i * lda + l;
          int64_t ib = p->trans_b ? j * ldb + l : l * ldb + j;
          double _Complex x = cload(p, p->a, b * gk_problem_a_stride(p) + ia);
          double _Complex y = cload(p, p->b, b * gk_problem_b_stride(p) + ib);
          acc += (p->conj_a ? conj(x) : x) * (p->conj_b ? conj(y) : y);
        }
        int64_t ic = b * gk_problem_c_stride(p) + i * ldc + j;
        double _Complex v = alpha * acc + (beta_zero ? 0 : beta * cload(p, p->c, ic));
        if (p->dtype == GK_C64) {
          ((float *)p->c)[2 * ic] = (float)creal(v);
          ((float *)p->c)[2 * ic + 1] = (float)cimag(v);
        } else {
          ((double *)p->c)[2 * ic] = creal(v);
          ((double *)p->c)[2 * ic + 1] = cimag(v);
        }
      }
}

static void gemm_run(const gk_problem *p) {
  if (gk_dtype_is_complex(p->dtype)) {
    gemm_run_complex(p);
    return;
  }
  int64_t sa = p->m * p->k, sb = p->k * p->n, sc = p->m * p->n;
  for (int64_t b = 0; b < p->batch; b++)
    for (int64_t i = 0; i < p->m; i++)
      for (int64_t j = 0; j < p->n; j++) {
        double acc = 0;
        for (int64_t l = 0; l < p->k; l++) {
          int64_t ia = p->trans_a ? l * p->m + i : i * p->k + l;
          int64_t ib = p->trans_b ? j * p->k + l : l * p->n + j;
          acc += gk_host_load(p->dtype, p->a, b * sa + ia) *
                 gk_host_load(p->dtype, p->b, b * sb + ib);
        }
        int64_t ic = b * sc + i * p->n + j;
        if (p->dtype == GK_I8) { /* exact: i32 C, 32-bit wrapping arithmetic */
          int32_t *c = (int32_t *)p->c;
          c[ic] = gk_host_i32_axpby((int64_t)p->alpha, (int64_t)acc, (int64_t)p->beta,
                                    p->beta != 0.0 ? c[ic] : 0);
          continue;
        }
        double v =
            p->alpha * acc +
            (p->beta != 0.0 ? p->beta * gk_host_load(gk_problem_c_dtype(p), p->c, ic) : 0.0);
        gk_host_store(gk_problem_c_dtype(p), p->c, ic, v);
      }
}
