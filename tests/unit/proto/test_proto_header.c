/*
 * test_proto_header.c - the gemm header: every key, every default, integer
 * and float encodings, and every rejection path of a request (each names its
 * field, carries the msgid, and the stream goes on with the next message).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tp_util.h"

#define MSGID 4242u

/* Packs [0, MSGID, "gemm", [ and a map of npairs: the caller packs the pairs. */
static void gemm_start(msgpack_packer *pk, uint32_t nparams, uint32_t npairs) {
  tp_pack_request_start(pk, MSGID, "gemm", nparams);
  msgpack_pack_map(pk, npairs);
}

static void key(msgpack_packer *pk, const char *k) { tp_pack_str(pk, k); }

static void pack_required(msgpack_packer *pk, uint64_t m, uint64_t n, uint64_t k,
                          const char *dtype) {
  key(pk, "m");
  msgpack_pack_uint64(pk, m);
  key(pk, "n");
  msgpack_pack_uint64(pk, n);
  key(pk, "k");
  msgpack_pack_uint64(pk, k);
  key(pk, "dtype");
  tp_pack_str(pk, dtype);
}

/* Appends bins of the sizes hdr implies (zeros). */
static void pack_operands(msgpack_packer *pk, const gp_gemm_hdr *h, bool with_c) {
  for (gp_operand op = GP_OPERAND_A; op <= (with_c ? GP_OPERAND_C : GP_OPERAND_B); op++) {
    uint64_t bytes;
    ck_assert(gp_gemm_operand_bytes(h, op, &bytes));
    uint8_t *zeros = calloc(1, bytes + 1);
    tp_pack_bin(pk, zeros, bytes);
    free(zeros);
  }
}

/* Completes a message cut short after a reject: `pairs` more dummy map pairs, then `params`
 * more params (nil), so that the next message starts where it should. */
static void pad(msgpack_packer *pk, int pairs, int params) {
  for (int i = 0; i < pairs; i++) {
    tp_pack_str(pk, "pad");
    msgpack_pack_nil(pk);
  }
  for (int i = 0; i < params; i++)
    msgpack_pack_nil(pk);
}

static void assert_types(const tp_trace *t, const char *want) {
  char buf[512];
  ck_assert_str_eq(tp_trace_types(t, buf, sizeof buf), want);
}

/* Decodes sb + a ping (msgid 999) whole and bytewise (they must agree). Expects
 * `before` events, then REJECT with code and a message containing `needle`, then the ping. */
static void expect_reject_in(msgpack_sbuffer *sb, const char *before, int code,
                             const char *needle) {
  ck_assert_int_eq(gp_encode_request(sb, 999, "ping"), 0);
  const uint8_t *p = (const uint8_t *)sb->data;
  tp_trace t = tp_decode(GP_ROLE_SERVER, NULL, p, sb->size, TP_WHOLE, 0);
  tp_trace b = tp_decode(GP_ROLE_SERVER, NULL, p, sb->size, TP_BYTES, 0);
  ck_assert_msg(tp_trace_equal(&t, &b), "bytewise feeding differs");
  char want[256];
  snprintf(want, sizeof want, "%s%sREJECT REQUEST MESSAGE_END", before, *before ? " " : "");
  assert_types(&t, want);
  const tp_event *rej = &t.ev[t.n - 3];
  ck_assert_int_eq(rej->err.code, code);
  ck_assert(rej->has_msgid);
  ck_assert_uint_eq(rej->msgid, MSGID);
  ck_assert_msg(strstr(rej->err.message, needle) != NULL, "message \"%s\" lacks \"%s\"",
                rej->err.message, needle);
  ck_assert_uint_eq(t.ev[t.n - 2].msgid, 999);
  tp_trace_free(&t);
  tp_trace_free(&b);
}

static void expect_reject(msgpack_sbuffer *sb, int code, const char *needle) {
  expect_reject_in(sb, "", code, needle);
}

/* Packs a gemm request whose header holds only m, n, k and dtype (plus padding for the
 * rest), expects it rejected with code and a message containing needle, then clears sb. */
static void expect_required_rejected(msgpack_sbuffer *sb, msgpack_packer *pk, uint64_t m,
                                     uint64_t n, uint64_t k, const char *dtype, int code,
                                     const char *needle) {
  gemm_start(pk, 3, 4);
  pack_required(pk, m, n, k, dtype);
  pad(pk, 0, 2);
  expect_reject(sb, code, needle);
  msgpack_sbuffer_clear(sb);
}

/* Decodes one gemm request and returns its REQUEST's header (asserting the full trace). */
static gp_gemm_hdr decode_hdr(msgpack_sbuffer *sb, bool with_c) {
  tp_trace t = tp_decode(GP_ROLE_SERVER, NULL, (const uint8_t *)sb->data, sb->size, TP_WHOLE, 0);
  assert_types(&t, with_c ? "REQUEST PAYLOAD PAYLOAD PAYLOAD MESSAGE_END"
                          : "REQUEST PAYLOAD PAYLOAD MESSAGE_END");
  gp_gemm_hdr h = t.ev[0].gemm;
  tp_trace_free(&t);
  return h;
}

