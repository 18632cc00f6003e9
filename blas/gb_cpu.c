/*
 * gb_cpu.c - the CPU BLAS: where the calls gemmd does not take go (small gemms, complex
 * ones for now, a failed call) and every other BLAS routine when this library stands in
 * for libblas.so.3. Found at the first use, never this library itself:
 *   1. $GEMMD_BLAS_CPU_LIBRARY, a path to dlopen;
 *   2. the next definition after ours (dlsym RTLD_NEXT): the program's own BLAS when this
 *      library is LD_PRELOADed;
 *   3. GB_CPU_DEFAULTS (set at build time: Debian's OpenBLAS, then the reference BLAS).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gb_internal.h"

#ifndef GB_CPU_DEFAULTS
#define GB_CPU_DEFAULTS                                           \
  "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3:"      \
  "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3:libopenblas.so.0"
#endif

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *handles[8];
static size_t handle_count;
static int opened;

/* Whether p is a symbol of this library (a path that leads back here). */
static int is_self(const void *p) {
  Dl_info mine, theirs;
  if (dladdr((const void *)&gb_cpu_sym, &mine) == 0 || dladdr(p, &theirs) == 0) return 0;
  return mine.dli_fbase == theirs.dli_fbase;
}

static void open_one(const char *path) {
  if (handle_count == sizeof handles / sizeof handles[0]) return;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return;
  void *probe = dlsym(h, "dgemm_");
  if (probe == NULL || is_self(probe)) {
    dlclose(h);
    return;
  }
  handles[handle_count++] = h;
}

static void open_all(void) {
  const gb_settings *s = gb_env();
  if (s->cpu_library != NULL) {
    open_one(s->cpu_library);
    if (handle_count == 0)
      fprintf(stderr, "libgemmd_blas: GEMMD_BLAS_CPU_LIBRARY=%s: %s\n", s->cpu_library,
              dlerror() != NULL ? "cannot be opened as a BLAS" : "not a BLAS");
  }
  char list[] = GB_CPU_DEFAULTS;
  char *save = NULL;
  for (char *path = strtok_r(list, ":", &save); path != NULL; path = strtok_r(NULL, ":", &save))
    open_one(path);
}

void *gb_cpu_sym(const char *name) {
  const gb_settings *s = gb_env();
  void *p = NULL;
  if (s->cpu_library == NULL) {
    p = dlsym(RTLD_NEXT, name);
    if (p != NULL && !is_self(p)) return p;
  }
  pthread_mutex_lock(&lock);
  if (!opened) {
    open_all();
    opened = 1;
  }
  for (size_t i = 0; i < handle_count && p == NULL; i++) {
    p = dlsym(handles[i], name);
    if (p != NULL && is_self(p)) p = NULL;
  }
  pthread_mutex_unlock(&lock);
  if (p == NULL) {
    fprintf(stderr,
            "libgemmd_blas: no CPU BLAS provides %s (set GEMMD_BLAS_CPU_LIBRARY to one)\n",
            name);
    abort();
  }
  return p;
}
