/*
 * test_proto_resident.c - the server decoder's resident operands and shared B: put
 * [put_hdr, data] (data as a bin streamed as PAYLOAD of operand a, or a region reference),
 * free [handle], gemm operands given as {"handle": N} (OPERAND_REF with by_handle), the header
 * key broadcast_b (b one matrix long), and the malformed forms rejected with their message.
 * Each message is decoded whole and byte by byte, and the two traces must agree.
 */
#include <check.h>
#include <string.h>

#include "tp_util.h"

#define MSGID 41u

#define decode tp_decode_checked

static void expect_reject(msgpack_sbuffer *sb, const char *before, int code, const char *needle) {
  tp_expect_reject(sb, MSGID, before, code, needle);
}

/* [0, MSGID, "put", [{dtype, rows, cols (, batch)}, then the caller's data */
static void put_start(msgpack_packer *pk, const char *dtype, uint64_t rows, uint64_t cols,
                      uint64_t batch) {
  tp_pack_request_start(pk, MSGID, "put", 2);
  msgpack_pack_map(pk, batch ? 4 : 3);
  tp_pack_str(pk, "dtype");
  tp_pack_str(pk, dtype);
  tp_pack_str(pk, "rows");
  msgpack_pack_uint64(pk, rows);
  tp_pack_str(pk, "cols");
  msgpack_pack_uint64(pk, cols);
  if (batch) {
    tp_pack_str(pk, "batch");
    msgpack_pack_uint64(pk, batch);
  }
}

static void pack_handle(msgpack_packer *pk, uint64_t handle) {
  msgpack_pack_map(pk, 1);
  tp_pack_str(pk, "handle");
  msgpack_pack_uint64(pk, handle);
}