START_TEST(defaults) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  gemm_start(&pk, 3, 4);
  pack_required(&pk, 2, 3, 4, "f64");
  gp_gemm_hdr want;
  gp_gemm_hdr_init(&want);
  want.m = 2;
  want.n = 3;
  want.k = 4;
  want.dtype = GP_DTYPE_F64;
  pack_operands(&pk, &want, false);
  gp_gemm_hdr h = decode_hdr(&sb, false);
  ck_assert_uint_eq(h.m, 2);
  ck_assert_uint_eq(h.n, 3);
  ck_assert_uint_eq(h.k, 4);
  ck_assert_int_eq(h.dtype, GP_DTYPE_F64);
  ck_assert(!h.trans_a && !h.trans_b);
  ck_assert(h.alpha == 1.0);
  ck_assert(h.beta == 0.0);
  ck_assert_uint_eq(h.batch, 1);
  ck_assert_int_eq(h.precision, GP_PRECISION_EXACT);
  ck_assert(!h.has_timeout);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(every_key_set) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  gemm_start(&pk, 4, 11);
  /* keys in an unusual order, ints in every width */
  key(&pk, "timeout_ms");
  msgpack_pack_uint64(&pk, 70000); /* uint32 */
  key(&pk, "precision");
  tp_pack_str(&pk, "fast");
  key(&pk, "batch");
  msgpack_pack_uint16(&pk, 3);
  key(&pk, "beta");
  msgpack_pack_float(&pk, 0.25f); /* float32 */
  key(&pk, "alpha");
  msgpack_pack_int64(&pk, -2); /* an int */
  key(&pk, "trans_b");
  msgpack_pack_true(&pk);
  key(&pk, "trans_a");
  msgpack_pack_true(&pk);
  key(&pk, "dtype");
  tp_pack_str(&pk, "bf16");
  key(&pk, "k");
  msgpack_pack_int8(&pk, 5); /* a signed encoding of a positive value */
  key(&pk, "n");
  msgpack_pack_fix_uint64(&pk, 300); /* uint64 encoding */
  key(&pk, "m");
  msgpack_pack_fix_uint8(&pk, 7);
  gp_gemm_hdr want;
  gp_gemm_hdr_init(&want);
  want.m = 7;
  want.n = 300;
  want.k = 5;
  want.dtype = GP_DTYPE_BF16;
  want.trans_a = want.trans_b = true;
  want.batch = 3;
  pack_operands(&pk, &want, true);
  gp_gemm_hdr h = decode_hdr(&sb, true);
  ck_assert_uint_eq(h.m, 7);
  ck_assert_uint_eq(h.n, 300);
  ck_assert_uint_eq(h.k, 5);
  ck_assert_int_eq(h.dtype, GP_DTYPE_BF16);
  ck_assert(h.trans_a && h.trans_b);
  ck_assert(h.alpha == -2.0);
  ck_assert(h.beta == 0.25);
  ck_assert_uint_eq(h.batch, 3);
  ck_assert_int_eq(h.precision, GP_PRECISION_FAST);
  ck_assert(h.has_timeout);
  ck_assert_uint_eq(h.timeout_ms, 70000);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(every_dtype_sizes_operands) {
  static const char *const names[] = {"f32", "f64", "f16", "bf16", "i8"};
  static const size_t sizes[] = {4, 8, 2, 2, 1};
  for (int dt = 0; dt < 5; dt++) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    tp_packer(&pk, &sb);
    gemm_start(&pk, 3, 4);
    pack_required(&pk, 3, 5, 7, names[dt]);
    /* a is 3x7, b 7x5 */
    uint8_t *a = calloc(1, 21 * sizes[dt]), *b = calloc(1, 35 * sizes[dt]);
    tp_pack_bin(&pk, a, 21 * sizes[dt]);
    tp_pack_bin(&pk, b, 35 * sizes[dt]);
    gp_gemm_hdr h = decode_hdr(&sb, false);
    ck_assert_int_eq(h.dtype, dt);
    free(a);
    free(b);
    msgpack_sbuffer_destroy(&sb);
  }
}
END_TEST

START_TEST(transposed_shapes) {
  /* trans_a: A stored k x m; trans_b: B stored n x k; the lengths only differ with batch */
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = 2;
  h.n = 3;
  h.k = 5;
  h.trans_a = true;
  uint64_t r, c;
  gp_gemm_operand_shape(&h, GP_OPERAND_A, &r, &c);
  ck_assert(r == 5 && c == 2);
  gp_gemm_operand_shape(&h, GP_OPERAND_B, &r, &c);
  ck_assert(r == 5 && c == 3);
  h.trans_b = true;
  gp_gemm_operand_shape(&h, GP_OPERAND_B, &r, &c);
  ck_assert(r == 3 && c == 5);
  gp_gemm_operand_shape(&h, GP_OPERAND_C, &r, &c);
  ck_assert(r == 2 && c == 3);
}
END_TEST

START_TEST(method_as_bin) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  msgpack_pack_array(&pk, 4);
  msgpack_pack_uint8(&pk, 0);
  msgpack_pack_uint8(&pk, 3);
  tp_pack_binstr(&pk, "stats");
  msgpack_pack_array(&pk, 0);
  msgpack_pack_array(&pk, 3);
  msgpack_pack_uint8(&pk, 2);
  tp_pack_binstr(&pk, "info");
  msgpack_pack_array(&pk, 0);
  tp_trace t = tp_decode(GP_ROLE_SERVER, NULL, (const uint8_t *)sb.data, sb.size, TP_BYTES, 0);
  assert_types(&t, "REQUEST MESSAGE_END NOTIFICATION MESSAGE_END");
  ck_assert_int_eq(t.ev[0].method, GP_METHOD_STATS);
  ck_assert_int_eq(t.ev[2].method, GP_METHOD_INFO);
  tp_trace_free(&t);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* auth carries its token (str or bin) in the REQUEST; the first event of the stream. */
static void expect_token(const msgpack_sbuffer *sb, const char *token, size_t len) {
  gp_decoder *d = gp_decoder_new(GP_ROLE_SERVER, NULL);
  ck_assert_ptr_nonnull(d);
  gp_event ev;
  size_t used = gp_decoder_feed(d, (const uint8_t *)sb->data, sb->size, &ev);
  ck_assert_int_eq(ev.type, GP_EV_REQUEST);
  ck_assert_int_eq(ev.method, GP_METHOD_AUTH);
  ck_assert_uint_eq(ev.token_len, len);
  ck_assert_int_eq(memcmp(ev.token, token, len < GP_AUTH_TOKEN_MAX ? len : GP_AUTH_TOKEN_MAX),
                   0);
  gp_decoder_feed(d, (const uint8_t *)sb->data + used, sb->size - used, &ev);
  ck_assert_int_eq(ev.type, GP_EV_MESSAGE_END);
  gp_decoder_free(d);
}

