/*
 * gp_decode.c - the streaming decoder's engine: bytes in, tokens, nesting,
 * framing limits, bodies (collected, skipped or streamed) and the event
 * queue. What the elements mean is the grammars' business
 * (gp_decode_server.c, gp_decode_client.c).
 */
#include "gp_decode_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers for the grammars ---- */

void gp__printable(char *out, size_t out_size, const char *s, size_t len) {
  const size_t shown_max = 40;
  size_t shown = len < shown_max ? len : shown_max;
  if (shown > GP__STR_CAP)
    shown = GP__STR_CAP;
  size_t o = 0;
  for (size_t i = 0; i < shown && o + 1 < out_size; i++) {
    unsigned char c = (unsigned char)s[i];
    out[o++] = (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? (char)c : '?';
  }
  if (shown < len) {
    for (int i = 0; i < 3 && o + 1 < out_size; i++)
      out[o++] = '.';
  }
  if (out_size > 0)
    out[o] = '\0';
}

const char *gp__tok_words(const gp__token *tok) {
  switch (tok->type) {
  case GP__TOK_NIL: return "nil";
  case GP__TOK_BOOL: return "a bool";
  case GP__TOK_INT: return tok->neg ? "a negative integer" : "an integer";
  case GP__TOK_FLOAT: return "a float";
  case GP__TOK_STR: return "a str";
  case GP__TOK_BIN: return "a bin";
  case GP__TOK_EXT: return "an ext";
  case GP__TOK_ARRAY: return "an array";
  default: return "a map";
  }
}

void gp__map_key(gp_decoder *d, const char *const *keys, int count, uint32_t *seen,
                 const char *map, const char *hint) {
  for (int i = 0; i < count; i++) {
    if (d->str_len != strlen(keys[i]) || memcmp(d->str, keys[i], d->str_len) != 0)
      continue;
    if (*seen & (1u << i)) {
      gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: duplicate key \"%s\"", map, keys[i]);
      return;
    }
    *seen |= 1u << i;
    d->cur_key = i;
    return;
  }
  char name[64];
  gp__printable(name, sizeof name, d->str, d->str_len);
  gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: unknown key \"%s\" (%s)", map, name, hint);
}

gp__action gp__skip_action(gp__kind parent, const gp__token *tok) {
  gp__action act = {GP__K_SKIP, GP__BODY_SKIP};
  if (tok->type == GP__TOK_BIN && (parent == GP__K_PARAMS_SKIP || parent == GP__K_PARAMS_GEMM ||
                                   parent == GP__K_PARAMS_PUT))
    act.body = GP__BODY_PAYLOAD_SKIP;
  if (tok->type == GP__TOK_ARRAY && parent == GP__K_ENVELOPE)
    act.kind = GP__K_PARAMS_SKIP; /* the params of a skipped message */
  return act;
}

/* The envelope's opening: both roles take 3 or 4 elements; `expected` words what this role takes. */
gp__action gp__envelope_start(gp_decoder *d, const gp__token *tok, const char *expected) {
  if (tok->len != 4 && tok->len != 3)
    gp__fatalf(d, "envelope: %s, got %u", expected, tok->len);
  return (gp__action){GP__K_ENVELOPE, GP__BODY_NONE};
}

void gp__read_msgid(gp_decoder *d, const gp__token *tok) {
  if (tok->type != GP__TOK_INT || tok->neg || tok->u > UINT32_MAX) {
    gp__fatalf(d, "msgid: must be a uint32, got %s", gp__tok_words(tok));
    return;
  }
  d->msgid = (uint32_t)tok->u;
  d->has_msgid = true;
}

/* ---- events ---- */

gp_event *gp__emit(gp_decoder *d, gp_event_type type) {
  static _Thread_local gp_event scratch;
  if (d->q_len == GP__QUEUE_CAP) {
    gp__fatalf(d, "internal: event queue overflow");
    return &scratch;
  }
  gp_event *ev = &d->queue[(d->q_head + d->q_len) % GP__QUEUE_CAP];
  d->q_len++;
  memset(ev, 0, sizeof *ev);
  ev->type = type;
  ev->msgid = d->msgid;
  ev->has_msgid = d->has_msgid;
  ev->method = d->method;
  return ev;
}

void gp__reject(gp_decoder *d, const gp_error *err) {
  if (d->silent)
    return;
  gp_event *ev = gp__emit(d, GP_EV_REJECT);
  ev->err = *err;
  d->silent = true;
}

