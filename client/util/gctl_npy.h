/*
 * gctl_npy.h - NumPy .npy files for gemmctl: reading (format versions 1.0,
 * 2.0 and 3.0, C or Fortran order, little-endian only) and writing.
 *
 * Reading maps the file (no copy of the data); a Fortran-order array can be
 * turned into C order with gctl_npy_to_c_order (one copy), or, for a 2-D
 * gemm operand, passed as it is with the operand's trans flag flipped (the
 * column-major m x k array is the row-major k x m array of its transpose).
 *
 * dtypes: '<f4' f32, '<f8' f64, '<f2' f16; bfloat16 (which NumPy lacks) as
 * '<V2' / '|V2' (ml_dtypes' descr) or 'bfloat16'; '|i1' / '<i1' i8, '<i4' i32;
 * '<u2' is read as raw 16-bit data (GCTL_NPY_U2) and '|u1' as raw bytes (GCTL_NPY_U1: fp8,
 * which NumPy lacks) for the caller to reinterpret (gemmctl --dtype).
 * Big-endian files are refused with a message saying so.
 *
 * Errors: functions return 0 or -1 and write a message into err (errlen bytes).
 */
#ifndef GCTL_NPY_H
#define GCTL_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gemmclient.h"

#define GCTL_NPY_MAX_DIMS 8
/* The largest header accepted (checked before it is read into memory). */
#define GCTL_NPY_HEADER_MAX (1u << 20)
/* dtype value for raw '<u2' data (beside the gc_dtype values). */
#define GCTL_NPY_U2 100
/* dtype value for raw '|u1' data: fp8 bytes, e4m3 or e5m2 as --dtype says. */
#define GCTL_NPY_U1 101

typedef struct {
  int dtype;             /* a gc_dtype, GCTL_NPY_U2 or GCTL_NPY_U1 */
  size_t itemsize;
  bool fortran_order;
  int ndim;
  uint64_t shape[GCTL_NPY_MAX_DIMS];
  uint64_t count;        /* elements */
  uint64_t nbytes;       /* count * itemsize */
  int version_major, version_minor;
  void *data;            /* the elements; NULL when count is 0 */
  /* private */
  void *map_;
  size_t map_len_;
  void *owned_;
} gctl_npy;

/* The path that means stdin (gctl_npy_read) or stdout (gctl_npy_write). */
#define GCTL_NPY_STDIO "-"

/* Reads a .npy file: mapped when it is a regular file, read into memory when it is a pipe or
 * other stream. GCTL_NPY_STDIO reads exactly one array from stdin, so several can follow one
 * another there. */
int gctl_npy_read(const char *path, gctl_npy *out, char *err, size_t errlen);

/* Parses a header dict ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") into
 * dtype, fortran_order, ndim and shape. Exposed for tests. */
int gctl_npy_parse_header(const char *text, size_t len, gctl_npy *out, char *err, size_t errlen);

/* Rewrites a Fortran-order array in C order (one copy); no-op for C order. */
int gctl_npy_to_c_order(gctl_npy *a, char *err, size_t errlen);

void gctl_npy_free(gctl_npy *a);

/* The descr written for a dtype ("<f4", "<f8", "<f2", "|V2" for bf16, "|i1", "<i4", "<u2"; "|u1"
 * for GCTL_NPY_U1 and the fp8 dtypes). */
const char *gctl_npy_descr(int dtype);

/* Writes a C-order array (to stdout for GCTL_NPY_STDIO). version: 1, 2 or 3, or 0 for the
 * oldest that fits (1.0 unless the header needs more than 65535 bytes). */
int gctl_npy_write(const char *path, int dtype, int ndim, const uint64_t *shape,
                   const void *data, int version, char *err, size_t errlen);

#endif /* GCTL_NPY_H */
