/*
 * gp_decode_client.c - the client role's grammar: responses
 * [1, msgid, error, result]. A result [out_hdr, c] (a map, then a bin) is a
 * gemm reply whose c is streamed; any other result is captured (its bytes are
 * header bytes, so the capture is bounded by max_header_bytes and every count
 * in it has passed the engine's limits) and unpacked with msgpack-c.
 * Server notifications [2, method, params] are skipped without an event.
 */
#include "gp_decode_internal.h"

#include <stdio.h>
#include <string.h>

static const gp__action COLLECT = {GP__K_SKIP, GP__BODY_COLLECT};
static const gp__action NOTHING = {GP__K_SKIP, GP__BODY_SKIP};

/* Keys of the error map, out_hdr and timings the client reads; anything else is ignored so
 * that a newer daemon can add fields. */
enum { KEY_CODE, KEY_MESSAGE, KEY_M, KEY_N, KEY_DTYPE, KEY_BATCH, KEY_DEVICE, KEY_KERNEL,
       KEY_TIMINGS, KEY_OUT, KEY_QUEUE_US, KEY_TRANSFER_IN_US, KEY_COMPUTE_US,
       KEY_TRANSFER_OUT_US, KEY_COUNT };
static const char *const key_names[KEY_COUNT] = {
    "code", "message", "m", "n", "dtype", "batch", "device", "kernel", "timings", "out",
    "queue_us", "transfer_in_us", "compute_us", "transfer_out_us"};
/* The keys each map kind knows, as [first, last] ranges of the enum above. */
static int key_of(gp__kind kind, const char *s, size_t len) {
  int first = KEY_CODE, last = KEY_MESSAGE;
  if (kind == GP__K_OUT_HDR) {
    first = KEY_M;
    last = KEY_OUT;
  } else if (kind == GP__K_TIMINGS) {
    first = KEY_QUEUE_US;
    last = KEY_TRANSFER_OUT_US;
  }
  for (int i = first; i <= last; i++) {
    if (strlen(key_names[i]) == len && memcmp(key_names[i], s, len) == 0)
      return i;
  }
  return -1;
}

/* Notes the first problem of out_hdr; reported as a REJECT if a c bin follows. */
static gp__action out_hdr_problem(gp_decoder *d, gp__kind parent, const gp__token *tok,
                                  const char *expected) {
  if (d->rh_err.code == GP_OK)
    gp_error_set(&d->rh_err, GP_E_INVALID_ARGUMENT, "out_hdr: %s: must be %s, got %s",
                 key_names[d->cur_key], expected, gp__tok_words(tok));
  return gp__skip_action(parent, tok);
}

/* ---- envelope ---- */

static void read_type(gp_decoder *d, uint32_t count, const gp__token *tok) {
  bool is_int = tok->type == GP__TOK_INT && !tok->neg;
  if (is_int && tok->u == GP__MSG_RESPONSE && count == 4) {
    d->msg_type = GP__MSG_RESPONSE;
  } else if (is_int && tok->u == GP__MSG_NOTIFICATION && count == 3) {
    d->msg_type = GP__MSG_NOTIFICATION;
    d->silent = true; /* the daemon sends none; a newer one may: skip it */
  } else if (is_int) {
    gp__fatalf(d, "envelope: type %llu with %u elements is not a response",
               (unsigned long long)tok->u, count);
  } else {
    gp__fatalf(d, "envelope: the type field must be an integer, got %s", gp__tok_words(tok));
  }
}

static gp__action read_error(gp_decoder *d, const gp__token *tok) {
  if (tok->type == GP__TOK_NIL)
    return NOTHING;
  if (tok->type == GP__TOK_MAP) { /* code and message filled in as they come */
    gp_error_set(&d->resp_err, GP_E_INTERNAL, "%s", "");
    return (gp__action){GP__K_ERROR, GP__BODY_NONE};
  }
  gp_error_set(&d->resp_err, GP_E_INTERNAL, "error of unexpected form");
  if (tok->type == GP__TOK_STR) /* a plain msgpack-RPC error string */
    return COLLECT;
  return gp__skip_action(GP__K_ENVELOPE, tok);
}

static gp__action read_result(gp_decoder *d, const gp__token *tok) {
  if (d->resp_err.code != GP_OK)
    return gp__skip_action(GP__K_ENVELOPE, tok); /* result is nil beside an error */
  d->capturing = true;
  if (tok->type == GP__TOK_ARRAY && tok->len == 2)
    return (gp__action){GP__K_RESULT, GP__BODY_NONE};
  return NOTHING;
}

static gp__action envelope_element(gp_decoder *d, const gp__frame *f, const gp__token *tok) {
  switch (f->index) {
  case 0:
    read_type(d, f->count, tok);
    return NOTHING;
  case 1:
    gp__read_msgid(d, tok);
    return NOTHING;
  case 2:
    return read_error(d, tok);
  default:
    return read_result(d, tok);
  }
}

