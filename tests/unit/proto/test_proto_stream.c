/*
 * test_proto_stream.c - the decoder as a stream: pipelined messages back to
 * back, cut byte by byte and at random places (a fixed seed and a fresh one,
 * printed), receiving straight into the destination through the payload
 * window, skipping a message, message byte counts and limit changes.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tp_util.h"

typedef struct {
  msgpack_sbuffer sb;
  char want[8192]; /* the event types expected, space separated */
} stream;

static void want(stream *s, const char *types) {
  size_t o = strlen(s->want);
  snprintf(s->want + o, sizeof s->want - o, "%s%s", o ? " " : "", types);
}

/* Appends one random message for the server role and what it should produce. */
static void add_server_message(stream *s, uint32_t msgid, uint64_t *rng) {
  static const char *const simple[] = {"ping", "info", "stats"};
  switch (tp_rand(rng) % 6) {
  case 0:
  case 1: {
    gp_gemm_hdr h;
    gp_gemm_hdr_init(&h);
    h.m = 1 + tp_rand(rng) % 9;
    h.n = 1 + tp_rand(rng) % 9;
    h.k = 1 + tp_rand(rng) % 9;
    h.dtype = (gp_dtype)(tp_rand(rng) % GP_DTYPE_I32); /* every gemm dtype: i32 is a result's */
    h.trans_a = tp_rand(rng) & 1;
    h.batch = 1 + tp_rand(rng) % 3;
    bool with_c = tp_rand(rng) & 1;
    if (with_c)
      h.beta = h.dtype == GP_DTYPE_I8 ? 2 : 0.5; /* the integer gemm takes integers */
    uint8_t *ops[3];
    uint64_t sizes[3];
    tp_encode_gemm(&s->sb, msgid, &h, with_c, rng, ops, sizes);
    for (int i = 0; i < 3; i++)
      free(ops[i]);
    want(s, with_c ? "REQUEST PAYLOAD PAYLOAD PAYLOAD MESSAGE_END"
                   : "REQUEST PAYLOAD PAYLOAD MESSAGE_END");
    break;
  }
  case 2:
  case 3:
    ck_assert_int_eq(gp_encode_request(&s->sb, msgid, simple[tp_rand(rng) % 3]), 0);
    want(s, "REQUEST MESSAGE_END");
    break;
  case 4:
    ck_assert_int_eq(gp_encode_notification(&s->sb, tp_rand(rng) & 1 ? "stats" : "whatever"), 0);
    want(s, "NOTIFICATION MESSAGE_END");
    break;
  default:
    ck_assert_int_eq(gp_encode_request(&s->sb, msgid, "no_such_method"), 0);
    want(s, "REJECT");
    break;
  }
}

static void add_client_message(stream *s, uint32_t msgid, uint64_t *rng) {
  switch (tp_rand(rng) % 4) {
  case 0: {
    gp_gemm_result_hdr rh;
    memset(&rh, 0, sizeof rh);
    rh.m = 1 + tp_rand(rng) % 9;
    rh.n = 1 + tp_rand(rng) % 9;
    rh.batch = 1;
    rh.dtype = GP_DTYPE_F32;
    strcpy(rh.device, "cpu");
    strcpy(rh.kernel, "openblas");
    uint64_t bytes = rh.m * rh.n * 4;
    uint8_t c[9 * 9 * 4];
    tp_fill_random(c, bytes, rng);
    ck_assert_int_eq(gp_encode_gemm_response_head(&s->sb, msgid, &rh, bytes), 0);
    msgpack_sbuffer_write(&s->sb, (const char *)c, bytes);
    want(s, "RESPONSE PAYLOAD MESSAGE_END");
    break;
  }
  case 1:
    ck_assert_int_eq(gp_encode_pong_response(&s->sb, msgid), 0);
    want(s, "RESPONSE MESSAGE_END");
    break;
  case 2:
    ck_assert_int_eq(gp_encode_error_response(&s->sb, msgid, GP_E_UNAVAILABLE, "draining"), 0);
    want(s, "RESPONSE MESSAGE_END");
    break;
  default: {
    msgpack_packer pk;
    tp_packer(&pk, &s->sb);
    ck_assert_int_eq(gp_pack_response_head(&pk, msgid), 0);
    msgpack_pack_map(&pk, 2);
    tp_pack_str(&pk, "requests");
    msgpack_pack_uint64(&pk, tp_rand(rng));
    tp_pack_str(&pk, "latency_us");
    msgpack_pack_array(&pk, 3);
    for (int i = 0; i < 3; i++)
      msgpack_pack_double(&pk, (double)(tp_rand(rng) % 1000) / 8);
    want(s, "RESPONSE MESSAGE_END");
    break;
  }
  }
}

