/*
 * test_proto_types.c - the error table, dtype/method/precision names, shapes,
 * flops, and the encoders' edges (bin header widths, refusals).
 */
#include <check.h>
#include <string.h>

#include "tp_util.h"

START_TEST(error_table) {
  static const char *const names[] = {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "UNAVAILABLE",
                                      "DEADLINE_EXCEEDED", "CANCELLED", "UNAUTHENTICATED",
                                      "NOT_FOUND", "UNIMPLEMENTED", "INTERNAL"};
  for (int i = 0; i < 9; i++) {
    int code = -1 - i;
    ck_assert_str_eq(gp_code_name(code), names[i]);
    ck_assert_int_eq(gp_code_from_name(names[i], strlen(names[i])), code);
    ck_assert(strlen(gp_strerror(code)) > 0);
  }
  ck_assert_str_eq(gp_code_name(0), "OK");
  ck_assert_str_eq(gp_code_name(-100), "UNKNOWN");
  ck_assert_str_eq(gp_strerror(-100), "unknown error");
  /* never success from the wire, never a prefix match */
  ck_assert_int_eq(gp_code_from_name("OK", 2), GP_E_INTERNAL);
  ck_assert_int_eq(gp_code_from_name("TEAPOT", 6), GP_E_INTERNAL);
  ck_assert_int_eq(gp_code_from_name("INTERNAL_X", 8), GP_E_INTERNAL); /* "INTERNAL" */
  ck_assert_int_eq(gp_code_from_name("NOT_FOUNDX", 9), GP_E_NOT_FOUND);
  ck_assert_int_eq(gp_code_from_name("NOT_FOUNDX", 10), GP_E_INTERNAL);
  ck_assert_int_eq(gp_code_from_name(NULL, 0), GP_E_INTERNAL);
}
END_TEST

START_TEST(error_values) {
  gp_error err;
  ck_assert_int_eq(gp_error_set(&err, GP_E_CANCELLED, "job %d of %s", 3, "x"), GP_E_CANCELLED);
  ck_assert_int_eq(err.code, GP_E_CANCELLED);
  ck_assert_str_eq(err.message, "job 3 of x");
  char long_text[600];
  memset(long_text, 'z', sizeof long_text - 1);
  long_text[sizeof long_text - 1] = '\0';
  gp_error_set(&err, GP_E_INTERNAL, "%s", long_text);
  ck_assert_uint_eq(strlen(err.message), GP_ERROR_MESSAGE_MAX - 1); /* truncated, terminated */
  gp_error_clear(&err);
  ck_assert_int_eq(err.code, 0);
  ck_assert_str_eq(err.message, "");
  ck_assert_int_eq(gp_error_set(NULL, GP_E_INTERNAL, "ignored"), GP_E_INTERNAL);
}
END_TEST

START_TEST(names) {
  static const char *const dt[] = {"f32", "f64", "f16", "bf16", "i8",
                                   "i32", "e4m3", "e5m2", "c64", "c128"};
  static const size_t sz[] = {4, 8, 2, 2, 1, 4, 1, 1, 8, 16};
  _Static_assert(sizeof dt / sizeof dt[0] == GP_DTYPE_COUNT, "every dtype named");
  for (int i = 0; i < GP_DTYPE_COUNT; i++) {
    gp_dtype got = GP_DTYPE_F64;
    ck_assert_str_eq(gp_dtype_name((gp_dtype)i), dt[i]);
    ck_assert_uint_eq(gp_dtype_size((gp_dtype)i), sz[i]);
    ck_assert_int_eq(gp_dtype_from_name(dt[i], strlen(dt[i]), &got), 0);
    ck_assert_int_eq(got, i);
  }
  gp_dtype unchanged = GP_DTYPE_F16;
  ck_assert_int_eq(gp_dtype_from_name("f3", 2, &unchanged), GP_E_INVALID_ARGUMENT);
  ck_assert_int_eq(gp_dtype_from_name("f322", 4, &unchanged), GP_E_INVALID_ARGUMENT);
  ck_assert_int_eq(unchanged, GP_DTYPE_F16);
  ck_assert_uint_eq(gp_dtype_size((gp_dtype)GP_DTYPE_COUNT), 0);
  gp_precision p;
  ck_assert_int_eq(gp_precision_from_name("fast", 4, &p), 0);
  ck_assert_int_eq(p, GP_PRECISION_FAST);
  ck_assert_int_eq(gp_precision_from_name("exact", 5, &p), 0);
  ck_assert_int_eq(p, GP_PRECISION_EXACT);
  ck_assert_int_eq(gp_precision_from_name("Fast", 4, &p), GP_E_INVALID_ARGUMENT);
  ck_assert_int_eq(gp_method_from_name("gemm", 4), GP_METHOD_GEMM);
  ck_assert_int_eq(gp_method_from_name("ping", 4), GP_METHOD_PING);
  ck_assert_int_eq(gp_method_from_name("info", 4), GP_METHOD_INFO);
  ck_assert_int_eq(gp_method_from_name("stats", 5), GP_METHOD_STATS);
  ck_assert_int_eq(gp_method_from_name("gem", 3), GP_METHOD_UNKNOWN);
  ck_assert_ptr_null(gp_method_name(GP_METHOD_UNKNOWN));
  ck_assert_str_eq(gp_operand_name(GP_OPERAND_C), "c");
}
END_TEST

