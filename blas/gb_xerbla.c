/*
 * gb_xerbla.c - cblas_xerbla as the reference CBLAS has it (the message, then exit), for a
 * program that does not bring its own: one that does (a test catching errors) replaces it,
 * since the library calls it by its global name.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "gb_internal.h"

GB_API void cblas_xerbla(int p, const char *rout, const char *form, ...) {
  va_list ap;
  va_start(ap, form);
  if (p != 0) fprintf(stderr, "Parameter %d to routine %s was incorrect\n", p, rout);
  vfprintf(stderr, form, ap);
  va_end(ap);
  exit(-1);
}