START_TEST(auth_token) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  ck_assert_int_eq(gp_encode_auth_request(&sb, MSGID, "s3cret", 6), 0);
  expect_token(&sb, "s3cret", 6);
  msgpack_sbuffer_clear(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  tp_pack_request_start(&pk, MSGID, "auth", 1);
  char long_token[300];
  memset(long_token, 'x', sizeof long_token);
  tp_pack_bin(&pk, (const uint8_t *)long_token, sizeof long_token); /* bin, past the kept part */
  expect_token(&sb, long_token, sizeof long_token);
  msgpack_sbuffer_clear(&sb);
  tp_pack_request_start(&pk, MSGID, "auth", 0);
  expect_reject(&sb, GP_E_INVALID_ARGUMENT, "params: auth takes [token], got an array");
  msgpack_sbuffer_clear(&sb);
  tp_pack_request_start(&pk, MSGID, "auth", 1);
  msgpack_pack_int(&pk, 7);
  expect_reject(&sb, GP_E_INVALID_ARGUMENT, "token: must be a str or bin, got an integer");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* ---- rejections ---- */

START_TEST(unknown_method) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  tp_pack_request_start(&pk, MSGID, "frobnicate\x01", 2);
  uint8_t big[1000] = {0};
  tp_pack_bin(&pk, big, sizeof big); /* params are skipped, bins included */
  msgpack_pack_map(&pk, 1);
  msgpack_pack_nil(&pk);
  msgpack_pack_nil(&pk);
  expect_reject(&sb, GP_E_UNIMPLEMENTED, "method \"frobnicate?\" is not implemented");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(method_of_wrong_type) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  msgpack_pack_array(&pk, 4);
  msgpack_pack_uint8(&pk, 0);
  msgpack_pack_uint32(&pk, MSGID);
  msgpack_pack_int(&pk, 5);
  msgpack_pack_array(&pk, 0);
  expect_reject(&sb, GP_E_INVALID_ARGUMENT, "method: must be a str or bin, got an integer");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(simple_methods_take_empty_params) {
  static const char *const names[] = {"ping", "info", "stats"};
  for (int i = 0; i < 3; i++) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    tp_packer(&pk, &sb);
    tp_pack_request_start(&pk, MSGID, names[i], 1);
    msgpack_pack_true(&pk);
    expect_reject(&sb, GP_E_INVALID_ARGUMENT, "params:");
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_array(&pk, 4);
    msgpack_pack_uint8(&pk, 0);
    msgpack_pack_uint32(&pk, MSGID);
    tp_pack_str(&pk, names[i]);
    msgpack_pack_map(&pk, 0); /* {} is not [] */
    expect_reject(&sb, GP_E_INVALID_ARGUMENT, "params:");
    msgpack_sbuffer_destroy(&sb);
  }
}
END_TEST

START_TEST(gemm_params_shape) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  tp_pack_request_start(&pk, MSGID, "gemm", 2);
  msgpack_pack_map(&pk, 0);
  msgpack_pack_nil(&pk);
  expect_reject(&sb, GP_E_INVALID_ARGUMENT, "params: gemm takes [hdr, a, b] or [hdr, a, b, c]");
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_array(&pk, 4);
  msgpack_pack_uint8(&pk, 0);
  msgpack_pack_uint32(&pk, MSGID);
  tp_pack_str(&pk, "gemm");
  tp_pack_str(&pk, "params");
  expect_reject(&sb, GP_E_INVALID_ARGUMENT, "params: gemm takes");
  msgpack_sbuffer_clear(&sb);
  tp_pack_request_start(&pk, MSGID, "gemm", 3);
  msgpack_pack_array(&pk, 0);
  msgpack_pack_nil(&pk);
  msgpack_pack_nil(&pk);
  expect_reject(&sb, GP_E_INVALID_ARGUMENT, "hdr: must be a map, got an array");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(unknown_and_duplicate_keys) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  gemm_start(&pk, 3, 5);
  pack_required(&pk, 1, 1, 1, "f32");
  key(&pk, "tranz_a");
  msgpack_pack_true(&pk);
  pad(&pk, 0, 2);
  expect_reject(&sb, GP_E_INVALID_ARGUMENT, "hdr: unknown key \"tranz_a\"");
  msgpack_sbuffer_clear(&sb);
  gemm_start(&pk, 3, 5);
  pack_required(&pk, 1, 1, 1, "f32");
  key(&pk, "k");
  msgpack_pack_uint8(&pk, 1);
  pad(&pk, 0, 2);
  expect_reject(&sb, GP_E_INVALID_ARGUMENT, "hdr: duplicate key \"k\"");
  msgpack_sbuffer_clear(&sb);
  gemm_start(&pk, 3, 1);
  msgpack_pack_uint8(&pk, 1); /* a key that is not a str */
  msgpack_pack_uint8(&pk, 1);
  pad(&pk, 0, 2);
  expect_reject(&sb, GP_E_INVALID_ARGUMENT, "hdr: a key: must be a str, got an integer");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(missing_required_keys) {
  static const char *const names[] = {"m", "n", "k", "dtype"};
  for (int skip = 0; skip < 4; skip++) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    tp_packer(&pk, &sb);
    gemm_start(&pk, 3, 3);
    for (int i = 0; i < 4; i++) {
      if (i == skip)
        continue;
      key(&pk, names[i]);
      if (i == 3)
        tp_pack_str(&pk, "f32");
      else
        msgpack_pack_uint8(&pk, 1);
    }
    uint8_t four[4] = {0};
    tp_pack_bin(&pk, four, 4);
    tp_pack_bin(&pk, four, 4);
    char needle[32];
    snprintf(needle, sizeof needle, "hdr: missing %s", names[skip]);
    expect_reject(&sb, GP_E_INVALID_ARGUMENT, needle);
    msgpack_sbuffer_destroy(&sb);
  }
}
END_TEST

/* A header of the four required keys plus one more pair packed by `extra`, a and b of 16 bytes;
 * rejected after the events `before` ("" or "REQUEST": when the header itself passed). */
static void reject_extra_in(void (*extra)(msgpack_packer *), const char *before,
                            const char *needle, int code) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  gemm_start(&pk, 3, 5);
  pack_required(&pk, 2, 2, 2, "f32");
  extra(&pk);
  uint8_t sixteen[16] = {0};
  tp_pack_bin(&pk, sixteen, 16);
  tp_pack_bin(&pk, sixteen, 16);
  expect_reject_in(&sb, before, code, needle);
  msgpack_sbuffer_destroy(&sb);
}

static void reject_extra(void (*extra)(msgpack_packer *), const char *needle, int code) {
  reject_extra_in(extra, "", needle, code);
}

