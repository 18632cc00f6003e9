/*
 * test_proto_shm.c - the server decoder's shared-memory grammar: shm_register [size] and
 * shm_unregister [region], operands given as {"region": id, "offset": N} (OPERAND_REF events in
 * the place of their PAYLOAD events, mixed with bins), the header's "out", and every malformed
 * form rejected with the message in step. Each message is decoded whole and byte by byte, and
 * the two traces must agree.
 */
#include <check.h>
#include <string.h>

#include "tp_util.h"

#define MSGID 77u

#define decode tp_decode_checked

/* A REJECT (INVALID_ARGUMENT) of this file's msgid after `before`, its message holding needle. */
static void expect_reject(msgpack_sbuffer *sb, const char *before, const char *needle) {
  tp_expect_reject(sb, MSGID, before, GP_E_INVALID_ARGUMENT, needle);
}

static void pack_ref(msgpack_packer *pk, uint64_t region, uint64_t offset) {
  msgpack_pack_map(pk, 2);
  tp_pack_str(pk, "region");
  msgpack_pack_uint64(pk, region);
  tp_pack_str(pk, "offset");
  msgpack_pack_uint64(pk, offset);
}

/* [0, MSGID, "gemm", [{m: 2, n: 3, k: 4, dtype: f32 (, out: ref)}, then the caller's operands */
static void gemm_start(msgpack_packer *pk, uint32_t nparams, bool out) {
  tp_pack_request_start(pk, MSGID, "gemm", nparams);
  msgpack_pack_map(pk, out ? 5 : 4);
  const char *keys[] = {"m", "n", "k"};
  for (int i = 0; i < 3; i++) {
    tp_pack_str(pk, keys[i]);
    msgpack_pack_uint64(pk, (uint64_t)i + 2);
  }
  tp_pack_str(pk, "dtype");
  tp_pack_str(pk, "f32");
  if (out) {
    tp_pack_str(pk, "out");
    pack_ref(pk, 9, 4096);
  }
}