/* ---- maps: error, out_hdr, timings ---- */

static gp__action map_key(gp_decoder *d, const gp__token *tok) {
  d->cur_key = -1;
  if (tok->type == GP__TOK_STR)
    return COLLECT;
  return NOTHING; /* a key of another type: it and its value are ignored */
}

static gp__action uint_value(gp_decoder *d, gp__kind parent, const gp__token *tok, uint64_t *out) {
  if (tok->type != GP__TOK_INT || tok->neg)
    return out_hdr_problem(d, parent, tok, "an unsigned integer");
  *out = tok->u;
  return NOTHING;
}

static uint64_t *timing_field(gp_gemm_result_hdr *rh, int key) {
  switch (key) {
  case KEY_QUEUE_US: return &rh->queue_us;
  case KEY_TRANSFER_IN_US: return &rh->transfer_in_us;
  case KEY_COMPUTE_US: return &rh->compute_us;
  default: return &rh->transfer_out_us;
  }
}

static gp__action map_value(gp_decoder *d, gp__kind kind, const gp__token *tok) {
  int key = d->cur_key;
  if (key < 0)
    return gp__skip_action(kind, tok);
  switch (key) {
  case KEY_CODE:
  case KEY_MESSAGE:
    return tok->type == GP__TOK_STR ? COLLECT : gp__skip_action(kind, tok);
  case KEY_M: return uint_value(d, kind, tok, &d->rh.m);
  case KEY_N: return uint_value(d, kind, tok, &d->rh.n);
  case KEY_BATCH: return uint_value(d, kind, tok, &d->rh.batch);
  case KEY_DTYPE:
  case KEY_DEVICE:
  case KEY_KERNEL:
    return tok->type == GP__TOK_STR ? COLLECT : out_hdr_problem(d, kind, tok, "a str");
  case KEY_TIMINGS:
    if (tok->type == GP__TOK_MAP)
      return (gp__action){GP__K_TIMINGS, GP__BODY_NONE};
    return out_hdr_problem(d, kind, tok, "a map");
  case KEY_OUT: /* where a result in shared memory went: the client knows, it asked */
    if (tok->type == GP__TOK_MAP)
      return gp__skip_action(kind, tok);
    return out_hdr_problem(d, kind, tok, "a map");
  default:
    return uint_value(d, kind, tok, timing_field(&d->rh, key));
  }
}

static void copy_name(char out[GP_NAME_MAX], const char *s, size_t len) {
  size_t n = len < GP_NAME_MAX - 1 ? len : GP_NAME_MAX - 1;
  if (n > GP__STR_CAP)
    n = GP__STR_CAP;
  memcpy(out, s, n);
  out[n] = '\0';
}

static void map_string(gp_decoder *d, gp__kind kind, bool is_key) {
  size_t kept = d->str_len < GP__STR_CAP ? d->str_len : GP__STR_CAP;
  if (is_key) {
    d->cur_key = d->str_len <= GP__STR_CAP ? key_of(kind, d->str, d->str_len) : -1;
    if (d->cur_key >= 0 && kind != GP__K_ERROR)
      d->rh_seen |= 1u << d->cur_key;
    return;
  }
  switch (d->cur_key) {
  case KEY_CODE:
    d->resp_err.code = gp_code_from_name(d->str, kept);
    break;
  case KEY_MESSAGE:
    snprintf(d->resp_err.message, sizeof d->resp_err.message, "%.*s", (int)kept, d->str);
    break;
  case KEY_DTYPE:
    if (gp_dtype_from_name(d->str, kept, &d->rh.dtype) != GP_OK && d->rh_err.code == GP_OK)
      gp_error_set(&d->rh_err, GP_E_INVALID_ARGUMENT, "out_hdr: dtype: unknown");
    break;
  case KEY_DEVICE:
    copy_name(d->rh.device, d->str, kept);
    break;
  case KEY_KERNEL:
    copy_name(d->rh.kernel, d->str, kept);
    break;
  default:
    break;
  }
}

/* ---- the result: [out_hdr, c] or anything else ---- */

/* result[1] is a bin after a map (or nil after an out_hdr with "out"): a gemm reply. Checks
 * out_hdr and c's length, then emits RESPONSE and streams c; a malformed one becomes a REJECT
 * for this msgid. */