START_TEST(flops_and_sizes) {
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = 3;
  h.n = 5;
  h.k = 7;
  h.batch = 2;
  h.dtype = GP_DTYPE_F64;
  ck_assert(gp_gemm_flops(&h) == 2.0 * 3 * 5 * 7 * 2);
  uint64_t bytes;
  ck_assert(gp_gemm_operand_bytes(&h, GP_OPERAND_A, &bytes) && bytes == 2 * 3 * 7 * 8);
  ck_assert(gp_gemm_operand_bytes(&h, GP_OPERAND_B, &bytes) && bytes == 2 * 7 * 5 * 8);
  ck_assert(gp_gemm_operand_bytes(&h, GP_OPERAND_C, &bytes) && bytes == 2 * 3 * 5 * 8);
}
END_TEST

START_TEST(bin_headers) {
  static const struct {
    uint64_t len;
    size_t size;
    uint8_t first;
  } cases[] = {{0, 2, 0xc4},     {255, 2, 0xc4},     {256, 3, 0xc5},
               {65535, 3, 0xc5}, {65536, 5, 0xc6},   {UINT32_MAX, 5, 0xc6}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t out[GP_BIN_HEADER_MAX];
    ck_assert_uint_eq(gp_encode_bin_header(out, cases[i].len), cases[i].size);
    ck_assert_uint_eq(out[0], cases[i].first);
    /* the same bytes msgpack-c writes */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    tp_packer(&pk, &sb);
    msgpack_pack_bin(&pk, (size_t)cases[i].len);
    ck_assert_uint_eq(sb.size, cases[i].size);
    ck_assert(memcmp(sb.data, out, sb.size) == 0);
    msgpack_sbuffer_destroy(&sb);
  }
}
END_TEST

START_TEST(encoder_refusals) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  ck_assert_int_eq(gp_encode_request(&sb, 1, NULL), GP_E_INVALID_ARGUMENT);
  ck_assert_int_eq(gp_encode_notification(&sb, NULL), GP_E_INVALID_ARGUMENT);
  ck_assert_int_eq(gp_encode_error_response(&sb, 1, 0, "not an error"), GP_E_INVALID_ARGUMENT);
  gp_gemm_result_hdr rh;
  memset(&rh, 0, sizeof rh);
  ck_assert_int_eq(gp_encode_gemm_response_head(&sb, 1, &rh, 1ull << 32), GP_E_INVALID_ARGUMENT);
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = 1u << 16;
  h.k = 1u << 15;
  h.n = 1;
  h.dtype = GP_DTYPE_F64; /* a is 16 GiB: no bin holds it */
  ck_assert_int_eq(gp_encode_gemm_request_head(&sb, 1, &h, false), GP_E_INVALID_ARGUMENT);
  ck_assert_uint_eq(sb.size, 0);
  /* a device name filling its whole field, without a NUL, is not overrun */
  memset(rh.device, 'd', sizeof rh.device);
  rh.m = rh.n = rh.batch = 1;
  ck_assert_int_eq(gp_encode_gemm_response_head(&sb, 1, &rh, 4), 0);
  msgpack_sbuffer_write(&sb, "\0\0\0\0", 4);
  tp_trace t = tp_decode(GP_ROLE_CLIENT, NULL, (const uint8_t *)sb.data, sb.size, TP_WHOLE, 0);
  ck_assert_int_eq(t.ev[0].type, GP_EV_RESPONSE);
  ck_assert_uint_eq(strlen(t.ev[0].result_hdr.device), GP_NAME_MAX - 1);
  tp_trace_free(&t);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

Suite *types_suite(void) {
  Suite *s = suite_create("proto_types");
  TCase *tc = tcase_create("types");
  tcase_add_test(tc, error_table);
  tcase_add_test(tc, error_values);
  tcase_add_test(tc, names);
  tcase_add_test(tc, flops_and_sizes);
  tcase_add_test(tc, bin_headers);
  tcase_add_test(tc, encoder_refusals);
  suite_add_tcase(s, tc);
  return s;
}

TP_MAIN(types_suite)