static void x_trans_a_int(msgpack_packer *pk) { key(pk, "trans_a"); msgpack_pack_uint8(pk, 1); }
static void x_trans_b_nil(msgpack_packer *pk) { key(pk, "trans_b"); msgpack_pack_nil(pk); }
static void x_alpha_str(msgpack_packer *pk) { key(pk, "alpha"); tp_pack_str(pk, "1.0"); }
static void x_beta_bool(msgpack_packer *pk) { key(pk, "beta"); msgpack_pack_false(pk); }
static void x_batch_float(msgpack_packer *pk) { key(pk, "batch"); msgpack_pack_double(pk, 1); }
static void x_batch_zero(msgpack_packer *pk) { key(pk, "batch"); msgpack_pack_uint8(pk, 0); }
static void x_batch_negative(msgpack_packer *pk) { key(pk, "batch"); msgpack_pack_int8(pk, -3); }
static void x_precision_bad(msgpack_packer *pk) { key(pk, "precision"); tp_pack_str(pk, "sloppy"); }
static void x_precision_int(msgpack_packer *pk) { key(pk, "precision"); msgpack_pack_uint8(pk, 1); }
static void x_timeout_negative(msgpack_packer *pk) { key(pk, "timeout_ms"); msgpack_pack_int8(pk, -1); }
static void x_timeout_ext(msgpack_packer *pk) {
  key(pk, "timeout_ms");
  msgpack_pack_ext(pk, 4, 7);
  msgpack_pack_ext_body(pk, "abcd", 4);
}
static void x_alpha_nan(msgpack_packer *pk) { key(pk, "alpha"); msgpack_pack_double(pk, NAN); }
static void x_alpha_inf(msgpack_packer *pk) { key(pk, "alpha"); msgpack_pack_float(pk, INFINITY); }
static void x_beta_without_c(msgpack_packer *pk) { key(pk, "beta"); msgpack_pack_double(pk, 0.5); }
static void x_beta_map(msgpack_packer *pk) { key(pk, "beta"); msgpack_pack_map(pk, 1); msgpack_pack_nil(pk); msgpack_pack_nil(pk); }

START_TEST(wrong_values) {
  reject_extra(x_trans_a_int, "trans_a: must be a bool, got an integer", GP_E_INVALID_ARGUMENT);
  reject_extra(x_trans_b_nil, "trans_b: must be a bool, got nil", GP_E_INVALID_ARGUMENT);
  reject_extra(x_alpha_str, "alpha: must be a number, got a str", GP_E_INVALID_ARGUMENT);
  reject_extra(x_beta_bool, "beta: must be a number, got a bool", GP_E_INVALID_ARGUMENT);
  reject_extra(x_beta_map, "beta: must be a number, got a map", GP_E_INVALID_ARGUMENT);
  reject_extra(x_batch_float, "batch: must be an integer, got a float", GP_E_INVALID_ARGUMENT);
  reject_extra(x_batch_zero, "batch: must be >= 1", GP_E_INVALID_ARGUMENT);
  reject_extra(x_batch_negative, "batch: must be >= 1, got -3", GP_E_INVALID_ARGUMENT);
  reject_extra(x_precision_bad, "precision: \"sloppy\" is not one of exact, fast",
               GP_E_INVALID_ARGUMENT);
  reject_extra(x_precision_int, "precision: must be a str, got an integer", GP_E_INVALID_ARGUMENT);
  reject_extra(x_timeout_negative, "timeout_ms: must be >= 0, got -1", GP_E_INVALID_ARGUMENT);
  reject_extra(x_timeout_ext, "timeout_ms: must be an integer, got an ext", GP_E_INVALID_ARGUMENT);
  reject_extra(x_alpha_nan, "alpha: must be finite", GP_E_INVALID_ARGUMENT);
  reject_extra(x_alpha_inf, "alpha: must be finite", GP_E_INVALID_ARGUMENT);
  reject_extra(x_beta_without_c, "c: required when beta != 0", GP_E_INVALID_ARGUMENT);
}
END_TEST

static void x_act_bad(msgpack_packer *pk) { key(pk, "activation"); tp_pack_str(pk, "tanh"); }
static void x_act_int(msgpack_packer *pk) { key(pk, "activation"); msgpack_pack_uint8(pk, 1); }
static void x_bias_int(msgpack_packer *pk) { key(pk, "bias"); msgpack_pack_uint8(pk, 1); }
static void x_bias_no_c(msgpack_packer *pk) { key(pk, "bias"); msgpack_pack_true(pk); }

/* want encoded (with c) and decoded again; key is in the encoding exactly when present. */
static gp_gemm_hdr encode_decode(const gp_gemm_hdr *want, const char *name, bool present) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  ck_assert_int_eq(gp_encode_gemm_request_hdr(&sb, MSGID, want, true), 0);
  ck_assert((memmem(sb.data, sb.size, name, strlen(name)) != NULL) == present);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  pack_operands(&pk, want, true);
  gp_gemm_hdr got = decode_hdr(&sb, true);
  msgpack_sbuffer_destroy(&sb);
  return got;
}

/* A 2 x 2 x 2 f32 gemm with beta 1, one more key (extra) and a c of 16 bytes (a full f32 C):
 * refused where that key makes c 8 bytes long. */
static void reject_short_c(void (*extra)(msgpack_packer *)) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  gemm_start(&pk, 4, 6);
  pack_required(&pk, 2, 2, 2, "f32");
  extra(&pk);
  key(&pk, "beta");
  msgpack_pack_double(&pk, 1.0);
  uint8_t sixteen[16] = {0};
  for (int i = 0; i < 3; i++)
    tp_pack_bin(&pk, sixteen, 16);
  expect_reject_in(&sb, "REQUEST PAYLOAD PAYLOAD", GP_E_INVALID_ARGUMENT, "c: expected 8 bytes");
  msgpack_sbuffer_destroy(&sb);
}

static void x_bias_true(msgpack_packer *pk) { key(pk, "bias"); msgpack_pack_true(pk); }
static void x_out_bf16(msgpack_packer *pk) { key(pk, "out_dtype"); tp_pack_str(pk, "bf16"); }

/* The epilogue's keys: bias makes c one row of n (a full C is refused by its length), it needs
 * c and a beta, the activation names are the four of PROTOCOL.md, and the encoder writes both
 * keys back only when set. */
