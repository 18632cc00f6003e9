/*
 * gb_env.c - the library's settings, read once from the environment (docs/blas.md).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gb_internal.h"

#define DEFAULT_OFFLOAD_MIN (256.0 * 256.0 * 256.0)
#define DEFAULT_CONNECT_TIMEOUT_MS 2000
#define DEFAULT_CALL_TIMEOUT_MS 300000
#define DEFAULT_RETRY_MS 5000

static gb_settings settings;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *nonempty(const char *name) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0' ? v : NULL;
}

/* A number >= 0 from name, else def (a malformed value is reported once and ignored). */
static double number(const char *name, double def) {
  const char *v = nonempty(name);
  if (v == NULL) return def;
  char *end;
  double x = strtod(v, &end);
  if (*end != '\0' || !(x >= 0)) {
    fprintf(stderr, "libgemmd_blas: %s=%s is not a number >= 0; using %.0f\n", name, v, def);
    return def;
  }
  return x;
}

static void load(void) {
  settings.address = nonempty("GEMMD_ADDRESS");
  settings.offload_min = number("GEMMD_BLAS_OFFLOAD_MIN", DEFAULT_OFFLOAD_MIN);
  const char *p = nonempty("GEMMD_BLAS_PRECISION");
  settings.precision = GC_PRECISION_EXACT;
  if (p != NULL && strcmp(p, "fast") == 0)
    settings.precision = GC_PRECISION_FAST;
  else if (p != NULL && strcmp(p, "exact") != 0)
    fprintf(stderr, "libgemmd_blas: GEMMD_BLAS_PRECISION=%s is not exact or fast; exact\n", p);
  settings.stats = number("GEMMD_BLAS_STATS", 0) != 0;
  settings.strict = number("GEMMD_BLAS_STRICT", 0) != 0;
  settings.connect_timeout_ms =
      (int64_t)number("GEMMD_BLAS_CONNECT_TIMEOUT_MS", DEFAULT_CONNECT_TIMEOUT_MS);
  settings.call_timeout_ms = (int64_t)number("GEMMD_BLAS_TIMEOUT_MS", DEFAULT_CALL_TIMEOUT_MS);
  settings.retry_ms = (int64_t)number("GEMMD_BLAS_RETRY_MS", DEFAULT_RETRY_MS);
  settings.cpu_library = nonempty("GEMMD_BLAS_CPU_LIBRARY");
}

const gb_settings *gb_env(void) {
  pthread_once(&once, load);
  return &settings;
}
