/*
 * test_proto_limits.c - every limit at exactly its value and one past,
 * overflow of m*n*k*batch, hostile counts that must never allocate, bytes
 * that are not msgpack or not an envelope, and the client side's malformed
 * replies.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "tp_util.h"

static gp_limits defaults(void) {
  gp_limits lim;
  gp_limits_default(&lim);
  return lim;
}

static tp_trace decode(gp_role role, const gp_limits *lim, const msgpack_sbuffer *sb) {
  tp_trace t = tp_decode(role, lim, (const uint8_t *)sb->data, sb->size, TP_WHOLE, 0);
  tp_trace b = tp_decode(role, lim, (const uint8_t *)sb->data, sb->size, TP_BYTES, 0);
  ck_assert_msg(tp_trace_equal(&t, &b), "bytewise feeding differs");
  tp_trace_free(&b);
  return t;
}

static void expect_types(gp_role role, const gp_limits *lim, const msgpack_sbuffer *sb,
                         const char *want, const char *needle) {
  tp_trace t = decode(role, lim, sb);
  char got[512];
  ck_assert_str_eq(tp_trace_types(&t, got, sizeof got), want);
  if (needle != NULL) {
    const tp_event *last = &t.ev[t.n - 1];
    ck_assert_msg(strstr(last->err.message, needle) != NULL, "\"%s\" lacks \"%s\"",
                  last->err.message, needle);
  }
  tp_trace_free(&t);
}

static void expect_raw(gp_role role, const uint8_t *p, size_t n, const char *want,
                       const char *needle) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_sbuffer_write(&sb, (const char *)p, n);
  gp_limits lim = defaults();
  expect_types(role, &lim, &sb, want, needle);
  msgpack_sbuffer_destroy(&sb);
}

START_TEST(defaults_documented) {
  gp_limits lim = defaults();
  ck_assert_uint_eq(lim.max_message_bytes, 3ull * (1u << 30) + 65536);
  ck_assert_uint_eq(lim.max_header_bytes, 65536);
  ck_assert_uint_eq(lim.max_depth, 8);
  ck_assert_uint_eq(lim.max_items, 4096);
  ck_assert_uint_eq(lim.max_string_bytes, 4096);
  ck_assert_uint_eq(lim.max_dim, 65536);
  ck_assert_uint_eq(lim.max_batch, 65536);
  ck_assert_uint_eq(lim.max_work, 1ull << 46);
  ck_assert_uint_eq(lim.max_operand_bytes, 1ull << 30);
}
END_TEST

START_TEST(message_bytes) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  ck_assert_int_eq(gp_encode_request(&sb, 1, "ping"), 0);
  gp_limits lim = defaults();
  lim.max_message_bytes = sb.size;
  expect_types(GP_ROLE_SERVER, &lim, &sb, "REQUEST MESSAGE_END", NULL);
  lim.max_message_bytes = sb.size - 1;
  expect_types(GP_ROLE_SERVER, &lim, &sb, "FATAL", "max_message_bytes");
  /* payload bytes count: a gemm request of exactly the limit, then one past */
  msgpack_sbuffer_clear(&sb);
  uint64_t rng = 1;
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = h.n = h.k = 30;
  uint8_t *ops[3];
  uint64_t sizes[3];
  tp_encode_gemm(&sb, 1, &h, false, &rng, ops, sizes);
  lim = defaults();
  lim.max_message_bytes = sb.size;
  expect_types(GP_ROLE_SERVER, &lim, &sb, "REQUEST PAYLOAD PAYLOAD MESSAGE_END", NULL);
  lim.max_message_bytes = sb.size - 1;
  expect_types(GP_ROLE_SERVER, &lim, &sb, "REJECT FATAL", "max_message_bytes");
  for (int i = 0; i < 3; i++)
    free(ops[i]);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(header_bytes) {
  uint64_t rng = 1;
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = h.n = h.k = 40;
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  uint8_t *ops[3];
  uint64_t sizes[3];
  tp_encode_gemm(&sb, 1, &h, false, &rng, ops, sizes);
  uint32_t header = (uint32_t)(sb.size - sizes[0] - sizes[1]); /* bin headers included */
  gp_limits lim = defaults();
  lim.max_header_bytes = header;
  expect_types(GP_ROLE_SERVER, &lim, &sb, "REQUEST PAYLOAD PAYLOAD MESSAGE_END", NULL);
  lim.max_header_bytes = header - 1;
  expect_types(GP_ROLE_SERVER, &lim, &sb, "REQUEST PAYLOAD FATAL", "max_header_bytes");
  for (int i = 0; i < 3; i++)
    free(ops[i]);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* [2, "x", [[[...]]]] nested so that the innermost array sits at depth `depth` */
static void nested_notification(msgpack_sbuffer *sb, uint32_t depth) {
  msgpack_packer pk;
  tp_packer(&pk, sb);
  msgpack_pack_array(&pk, 3);
  msgpack_pack_uint8(&pk, 2);
  tp_pack_str(&pk, "x");
  for (uint32_t d = 2; d < depth; d++)
    msgpack_pack_array(&pk, 1);
  msgpack_pack_array(&pk, 0);
}

START_TEST(depth) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  gp_limits lim = defaults();
  nested_notification(&sb, lim.max_depth);
  expect_types(GP_ROLE_SERVER, &lim, &sb, "NOTIFICATION MESSAGE_END", NULL);
  msgpack_sbuffer_clear(&sb);
  nested_notification(&sb, lim.max_depth + 1);
  expect_types(GP_ROLE_SERVER, &lim, &sb, "FATAL", "max_depth");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

static void wide_notification(msgpack_sbuffer *sb, uint32_t items, bool map) {
  msgpack_packer pk;
  tp_packer(&pk, sb);
  msgpack_pack_array(&pk, 3);
  msgpack_pack_uint8(&pk, 2);
  tp_pack_str(&pk, "x");
  if (map)
    msgpack_pack_map(&pk, items);
  else
    msgpack_pack_array(&pk, items);
  for (uint32_t i = 0; i < (map ? 2 * items : items); i++)
    msgpack_pack_nil(&pk);
}

START_TEST(items) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  gp_limits lim = defaults();
  for (int map = 0; map < 2; map++) {
    msgpack_sbuffer_clear(&sb);
    wide_notification(&sb, lim.max_items, map);
    expect_types(GP_ROLE_SERVER, &lim, &sb, "NOTIFICATION MESSAGE_END", NULL);
    msgpack_sbuffer_clear(&sb);
    wide_notification(&sb, lim.max_items + 1, map);
    expect_types(GP_ROLE_SERVER, &lim, &sb, "FATAL", "max_items");
  }
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(string_bytes) {
  gp_limits lim = defaults();
  lim.max_string_bytes = 100;
  char name[102];
  memset(name, 'q', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  name[100] = '\0'; /* exactly the limit: an unknown method, answered */
  ck_assert_int_eq(gp_encode_request(&sb, 1, name), 0);
  expect_types(GP_ROLE_SERVER, &lim, &sb, "REJECT", "not implemented");
  msgpack_sbuffer_clear(&sb);
  name[100] = 'q'; /* one past: framing */
  ck_assert_int_eq(gp_encode_request(&sb, 1, name), 0);
  expect_types(GP_ROLE_SERVER, &lim, &sb, "FATAL", "max_string_bytes");
  /* a bin directly in params is a payload, not a string: no string limit */
  msgpack_sbuffer_clear(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  msgpack_pack_array(&pk, 3);
  msgpack_pack_uint8(&pk, 2);
  tp_pack_str(&pk, "upload");
  msgpack_pack_array(&pk, 1);
  uint8_t big[1000] = {0};
  tp_pack_bin(&pk, big, sizeof big);
  expect_types(GP_ROLE_SERVER, &lim, &sb, "NOTIFICATION MESSAGE_END", NULL);
  /* but one nested deeper is */
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_array(&pk, 3);
  msgpack_pack_uint8(&pk, 2);
  tp_pack_str(&pk, "upload");
  msgpack_pack_array(&pk, 1);
  msgpack_pack_array(&pk, 1);
  tp_pack_bin(&pk, big, sizeof big);
  expect_types(GP_ROLE_SERVER, &lim, &sb, "FATAL", "max_string_bytes");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

static int validate(uint64_t m, uint64_t n, uint64_t k, uint64_t batch, gp_dtype dt,
                    const gp_limits *lim, gp_error *err) {
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = m;
  h.n = n;
  h.k = k;
  h.batch = batch;
  h.dtype = dt;
  return gp_gemm_hdr_validate(&h, false, lim, err);
}

START_TEST(semantic_limits_exact_and_past) {
  gp_limits lim = defaults();
  gp_error err;
  ck_assert_int_eq(validate(65536, 1, 1, 1, GP_DTYPE_F32, &lim, &err), 0);
  ck_assert_int_eq(validate(65537, 1, 1, 1, GP_DTYPE_F32, &lim, &err), GP_E_RESOURCE_EXHAUSTED);
  ck_assert_str_eq(err.message, "m: 65537 is over the limit 65536");
  ck_assert_int_eq(validate(1, 65537, 1, 1, GP_DTYPE_F32, &lim, &err), GP_E_RESOURCE_EXHAUSTED);
  ck_assert(strncmp(err.message, "n:", 2) == 0);
  ck_assert_int_eq(validate(1, 1, 65537, 1, GP_DTYPE_F32, &lim, &err), GP_E_RESOURCE_EXHAUSTED);
  ck_assert(strncmp(err.message, "k:", 2) == 0);
  ck_assert_int_eq(validate(1, 1, 1, 65536, GP_DTYPE_F32, &lim, &err), 0);
  ck_assert_int_eq(validate(1, 1, 1, 65537, GP_DTYPE_F32, &lim, &err), GP_E_RESOURCE_EXHAUSTED);
  ck_assert(strncmp(err.message, "batch:", 6) == 0);
  /* work: exactly max_work, then one step past (2^46 itself needs an operand of 4 GiB) */
  lim.max_work = 1000ull * 1000 * 1000 * 3;
  ck_assert_int_eq(validate(1000, 1000, 1000, 3, GP_DTYPE_F32, &lim, &err), 0);
  ck_assert_int_eq(validate(1000, 1000, 1001, 3, GP_DTYPE_F32, &lim, &err),
                   GP_E_RESOURCE_EXHAUSTED);
  ck_assert(strncmp(err.message, "m*n*k*batch", 11) == 0);
  lim = defaults(); /* the default: 2^46 passes the work check, 2^46 + 2^30 does not */
  ck_assert_int_eq(validate(65536, 16384, 65536, 1, GP_DTYPE_F16, &lim, &err),
                   GP_E_RESOURCE_EXHAUSTED);
  ck_assert(strncmp(err.message, "a:", 2) == 0); /* past work: the operand is what fails */
  ck_assert_int_eq(validate(65536, 16385, 65536, 1, GP_DTYPE_F16, &lim, &err),
                   GP_E_RESOURCE_EXHAUSTED);
  ck_assert(strncmp(err.message, "m*n*k*batch", 11) == 0);
  /* operand bytes: 1 GiB exactly, then one element past */
  lim = defaults();
  ck_assert_int_eq(validate(16384, 1, 16384, 1, GP_DTYPE_F32, &lim, &err), 0);
  lim.max_operand_bytes = 16384ull * 16384 * 4 - 1;
  ck_assert_int_eq(validate(16384, 1, 16384, 1, GP_DTYPE_F32, &lim, &err),
                   GP_E_RESOURCE_EXHAUSTED);
  ck_assert(strncmp(err.message, "a:", 2) == 0);
  /* the result c counts even when c is not sent: k = 1 keeps a and b tiny */
  lim = defaults();
  lim.max_operand_bytes = 8192;
  ck_assert_int_eq(validate(64, 32, 1, 1, GP_DTYPE_F32, &lim, &err), 0); /* c: 8192 B */
  ck_assert_int_eq(validate(64, 33, 1, 1, GP_DTYPE_F32, &lim, &err), GP_E_RESOURCE_EXHAUSTED);
  ck_assert_str_eq(err.message, "c: over the limit of 8192 bytes (the result c)");
  /* message: the operands' sum */
  lim = defaults();
  lim.max_message_bytes = 16 + 16 - 1;
  ck_assert_int_eq(validate(2, 2, 2, 1, GP_DTYPE_F32, &lim, &err), GP_E_RESOURCE_EXHAUSTED);
  ck_assert(strncmp(err.message, "message:", 8) == 0);
  lim.max_message_bytes = 32;
  ck_assert_int_eq(validate(2, 2, 2, 1, GP_DTYPE_F32, &lim, &err), 0);
}
END_TEST

START_TEST(work_overflow) {
  gp_limits lim = defaults();
  lim.max_dim = lim.max_batch = lim.max_work = lim.max_operand_bytes = UINT64_MAX;
  lim.max_message_bytes = UINT64_MAX;
  gp_error err;
  /* 2^16 * 2^16 * 2^16 * 2^16 = 2^64 wraps to 0 in uint64_t */
  ck_assert_int_eq(validate(1u << 16, 1u << 16, 1u << 16, 1u << 16, GP_DTYPE_F32, &lim, &err),
                   GP_E_RESOURCE_EXHAUSTED);
  ck_assert(strncmp(err.message, "m*n*k*batch", 11) == 0);
  ck_assert_int_eq(validate(UINT64_MAX, 2, 1, 1, GP_DTYPE_F32, &lim, &err),
                   GP_E_RESOURCE_EXHAUSTED);
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = 1ull << 32;
  h.k = 1ull << 32;
  h.n = 1;
  uint64_t bytes = 7;
  ck_assert(!gp_gemm_operand_bytes(&h, GP_OPERAND_A, &bytes));
  ck_assert_uint_eq(bytes, 7);
  /* and through the decoder, with msgpack uint64 dims */
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  tp_pack_request_start(&pk, 9, "gemm", 3);
  msgpack_pack_map(&pk, 5);
  tp_pack_str(&pk, "m");
  msgpack_pack_uint64(&pk, 1ull << 16);
  tp_pack_str(&pk, "n");
  msgpack_pack_uint64(&pk, 1ull << 16);
  tp_pack_str(&pk, "k");
  msgpack_pack_uint64(&pk, 1ull << 16);
  tp_pack_str(&pk, "batch");
  msgpack_pack_uint64(&pk, 1ull << 16);
  tp_pack_str(&pk, "dtype");
  tp_pack_str(&pk, "f32");
  msgpack_pack_nil(&pk);
  msgpack_pack_nil(&pk);
  expect_types(GP_ROLE_SERVER, &lim, &sb, "REJECT", "m*n*k*batch");
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* Caps the address space so that a decoder reserving memory for a hostile count would fail
 * (the test runs in a forked child: the cap dies with it). Not under ASan, which reserves
 * terabytes of shadow memory up front. */
static void cap_address_space(void) {
#if defined(__SANITIZE_ADDRESS__)
  return;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return;
#endif
#endif
  const char *fork_mode = getenv("CK_FORK");
  if (fork_mode != NULL && strcmp(fork_mode, "no") == 0)
    return; /* not in a child of our own: the cap would outlive the test */
  struct rlimit rl = {512u << 20, 512u << 20};
  ck_assert_int_eq(setrlimit(RLIMIT_AS, &rl), 0);
}

START_TEST(hostile_counts_never_allocate) {
  cap_address_space();
  gp_limits lim = defaults();
  /* an envelope declaring 2^32-1 elements: framing, fatal at its header */
  static const uint8_t env[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x02};
  expect_raw(GP_ROLE_SERVER, env, sizeof env, "FATAL", "max_items");
  static const uint8_t map_env[] = {0xdf, 0xff, 0xff, 0xff, 0xff};
  expect_raw(GP_ROLE_CLIENT, map_env, sizeof map_env, "FATAL", "expected an array");
  /* with max_items opened wide, counts are only counted: a client result declaring 2^32-1
   * elements of which 70000 nils arrive stops at max_header_bytes, having captured at most
   * that much */
  lim.max_items = UINT32_MAX;
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  static const uint8_t head[] = {0x94, 0x01, 0x07, 0xc0, 0xdd, 0xff, 0xff, 0xff, 0xff};
  msgpack_sbuffer_write(&sb, (const char *)head, sizeof head);
  for (int i = 0; i < 70000; i++)
    msgpack_sbuffer_write(&sb, "\xc0", 1);
  tp_trace t = tp_decode(GP_ROLE_CLIENT, &lim, (const uint8_t *)sb.data, sb.size, TP_WHOLE, 0);
  ck_assert_uint_eq(t.n, 1);
  ck_assert_int_eq(t.ev[0].type, GP_EV_FATAL);
  ck_assert(strstr(t.ev[0].err.message, "max_header_bytes") != NULL);
  tp_trace_free(&t);
  /* a map of 2^32-1 pairs in a gemm header with max_items wide: still bounded */
  msgpack_sbuffer_clear(&sb);
  static const uint8_t req[] = {0x94, 0x00, 0x01, 0xa4, 'g', 'e', 'm', 'm', 0x93,
                                0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'm', 0x01};
  msgpack_sbuffer_write(&sb, (const char *)req, sizeof req);
  t = tp_decode(GP_ROLE_SERVER, &lim, (const uint8_t *)sb.data, sb.size, TP_BYTES, 0);
  ck_assert_uint_eq(t.n, 0); /* waiting for more, nothing reserved */
  tp_trace_free(&t);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(not_msgpack_or_not_an_envelope) {
  static const uint8_t c1[] = {0x94, 0x00, 0xc1};
  expect_raw(GP_ROLE_SERVER, c1, sizeof c1, "FATAL", "0xc1 is not msgpack");
  static const uint8_t c1_first[] = {0xc1};
  expect_raw(GP_ROLE_CLIENT, c1_first, 1, "FATAL", "not msgpack");
  static const uint8_t an_int[] = {0x05};
  expect_raw(GP_ROLE_SERVER, an_int, 1, "FATAL", "expected an array, got an integer");
  static const uint8_t five[] = {0x95, 0x00, 0x01, 0xa4, 'p', 'i', 'n', 'g', 0x90, 0xc0};
  expect_raw(GP_ROLE_SERVER, five, sizeof five, "FATAL", "envelope:");
  static const uint8_t response_to_server[] = {0x94, 0x01, 0x01, 0xc0, 0xc0};
  expect_raw(GP_ROLE_SERVER, response_to_server, sizeof response_to_server, "FATAL", "type 1");
  static const uint8_t request_to_client[] = {0x94, 0x00, 0x01, 0xa4, 'p', 'i', 'n', 'g', 0x90};
  expect_raw(GP_ROLE_CLIENT, request_to_client, sizeof request_to_client, "FATAL", "type 0");
  static const uint8_t type_str[] = {0x94, 0xa1, '0', 0x01, 0xa4, 'p', 'i', 'n', 'g', 0x90};
  expect_raw(GP_ROLE_SERVER, type_str, sizeof type_str, "FATAL", "type field");
  static const uint8_t type_neg[] = {0x94, 0xff, 0x01, 0xa4, 'p', 'i', 'n', 'g', 0x90};
  expect_raw(GP_ROLE_SERVER, type_neg, sizeof type_neg, "FATAL", "type field");
  static const uint8_t notif_with_4[] = {0x94, 0x02, 0xa4, 'p', 'i', 'n', 'g', 0x90, 0x90};
  expect_raw(GP_ROLE_SERVER, notif_with_4, sizeof notif_with_4, "FATAL", "type 2");
}
END_TEST

START_TEST(bad_msgids) {
  static const uint8_t negative[] = {0x94, 0x00, 0xff, 0xa4, 'p', 'i', 'n', 'g', 0x90};
  expect_raw(GP_ROLE_SERVER, negative, sizeof negative, "FATAL", "msgid: must be a uint32");
  static const uint8_t too_big[] = {0x94, 0x00, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0,
                                    0xa4, 'p',  'i',  'n', 'g', 0x90};
  expect_raw(GP_ROLE_SERVER, too_big, sizeof too_big, "FATAL", "msgid: must be a uint32");
  static const uint8_t nil[] = {0x94, 0x01, 0xc0, 0xc0, 0xc0};
  expect_raw(GP_ROLE_CLIENT, nil, sizeof nil, "FATAL", "msgid: must be a uint32, got nil");
  /* uint32 max in a uint64 encoding is still a uint32 */
  static const uint8_t wide[] = {0x94, 0x00, 0xcf, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
                                 0xa4, 'p',  'i',  'n', 'g', 0x90};
  expect_raw(GP_ROLE_SERVER, wide, sizeof wide, "REQUEST MESSAGE_END", NULL);
}
END_TEST

START_TEST(odd_types_in_odd_places) {
  /* a notification's params are never parsed: ext, nil, bools, floats, nested maps */
  static const uint8_t notif[] = {0x93, 0x02, 0xa1, 'x', 0x96, 0xd4, 0x01, 0x02, 0xc0, 0xc3,
                                  0xca, 0x3f, 0x80, 0x00, 0x00, 0xd0, 0xfd, 0x81, 0xc0, 0xc2};
  expect_raw(GP_ROLE_SERVER, notif, sizeof notif, "NOTIFICATION MESSAGE_END", NULL);
  /* ext as the method of a request */
  static const uint8_t ext_method[] = {0x94, 0x00, 0x05, 0xd5, 0x01, 'a', 'b', 0x90};
  expect_raw(GP_ROLE_SERVER, ext_method, sizeof ext_method, "REJECT", "got an ext");
  /* nil as the method of a notification: ignored like an unknown one */
  static const uint8_t nil_method[] = {0x93, 0x02, 0xc0, 0x90};
  expect_raw(GP_ROLE_SERVER, nil_method, sizeof nil_method, "NOTIFICATION MESSAGE_END", NULL);
  /* a huge ext in a skipped place is bounded by max_string_bytes */
  static const uint8_t big_ext[] = {0x93, 0x02, 0xa1, 'x', 0x91, 0xc9, 0x00, 0x10, 0x00, 0x00, 0x01};
  expect_raw(GP_ROLE_SERVER, big_ext, sizeof big_ext, "FATAL", "max_string_bytes");
}
END_TEST

/* ---- client side: malformed replies ---- */

START_TEST(client_malformed_replies) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  tp_packer(&pk, &sb);
  gp_limits lim = defaults();
  uint8_t c[64] = {0};
  /* out_hdr missing n */
  gp_pack_response_head(&pk, 3);
  msgpack_pack_array(&pk, 2);
  msgpack_pack_map(&pk, 2);
  tp_pack_str(&pk, "m");
  msgpack_pack_uint8(&pk, 2);
  tp_pack_str(&pk, "dtype");
  tp_pack_str(&pk, "f32");
  tp_pack_bin(&pk, c, 8);
  expect_types(GP_ROLE_CLIENT, &lim, &sb, "REJECT", "out_hdr: missing n");
  /* c of the wrong length; unknown keys are ignored */
  msgpack_sbuffer_clear(&sb);
  gp_pack_response_head(&pk, 3);
  msgpack_pack_array(&pk, 2);
  msgpack_pack_map(&pk, 4);
  tp_pack_str(&pk, "m");
  msgpack_pack_uint8(&pk, 2);
  tp_pack_str(&pk, "n");
  msgpack_pack_uint8(&pk, 2);
  tp_pack_str(&pk, "dtype");
  tp_pack_str(&pk, "f32");
  tp_pack_str(&pk, "energy_j");
  msgpack_pack_double(&pk, 1.5);
  tp_pack_bin(&pk, c, 15);
  ck_assert_int_eq(gp_encode_pong_response(&sb, 4), 0);
  expect_types(GP_ROLE_CLIENT, &lim, &sb, "REJECT RESPONSE MESSAGE_END", NULL);
  tp_trace t = decode(GP_ROLE_CLIENT, &lim, &sb);
  ck_assert_str_eq(t.ev[0].err.message, "c: expected 16 bytes, got 15");
  ck_assert_uint_eq(t.ev[0].msgid, 3);
  tp_trace_free(&t);
  /* m of the wrong type */
  msgpack_sbuffer_clear(&sb);
  gp_pack_response_head(&pk, 3);
  msgpack_pack_array(&pk, 2);
  msgpack_pack_map(&pk, 1);
  tp_pack_str(&pk, "m");
  tp_pack_str(&pk, "2");
  tp_pack_bin(&pk, c, 8);
  expect_types(GP_ROLE_CLIENT, &lim, &sb, "REJECT", "out_hdr: m: must be an unsigned integer");
  /* an error sent as a plain string, and an error map without a code */
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_array(&pk, 4);
  msgpack_pack_uint8(&pk, 1);
  msgpack_pack_uint8(&pk, 5);
  tp_pack_str(&pk, "boom");
  msgpack_pack_nil(&pk);
  msgpack_pack_array(&pk, 4);
  msgpack_pack_uint8(&pk, 1);
  msgpack_pack_uint8(&pk, 6);
  msgpack_pack_map(&pk, 1);
  tp_pack_str(&pk, "message");
  tp_pack_str(&pk, "no code");
  msgpack_pack_nil(&pk);
  msgpack_pack_array(&pk, 4); /* and one with a code but no message */
  msgpack_pack_uint8(&pk, 1);
  msgpack_pack_uint8(&pk, 7);
  msgpack_pack_map(&pk, 1);
  tp_pack_str(&pk, "code");
  tp_pack_str(&pk, "NOT_FOUND");
  msgpack_pack_nil(&pk);
  t = decode(GP_ROLE_CLIENT, &lim, &sb);
  char got[256];
  ck_assert_str_eq(tp_trace_types(&t, got, sizeof got),
                   "RESPONSE MESSAGE_END RESPONSE MESSAGE_END RESPONSE MESSAGE_END");
  ck_assert_int_eq(t.ev[4].err.code, GP_E_NOT_FOUND);
  ck_assert_str_eq(t.ev[4].err.message, "not found");
  ck_assert_int_eq(t.ev[0].err.code, GP_E_INTERNAL);
  ck_assert_str_eq(t.ev[0].err.message, "boom");
  ck_assert_int_eq(t.ev[2].err.code, GP_E_INTERNAL);
  ck_assert_str_eq(t.ev[2].err.message, "no code");
  tp_trace_free(&t);
  /* a notification from a (newer) server is skipped; a nil result is a result */
  msgpack_sbuffer_clear(&sb);
  msgpack_pack_array(&pk, 3);
  msgpack_pack_uint8(&pk, 2);
  tp_pack_str(&pk, "draining");
  msgpack_pack_array(&pk, 1);
  tp_pack_bin(&pk, c, 64);
  gp_pack_response_head(&pk, 8);
  msgpack_pack_nil(&pk);
  t = decode(GP_ROLE_CLIENT, &lim, &sb);
  ck_assert_str_eq(tp_trace_types(&t, got, sizeof got), "RESPONSE MESSAGE_END");
  ck_assert_str_eq(t.ev[0].result_text, "nil");
  tp_trace_free(&t);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

Suite *limits_suite(void) {
  Suite *s = suite_create("proto_limits");
  TCase *tc = tcase_create("limits");
  tcase_add_test(tc, defaults_documented);
  tcase_add_test(tc, message_bytes);
  tcase_add_test(tc, header_bytes);
  tcase_add_test(tc, depth);
  tcase_add_test(tc, items);
  tcase_add_test(tc, string_bytes);
  tcase_add_test(tc, semantic_limits_exact_and_past);
  tcase_add_test(tc, work_overflow);
  tcase_add_test(tc, hostile_counts_never_allocate);
  suite_add_tcase(s, tc);
  tc = tcase_create("hostile");
  tcase_add_test(tc, not_msgpack_or_not_an_envelope);
  tcase_add_test(tc, bad_msgids);
  tcase_add_test(tc, odd_types_in_odd_places);
  tcase_add_test(tc, client_malformed_replies);
  suite_add_tcase(s, tc);
  return s;
}

TP_MAIN(limits_suite)