START_TEST(epilogue_keys) {
  reject_extra(x_act_bad, "activation: \"tanh\" is not one of none, relu, gelu, gelu_tanh",
               GP_E_INVALID_ARGUMENT);
  reject_extra(x_act_int, "activation: must be a str, got an integer", GP_E_INVALID_ARGUMENT);
  reject_extra(x_bias_int, "bias: must be a bool, got an integer", GP_E_INVALID_ARGUMENT);
  reject_extra(x_bias_no_c, "bias: needs c", GP_E_INVALID_ARGUMENT);
  const char *acts[] = {"none", "relu", "gelu", "gelu_tanh"};
  for (int i = 0; i < 4; i++) {
    gp_gemm_hdr want;
    gp_gemm_hdr_init(&want);
    want.m = 5, want.n = 3, want.k = 2, want.batch = 4, want.beta = 1.0;
    want.bias = true;
    want.activation = (gp_act)i;
    ck_assert_str_eq(gp_act_name(want.activation), acts[i]);
    uint64_t c_bytes, result_bytes;
    ck_assert(gp_gemm_operand_bytes(&want, GP_OPERAND_C, &c_bytes) && c_bytes == 3 * 4);
    ck_assert(gp_gemm_result_bytes(&want, &result_bytes) && result_bytes == 4 * 5 * 3 * 4);
    gp_gemm_hdr got = encode_decode(&want, "activation", i != 0);
    ck_assert(got.bias);
    ck_assert_int_eq(got.activation, i);
  }
  reject_short_c(x_bias_true); /* with bias, a c of the full C's size is the wrong length */
}
END_TEST

static void x_out_bad(msgpack_packer *pk) { key(pk, "out_dtype"); tp_pack_str(pk, "f8"); }
static void x_out_int(msgpack_packer *pk) { key(pk, "out_dtype"); msgpack_pack_uint8(pk, 2); }
static void x_out_wider(msgpack_packer *pk) { key(pk, "out_dtype"); tp_pack_str(pk, "f64"); }

/* The output cast: out_dtype names one of the four dtypes, only f16/bf16 from f32/f64 is a
 * cast, c and the result take the out dtype's size, and the encoder writes the key only for a
 * real cast. */
START_TEST(out_dtype_key) {
  reject_extra(x_out_bad, "out_dtype: \"f8\" is not one of f32, f64, f16, bf16, i8, i32, e4m3, e5m2, c64, c128",
               GP_E_INVALID_ARGUMENT);
  reject_extra(x_out_int, "out_dtype: must be a str, got an integer", GP_E_INVALID_ARGUMENT);
  reject_extra(x_out_wider, "out_dtype: a f32 gemm cannot return f64", GP_E_INVALID_ARGUMENT);
  for (int dt = 0; dt < GP_DTYPE_COUNT; dt++)
    for (int out = 0; out < GP_DTYPE_COUNT; out++) {
      bool fp8 = dt == GP_DTYPE_E4M3 || dt == GP_DTYPE_E5M2; /* an f32 result */
      bool casts = (dt == GP_DTYPE_F32 || dt == GP_DTYPE_F64 || fp8) &&
                   (out == GP_DTYPE_F16 || out == GP_DTYPE_BF16);
      bool same = out == (dt == GP_DTYPE_I8 ? GP_DTYPE_I32 : fp8 ? GP_DTYPE_F32 : dt);
      ck_assert(gp_dtype_cast_ok((gp_dtype)dt, (gp_dtype)out) == (casts || same));
    }
  const gp_dtype from[2] = {GP_DTYPE_F32, GP_DTYPE_F64}, to[3] = {GP_DTYPE_F16, GP_DTYPE_BF16,
                                                                  GP_DTYPE_F64};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      if (!gp_dtype_cast_ok(from[i], to[j]))
        continue;
      gp_gemm_hdr want;
      gp_gemm_hdr_init(&want);
      want.m = 5, want.n = 3, want.k = 2, want.batch = 4, want.beta = 0.5;
      want.dtype = from[i];
      want.has_out_dtype = true;
      want.out_dtype = to[j];
      size_t es = gp_dtype_size(from[i]), os = gp_dtype_size(to[j]);
      uint64_t a_bytes, c_bytes, result_bytes;
      ck_assert(gp_gemm_operand_bytes(&want, GP_OPERAND_A, &a_bytes) && a_bytes == 4 * 5 * 2 * es);
      ck_assert(gp_gemm_operand_bytes(&want, GP_OPERAND_C, &c_bytes) && c_bytes == 4 * 5 * 3 * os);
      ck_assert(gp_gemm_result_bytes(&want, &result_bytes) && result_bytes == c_bytes);
      ck_assert(gp_gemm_casts(&want) == (from[i] != to[j]));
      gp_gemm_hdr got = encode_decode(&want, "out_dtype", gp_gemm_casts(&want));
      ck_assert_int_eq(gp_gemm_out_dtype(&got), to[j]);
      ck_assert_int_eq(got.dtype, from[i]);
    }
  reject_short_c(x_out_bf16); /* c of the compute dtype's size is the wrong length for a cast */
}
END_TEST

