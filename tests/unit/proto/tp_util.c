/*
 * tp_util.c - see tp_util.h.
 */
#include "tp_util.h"

#include <check.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *xrealloc(void *p, size_t n) {
  void *q = realloc(p, n);
  if (q == NULL) {
    fprintf(stderr, "tp_util: out of memory\n");
    abort();
  }
  return q;
}

static tp_event *push(tp_trace *t) {
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 16;
    t->ev = xrealloc(t->ev, t->cap * sizeof *t->ev);
  }
  tp_event *e = &t->ev[t->n++];
  memset(e, 0, sizeof *e);
  return e;
}

static void record_payload(tp_trace *t, const gp_event *ev) {
  tp_event *last = t->n ? &t->ev[t->n - 1] : NULL;
  if (last == NULL || last->type != GP_EV_PAYLOAD || last->operand != ev->operand ||
      last->msgid != ev->msgid) {
    if (ev->offset != 0)
      t->bad_offsets = true;
    last = push(t);
    last->type = GP_EV_PAYLOAD;
    last->operand = ev->operand;
    last->msgid = ev->msgid;
    last->has_msgid = ev->has_msgid;
    last->method = ev->method;
  } else if (ev->offset != last->payload_len) {
    t->bad_offsets = true;
  }
  last->payload = xrealloc(last->payload, last->payload_len + ev->len + 1);
  memcpy(last->payload + last->payload_len, ev->data, ev->len);
  last->payload_len += ev->len;
}

static void record(tp_trace *t, const gp_event *ev) {
  if (ev->type == GP_EV_PAYLOAD) {
    record_payload(t, ev);
    return;
  }
  tp_event *e = push(t);
  e->type = ev->type;
  e->msgid = ev->msgid;
  e->has_msgid = ev->has_msgid;
  e->method = ev->method;
  e->err = ev->err;
  if (ev->type == GP_EV_REQUEST) {
    e->gemm = ev->gemm;
    e->has_c = ev->has_c;
    e->arg = ev->arg;
    e->put = ev->put;
    e->cuda = ev->cuda;
  }
  if (ev->type == GP_EV_OPERAND_REF) {
    e->operand = ev->operand;
    e->region = ev->region;
    e->offset = ev->offset;
    e->by_handle = ev->by_handle;
    e->handle = ev->handle;
  }
  if (ev->type == GP_EV_RESPONSE) {
    e->is_gemm_result = ev->is_gemm_result;
    e->result_hdr = ev->result_hdr;
    e->result_bytes = ev->result_bytes;
    if (ev->result != NULL) {
      e->has_result = true;
      msgpack_object_print_buffer(e->result_text, sizeof e->result_text, *ev->result);
    }
  }
}

static size_t piece_size(tp_cut cut, size_t left, uint64_t *rng) {
  switch (cut) {
  case TP_WHOLE: return left;
  case TP_BYTES: return 1;
  default: {
    size_t n = 1 + (size_t)(tp_rand(rng) % 64);
    return n < left ? n : left;
  }
  }
}

tp_trace tp_decode(gp_role role, const gp_limits *limits, const uint8_t *data, size_t len,
                   tp_cut cut, uint64_t seed) {
  tp_trace t = {0};
  gp_limits defaults;
  gp_limits_default(&defaults);
  gp_decoder *d = gp_decoder_new(role, limits ? limits : &defaults);
  if (d == NULL)
    abort();
  uint64_t rng = seed;
  size_t off = 0;
  bool done = false;
  while (!done) {
    size_t n = off < len ? piece_size(cut, len - off, &rng) : 0;
    const uint8_t *piece = data + off;
    size_t piece_len = n;
    for (;;) { /* until NEED_MORE, as gp_decode.h says */
      gp_event ev;
      size_t used = gp_decoder_feed(d, piece, piece_len, &ev);
      if (ev.type == GP_EV_PAYLOAD &&
          (ev.data < data + off || ev.data + ev.len > data + off + n))
        t.bad_pointers = true;
      piece += used;
      piece_len -= used;
      if (ev.type == GP_EV_NEED_MORE) {
        if (piece_len != 0)
          t.zero_progress = true;
        break;
      }
      record(&t, &ev);
      if (ev.type == GP_EV_FATAL) {
        done = true;
        break;
      }
      if (t.n > 100000) { /* a decoder that never stops emitting */
        t.zero_progress = true;
        done = true;
        break;
      }
    }
    off += n;
    if (off >= len && n == 0)
      done = true;
  }
  gp_decoder_free(d);
  return t;
}

void tp_trace_free(tp_trace *t) {
  for (size_t i = 0; i < t->n; i++)
    free(t->ev[i].payload);
  free(t->ev);
  memset(t, 0, sizeof *t);
}

static const char *type_name(gp_event_type type) {
  static const char *const names[] = {"NEED_MORE", "REQUEST", "NOTIFICATION", "RESPONSE",
                                      "PAYLOAD",   "MESSAGE_END", "REJECT", "FATAL",
                                      "OPERAND_REF"};
  return (unsigned)type < sizeof names / sizeof names[0] ? names[type] : "?";
}

const char *tp_trace_types(const tp_trace *t, char *buf, size_t size) {
  size_t o = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < t->n && o < size; i++) {
    int w = snprintf(buf + o, size - o, "%s%s", i ? " " : "", type_name(t->ev[i].type));
    if (w < 0)
      break;
    o += (size_t)w;
  }
  return buf;
}

