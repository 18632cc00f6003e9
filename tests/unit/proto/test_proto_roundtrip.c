/*
 * test_proto_roundtrip.c - every message the encoders write decodes to what
 * was encoded, in one piece, byte by byte and in random pieces.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "tp_util.h"

/* Decodes sb whole, bytewise and randomly cut; asserts the three traces agree; returns the
 * whole one. */
static tp_trace decode_all_ways(gp_role role, const msgpack_sbuffer *sb) {
  const uint8_t *p = (const uint8_t *)sb->data;
  tp_trace whole = tp_decode(role, NULL, p, sb->size, TP_WHOLE, 0);
  tp_trace bytes = tp_decode(role, NULL, p, sb->size, TP_BYTES, 0);
  tp_trace pieces = tp_decode(role, NULL, p, sb->size, TP_RANDOM, 12345);
  ck_assert_msg(tp_trace_equal(&whole, &bytes), "byte-by-byte feeding differs");
  ck_assert_msg(tp_trace_equal(&whole, &pieces), "random pieces differ");
  ck_assert(!whole.bad_offsets && !bytes.bad_offsets && !pieces.bad_offsets);
  ck_assert(!whole.bad_pointers && !bytes.bad_pointers && !pieces.bad_pointers);
  ck_assert(!whole.zero_progress && !bytes.zero_progress && !pieces.zero_progress);
  tp_trace_free(&bytes);
  tp_trace_free(&pieces);
  return whole;
}

static void assert_types(const tp_trace *t, const char *want) {
  char buf[512];
  ck_assert_str_eq(tp_trace_types(t, buf, sizeof buf), want);
}

START_TEST(simple_requests) {
  static const char *const names[] = {"ping", "info", "stats"};
  static const gp_method methods[] = {GP_METHOD_PING, GP_METHOD_INFO, GP_METHOD_STATS};
  for (int i = 0; i < 3; i++) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    uint32_t msgid = i == 0 ? 0 : i == 1 ? 200 : UINT32_MAX; /* fixint, uint8, uint32 */
    ck_assert_int_eq(gp_encode_request(&sb, msgid, names[i]), 0);
    tp_trace t = decode_all_ways(GP_ROLE_SERVER, &sb);
    assert_types(&t, "REQUEST MESSAGE_END");
    ck_assert_int_eq(t.ev[0].method, methods[i]);
    ck_assert_uint_eq(t.ev[0].msgid, msgid);
    ck_assert(t.ev[0].has_msgid);
    ck_assert_uint_eq(t.ev[1].msgid, msgid);
    tp_trace_free(&t);
    msgpack_sbuffer_destroy(&sb);
  }
}
END_TEST

START_TEST(notifications) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  ck_assert_int_eq(gp_encode_notification(&sb, "ping"), 0);
  ck_assert_int_eq(gp_encode_notification(&sb, "no_such_method"), 0);
  tp_trace t = decode_all_ways(GP_ROLE_SERVER, &sb);
  assert_types(&t, "NOTIFICATION MESSAGE_END NOTIFICATION MESSAGE_END");
  ck_assert_int_eq(t.ev[0].method, GP_METHOD_PING);
  ck_assert(!t.ev[0].has_msgid);
  ck_assert_int_eq(t.ev[2].method, GP_METHOD_UNKNOWN);
  tp_trace_free(&t);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

static void check_gemm_roundtrip(const gp_gemm_hdr *h, bool with_c, uint64_t *rng) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  uint8_t *ops[3];
  uint64_t sizes[3];
  tp_encode_gemm(&sb, 77, h, with_c, rng, ops, sizes);
  tp_trace t = decode_all_ways(GP_ROLE_SERVER, &sb);
  assert_types(&t, with_c ? "REQUEST PAYLOAD PAYLOAD PAYLOAD MESSAGE_END"
                          : "REQUEST PAYLOAD PAYLOAD MESSAGE_END");
  const gp_gemm_hdr *g = &t.ev[0].gemm;
  ck_assert_int_eq(t.ev[0].method, GP_METHOD_GEMM);
  ck_assert_uint_eq(t.ev[0].msgid, 77);
  ck_assert_int_eq(t.ev[0].has_c, with_c);
  ck_assert_uint_eq(g->m, h->m);
  ck_assert_uint_eq(g->n, h->n);
  ck_assert_uint_eq(g->k, h->k);
  ck_assert_int_eq(g->dtype, h->dtype);
  ck_assert_int_eq(g->trans_a, h->trans_a);
  ck_assert_int_eq(g->trans_b, h->trans_b);
  ck_assert(g->alpha == h->alpha);
  ck_assert(g->beta == h->beta);
  ck_assert_uint_eq(g->batch, h->batch);
  ck_assert_int_eq(g->precision, h->precision);
  ck_assert_int_eq(g->has_timeout, h->has_timeout);
  ck_assert_uint_eq(g->timeout_ms, h->timeout_ms);
  for (int op = 0; op < (with_c ? 3 : 2); op++) {
    const tp_event *e = &t.ev[1 + op];
    ck_assert_int_eq(e->operand, op);
    ck_assert_uint_eq(e->payload_len, sizes[op]);
    ck_assert(memcmp(e->payload, ops[op], sizes[op]) == 0);
  }
  tp_trace_free(&t);
  for (int op = 0; op < 3; op++)
    free(ops[op]);
  msgpack_sbuffer_destroy(&sb);
}