START_TEST(wrong_dims_and_dtype) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  expect_required_rejected(&sb, &pk, 0, 1, 1, "f32", GP_E_INVALID_ARGUMENT, "m: must be >= 1");
  gemm_start(&pk, 3, 4);
  key(&pk, "m");
  msgpack_pack_int8(&pk, -1);
  pad(&pk, 3, 2);
  expect_reject(&sb, GP_E_INVALID_ARGUMENT, "m: must be >= 1, got -1");
  msgpack_sbuffer_clear(&sb);
  expect_required_rejected(&sb, &pk, 1, 0, 1, "f32", GP_E_INVALID_ARGUMENT, "n: must be >= 1");
  expect_required_rejected(&sb, &pk, 1, 1, 0, "f32", GP_E_INVALID_ARGUMENT, "k: must be >= 1");
  gemm_start(&pk, 3, 4);
  key(&pk, "k");
  tp_pack_str(&pk, "3");
  pad(&pk, 3, 2);
  expect_reject(&sb, GP_E_INVALID_ARGUMENT, "k: must be an integer, got a str");
  msgpack_sbuffer_clear(&sb);
  expect_required_rejected(&sb, &pk, 1, 1, 1, "f128", GP_E_INVALID_ARGUMENT,
                           "dtype: \"f128\" is not one of f32, f64, f16, bf16, i8, i32, e4m3, e5m2, c64, c128");
  gemm_start(&pk, 3, 4);
  key(&pk, "dtype");
  tp_pack_binstr(&pk, "f32");
  pad(&pk, 3, 2);
  expect_reject(&sb, GP_E_INVALID_ARGUMENT, "dtype: must be a str, got a bin");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(operands_wrong) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  uint8_t buf[64] = {0};
  /* a of the wrong length: REJECT right after the REQUEST, before any payload byte */
  gemm_start(&pk, 3, 4);
  pack_required(&pk, 2, 3, 4, "f32");
  tp_pack_bin(&pk, buf, 31);
  tp_pack_bin(&pk, buf, 48);
  expect_reject_in(&sb, "REQUEST", GP_E_INVALID_ARGUMENT, "a: expected 32 bytes, got 31");
  msgpack_sbuffer_clear(&sb);
  /* b of the wrong length: a is already delivered */
  gemm_start(&pk, 3, 4);
  pack_required(&pk, 2, 3, 4, "f32");
  tp_pack_bin(&pk, buf, 32);
  tp_pack_bin(&pk, buf, 49);
  expect_reject_in(&sb, "REQUEST PAYLOAD", GP_E_INVALID_ARGUMENT, "b: expected 48 bytes, got 49");
  msgpack_sbuffer_clear(&sb);
  /* c of the wrong length */
  gemm_start(&pk, 4, 4);
  pack_required(&pk, 2, 3, 4, "f32");
  tp_pack_bin(&pk, buf, 32);
  tp_pack_bin(&pk, buf, 48);
  tp_pack_bin(&pk, buf, 23);
  expect_reject_in(&sb, "REQUEST PAYLOAD PAYLOAD", GP_E_INVALID_ARGUMENT,
                   "c: expected 24 bytes, got 23");
  msgpack_sbuffer_clear(&sb);
  /* a str where a bin belongs */
  gemm_start(&pk, 3, 4);
  pack_required(&pk, 1, 1, 1, "f32");
  tp_pack_str(&pk, "abcd");
  tp_pack_bin(&pk, buf, 4);
  expect_reject_in(&sb, "REQUEST", GP_E_INVALID_ARGUMENT, "a: must be a bin, a region reference map or a handle map, got a str");
  msgpack_sbuffer_clear(&sb);
  /* an array where b belongs */
  gemm_start(&pk, 3, 4);
  pack_required(&pk, 1, 1, 1, "f32");
  tp_pack_bin(&pk, buf, 4);
  msgpack_pack_array(&pk, 4);
  for (int i = 0; i < 4; i++)
    msgpack_pack_uint8(&pk, 0);
  expect_reject_in(&sb, "REQUEST PAYLOAD", GP_E_INVALID_ARGUMENT, "b: must be a bin, a region reference map or a handle map, got an array");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* An i8 header through the validator: err's code, and its message starting with `want`. */
static void check_i8_hdr(const gp_gemm_hdr *h, bool has_c, int code, const char *want) {
  gp_limits lim;
  gp_limits_default(&lim);
  gp_error err;
  ck_assert_int_eq(gp_gemm_hdr_validate(h, has_c, &lim, &err), code);
  if (want != NULL)
    ck_assert_msg(strncmp(err.message, want, strlen(want)) == 0, "got \"%s\", want \"%s...\"",
                  err.message, want);
}

/* The integer gemm: i8 operands, c and the result i32 (4 bytes, out_dtype i32 or none), integer
 * alpha and beta within int32, ReLU at most; i32 is no gemm's dtype. */
START_TEST(integer_gemm) {
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = 5, h.n = 3, h.k = 16, h.batch = 2, h.dtype = GP_DTYPE_I8, h.alpha = -7, h.beta = 3;
  uint64_t a_bytes, c_bytes, result_bytes;
  ck_assert(gp_gemm_operand_bytes(&h, GP_OPERAND_A, &a_bytes) && a_bytes == 2 * 5 * 16);
  ck_assert(gp_gemm_operand_bytes(&h, GP_OPERAND_C, &c_bytes) && c_bytes == 2 * 5 * 3 * 4);
  ck_assert(gp_gemm_result_bytes(&h, &result_bytes) && result_bytes == c_bytes);
  ck_assert_int_eq(gp_gemm_out_dtype(&h), GP_DTYPE_I32);
  ck_assert(!gp_gemm_casts(&h) && gp_dtype_is_int(h.dtype));
  check_i8_hdr(&h, true, GP_OK, NULL);
  h.has_out_dtype = true, h.out_dtype = GP_DTYPE_I32; /* the same as none */
  check_i8_hdr(&h, true, GP_OK, NULL);
  ck_assert(!gp_gemm_casts(&h));
  h.out_dtype = GP_DTYPE_F32;
  check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "out_dtype: a i8 gemm cannot return f32");
  h.has_out_dtype = false, h.alpha = 0.5;
  check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "alpha, beta: an i8 gemm takes integers");
  h.alpha = 2147483648.0; /* one past int32 */
  check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "alpha, beta");
  h.alpha = -2147483648.0, h.beta = 2147483647.0; /* the ends of int32 */
  check_i8_hdr(&h, true, GP_OK, NULL);
  h.activation = GP_ACT_GELU;
  check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "activation: an i8 gemm takes none or relu");
  h.activation = GP_ACT_RELU, h.bias = true; /* a bias row of n i32 values */
  check_i8_hdr(&h, true, GP_OK, NULL);
  ck_assert(gp_gemm_operand_bytes(&h, GP_OPERAND_C, &c_bytes) && c_bytes == 3 * 4);
  h.dtype = GP_DTYPE_I32;
  check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "dtype: i32 is a result dtype only");
  /* on the wire: the encoder sends no out_dtype for i8's own result, and it decodes back */
  gp_gemm_hdr want;
  gp_gemm_hdr_init(&want);
  want.m = 4, want.n = 8, want.k = 32, want.dtype = GP_DTYPE_I8, want.trans_b = true;
  want.alpha = 3, want.beta = -2;
  gp_gemm_hdr got = encode_decode(&want, "out_dtype", false);
  ck_assert_int_eq(got.dtype, GP_DTYPE_I8);
  ck_assert_int_eq(gp_gemm_out_dtype(&got), GP_DTYPE_I32);
  ck_assert(got.alpha == 3 && got.beta == -2 && got.trans_b);
}
END_TEST

static void x_scale_a_str(msgpack_packer *pk) { key(pk, "scale_a"); tp_pack_str(pk, "2"); }
static void x_scale_b_f32(msgpack_packer *pk) { key(pk, "scale_b"); msgpack_pack_double(pk, 2); }

/* The fp8 gemm: e4m3 / e5m2 operands of 1 byte, c and the result f32 (or a cast to f16/bf16),
 * the per-tensor scales scale_a and scale_b (fp8 only, finite, folded into gp_gemm_alpha), sent
 * by the encoder only when not 1 and decoded back. */
