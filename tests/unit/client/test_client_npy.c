/*
 * test_client_npy.c - gemmctl's .npy reader and writer, cross-checked with
 * numpy: numpy writes every dtype, order and format version and C reads them;
 * C writes and numpy reads (npy_py.py); malformed files are refused. The integer
 * dtypes (|i1, <i4) hold 8 value(i).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gctl_npy.h"
#include "gctl_ref.h"

static char dir[64];

static double value(uint64_t i) { return (double)((int)((37 * i) % 101) - 50) / 8.0; }

/* Element i as an array of dtype holds it: value(i), or 8 value(i) for an integer dtype. */
static double value_in(gc_dtype dtype, uint64_t i) {
  return gctl_dtype_is_int(dtype) ? 8.0 * value(i) : value(i);
}

static int run_python(const char *mode) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s %s %s %s", GCTL_PYTHON, GCTL_NPY_SCRIPT, mode, dir);
  return system(cmd);
}

static void setup(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/gc_npy_XXXXXX", tmp != NULL && strlen(tmp) < 40 ? tmp : "/tmp");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_int_eq(run_python("write"), 0);
}

static void teardown(void) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}

static int dtype_code(const char *name) {
  if (strcmp(name, "f32") == 0) return GC_DTYPE_F32;
  if (strcmp(name, "f64") == 0) return GC_DTYPE_F64;
  if (strcmp(name, "f16") == 0) return GC_DTYPE_F16;
  if (strcmp(name, "bf16") == 0) return GC_DTYPE_BF16;
  if (strcmp(name, "i8") == 0) return GC_DTYPE_I8;
  if (strcmp(name, "i32") == 0) return GC_DTYPE_I32;
  return GCTL_NPY_U2;
}

START_TEST(reads_what_numpy_writes) {
  char path[512];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE *manifest = fopen(path, "r");
  ck_assert_ptr_nonnull(manifest);
  char name[64], dtype[16];
  int fortran, ndim, files = 0, versions[4] = {0};
  unsigned long long dims[3];
  while (fscanf(manifest, "%63s %15s %d %d %llu %llu %llu", name, dtype, &fortran, &ndim,
                &dims[0], &dims[1], &dims[2]) == 7) {
    snprintf(path, sizeof path, "%s/%s", dir, name);
    gctl_npy arr;
    char err[256];
    ck_assert_msg(gctl_npy_read(path, &arr, err, sizeof err) == 0, "%s: %s", name, err);
    ck_assert_int_eq(arr.dtype, dtype_code(dtype));
    ck_assert_int_eq(arr.ndim, ndim);
    /* a 1-element or vector-like array is both C and Fortran contiguous: numpy writes False */
    if (!fortran) ck_assert(!arr.fortran_order);
    for (int d = 0; d < ndim; d++) ck_assert_uint_eq(arr.shape[d], dims[d]);
    versions[arr.version_major]++;
    ck_assert_int_eq(gctl_npy_to_c_order(&arr, err, sizeof err), 0);
    gc_dtype as = arr.dtype == GCTL_NPY_U2 ? GC_DTYPE_BF16 : (gc_dtype)arr.dtype;
    for (uint64_t i = 0; i < arr.count; i++)
      ck_assert_msg(gctl_load(as, arr.data, i) == value_in(as, i), "%s element %llu: %g != %g",
                    name, (unsigned long long)i, gctl_load(as, arr.data, i), value_in(as, i));
    gctl_npy_free(&arr);
    files++;
  }
  fclose(manifest);
  ck_assert_int_ge(files, 280);
  ck_assert_int_gt(versions[1], 0);
  ck_assert_int_gt(versions[2], 0);
  ck_assert_int_gt(versions[3], 0);
}
END_TEST