void gp__rejectf(gp_decoder *d, int code, const char *fmt, ...) {
  gp_error err;
  va_list ap;
  va_start(ap, fmt);
  gp_error_vset(&err, code, fmt, ap);
  va_end(ap);
  gp__reject(d, &err);
}

void gp__fatalf(gp_decoder *d, const char *fmt, ...) {
  if (d->fatal)
    return;
  va_list ap;
  va_start(ap, fmt);
  gp_error_vset(&d->fatal_err, GP_E_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  d->fatal = true;
  d->q_len = 0; /* nothing queued matters any more */
}

static bool pop_event(gp_decoder *d, gp_event *ev) {
  if (d->fatal) {
    memset(ev, 0, sizeof *ev);
    ev->type = GP_EV_FATAL;
    ev->err = d->fatal_err;
    ev->msgid = d->msgid;
    ev->has_msgid = d->has_msgid;
    return true;
  }
  if (d->q_len == 0)
    return false;
  *ev = d->queue[d->q_head];
  d->q_head = (d->q_head + 1) % GP__QUEUE_CAP;
  d->q_len--;
  return true;
}

/* ---- life cycle ---- */

static const gp__grammar *grammar_of(const gp_decoder *d) {
  return d->role == GP_ROLE_SERVER ? &gp__server_grammar : &gp__client_grammar;
}

gp_decoder *gp_decoder_new(gp_role role, const gp_limits *limits) {
  gp_decoder *d = calloc(1, sizeof *d);
  if (d == NULL)
    return NULL;
  d->role = role;
  if (limits != NULL)
    d->limits = *limits;
  else
    gp_limits_default(&d->limits);
  d->next_limits = d->limits;
  msgpack_unpacked_init(&d->unpacked);
  return d;
}

void gp_decoder_free(gp_decoder *d) {
  if (d == NULL)
    return;
  msgpack_unpacked_destroy(&d->unpacked);
  free(d->cap);
  free(d);
}

void gp_decoder_set_limits(gp_decoder *d, const gp_limits *limits) {
  if (limits != NULL)
    d->next_limits = *limits;
}

static void begin_message(gp_decoder *d) {
  d->limits = d->next_limits;
  d->in_message = true;
  d->msg_bytes = 0;
  d->hdr_bytes = 0;
  d->msgid = 0;
  d->has_msgid = false;
  d->method = GP_METHOD_UNKNOWN;
  d->silent = false;
  d->cur_key = -1;
  gp_gemm_hdr_init(&d->gemm);
  d->has_c = false;
  d->keys_seen = 0;
  d->shm_arg = 0;
  d->put = (gp_put_hdr){.dtype = GP_DTYPE_F32, .batch = 1};
  d->put_seen = 0;
  memset(d->operand_bytes, 0, sizeof d->operand_bytes);
  gp_error_clear(&d->resp_err);
  d->result_first_map = false;
  memset(&d->rh, 0, sizeof d->rh);
  d->rh.batch = 1;
  d->rh_seen = 0;
  gp_error_clear(&d->rh_err);
  d->capturing = false;
  d->capture_failed = false;
  d->cap_len = 0;
  /* The previous result (valid until this call) goes now. */
  msgpack_unpacked_destroy(&d->unpacked);
  msgpack_unpacked_init(&d->unpacked);
}

/* msg_bytes stays readable until the message's last queued event is taken (see
 * gp_decoder_message_bytes); begin_message resets it. */
static void end_message(gp_decoder *d) { d->in_message = false; }

/* ---- capture of a client's generic result ---- */

static void capture(gp_decoder *d, const uint8_t *p, size_t n) {
  if (!d->capturing || d->capture_failed || n == 0)
    return;
  /* cap_len never exceeds hdr_bytes, which the engine holds within max_header_bytes. */
  if (d->cap_alloc - d->cap_len < n) {
    size_t want = d->cap_alloc ? d->cap_alloc : 256;
    while (want - d->cap_len < n)
      want *= 2;
    uint8_t *grown = realloc(d->cap, want);
    if (grown == NULL) {
      d->capture_failed = true;
      return;
    }
    d->cap = grown;
    d->cap_alloc = want;
  }
  memcpy(d->cap + d->cap_len, p, n);
  d->cap_len += n;
}

/* ---- accounting ---- */

static bool count_header_bytes(gp_decoder *d, uint64_t n) {
  d->hdr_bytes += n;
  if (d->hdr_bytes > d->limits.max_header_bytes) {
    gp__fatalf(d, "message: more than max_header_bytes (%u) outside payloads",
               d->limits.max_header_bytes);
    return false;
  }
  return true;
}

static bool count_message_bytes(gp_decoder *d, uint64_t n) {
  if (n > d->limits.max_message_bytes - d->msg_bytes) {
    gp__fatalf(d, "message: more than max_message_bytes (%llu)",
               (unsigned long long)d->limits.max_message_bytes);
    return false;
  }
  d->msg_bytes += n;
  return true;
}

static uint32_t effective_max_depth(const gp_decoder *d) {
  return d->limits.max_depth < GP__DEPTH_CAP ? d->limits.max_depth : GP__DEPTH_CAP;
}

/* ---- structure ---- */

/* An element of the current frame is complete: advance it, and close every frame that this
 * completes (their on_close may emit events). */
static void value_done(gp_decoder *d) {
  const gp__grammar *g = grammar_of(d);
  while (d->depth > 0 && !d->fatal) {
    gp__frame *f = &d->stack[d->depth - 1];
    f->index++;
    f->remaining--;
    if (f->remaining > 0)
      return;
    gp__frame closed = *f;
    d->depth--;
    g->on_close(d, &closed);
    if (d->depth == 0) {
      end_message(d);
      return;
    }
  }
}

static void push_frame(gp_decoder *d, gp__kind kind, const gp__token *tok) {
  gp__frame f = {
      .kind = kind,
      .remaining = tok->type == GP__TOK_MAP ? 2 * (uint64_t)tok->len : tok->len,
      .index = 0,
      .count = tok->len,
  };
  if (f.remaining > 0) {
    d->stack[d->depth++] = f;
    return;
  }
  /* An empty container is complete at once. */
  grammar_of(d)->on_close(d, &f);
  if (d->fatal)
    return;
  if (d->depth == 0)
    end_message(d);
  else
    value_done(d);
}

static bool container_within_limits(gp_decoder *d, const gp__token *tok) {
  if (d->depth + 1 > effective_max_depth(d)) {
    gp__fatalf(d, "message: nested deeper than max_depth (%u)", effective_max_depth(d));
    return false;
  }
  if (tok->len > d->limits.max_items) {
    gp__fatalf(d, "message: %s of %u %s is over max_items (%u)",
               tok->type == GP__TOK_MAP ? "a map" : "an array", tok->len,
               tok->type == GP__TOK_MAP ? "pairs" : "elements", d->limits.max_items);
    return false;
  }
  return true;
}

static void start_body(gp_decoder *d, const gp__token *tok, gp__body body) {
  d->body = body;
  d->body_left = tok->len;
  d->body_offset = 0;
  d->str_len = tok->len;
}

static void body_done(gp_decoder *d) {
  gp__body body = d->body;
  d->body = GP__BODY_NONE;
  if (body == GP__BODY_COLLECT && !d->silent)
    grammar_of(d)->on_string(d);
  if (!d->fatal)
    value_done(d);
}

/* A complete token header: ask the grammar, check the limits that apply, and act. */
static void on_token(gp_decoder *d, const gp__token *tok) {
  if (d->depth == 0 && tok->type != GP__TOK_ARRAY) {
    gp__fatalf(d, "envelope: expected an array, got %s", gp__tok_words(tok));
    return;
  }
  bool is_container = tok->type == GP__TOK_ARRAY || tok->type == GP__TOK_MAP;
  if (is_container && !container_within_limits(d, tok))
    return;
  gp__frame *parent = gp__parent(d);
  gp__action act = d->silent && parent != NULL ? gp__skip_action(parent->kind, tok)
                                               : grammar_of(d)->on_value(d, tok);
  if (d->fatal)
    return;
  /* Rejected at this very token: it is skipped like the rest, unless the grammar already
   * chose to drop it as a payload. */
  if (d->silent && parent != NULL && act.body != GP__BODY_PAYLOAD_SKIP)
    act = gp__skip_action(parent->kind, tok);
  /* The token header belongs to a capture that on_value may just have started. */
  capture(d, d->tz.raw, d->tz.have);
  if (is_container) {
    push_frame(d, act.kind, tok);
    return;
  }
  if (tok->type == GP__TOK_STR || tok->type == GP__TOK_BIN || tok->type == GP__TOK_EXT) {
    gp__body body = act.body;
    if (body == GP__BODY_PAYLOAD && tok->type != GP__TOK_BIN)
      body = GP__BODY_SKIP;
    bool is_payload = body == GP__BODY_PAYLOAD || body == GP__BODY_PAYLOAD_SKIP;
    if (!is_payload && tok->len > d->limits.max_string_bytes) {
      gp__fatalf(d, "message: a %s of %u bytes is over max_string_bytes (%u)",
                 tok->type == GP__TOK_STR ? "str" : tok->type == GP__TOK_BIN ? "bin" : "ext",
                 tok->len, d->limits.max_string_bytes);
      return;
    }
    start_body(d, tok, body);
    if (d->body_left == 0)
      body_done(d);
    return;
  }
  value_done(d);
}

/* ---- feeding ---- */

/* Keeps the first GP__STR_CAP bytes of a collected body. */
static void collect(gp_decoder *d, const uint8_t *p, size_t n) {
  uint64_t at = d->str_len - d->body_left;
  if (at >= GP__STR_CAP)
    return;
  size_t room = GP__STR_CAP - (size_t)at;
  memcpy(d->str + at, p, n < room ? n : room);
}

/* Consumes body bytes; returns how many. */
static size_t feed_body(gp_decoder *d, const uint8_t *p, size_t n) {
  size_t take = d->body_left < n ? (size_t)d->body_left : n;
  /* Stop at the exact byte that breaks max_message_bytes, so that the events before it do
   * not depend on how the input was cut. */
  uint64_t allowed = d->limits.max_message_bytes - d->msg_bytes;
  if (take > allowed)
    take = (size_t)allowed;
  if (take == 0 || !count_message_bytes(d, take)) {
    count_message_bytes(d, 1); /* reports the breach */
    return 0;
  }
  switch (d->body) {
  case GP__BODY_COLLECT:
  case GP__BODY_SKIP:
    if (!count_header_bytes(d, take))
      return take;
    if (d->body == GP__BODY_COLLECT)
      collect(d, p, take);
    capture(d, p, take);
    break;
  case GP__BODY_PAYLOAD:
    if (!d->silent) {
      gp_event *ev = gp__emit(d, GP_EV_PAYLOAD);
      ev->operand = d->body_operand;
      ev->offset = d->body_offset;
      ev->data = p;
      ev->len = take;
    }
    break;
  default: /* PAYLOAD_SKIP */
    break;
  }
  d->body_left -= take;
  d->body_offset += take;
  if (d->body_left == 0)
    body_done(d);
  return take;
}

/* Consumes token header bytes; returns how many. */
static size_t feed_token(gp_decoder *d, const uint8_t *p, size_t n) {
  if (!d->in_message && gp__tokenizer_idle(&d->tz))
    begin_message(d);
  size_t used;
  gp__token tok;
  gp__token_status st = gp__tokenizer_feed(&d->tz, p, n, &used, &tok);
  if (st == GP__TOKEN_INVALID) {
    gp__fatalf(d, "message: byte 0x%02x is not msgpack", p[0]);
    return 0;
  }
  if (!count_message_bytes(d, used) || !count_header_bytes(d, used))
    return used;
  if (st == GP__TOKEN_DONE) {
    d->tok = tok;
    on_token(d, &tok);
    gp__tokenizer_reset(&d->tz);
  }
  return used;
}

size_t gp_decoder_feed(gp_decoder *d, const uint8_t *data, size_t len, gp_event *ev) {
  if (pop_event(d, ev))
    return 0;
  size_t used = 0;
  while (used < len) {
    if (d->body != GP__BODY_NONE)
      used += feed_body(d, data + used, len - used);
    else
      used += feed_token(d, data + used, len - used);
    if (pop_event(d, ev))
      return used;
  }
  memset(ev, 0, sizeof *ev);
  ev->type = GP_EV_NEED_MORE;
  return used;
}

void gp_decoder_skip_message(gp_decoder *d) {
  d->silent = true;
  if (d->body == GP__BODY_PAYLOAD)
    d->body = GP__BODY_PAYLOAD_SKIP;
  if (!d->fatal)
    d->q_len = 0; /* e.g. the MESSAGE_END queued behind a REQUEST */
}

bool gp_decoder_payload_window(const gp_decoder *d, gp_operand *operand, uint64_t *offset,
                               uint64_t *remaining) {
  if (d->fatal || d->silent || d->body != GP__BODY_PAYLOAD || d->body_left == 0)
    return false;
  *operand = d->body_operand;
  *offset = d->body_offset;
  *remaining = d->body_left;
  return true;
}

/* A message counts as current until its last event (e.g. the MESSAGE_END queued behind a
 * ping's REQUEST) has been taken, so "0" really means "between messages". */
uint64_t gp_decoder_message_bytes(const gp_decoder *d) {
  return d->in_message || d->q_len > 0 ? d->msg_bytes : 0;
}