START_TEST(fp8_gemm) {
  reject_extra(x_scale_a_str, "scale_a: must be a number, got a str", GP_E_INVALID_ARGUMENT);
  reject_extra(x_scale_b_f32, "scale_a, scale_b: only an e4m3 or e5m2 gemm takes per-tensor scales",
               GP_E_INVALID_ARGUMENT);
  for (int e5m2 = 0; e5m2 < 2; e5m2++) {
    gp_gemm_hdr h;
    gp_gemm_hdr_init(&h);
    h.m = 5, h.n = 3, h.k = 16, h.batch = 2, h.beta = 0.5;
    h.dtype = e5m2 ? GP_DTYPE_E5M2 : GP_DTYPE_E4M3;
    uint64_t a_bytes, c_bytes, result_bytes;
    ck_assert(gp_gemm_operand_bytes(&h, GP_OPERAND_A, &a_bytes) && a_bytes == 2 * 5 * 16);
    ck_assert(gp_gemm_operand_bytes(&h, GP_OPERAND_C, &c_bytes) && c_bytes == 2 * 5 * 3 * 4);
    ck_assert(gp_gemm_result_bytes(&h, &result_bytes) && result_bytes == c_bytes);
    ck_assert_int_eq(gp_gemm_out_dtype(&h), GP_DTYPE_F32);
    ck_assert(!gp_gemm_casts(&h) && gp_dtype_is_fp8(h.dtype) && !gp_dtype_is_int(h.dtype));
    h.alpha = -2, h.scale_a = 0.5, h.scale_b = 0.125;
    ck_assert(gp_gemm_alpha(&h) == -0.125);
    h.activation = GP_ACT_GELU, h.bias = true;
    check_i8_hdr(&h, true, GP_OK, NULL);
    h.has_out_dtype = true, h.out_dtype = GP_DTYPE_BF16; /* a cast of the f32 result */
    check_i8_hdr(&h, true, GP_OK, NULL);
    ck_assert(gp_gemm_casts(&h));
    h.out_dtype = GP_DTYPE_E4M3;
    check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "out_dtype: a e");
    h.has_out_dtype = false, h.scale_a = INFINITY;
    check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "scale_a, scale_b: must be finite");
    h.scale_a = 1e300, h.scale_b = 1e300; /* each finite, the product not */
    check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "scale_a, scale_b: must be finite");
    h.scale_a = h.scale_b = 1, h.dtype = GP_DTYPE_F16, h.scale_b = 2;
    check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "scale_a, scale_b: only an e4m3 or e5m2");
  }
  gp_gemm_hdr want;
  gp_gemm_hdr_init(&want);
  want.m = 4, want.n = 8, want.k = 32, want.dtype = GP_DTYPE_E4M3, want.trans_b = true;
  want.scale_a = 0.25;
  gp_gemm_hdr got = encode_decode(&want, "scale_a", true);
  ck_assert(got.dtype == GP_DTYPE_E4M3 && got.scale_a == 0.25 && got.scale_b == 1.0);
  want.scale_a = 1, want.scale_b = 3;
  got = encode_decode(&want, "scale_a", false);
  ck_assert(got.scale_a == 1.0 && got.scale_b == 3.0 && gp_gemm_alpha(&got) == 3.0);
  want.scale_b = 1, want.dtype = GP_DTYPE_E5M2;
  got = encode_decode(&want, "scale_", false);
  ck_assert(got.dtype == GP_DTYPE_E5M2 && gp_gemm_out_dtype(&got) == GP_DTYPE_F32);
}
END_TEST

static void x_conj_a_f32(msgpack_packer *pk) { key(pk, "conj_a"); msgpack_pack_true(pk); }
static void x_alpha_im_str(msgpack_packer *pk) { key(pk, "alpha_im"); tp_pack_str(pk, "1"); }
static void x_lda_payload(msgpack_packer *pk) { key(pk, "lda"); msgpack_pack_uint8(pk, 2); }
static void x_lda_short(msgpack_packer *pk) { key(pk, "lda"); msgpack_pack_uint8(pk, 1); }
static void x_ldc_no_out(msgpack_packer *pk) { key(pk, "ldc"); msgpack_pack_uint8(pk, 4); }

/* The complex gemm: c64 / c128 elements of 8 / 16 bytes and 8 m n k flops, alpha_im, beta_im,
 * conj_a, conj_b (complex only, finite; beta_im alone needs c; no epilogue, no cast), sent by
 * the encoder only when set and decoded back. */
START_TEST(complex_gemm) {
  reject_extra(x_conj_a_f32, "alpha_im, beta_im, conj_a, conj_b: only a c64 or c128 gemm",
               GP_E_INVALID_ARGUMENT);
  reject_extra(x_alpha_im_str, "alpha_im: must be a number, got a str", GP_E_INVALID_ARGUMENT);
  for (int wide = 0; wide < 2; wide++) {
    gp_gemm_hdr h;
    gp_gemm_hdr_init(&h);
    h.m = 5, h.n = 3, h.k = 7, h.batch = 2;
    h.dtype = wide ? GP_DTYPE_C128 : GP_DTYPE_C64;
    const uint64_t size = wide ? 16 : 8;
    uint64_t a_bytes, c_bytes, result_bytes;
    ck_assert(gp_gemm_operand_bytes(&h, GP_OPERAND_A, &a_bytes) && a_bytes == 2 * 5 * 7 * size);
    ck_assert(gp_gemm_operand_bytes(&h, GP_OPERAND_C, &c_bytes) && c_bytes == 2 * 5 * 3 * size);
    ck_assert(gp_gemm_result_bytes(&h, &result_bytes) && result_bytes == c_bytes);
    ck_assert(gp_gemm_flops(&h) == 8.0 * 5 * 3 * 7 * 2);
    h.alpha_im = -1, h.conj_a = h.conj_b = true;
    check_i8_hdr(&h, false, GP_OK, NULL);
    h.beta_im = 0.5; /* beta is 0 + 0.5i: c is read */
    ck_assert(!gp_gemm_beta_zero(&h));
    check_i8_hdr(&h, false, GP_E_INVALID_ARGUMENT, "c: required when beta != 0");
    check_i8_hdr(&h, true, GP_OK, NULL);
    h.alpha_im = NAN;
    check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "alpha_im, beta_im: must be finite");
    h.alpha_im = 0, h.activation = GP_ACT_RELU;
    check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "bias, activation: a c");
    h.activation = GP_ACT_NONE, h.has_out_dtype = true, h.out_dtype = GP_DTYPE_F16;
    check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "out_dtype: a c");
    h.out_dtype = h.dtype; /* its own dtype: no cast */
    check_i8_hdr(&h, true, GP_OK, NULL);
    h.has_out_dtype = false, h.dtype = GP_DTYPE_F64;
    check_i8_hdr(&h, true, GP_E_INVALID_ARGUMENT, "alpha_im, beta_im, conj_a, conj_b: only");
  }
  gp_gemm_hdr want;
  gp_gemm_hdr_init(&want);
  want.m = 4, want.n = 8, want.k = 3, want.dtype = GP_DTYPE_C64, want.trans_a = true;
  want.alpha_im = 2, want.beta = 1, want.beta_im = -1, want.conj_b = true;
  gp_gemm_hdr got = encode_decode(&want, "alpha_im", true);
  ck_assert(got.dtype == GP_DTYPE_C64 && got.alpha_im == 2 && got.beta_im == -1);
  ck_assert(got.conj_b && !got.conj_a && got.trans_a);
  want.alpha_im = 0, want.beta_im = 0, want.conj_b = false;
  got = encode_decode(&want, "conj_", false);
  ck_assert(!got.conj_a && !got.conj_b && got.alpha_im == 0 && got.beta_im == 0);
}
END_TEST