START_TEST(register_and_unregister) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  tp_pack_request_start(&pk, MSGID, "shm_register", 1);
  msgpack_pack_uint64(&pk, 1ull << 40);
  tp_trace t = decode(&sb, "REQUEST MESSAGE_END");
  ck_assert_int_eq(t.ev[0].method, GP_METHOD_SHM_REGISTER);
  ck_assert_uint_eq(t.ev[0].arg, 1ull << 40);
  tp_trace_free(&t);
  tp_pack_request_start(&pk, MSGID, "shm_unregister", 1);
  msgpack_pack_uint64(&pk, UINT64_MAX);
  t = decode(&sb, "REQUEST MESSAGE_END");
  ck_assert_int_eq(t.ev[0].method, GP_METHOD_SHM_UNREGISTER);
  ck_assert_uint_eq(t.ev[0].arg, UINT64_MAX);
  ck_assert_uint_eq(t.ev[2].arg, 0); /* the ping after it: reset per message */
  tp_trace_free(&t);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(register_params_rejected) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  tp_pack_request_start(&pk, MSGID, "shm_register", 0);
  expect_reject(&sb, "", "shm_register takes [size], got an array of 0");
  tp_pack_request_start(&pk, MSGID, "shm_register", 2);
  msgpack_pack_uint64(&pk, 1);
  msgpack_pack_uint64(&pk, 2);
  expect_reject(&sb, "", "got an array of 2");
  tp_pack_request_start(&pk, MSGID, "shm_register", 1);
  msgpack_pack_int64(&pk, -5);
  expect_reject(&sb, "", "size: must be a non-negative integer");
  tp_pack_request_start(&pk, MSGID, "shm_unregister", 1);
  tp_pack_str(&pk, "1");
  expect_reject(&sb, "", "region: must be a non-negative integer, got a str");
  msgpack_pack_array(&pk, 4); /* params not an array */
  msgpack_pack_uint8(&pk, 0);
  msgpack_pack_uint32(&pk, MSGID);
  tp_pack_str(&pk, "shm_unregister");
  msgpack_pack_map(&pk, 0);
  expect_reject(&sb, "", "shm_unregister takes [region], got a map");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(operand_refs_mixed_with_bins) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  uint8_t b[48] = {1};
  gemm_start(&pk, 4, true);
  pack_ref(&pk, 3, 64);        /* a */
  tp_pack_bin(&pk, b, 48);     /* b */
  msgpack_pack_map(&pk, 1);    /* c: offset defaults to 0 */
  tp_pack_str(&pk, "region");
  msgpack_pack_uint64(&pk, 5);
  tp_trace t = decode(&sb, "REQUEST OPERAND_REF PAYLOAD OPERAND_REF MESSAGE_END");
  ck_assert(t.ev[0].gemm.has_out);
  ck_assert_uint_eq(t.ev[0].gemm.out_region, 9);
  ck_assert_uint_eq(t.ev[0].gemm.out_offset, 4096);
  ck_assert_int_eq(t.ev[1].operand, GP_OPERAND_A);
  ck_assert_uint_eq(t.ev[1].region, 3);
  ck_assert_uint_eq(t.ev[1].offset, 64);
  ck_assert_int_eq(t.ev[2].operand, GP_OPERAND_B);
  ck_assert_uint_eq(t.ev[2].payload_len, 48);
  ck_assert_int_eq(t.ev[3].operand, GP_OPERAND_C);
  ck_assert_uint_eq(t.ev[3].region, 5);
  ck_assert_uint_eq(t.ev[3].offset, 0);
  tp_trace_free(&t);
  /* without out, every operand a reference, the largest offset */
  gemm_start(&pk, 3, false);
  pack_ref(&pk, 1, UINT64_MAX);
  pack_ref(&pk, UINT64_MAX, 0);
  t = decode(&sb, "REQUEST OPERAND_REF OPERAND_REF MESSAGE_END");
  ck_assert(!t.ev[0].gemm.has_out);
  ck_assert_uint_eq(t.ev[1].offset, UINT64_MAX);
  ck_assert_uint_eq(t.ev[2].region, UINT64_MAX);
  tp_trace_free(&t);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(refs_rejected) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  uint8_t a[32] = {0};
  gemm_start(&pk, 3, false); /* no region */
  tp_pack_bin(&pk, a, 32);
  msgpack_pack_map(&pk, 1);
  tp_pack_str(&pk, "offset");
  msgpack_pack_uint64(&pk, 0);
  expect_reject(&sb, "REQUEST PAYLOAD", "b: missing region");
  gemm_start(&pk, 3, false); /* a key given twice */
  msgpack_pack_map(&pk, 2);
  tp_pack_str(&pk, "region");
  msgpack_pack_uint64(&pk, 1);
  tp_pack_str(&pk, "region");
  msgpack_pack_uint64(&pk, 1);
  msgpack_pack_nil(&pk);
  expect_reject(&sb, "REQUEST", "a: duplicate key \"region\"");
  gemm_start(&pk, 3, false); /* an unknown key */
  msgpack_pack_map(&pk, 1);
  tp_pack_str(&pk, "bytes");
  msgpack_pack_uint64(&pk, 1);
  msgpack_pack_nil(&pk);
  expect_reject(&sb, "REQUEST", "a: unknown key \"bytes\"");
  gemm_start(&pk, 3, false); /* a float offset */
  msgpack_pack_map(&pk, 2);
  tp_pack_str(&pk, "region");
  msgpack_pack_uint64(&pk, 1);
  tp_pack_str(&pk, "offset");
  msgpack_pack_double(&pk, 1.5);
  msgpack_pack_nil(&pk);
  expect_reject(&sb, "REQUEST", "a.offset: must be a non-negative integer, got a float");
  gemm_start(&pk, 3, false); /* a key that is not a str */
  msgpack_pack_map(&pk, 1);
  msgpack_pack_uint64(&pk, 1);
  msgpack_pack_uint64(&pk, 1);
  msgpack_pack_nil(&pk);
  expect_reject(&sb, "REQUEST", "a: a key must be a str");
  /* the header's out: not a map; missing region (then no REQUEST at all) */
  tp_pack_request_start(&pk, MSGID, "gemm", 3);
  msgpack_pack_map(&pk, 1);
  tp_pack_str(&pk, "out");
  msgpack_pack_uint64(&pk, 3);
  msgpack_pack_nil(&pk);
  msgpack_pack_nil(&pk);
  expect_reject(&sb, "", "out: must be a region reference map, got an integer");
  tp_pack_request_start(&pk, MSGID, "gemm", 3);
  msgpack_pack_map(&pk, 1);
  tp_pack_str(&pk, "out");
  msgpack_pack_map(&pk, 0);
  msgpack_pack_nil(&pk);
  msgpack_pack_nil(&pk);
  expect_reject(&sb, "", "out: missing region");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

static Suite *shm_suite(void) {
  Suite *s = suite_create("proto_shm");
  TCase *tc = tcase_create("shm");
  tcase_add_test(tc, register_and_unregister);
  tcase_add_test(tc, register_params_rejected);
  tcase_add_test(tc, operand_refs_mixed_with_bins);
  tcase_add_test(tc, refs_rejected);
  suite_add_tcase(s, tc);
  return s;
}

TP_MAIN(shm_suite)
