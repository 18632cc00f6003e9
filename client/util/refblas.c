/*
 * refblas.c - OpenBLAS's cblas_dgemm for the float64 reference, found at run time: gemmctl
 * must work on a client-only machine without OpenBLAS (it is not linked, so a package need not
 * depend on it), and where the library is there a 4099 x 3001 x 2050 reference takes a second
 * or two on its threads instead of a minute in one loop.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "gctl_ref.h"

static gctl_dgemm_fn found;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void find_dgemm(void) {
  /* GEMMCTL_REF_BLAS=0: the loop, as on a machine without OpenBLAS (the tests use it) */
  const char *env = getenv("GEMMCTL_REF_BLAS");
  if (env != NULL && env[0] == '0') return;
  const char *names[] = {"libopenblas.so.0", "libopenblas.so"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) continue;
    /* POSIX's way from a data pointer to a function pointer (dlsym's own example) */
    *(void **)&found = dlsym(lib, "cblas_dgemm");
    if (found != NULL) return; /* the library stays loaded for the process */
    dlclose(lib);
  }
}

gctl_dgemm_fn gctl_ref_dgemm(void) {
  (void)pthread_once(&once, find_dgemm);
  return found;
}