/* Leading dimensions: the strided extent ((rows - 1) ld + cols) size, overflow-checked; ld below
 * the row length, an ld with the operand sent as a payload, ldc without out, and other dtypes
 * or the epilogue refused. */
START_TEST(leading_dims) {
  reject_extra(x_lda_short, "lda: 1 is less than the row length 2 of a", GP_E_INVALID_ARGUMENT);
  reject_extra(x_ldc_no_out, "ldc: needs out", GP_E_INVALID_ARGUMENT);
  /* an lda with a sent as a payload: the header passes, the payload is refused */
  reject_extra_in(x_lda_payload, "REQUEST", "a: a leading dimension (lda)",
                  GP_E_INVALID_ARGUMENT);

  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = 3, h.n = 4, h.k = 5, h.batch = 2, h.dtype = GP_DTYPE_C128, h.trans_a = true;
  h.ld[GP_OPERAND_A] = 7; /* A stored k x m = 5 x 3: 10 rows of 7, the last 3 long */
  h.ld[GP_OPERAND_C] = 9, h.has_out = true;
  uint64_t bytes_a, bytes_c;
  ck_assert(gp_gemm_operand_bytes(&h, GP_OPERAND_A, &bytes_a) && bytes_a == (9 * 7 + 3) * 16);
  ck_assert(gp_gemm_result_bytes(&h, &bytes_c) && bytes_c == (5 * 9 + 4) * 16);
  ck_assert(gp_gemm_ld(&h, GP_OPERAND_B) == 4 && gp_gemm_ld(&h, GP_OPERAND_A) == 7);
  check_i8_hdr(&h, false, GP_OK, NULL);
  h.ld[GP_OPERAND_A] = UINT64_MAX; /* the extent overflows: refused, never sized */
  ck_assert(!gp_gemm_operand_bytes(&h, GP_OPERAND_A, &bytes_a));
  check_i8_hdr(&h, false, GP_E_RESOURCE_EXHAUSTED, "a: over the limit");
  h.ld[GP_OPERAND_A] = 7, h.dtype = GP_DTYPE_F16;
  check_i8_hdr(&h, false, GP_E_INVALID_ARGUMENT, "lda, ldb, ldc: only an f32, f64, c64 or c128");
  h.dtype = GP_DTYPE_F32, h.activation = GP_ACT_GELU;
  check_i8_hdr(&h, false, GP_E_INVALID_ARGUMENT, "lda, ldb, ldc: only");
  gp_gemm_hdr want;
  gp_gemm_hdr_init(&want);
  want.m = 2, want.n = 3, want.k = 4, want.ld[GP_OPERAND_B] = 11;
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  ck_assert_int_eq(gp_encode_gemm_request_hdr(&sb, MSGID, &want, false), 0);
  ck_assert(memmem(sb.data, sb.size, "ldb", 3) != NULL && memmem(sb.data, sb.size, "lda", 3) == NULL);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(semantic_limits) {
  gp_limits lim;
  gp_limits_default(&lim);
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  expect_required_rejected(&sb, &pk, lim.max_dim + 1, 1, 1, "f32", GP_E_RESOURCE_EXHAUSTED,
                           "m: 65537 is over the limit 65536");
  expect_required_rejected(&sb, &pk, 65536, 65536, 65536, "f32", GP_E_RESOURCE_EXHAUSTED,
                           "m*n*k*batch");
  /* a within work but over max_operand_bytes: 65536 x 8192 f64 = 4 GiB */
  expect_required_rejected(&sb, &pk, 65536, 1, 8192, "f64", GP_E_RESOURCE_EXHAUSTED,
                           "a: over the limit");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

Suite *header_suite(void) {
  Suite *s = suite_create("proto_header");
  TCase *tc = tcase_create("keys");
  tcase_add_test(tc, defaults);
  tcase_add_test(tc, every_key_set);
  tcase_add_test(tc, every_dtype_sizes_operands);
  tcase_add_test(tc, transposed_shapes);
  tcase_add_test(tc, method_as_bin);
  tcase_add_test(tc, auth_token);
  suite_add_tcase(s, tc);
  tc = tcase_create("rejections");
  tcase_add_test(tc, unknown_method);
  tcase_add_test(tc, method_of_wrong_type);
  tcase_add_test(tc, simple_methods_take_empty_params);
  tcase_add_test(tc, gemm_params_shape);
  tcase_add_test(tc, unknown_and_duplicate_keys);
  tcase_add_test(tc, missing_required_keys);
  tcase_add_test(tc, wrong_values);
  tcase_add_test(tc, epilogue_keys);
  tcase_add_test(tc, out_dtype_key);
  tcase_add_test(tc, wrong_dims_and_dtype);
  tcase_add_test(tc, operands_wrong);
  tcase_add_test(tc, semantic_limits);
  tcase_add_test(tc, integer_gemm);
  tcase_add_test(tc, fp8_gemm);
  tcase_add_test(tc, complex_gemm);
  tcase_add_test(tc, leading_dims);
  suite_add_tcase(s, tc);
  return s;
}

TP_MAIN(header_suite)