START_TEST(gemm_requests) {
  uint64_t rng = 42;
  static const uint64_t dims[] = {1, 7, 17, 33};
  for (int dt = 0; dt < GP_DTYPE_COUNT; dt++) {
    if (dt == GP_DTYPE_I32)
      continue; /* a result dtype only */
    for (size_t i = 0; i < 4; i++) {
      gp_gemm_hdr h;
      gp_gemm_hdr_init(&h);
      h.m = dims[i];
      h.n = dims[(i + 1) % 4];
      h.k = dims[(i + 2) % 4];
      h.dtype = (gp_dtype)dt;
      h.trans_a = i & 1;
      h.trans_b = (i >> 1) & 1;
      h.batch = 1 + i % 3;
      check_gemm_roundtrip(&h, false, &rng);
      h.alpha = dt == GP_DTYPE_I8 ? -3 : -0.5; /* the integer gemm takes integers */
      h.beta = dt == GP_DTYPE_I8 ? 2 : 2.25;
      h.precision = GP_PRECISION_FAST;
      h.has_timeout = true;
      h.timeout_ms = 1500;
      check_gemm_roundtrip(&h, true, &rng);
    }
  }
}
END_TEST

START_TEST(pong_and_error_responses) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  ck_assert_int_eq(gp_encode_pong_response(&sb, 5), 0);
  ck_assert_int_eq(gp_encode_error_response(&sb, 6, GP_E_DEADLINE_EXCEEDED, "not started in 5 ms"),
                   0);
  ck_assert_int_eq(gp_encode_error_response(&sb, 7, GP_E_INTERNAL, NULL), 0);
  tp_trace t = decode_all_ways(GP_ROLE_CLIENT, &sb);
  assert_types(&t, "RESPONSE MESSAGE_END RESPONSE MESSAGE_END RESPONSE MESSAGE_END");
  ck_assert_uint_eq(t.ev[0].msgid, 5);
  ck_assert_int_eq(t.ev[0].err.code, 0);
  ck_assert(t.ev[0].has_result);
  ck_assert_str_eq(t.ev[0].result_text, "\"pong\"");
  ck_assert_uint_eq(t.ev[2].msgid, 6);
  ck_assert_int_eq(t.ev[2].err.code, GP_E_DEADLINE_EXCEEDED);
  ck_assert_str_eq(t.ev[2].err.message, "not started in 5 ms");
  ck_assert(!t.ev[2].has_result);
  ck_assert_int_eq(t.ev[4].err.code, GP_E_INTERNAL);
  ck_assert_str_eq(t.ev[4].err.message, "internal error");
  tp_trace_free(&t);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(every_error_code_roundtrips) {
  for (int code = -1; code >= -9; code--) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    ck_assert_int_eq(gp_encode_error_response(&sb, 1, code, "why"), 0);
    tp_trace t = decode_all_ways(GP_ROLE_CLIENT, &sb);
    assert_types(&t, "RESPONSE MESSAGE_END");
    ck_assert_int_eq(t.ev[0].err.code, code);
    ck_assert_str_eq(t.ev[0].err.message, "why");
    tp_trace_free(&t);
    msgpack_sbuffer_destroy(&sb);
  }
}
END_TEST