static void check_stream(gp_role role, uint64_t seed) {
  stream s;
  msgpack_sbuffer_init(&s.sb);
  s.want[0] = '\0';
  uint64_t rng = seed;
  for (uint32_t i = 0; i < 40; i++) {
    if (role == GP_ROLE_SERVER)
      add_server_message(&s, i, &rng);
    else
      add_client_message(&s, i, &rng);
  }
  const uint8_t *p = (const uint8_t *)s.sb.data;
  tp_trace whole = tp_decode(role, NULL, p, s.sb.size, TP_WHOLE, 0);
  char got[8192];
  ck_assert_str_eq(tp_trace_types(&whole, got, sizeof got), s.want);
  tp_trace bytes = tp_decode(role, NULL, p, s.sb.size, TP_BYTES, 0);
  ck_assert_msg(tp_trace_equal(&whole, &bytes), "byte-by-byte differs (seed %llu)",
                (unsigned long long)seed);
  for (int i = 0; i < 5; i++) {
    tp_trace pieces = tp_decode(role, NULL, p, s.sb.size, TP_RANDOM, seed + (uint64_t)i);
    ck_assert_msg(tp_trace_equal(&whole, &pieces), "random pieces differ (seed %llu)",
                  (unsigned long long)seed);
    ck_assert(!pieces.bad_offsets && !pieces.bad_pointers && !pieces.zero_progress);
    tp_trace_free(&pieces);
  }
  /* msgids come back in order, one per message */
  uint32_t next = 0;
  for (size_t i = 0; i < whole.n; i++) {
    if (whole.ev[i].type == GP_EV_MESSAGE_END || whole.ev[i].type == GP_EV_REJECT) {
      if (whole.ev[i].has_msgid)
        ck_assert_uint_eq(whole.ev[i].msgid, next);
    }
    if (whole.ev[i].type == GP_EV_MESSAGE_END || whole.ev[i].type == GP_EV_REJECT)
      next++;
  }
  tp_trace_free(&whole);
  tp_trace_free(&bytes);
  msgpack_sbuffer_destroy(&s.sb);
}

START_TEST(server_stream_fixed_seed) { check_stream(GP_ROLE_SERVER, 1); }
END_TEST
START_TEST(server_stream_fresh_seed) { check_stream(GP_ROLE_SERVER, tp_fresh_seed("server_stream")); }
END_TEST
START_TEST(client_stream_fixed_seed) { check_stream(GP_ROLE_CLIENT, 2); }
END_TEST
START_TEST(client_stream_fresh_seed) { check_stream(GP_ROLE_CLIENT, tp_fresh_seed("client_stream")); }
END_TEST

/* Reads like the daemon: when the decoder has a payload window, "receive" straight into the
 * destination matrix and feed those bytes from there; else read small pieces into a buffer. */