START_TEST(put_with_a_bin) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  uint8_t data[3 * 5 * 7 * 2];
  uint64_t seed = tp_fresh_seed("put_with_a_bin");
  tp_fill_random(data, sizeof data, &seed);
  put_start(&pk, "bf16", 5, 7, 3);
  tp_pack_bin(&pk, data, sizeof data);
  tp_trace t = decode(&sb, "REQUEST PAYLOAD MESSAGE_END");
  ck_assert_int_eq(t.ev[0].method, GP_METHOD_PUT);
  ck_assert_int_eq(t.ev[0].put.dtype, GP_DTYPE_BF16);
  ck_assert_uint_eq(t.ev[0].put.rows, 5);
  ck_assert_uint_eq(t.ev[0].put.cols, 7);
  ck_assert_uint_eq(t.ev[0].put.batch, 3);
  ck_assert_int_eq(t.ev[1].operand, GP_OPERAND_A);
  ck_assert_uint_eq(t.ev[1].payload_len, sizeof data);
  ck_assert(memcmp(t.ev[1].payload, data, sizeof data) == 0);
  tp_trace_free(&t);
  /* batch defaults to 1 */
  put_start(&pk, "f64", 2, 3, 0);
  tp_pack_bin(&pk, data, 2 * 3 * 8);
  t = decode(&sb, "REQUEST PAYLOAD MESSAGE_END");
  ck_assert_uint_eq(t.ev[0].put.batch, 1);
  tp_trace_free(&t);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(put_from_a_region) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  put_start(&pk, "f32", 4, 4, 0);
  msgpack_pack_map(&pk, 2);
  tp_pack_str(&pk, "region");
  msgpack_pack_uint64(&pk, 3);
  tp_pack_str(&pk, "offset");
  msgpack_pack_uint64(&pk, 128);
  tp_trace t = decode(&sb, "REQUEST OPERAND_REF MESSAGE_END");
  ck_assert_int_eq(t.ev[1].operand, GP_OPERAND_A);
  ck_assert(!t.ev[1].by_handle);
  ck_assert_uint_eq(t.ev[1].region, 3);
  ck_assert_uint_eq(t.ev[1].offset, 128);
  tp_trace_free(&t);
  put_start(&pk, "f32", 4, 4, 0);
  pack_handle(&pk, 1);
  expect_reject(&sb, "REQUEST", GP_E_INVALID_ARGUMENT, "data: must be a region reference");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(put_rejected) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  uint8_t data[64] = {0};
  put_start(&pk, "f32", 2, 2, 0);
  tp_pack_bin(&pk, data, 15);
  expect_reject(&sb, "REQUEST", GP_E_INVALID_ARGUMENT, "data: expected 16 bytes");
  put_start(&pk, "f31", 2, 2, 0);
  tp_pack_bin(&pk, data, 16);
  expect_reject(&sb, "", GP_E_INVALID_ARGUMENT, "dtype: \"f31\"");
  put_start(&pk, "f32", 0, 2, 0);
  tp_pack_bin(&pk, data, 0);
  expect_reject(&sb, "", GP_E_INVALID_ARGUMENT, "rows: must be >= 1");
  put_start(&pk, "f32", 65537, 2, 0);
  tp_pack_bin(&pk, data, 0);
  expect_reject(&sb, "", GP_E_RESOURCE_EXHAUSTED, "rows: 65537 is over the limit");
  put_start(&pk, "f64", 65536, 65536, 0);
  tp_pack_bin(&pk, data, 0);
  expect_reject(&sb, "", GP_E_RESOURCE_EXHAUSTED, "data: over the limit");
  /* a missing key, a duplicate, an unknown one */
  static const struct {
    const char *keys[2];
    const char *needle;
  } bad_keys[] = {
      {{"dtype", "rows"}, "hdr: missing cols"},
      {{"rows", "rows"}, "hdr: duplicate key \"rows\""},
      {{"m", NULL}, "hdr: unknown key \"m\" (put takes"},
  };
  for (size_t i = 0; i < sizeof bad_keys / sizeof bad_keys[0]; i++) {
    tp_pack_request_start(&pk, MSGID, "put", 2);
    msgpack_pack_map(&pk, bad_keys[i].keys[1] ? 2 : 1);
    for (int j = 0; j < 2 && bad_keys[i].keys[j]; j++) {
      tp_pack_str(&pk, bad_keys[i].keys[j]);
      if (strcmp(bad_keys[i].keys[j], "dtype") == 0)
        tp_pack_str(&pk, "f32");
      else
        msgpack_pack_uint64(&pk, 2);
    }
    tp_pack_bin(&pk, data, 8);
    expect_reject(&sb, "", GP_E_INVALID_ARGUMENT, bad_keys[i].needle);
  }
  /* params of the wrong form */
  tp_pack_request_start(&pk, MSGID, "put", 1);
  msgpack_pack_map(&pk, 0);
  expect_reject(&sb, "", GP_E_INVALID_ARGUMENT, "put takes [hdr, data], got 1 elements");
  tp_pack_request_start(&pk, MSGID, "put", 2);
  msgpack_pack_uint64(&pk, 2);
  tp_pack_bin(&pk, data, 8);
  expect_reject(&sb, "", GP_E_INVALID_ARGUMENT, "hdr: must be a map");
  put_start(&pk, "f32", 2, 2, 0);
  tp_pack_str(&pk, "data");
  expect_reject(&sb, "REQUEST", GP_E_INVALID_ARGUMENT, "data: must be a bin or a region");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(free_takes_one_handle) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  tp_pack_request_start(&pk, MSGID, "free", 1);
  msgpack_pack_uint64(&pk, UINT64_MAX);
  tp_trace t = decode(&sb, "REQUEST MESSAGE_END");
  ck_assert_int_eq(t.ev[0].method, GP_METHOD_FREE);
  ck_assert_uint_eq(t.ev[0].arg, UINT64_MAX);
  tp_trace_free(&t);
  tp_pack_request_start(&pk, MSGID, "free", 0);
  expect_reject(&sb, "", GP_E_INVALID_ARGUMENT, "free takes [handle]");
  tp_pack_request_start(&pk, MSGID, "free", 1);
  msgpack_pack_int64(&pk, -1);
  expect_reject(&sb, "", GP_E_INVALID_ARGUMENT, "handle: must be a non-negative integer");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* [0, MSGID, "gemm", [{m: 2, n: 3, k: 4, dtype: f32, batch: 5 (, broadcast_b)}, ... */
static void gemm_start(msgpack_packer *pk, uint32_t nparams, bool broadcast) {
  tp_pack_request_start(pk, MSGID, "gemm", nparams);
  msgpack_pack_map(pk, broadcast ? 6 : 5);
  const char *keys[] = {"m", "n", "k", "batch"};
  const uint64_t values[] = {2, 3, 4, 5};
  for (int i = 0; i < 4; i++) {
    tp_pack_str(pk, keys[i]);
    msgpack_pack_uint64(pk, values[i]);
  }
  tp_pack_str(pk, "dtype");
  tp_pack_str(pk, "f32");
  if (broadcast) {
    tp_pack_str(pk, "broadcast_b");
    msgpack_pack_true(pk);
  }
}

START_TEST(handles_as_operands) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  uint8_t data[5 * 2 * 3 * 4] = {0};
  gemm_start(&pk, 4, false);
  pack_handle(&pk, 7);
  pack_handle(&pk, UINT64_MAX);
  tp_pack_bin(&pk, data, sizeof data);
  tp_trace t = decode(&sb, "REQUEST OPERAND_REF OPERAND_REF PAYLOAD MESSAGE_END");
  ck_assert(t.ev[1].by_handle && t.ev[2].by_handle);
  ck_assert_int_eq(t.ev[1].operand, GP_OPERAND_A);
  ck_assert_uint_eq(t.ev[1].handle, 7);
  ck_assert_int_eq(t.ev[2].operand, GP_OPERAND_B);
  ck_assert_uint_eq(t.ev[2].handle, UINT64_MAX);
  ck_assert_int_eq(t.ev[3].operand, GP_OPERAND_C);
  tp_trace_free(&t);
  /* a handle with a region, a handle of a negative number, a handle as "out" */
  gemm_start(&pk, 3, false);
  msgpack_pack_map(&pk, 2);
  tp_pack_str(&pk, "handle");
  msgpack_pack_uint64(&pk, 1);
  tp_pack_str(&pk, "region");
  msgpack_pack_uint64(&pk, 1);
  tp_pack_bin(&pk, data, 3 * 4 * 4);
  expect_reject(&sb, "REQUEST", GP_E_INVALID_ARGUMENT, "a: a reference has region (and offset) "
                "or handle, not both");
  gemm_start(&pk, 3, false);
  msgpack_pack_map(&pk, 1);
  tp_pack_str(&pk, "handle");
  msgpack_pack_int64(&pk, -3);
  tp_pack_bin(&pk, data, 3 * 4 * 4);
  expect_reject(&sb, "REQUEST", GP_E_INVALID_ARGUMENT, "a.handle: must be a non-negative");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(broadcast_b_takes_one_matrix) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  uint8_t data[5 * 3 * 4 * 4] = {0};
  gemm_start(&pk, 3, true);
  tp_pack_bin(&pk, data, 5 * 2 * 4 * 4);
  tp_pack_bin(&pk, data, 4 * 3 * 4); /* one k x n B */
  tp_trace t = decode(&sb, "REQUEST PAYLOAD PAYLOAD MESSAGE_END");
  ck_assert(t.ev[0].gemm.broadcast_b);
  ck_assert_uint_eq(t.ev[2].payload_len, 4 * 3 * 4);
  tp_trace_free(&t);
  gemm_start(&pk, 3, true);
  tp_pack_bin(&pk, data, 5 * 2 * 4 * 4);
  tp_pack_bin(&pk, data, 5 * 4 * 3 * 4); /* a batched B */
  expect_reject(&sb, "REQUEST PAYLOAD", GP_E_INVALID_ARGUMENT, "b: expected 48 bytes");
  /* the encoder writes the key only when set */
  gp_gemm_hdr hdr;
  gp_gemm_hdr_init(&hdr);
  hdr.m = hdr.n = hdr.k = 2;
  hdr.batch = 3;
  hdr.broadcast_b = true;
  uint64_t b_bytes = 0;
  ck_assert(gp_gemm_operand_bytes(&hdr, GP_OPERAND_B, &b_bytes) && b_bytes == 16);
  ck_assert_int_eq(gp_encode_gemm_request_hdr(&sb, MSGID, &hdr, false), 0);
  ck_assert(memmem(sb.data, sb.size, "broadcast_b", 11) != NULL);
  msgpack_sbuffer_clear(&sb);
  hdr.broadcast_b = false;
  ck_assert_int_eq(gp_encode_gemm_request_hdr(&sb, MSGID, &hdr, false), 0);
  ck_assert(memmem(sb.data, sb.size, "broadcast_b", 11) == NULL);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

int main(void) {
  Suite *s = suite_create("proto_resident");
  TCase *tc = tcase_create("resident");
  tcase_add_test(tc, put_with_a_bin);
  tcase_add_test(tc, put_from_a_region);
  tcase_add_test(tc, put_rejected);
  tcase_add_test(tc, free_takes_one_handle);
  tcase_add_test(tc, handles_as_operands);
  tcase_add_test(tc, broadcast_b_takes_one_matrix);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