static bool event_equal(const tp_event *a, const tp_event *b) {
  if (a->type != b->type || a->msgid != b->msgid || a->has_msgid != b->has_msgid ||
      a->method != b->method || a->err.code != b->err.code ||
      strcmp(a->err.message, b->err.message) != 0 || a->has_c != b->has_c ||
      memcmp(&a->gemm, &b->gemm, sizeof a->gemm) != 0 ||
      a->is_gemm_result != b->is_gemm_result || a->result_bytes != b->result_bytes ||
      memcmp(&a->result_hdr, &b->result_hdr, sizeof a->result_hdr) != 0 ||
      a->has_result != b->has_result || strcmp(a->result_text, b->result_text) != 0 ||
      a->payload_len != b->payload_len || a->arg != b->arg || a->region != b->region ||
      a->offset != b->offset || a->by_handle != b->by_handle || a->handle != b->handle ||
      a->put.dtype != b->put.dtype || a->put.rows != b->put.rows || a->put.cols != b->put.cols ||
      a->put.batch != b->put.batch || memcmp(&a->cuda, &b->cuda, sizeof a->cuda) != 0)
    return false;
  if ((a->type == GP_EV_PAYLOAD || a->type == GP_EV_OPERAND_REF) && a->operand != b->operand)
    return false;
  if (a->type == GP_EV_PAYLOAD && memcmp(a->payload, b->payload, a->payload_len) != 0)
    return false;
  return true;
}

bool tp_trace_equal(const tp_trace *a, const tp_trace *b) {
  if (a->n != b->n)
    return false;
  for (size_t i = 0; i < a->n; i++) {
    if (!event_equal(&a->ev[i], &b->ev[i]))
      return false;
  }
  return true;
}

uint64_t tp_fresh_seed(const char *test) {
  const char *env = getenv("GEMMD_TEST_SEED");
  uint64_t seed;
  if (env != NULL && *env != '\0') {
    seed = strtoull(env, NULL, 0);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
  }
  fprintf(stderr, "%s: fresh seed %llu (rerun with GEMMD_TEST_SEED=%llu)\n", test,
          (unsigned long long)seed, (unsigned long long)seed);
  return seed;
}

uint64_t tp_rand(uint64_t *state) { /* splitmix64 */
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void tp_fill_random(uint8_t *p, size_t n, uint64_t *state) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)tp_rand(state);
}

void tp_packer(msgpack_packer *pk, msgpack_sbuffer *sb) {
  msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
}

void tp_pack_str(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s, n);
}

void tp_pack_binstr(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  msgpack_pack_bin(pk, n);
  msgpack_pack_bin_body(pk, s, n);
}

void tp_pack_bin(msgpack_packer *pk, const uint8_t *p, size_t n) {
  msgpack_pack_bin(pk, n);
  msgpack_pack_bin_body(pk, p, n);
}

void tp_pack_request_start(msgpack_packer *pk, uint32_t msgid, const char *method,
                           uint32_t nparams) {
  msgpack_pack_array(pk, 4);
  msgpack_pack_uint8(pk, 0);
  msgpack_pack_uint32(pk, msgid);
  tp_pack_str(pk, method);
  msgpack_pack_array(pk, nparams);
}

void tp_encode_gemm(msgpack_sbuffer *sb, uint32_t msgid, const gp_gemm_hdr *hdr, bool with_c,
                    uint64_t *rng, uint8_t *ops[3], uint64_t sizes[3]) {
  if (gp_encode_gemm_request_head(sb, msgid, hdr, with_c) != 0)
    abort();
  for (gp_operand op = GP_OPERAND_A; op <= GP_OPERAND_C; op++) {
    ops[op] = NULL;
    sizes[op] = 0;
    if (op == GP_OPERAND_C && !with_c)
      break;
    if (!gp_gemm_operand_bytes(hdr, op, &sizes[op]))
      abort();
    ops[op] = xrealloc(NULL, sizes[op] + 1);
    tp_fill_random(ops[op], sizes[op], rng);
    if (op != GP_OPERAND_A) {
      uint8_t bh[GP_BIN_HEADER_MAX];
      size_t n = gp_encode_bin_header(bh, sizes[op]);
      msgpack_sbuffer_write(sb, (const char *)bh, n);
    }
    msgpack_sbuffer_write(sb, (const char *)ops[op], sizes[op]);
  }
}

tp_trace tp_decode_checked(msgpack_sbuffer *sb, const char *want) {
  ck_assert_int_eq(gp_encode_request(sb, 999, "ping"), 0);
  tp_trace t = tp_decode(GP_ROLE_SERVER, NULL, (const uint8_t *)sb->data, sb->size, TP_WHOLE, 0);
  tp_trace b = tp_decode(GP_ROLE_SERVER, NULL, (const uint8_t *)sb->data, sb->size, TP_BYTES, 0);
  ck_assert_msg(tp_trace_equal(&t, &b), "bytewise feeding differs");
  tp_trace_free(&b);
  char buf[512], expect[512];
  snprintf(expect, sizeof expect, "%s REQUEST MESSAGE_END", want);
  tp_trace_types(&t, buf, sizeof buf);
  ck_assert_msg(strcmp(buf, expect) == 0, "events \"%s\", expected \"%s\"", buf, expect);
  msgpack_sbuffer_clear(sb);
  return t;
}

void tp_expect_reject(msgpack_sbuffer *sb, uint32_t msgid, const char *before, int code,
                      const char *needle) {
  char want[256];
  snprintf(want, sizeof want, "%s%sREJECT", before, *before ? " " : "");
  tp_trace t = tp_decode_checked(sb, want);
  const tp_event *rej = &t.ev[t.n - 3];
  ck_assert_int_eq(rej->err.code, code);
  ck_assert_uint_eq(rej->msgid, msgid);
  ck_assert_msg(strstr(rej->err.message, needle) != NULL, "message \"%s\" lacks \"%s\"",
                rej->err.message, needle);
  tp_trace_free(&t);
}