START_TEST(payload_window_receives_in_place) {
  uint64_t rng = 99;
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = 13;
  h.n = 11;
  h.k = 17;
  h.beta = 1.0;
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  uint8_t *ops[3];
  uint64_t sizes[3];
  tp_encode_gemm(&sb, 5, &h, true, &rng, ops, sizes);
  gp_limits lim;
  gp_limits_default(&lim);
  gp_decoder *d = gp_decoder_new(GP_ROLE_SERVER, &lim);
  uint8_t *dest[3];
  for (int i = 0; i < 3; i++)
    dest[i] = calloc(1, sizes[i]);
  const uint8_t *src = (const uint8_t *)sb.data;
  size_t at = 0, direct = 0;
  bool ended = false;
  uint8_t small[7];
  while (!ended) {
    gp_operand op;
    uint64_t offset, remaining;
    const uint8_t *data;
    size_t len;
    if (gp_decoder_payload_window(d, &op, &offset, &remaining)) {
      len = (size_t)remaining < 1000 ? (size_t)remaining : 1000;
      memcpy(dest[op] + offset, src + at, len); /* "recv" into place */
      data = dest[op] + offset;
      direct += len;
    } else {
      len = sb.size - at < sizeof small ? sb.size - at : sizeof small;
      memcpy(small, src + at, len);
      data = small;
    }
    at += len;
    for (;;) {
      gp_event ev;
      size_t used = gp_decoder_feed(d, data, len, &ev);
      data += used;
      len -= used;
      if (ev.type == GP_EV_NEED_MORE)
        break;
      ck_assert_int_ne(ev.type, GP_EV_FATAL);
      ck_assert_int_ne(ev.type, GP_EV_REJECT);
      if (ev.type == GP_EV_PAYLOAD) {
        uint8_t *where = dest[ev.operand] + ev.offset;
        if (ev.data != where) /* arrived through the small buffer */
          memcpy(where, ev.data, ev.len);
      }
      if (ev.type == GP_EV_MESSAGE_END)
        ended = true;
    }
  }
  ck_assert_uint_eq(at, sb.size);
  ck_assert_uint_gt(direct, sizes[0]); /* most bytes went straight into place */
  for (int i = 0; i < 3; i++) {
    ck_assert(memcmp(dest[i], ops[i], sizes[i]) == 0);
    free(dest[i]);
    free(ops[i]);
  }
  gp_decoder_free(d);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* Feeds everything; after the event of type `at_type` numbered `at_index` (0-based among that
 * type) calls skip_message. Returns the trace. */
static tp_trace decode_skipping(const msgpack_sbuffer *sb, size_t step, gp_event_type at_type,
                                int at_index) {
  tp_trace t = {0};
  t.cap = 64;
  t.ev = calloc(t.cap, sizeof *t.ev);
  gp_limits lim;
  gp_limits_default(&lim);
  gp_decoder *d = gp_decoder_new(GP_ROLE_SERVER, &lim);
  const uint8_t *p = (const uint8_t *)sb->data;
  size_t off = 0;
  int seen = 0;
  while (off <= sb->size) {
    size_t n = sb->size - off < step ? sb->size - off : step;
    const uint8_t *data = p + off;
    size_t len = n;
    for (;;) {
      gp_event ev;
      size_t used = gp_decoder_feed(d, data, len, &ev);
      data += used;
      len -= used;
      if (ev.type == GP_EV_NEED_MORE)
        break;
      ck_assert_uint_lt(t.n, t.cap);
      t.ev[t.n].type = ev.type;
      t.ev[t.n++].msgid = ev.msgid;
      if (ev.type == at_type && seen++ == at_index)
        gp_decoder_skip_message(d);
    }
    if (n == 0)
      break;
    off += n;
  }
  gp_decoder_free(d);
  return t;
}

START_TEST(skip_message) {
  uint64_t rng = 3;
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = h.n = h.k = 5;
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  uint8_t *ops[3];
  uint64_t sizes[3];
  ck_assert_int_eq(gp_encode_request(&sb, 1, "ping"), 0);
  tp_encode_gemm(&sb, 2, &h, false, &rng, ops, sizes);
  ck_assert_int_eq(gp_encode_request(&sb, 3, "info"), 0);
  char got[512];
  /* after the gemm's REQUEST: its payloads and MESSAGE_END vanish */
  tp_trace t = decode_skipping(&sb, sb.size, GP_EV_REQUEST, 1);
  ck_assert_str_eq(tp_trace_types(&t, got, sizeof got),
                   "REQUEST MESSAGE_END REQUEST REQUEST MESSAGE_END");
  ck_assert_uint_eq(t.ev[3].msgid, 3);
  tp_trace_free(&t);
  /* in the middle of a, fed byte by byte */
  t = decode_skipping(&sb, 1, GP_EV_PAYLOAD, 3);
  ck_assert_str_eq(tp_trace_types(&t, got, sizeof got),
                   "REQUEST MESSAGE_END REQUEST PAYLOAD PAYLOAD PAYLOAD PAYLOAD REQUEST MESSAGE_END");
  tp_trace_free(&t);
  /* after a ping's REQUEST: its queued MESSAGE_END is dropped */
  t = decode_skipping(&sb, sb.size, GP_EV_REQUEST, 0);
  ck_assert_str_eq(tp_trace_types(&t, got, sizeof got),
                   "REQUEST REQUEST PAYLOAD PAYLOAD MESSAGE_END REQUEST MESSAGE_END");
  tp_trace_free(&t);
  for (int i = 0; i < 3; i++)
    free(ops[i]);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(message_bytes_and_limit_changes) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  ck_assert_int_eq(gp_encode_request(&sb, 1, "stats"), 0);
  size_t one = sb.size;
  ck_assert_int_eq(gp_encode_request(&sb, 2, "stats"), 0);
  gp_limits lim;
  gp_limits_default(&lim);
  gp_decoder *d = gp_decoder_new(GP_ROLE_SERVER, &lim);
  gp_event ev;
  const uint8_t *p = (const uint8_t *)sb.data;
  ck_assert_uint_eq(gp_decoder_feed(d, p, 0, &ev), 0);
  ck_assert_int_eq(ev.type, GP_EV_NEED_MORE);
  ck_assert_uint_eq(gp_decoder_message_bytes(d), 0);
  ck_assert_uint_eq(gp_decoder_feed(d, p, 3, &ev), 3);
  ck_assert_int_eq(ev.type, GP_EV_NEED_MORE);
  ck_assert_uint_eq(gp_decoder_message_bytes(d), 3);
  /* a new limit applies from the next message: this one still completes */
  gp_limits tiny = lim;
  tiny.max_message_bytes = 2;
  gp_decoder_set_limits(d, &tiny);
  ck_assert_uint_eq(gp_decoder_feed(d, p + 3, one - 3, &ev), one - 3);
  ck_assert_int_eq(ev.type, GP_EV_REQUEST);
  ck_assert_uint_eq(gp_decoder_message_bytes(d), one); /* until its MESSAGE_END is taken */
  ck_assert_uint_eq(gp_decoder_feed(d, p + one, 0, &ev), 0);
  ck_assert_int_eq(ev.type, GP_EV_MESSAGE_END);
  ck_assert_uint_eq(gp_decoder_message_bytes(d), 0);
  gp_decoder_feed(d, p + one, sb.size - one, &ev);
  ck_assert_int_eq(ev.type, GP_EV_FATAL);
  ck_assert_msg(strstr(ev.err.message, "max_message_bytes") != NULL, "%s", ev.err.message);
  /* fatal is for good */
  ck_assert_uint_eq(gp_decoder_feed(d, p, sb.size, &ev), 0);
  ck_assert_int_eq(ev.type, GP_EV_FATAL);
  gp_decoder_free(d);
  msgpack_sbuffer_destroy(&sb);
}
END_TEST

Suite *stream_suite(void) {
  Suite *s = suite_create("proto_stream");
  TCase *tc = tcase_create("stream");
  tcase_add_test(tc, server_stream_fixed_seed);
  tcase_add_test(tc, server_stream_fresh_seed);
  tcase_add_test(tc, client_stream_fixed_seed);
  tcase_add_test(tc, client_stream_fresh_seed);
  tcase_add_test(tc, payload_window_receives_in_place);
  tcase_add_test(tc, skip_message);
  tcase_add_test(tc, message_bytes_and_limit_changes);
  suite_add_tcase(s, tc);
  return s;
}

TP_MAIN(stream_suite)