static gp__action gemm_reply(gp_decoder *d, const gp__token *tok) {
  d->capturing = false;
  bool in_shm = tok->type == GP__TOK_NIL;
  static const int required[] = {KEY_M, KEY_N, KEY_DTYPE};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    if (!(d->rh_seen & (1u << required[i])) && d->rh_err.code == GP_OK)
      gp_error_set(&d->rh_err, GP_E_INVALID_ARGUMENT, "out_hdr: missing %s",
                   key_names[required[i]]);
  }
  gp_gemm_hdr shape;
  gp_gemm_hdr_init(&shape);
  shape.m = d->rh.m;
  shape.n = d->rh.n;
  shape.batch = d->rh.batch;
  shape.dtype = d->rh.dtype;
  uint64_t expected = 0;
  if (d->rh_err.code == GP_OK &&
      (!gp_gemm_operand_bytes(&shape, GP_OPERAND_C, &expected) ||
       (!in_shm && expected != tok->len)))
    gp_error_set(&d->rh_err, GP_E_INVALID_ARGUMENT, "c: expected %llu bytes, got %u",
                 (unsigned long long)expected, tok->len);
  if (d->rh_err.code != GP_OK) {
    gp__reject(d, &d->rh_err);
    return (gp__action){GP__K_SKIP, GP__BODY_PAYLOAD_SKIP};
  }
  gp_event *ev = gp__emit(d, GP_EV_RESPONSE);
  ev->is_gemm_result = true;
  ev->result_hdr = d->rh;
  ev->result_in_shm = in_shm;
  if (in_shm)
    return NOTHING;
  ev->result_bytes = tok->len;
  d->body_operand = GP_OPERAND_C;
  return (gp__action){GP__K_SKIP, GP__BODY_PAYLOAD};
}

static gp__action result_element(gp_decoder *d, const gp__frame *f, const gp__token *tok) {
  if (f->index == 0) {
    if (tok->type != GP__TOK_MAP)
      return gp__skip_action(GP__K_RESULT, tok);
    d->result_first_map = true;
    return (gp__action){GP__K_OUT_HDR, GP__BODY_NONE};
  }
  if (tok->type == GP__TOK_BIN && d->result_first_map)
    return gemm_reply(d, tok);
  if (tok->type == GP__TOK_NIL && d->result_first_map && (d->rh_seen & (1u << KEY_OUT)))
    return gemm_reply(d, tok);
  return gp__skip_action(GP__K_RESULT, tok); /* captured: a generic result */
}

/* The envelope closed on a generic result: unpack the capture. */
static void generic_result(gp_decoder *d) {
  d->capturing = false;
  if (d->capture_failed) {
    gp__rejectf(d, GP_E_RESOURCE_EXHAUSTED, "result: out of memory");
    return;
  }
  size_t off = 0;
  msgpack_unpack_return ret =
      msgpack_unpack_next(&d->unpacked, (const char *)d->cap, d->cap_len, &off);
  if (ret == MSGPACK_UNPACK_NOMEM_ERROR) {
    gp__rejectf(d, GP_E_RESOURCE_EXHAUSTED, "result: out of memory");
    return;
  }
  if (ret != MSGPACK_UNPACK_SUCCESS || off != d->cap_len) {
    gp__rejectf(d, GP_E_INTERNAL, "result: msgpack-c could not unpack it (%d)", (int)ret);
    return;
  }
  gp_event *ev = gp__emit(d, GP_EV_RESPONSE);
  ev->result = &d->unpacked.data;
}

/* ---- the grammar ---- */

static gp__action client_on_value(gp_decoder *d, const gp__token *tok) {
  gp__frame *f = gp__parent(d);
  if (f == NULL)
    return gp__envelope_start(d, tok, "a response has 4 elements");
  switch (f->kind) {
  case GP__K_ENVELOPE:
    return envelope_element(d, f, tok);
  case GP__K_RESULT:
    return result_element(d, f, tok);
  case GP__K_ERROR:
  case GP__K_OUT_HDR:
  case GP__K_TIMINGS:
    return (f->index % 2 == 0) ? map_key(d, tok) : map_value(d, f->kind, tok);
  default:
    return gp__skip_action(f->kind, tok);
  }
}

static void client_on_string(gp_decoder *d) {
  gp__frame *f = gp__parent(d);
  if (f == NULL)
    return;
  if (f->kind == GP__K_ENVELOPE) { /* error as a plain string */
    size_t kept = d->str_len < GP__STR_CAP ? d->str_len : GP__STR_CAP;
    snprintf(d->resp_err.message, sizeof d->resp_err.message, "%.*s", (int)kept, d->str);
    return;
  }
  map_string(d, f->kind, f->index % 2 == 0);
}

static void client_on_close(gp_decoder *d, const gp__frame *closed) {
  if (d->silent || closed->kind != GP__K_ENVELOPE)
    return;
  if (d->resp_err.code != GP_OK) {
    if (d->resp_err.message[0] == '\0') /* an error map without a message */
      snprintf(d->resp_err.message, sizeof d->resp_err.message, "%s",
               gp_strerror(d->resp_err.code));
    gp_event *ev = gp__emit(d, GP_EV_RESPONSE);
    ev->err = d->resp_err;
  } else if (d->capturing) {
    generic_result(d);
    if (d->silent)
      return;
  }
  gp__emit(d, GP_EV_MESSAGE_END);
}

const gp__grammar gp__client_grammar = {
    .on_value = client_on_value,
    .on_string = client_on_string,
    .on_close = client_on_close,
};