START_TEST(numpy_reads_what_we_write) {
  static const char *names[] = {"f32", "f64", "f16", "bf16", "u2", "i8", "i32"};
  static const uint64_t shapes[][3] = {{1, 1, 0}, {3, 5, 0}, {2, 3, 4}, {7, 0, 0}};
  static const int ndims[] = {2, 2, 3, 1};
  char path[512];
  snprintf(path, sizeof path, "%s/written.txt", dir);
  FILE *list = fopen(path, "w");
  ck_assert_ptr_nonnull(list);
  int count = 0;
  for (int t = 0; t < 7; t++) {
    int dtype = dtype_code(names[t]);
    gc_dtype as = dtype == GCTL_NPY_U2 ? GC_DTYPE_BF16 : (gc_dtype)dtype;
    for (int s = 0; s < 4; s++) {
      for (int version = 0; version <= 3; version++) {
        uint64_t n = 1;
        for (int d = 0; d < ndims[s]; d++) n *= shapes[s][d];
        double *buf = malloc(n * 8);
        for (uint64_t i = 0; i < n; i++) gctl_store(as, buf, i, value_in(as, i));
        char name[64], err[256];
        snprintf(name, sizeof name, "out%03d.npy", count++);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        ck_assert_msg(gctl_npy_write(path, dtype, ndims[s], shapes[s], buf, version, err,
                                     sizeof err) == 0, "%s", err);
        free(buf);
        fprintf(list, "%s %s 0 %d %llu %llu %llu\n", name, names[t], ndims[s],
                (unsigned long long)shapes[s][0], (unsigned long long)shapes[s][1],
                (unsigned long long)shapes[s][2]);
      }
    }
  }
  fclose(list);
  ck_assert_int_eq(run_python("check"), 0);
}
END_TEST

static void expect_refused(const char *file, const char *why) {
  char path[512], err[256] = "";
  snprintf(path, sizeof path, "%s/%s", dir, file);
  gctl_npy arr;
  ck_assert_int_eq(gctl_npy_read(path, &arr, err, sizeof err), -1);
  ck_assert_msg(strstr(err, why) != NULL, "%s: \"%s\" does not mention \"%s\"", file, err, why);
  ck_assert_ptr_null(arr.data);
}

static void write_bytes(const char *file, const void *bytes, size_t len) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
  fclose(f);
}

START_TEST(refuses_bad_files) {
  expect_refused("bad_bigendian.npy", "big-endian");
  expect_refused("bad_int.npy", "unsupported dtype '<i2'");
  expect_refused("bad_struct.npy", "structured");
  expect_refused("no_such_file.npy", "No such file");
  write_bytes("bad_magic.npy", "\x93NUMPZ\x01\x00\x10\x00", 10);
  expect_refused("bad_magic.npy", "magic");
  /* a 4 GiB header length must be refused before anything is reserved */
  write_bytes("bad_hlen.npy", "\x93NUMPY\x02\x00\xff\xff\xff\xff", 12);
  expect_refused("bad_hlen.npy", "over the limit");
  write_bytes("bad_version.npy", "\x93NUMPY\x04\x00\x10\x00", 10);
  expect_refused("bad_version.npy", "version 4.0");
  /* a header that promises more data than the file holds */
  static const char dict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4), }\n";
  char file[10 + sizeof dict - 1 + 8];
  memcpy(file, "\x93NUMPY\x01\x00", 8);
  file[8] = (char)(sizeof dict - 1);
  file[9] = 0;
  memcpy(file + 10, dict, sizeof dict - 1);
  memset(file + 10 + sizeof dict - 1, 0, 8);
  write_bytes("bad_short.npy", file, sizeof file);
  expect_refused("bad_short.npy", "promises 64 data bytes, the file holds 8");
}
END_TEST

START_TEST(parses_header_forms) {
  gctl_npy arr;
  char err[256];
  static const char *good[] = {
      "{'descr': '<f8', 'fortran_order': True, 'shape': (3,), }",
      "{\"descr\": \"<f2\", \"shape\": (2, 3, 4), \"fortran_order\": False}",
      "{'descr':'<f4','fortran_order':False,'shape':(5L, 6L)}",
  };
  for (size_t i = 0; i < 3; i++) {
    memset(&arr, 0, sizeof arr);
    ck_assert_msg(gctl_npy_parse_header(good[i], strlen(good[i]), &arr, err, sizeof err) == 0,
                  "%s: %s", good[i], err);
  }
  ck_assert_int_eq(arr.ndim, 2);
  ck_assert_uint_eq(arr.shape[1], 6);
  static const char *bad[] = {
      "{'descr': '<f4', 'fortran_order': False}",                  /* no shape */
      "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}",   /* not a bool */
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1, x)}", /* not an int */
      "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}",
      "['descr']",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&arr, 0, sizeof arr);
    ck_assert_msg(gctl_npy_parse_header(bad[i], strlen(bad[i]), &arr, err, sizeof err) == -1,
                  "accepted %s", bad[i]);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("client_npy");
  TCase *tc = tcase_create("npy");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, reads_what_numpy_writes);
  tcase_add_test(tc, numpy_reads_what_we_write);
  tcase_add_test(tc, refuses_bad_files);
  tcase_add_test(tc, parses_header_forms);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