START_TEST(map_results) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  ck_assert_int_eq(gp_pack_response_head(&pk, 9), 0);
  msgpack_pack_map(&pk, 3);
  tp_pack_str(&pk, "version");
  tp_pack_str(&pk, "0.1.0");
  tp_pack_str(&pk, "devices");
  msgpack_pack_array(&pk, 1);
  msgpack_pack_map(&pk, 2);
  tp_pack_str(&pk, "id");
  msgpack_pack_int(&pk, 0);
  tp_pack_str(&pk, "memory");
  msgpack_pack_uint64(&pk, 150000000000ull);
  tp_pack_str(&pk, "ratio");
  msgpack_pack_double(&pk, 0.5);
  /* a 2-array that is not [map, bin] is a generic result too */
  ck_assert_int_eq(gp_pack_response_head(&pk, 10), 0);
  msgpack_pack_array(&pk, 2);
  msgpack_pack_map(&pk, 0);
  tp_pack_str(&pk, "x");
  tp_trace t = decode_all_ways(GP_ROLE_CLIENT, &sb);
  assert_types(&t, "RESPONSE MESSAGE_END RESPONSE MESSAGE_END");
  ck_assert_str_eq(t.ev[0].result_text,
                   "{\"version\"=>\"0.1.0\", \"devices\"=>[{\"id\"=>0, \"memory\"=>150000000000}], "
                   "\"ratio\"=>0.500000}");
  ck_assert(!t.ev[0].is_gemm_result);
  ck_assert_str_eq(t.ev[2].result_text, "[{}, \"x\"]");
  tp_trace_free(&t);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(gemm_responses) {
  uint64_t rng = 7;
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  gp_gemm_result_hdr rh;
  memset(&rh, 0, sizeof rh);
  rh.m = 7;
  rh.n = 3;
  rh.batch = 2;
  rh.dtype = GP_DTYPE_F64;
  strcpy(rh.device, "cuda:1");
  strcpy(rh.kernel, "tiled16");
  rh.queue_us = 1;
  rh.transfer_in_us = 22;
  rh.compute_us = 333;
  rh.transfer_out_us = 4444;
  uint8_t c[7 * 3 * 2 * 8];
  tp_fill_random(c, sizeof c, &rng);
  ck_assert_int_eq(gp_encode_gemm_response_head(&sb, 11, &rh, sizeof c), 0);
  msgpack_sbuffer_write(&sb, (const char *)c, sizeof c);
  tp_trace t = decode_all_ways(GP_ROLE_CLIENT, &sb);
  assert_types(&t, "RESPONSE PAYLOAD MESSAGE_END");
  ck_assert(t.ev[0].is_gemm_result);
  ck_assert_uint_eq(t.ev[0].msgid, 11);
  ck_assert_uint_eq(t.ev[0].result_bytes, sizeof c);
  const gp_gemm_result_hdr *got = &t.ev[0].result_hdr;
  ck_assert_uint_eq(got->m, 7);
  ck_assert_uint_eq(got->n, 3);
  ck_assert_uint_eq(got->batch, 2);
  ck_assert_int_eq(got->dtype, GP_DTYPE_F64);
  ck_assert_str_eq(got->device, "cuda:1");
  ck_assert_str_eq(got->kernel, "tiled16");
  ck_assert_uint_eq(got->queue_us, 1);
  ck_assert_uint_eq(got->transfer_in_us, 22);
  ck_assert_uint_eq(got->compute_us, 333);
  ck_assert_uint_eq(got->transfer_out_us, 4444);
  ck_assert_int_eq(t.ev[1].operand, GP_OPERAND_C);
  ck_assert_uint_eq(t.ev[1].payload_len, sizeof c);
  ck_assert(memcmp(t.ev[1].payload, c, sizeof c) == 0);
  tp_trace_free(&t);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

Suite *roundtrip_suite(void) {
  Suite *s = suite_create("proto_roundtrip");
  TCase *tc = tcase_create("roundtrip");
  tcase_set_timeout(tc, 30); /* every dtype cut at random under ASan on a loaded machine: > 4 s */
  tcase_add_test(tc, simple_requests);
  tcase_add_test(tc, notifications);
  tcase_add_test(tc, gemm_requests);
  tcase_add_test(tc, pong_and_error_responses);
  tcase_add_test(tc, every_error_code_roundtrips);
  tcase_add_test(tc, map_results);
  tcase_add_test(tc, gemm_responses);
  suite_add_tcase(s, tc);
  return s;
}

TP_MAIN(roundtrip_suite)
