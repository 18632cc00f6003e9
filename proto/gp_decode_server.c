/*
 * gp_decode_server.c - the server role's grammar: requests
 * [0, msgid, method, params] and notifications [2, method, params], and the
 * gemm header map inside a gemm request's params.
 */
#include "gp_decode_internal.h"
#include "gp_encode.h"

#include <string.h>

static const gp__action COLLECT = {GP__K_SKIP, GP__BODY_COLLECT};
static const gp__action NOTHING = {GP__K_SKIP, GP__BODY_SKIP};

/* The header keys; the bit of key i in keys_seen is 1 << i. */
enum { KEY_M, KEY_N, KEY_K, KEY_DTYPE, KEY_TRANS_A, KEY_TRANS_B, KEY_ALPHA, KEY_BETA, KEY_BATCH,
       KEY_PRECISION, KEY_TIMEOUT_MS, KEY_OUT, KEY_BROADCAST_B, KEY_BIAS, KEY_ACTIVATION,
       KEY_OUT_DTYPE, KEY_SCALE_A, KEY_SCALE_B, KEY_ALPHA_IM, KEY_BETA_IM, KEY_CONJ_A, KEY_CONJ_B,
       KEY_LDA, KEY_LDB, KEY_LDC, KEY_COUNT };
static const char *const hdr_keys[KEY_COUNT] = {
    "m", "n", "k", "dtype", "trans_a", "trans_b", "alpha", "beta", "batch", "precision",
    "timeout_ms", "out", "broadcast_b", "bias", "activation", "out_dtype", "scale_a", "scale_b",
    "alpha_im", "beta_im", "conj_a", "conj_b", "lda", "ldb", "ldc"};
_Static_assert(KEY_COUNT <= 32, "keys_seen holds a bit per key");

static int hdr_key_of(const char *s, size_t len) {
  for (int i = 0; i < KEY_COUNT; i++) {
    if (strlen(hdr_keys[i]) == len && memcmp(hdr_keys[i], s, len) == 0)
      return i;
  }
  return -1;
}

/* Element index of the method within the envelope; params follow it. */
static uint32_t method_index(const gp_decoder *d) {
  return d->msg_type == GP__MSG_REQUEST ? 2 : 1;
}

/* Rejects a value of the wrong type: "<field>: must be <expected>, got <what it was>". */
static gp__action reject_type(gp_decoder *d, gp__kind parent, const gp__token *tok,
                              const char *field, const char *expected) {
  gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: must be %s, got %s", field, expected,
              gp__tok_words(tok));
  return gp__skip_action(parent, tok);
}

/* ---- envelope ---- */

static void read_type(gp_decoder *d, uint32_t count, const gp__token *tok) {
  if (tok->type == GP__TOK_INT && !tok->neg && tok->u == GP__MSG_REQUEST && count == 4) {
    d->msg_type = GP__MSG_REQUEST;
    return;
  }
  if (tok->type == GP__TOK_INT && !tok->neg && tok->u == GP__MSG_NOTIFICATION && count == 3) {
    d->msg_type = GP__MSG_NOTIFICATION;
    return;
  }
  if (tok->type == GP__TOK_INT && !tok->neg)
    gp__fatalf(d, "envelope: type %llu with %u elements is neither a request nor a notification",
               (unsigned long long)tok->u, count);
  else
    gp__fatalf(d, "envelope: the type field must be an integer, got %s", gp__tok_words(tok));
}

static gp__action read_method(gp_decoder *d, const gp__token *tok) {
  if (tok->type == GP__TOK_STR || tok->type == GP__TOK_BIN)
    return COLLECT;
  if (d->msg_type == GP__MSG_REQUEST)
    return reject_type(d, GP__K_ENVELOPE, tok, "method", "a str or bin");
  d->method = GP_METHOD_UNKNOWN; /* a notification: ignored */
  return gp__skip_action(GP__K_ENVELOPE, tok);
}

static gp__action read_params(gp_decoder *d, const gp__token *tok) {
  if (d->msg_type == GP__MSG_NOTIFICATION) /* never answered, so never parsed */
    return gp__skip_action(GP__K_ENVELOPE, tok);
  if (d->method == GP_METHOD_GEMM) {
    if (tok->type == GP__TOK_ARRAY && (tok->len == 3 || tok->len == 4)) {
      d->has_c = tok->len == 4;
      return (gp__action){GP__K_PARAMS_GEMM, GP__BODY_NONE};
    }
    if (tok->type == GP__TOK_ARRAY)
      gp__rejectf(d, GP_E_INVALID_ARGUMENT,
                  "params: gemm takes [hdr, a, b] or [hdr, a, b, c], got %u elements", tok->len);
    else
      gp__rejectf(d, GP_E_INVALID_ARGUMENT,
                  "params: gemm takes [hdr, a, b] or [hdr, a, b, c], got %s", gp__tok_words(tok));
    return gp__skip_action(GP__K_ENVELOPE, tok);
  }
  if (d->method == GP_METHOD_SHM_REGISTER || d->method == GP_METHOD_SHM_UNREGISTER ||
      d->method == GP_METHOD_FREE)
    return gp__shm_params(d, tok);
  if (d->method == GP_METHOD_PUT)
    return gp__put_params(d, tok);
  if (d->method == GP_METHOD_CUDA_REGISTER)
    return gp__cuda_params(d, tok);
  if (d->method == GP_METHOD_AUTH) {
    if (tok->type == GP__TOK_ARRAY && tok->len == 1)
      return (gp__action){GP__K_PARAMS_AUTH, GP__BODY_NONE};
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "params: auth takes [token], got %s",
                gp__tok_words(tok));
    return gp__skip_action(GP__K_ENVELOPE, tok);
  }
  if (tok->type == GP__TOK_ARRAY && tok->len == 0)
    return (gp__action){GP__K_SKIP, GP__BODY_NONE};
  if (tok->type == GP__TOK_ARRAY)
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "params: %s takes [], got an array of %u elements",
                gp_method_name(d->method), tok->len);
  else
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "params: %s takes [], got %s", gp_method_name(d->method),
                gp__tok_words(tok));
  return gp__skip_action(GP__K_ENVELOPE, tok);
}

static gp__action envelope_element(gp_decoder *d, const gp__frame *f, const gp__token *tok) {
  if (f->index == 0) {
    read_type(d, f->count, tok);
    return NOTHING;
  }
  if (d->msg_type == GP__MSG_REQUEST && f->index == 1) {
    gp__read_msgid(d, tok);
    return NOTHING;
  }
  if (f->index == method_index(d))
    return read_method(d, tok);
  return read_params(d, tok);
}

static void method_read(gp_decoder *d) {
  d->method = d->str_len <= GP__STR_CAP ? gp_method_from_name(d->str, d->str_len)
                                         : GP_METHOD_UNKNOWN;
  if (d->method != GP_METHOD_UNKNOWN || d->msg_type != GP__MSG_REQUEST)
    return;
  char name[64];
  gp__printable(name, sizeof name, d->str, d->str_len);
  gp__rejectf(d, GP_E_UNIMPLEMENTED, "method \"%s\" is not implemented", name);
}

/* ---- auth params: [token] ---- */

_Static_assert(GP__STR_CAP >= GP_AUTH_TOKEN_MAX, "the decoder keeps every byte of a token");

static gp__action auth_param(gp_decoder *d, const gp__token *tok) {
  if (tok->type == GP__TOK_STR || tok->type == GP__TOK_BIN)
    return COLLECT; /* a str or bin within max_string_bytes: never a payload */
  return reject_type(d, GP__K_PARAMS_AUTH, tok, "token", "a str or bin");
}

/* ---- gemm params: [hdr, a, b(, c)] ---- */

static gp__action gemm_param(gp_decoder *d, const gp__frame *f, const gp__token *tok) {
  if (f->index == 0) {
    if (tok->type == GP__TOK_MAP)
      return (gp__action){GP__K_HDR, GP__BODY_NONE};
    return reject_type(d, GP__K_PARAMS_GEMM, tok, "hdr", "a map");
  }
  gp_operand op = (gp_operand)(f->index - 1);
  if (tok->type == GP__TOK_MAP)
    return gp__shmref_start(d, (int)op);
  if (tok->type != GP__TOK_BIN)
    return reject_type(d, GP__K_PARAMS_GEMM, tok, gp_operand_name(op),
                       "a bin, a region reference map or a handle map");
  if (d->gemm.ld[op] != 0) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: a leading dimension (ld%s) is only for an operand "
                "in a shared-memory region or CUDA memory, not one sent in the message",
                gp_operand_name(op), gp_operand_name(op));
    return (gp__action){GP__K_SKIP, GP__BODY_PAYLOAD_SKIP};
  }
  if (tok->len != d->operand_bytes[op]) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: expected %llu bytes, got %u", gp_operand_name(op),
                (unsigned long long)d->operand_bytes[op], tok->len);
    return (gp__action){GP__K_SKIP, GP__BODY_PAYLOAD_SKIP};
  }
  d->body_operand = op;
  return (gp__action){GP__K_SKIP, GP__BODY_PAYLOAD};
}

/* ---- the gemm header map ---- */

static gp__action hdr_key(gp_decoder *d, const gp__token *tok) {
  if (tok->type == GP__TOK_STR)
    return COLLECT;
  return reject_type(d, GP__K_HDR, tok, "hdr: a key", "a str");
}

static gp__action hdr_uint(gp_decoder *d, const gp__token *tok, uint64_t *out) {
  const char *key = hdr_keys[d->cur_key];
  if (tok->type != GP__TOK_INT)
    return reject_type(d, GP__K_HDR, tok, key, "an integer");
  if (tok->neg) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: must be >= %d, got %lld", key,
                d->cur_key == KEY_TIMEOUT_MS ? 0 : 1, (long long)tok->i);
    return NOTHING;
  }
  *out = tok->u;
  return NOTHING;
}

static gp__action hdr_bool(gp_decoder *d, const gp__token *tok, bool *out) {
  if (tok->type != GP__TOK_BOOL)
    return reject_type(d, GP__K_HDR, tok, hdr_keys[d->cur_key], "a bool");
  *out = tok->b;
  return NOTHING;
}

static gp__action hdr_number(gp_decoder *d, const gp__token *tok, double *out) {
  if (tok->type == GP__TOK_FLOAT)
    *out = tok->f;
  else if (tok->type == GP__TOK_INT)
    *out = tok->neg ? (double)tok->i : (double)tok->u;
  else
    return reject_type(d, GP__K_HDR, tok, hdr_keys[d->cur_key], "a number");
  return NOTHING;
}

static gp__action hdr_value(gp_decoder *d, const gp__token *tok) {
  gp_gemm_hdr *h = &d->gemm;
  switch (d->cur_key) {
  case KEY_M: return hdr_uint(d, tok, &h->m);
  case KEY_N: return hdr_uint(d, tok, &h->n);
  case KEY_K: return hdr_uint(d, tok, &h->k);
  case KEY_BATCH: return hdr_uint(d, tok, &h->batch);
  case KEY_TIMEOUT_MS:
    h->has_timeout = true;
    return hdr_uint(d, tok, &h->timeout_ms);
  case KEY_TRANS_A: return hdr_bool(d, tok, &h->trans_a);
  case KEY_TRANS_B: return hdr_bool(d, tok, &h->trans_b);
  case KEY_BROADCAST_B: return hdr_bool(d, tok, &h->broadcast_b);
  case KEY_BIAS: return hdr_bool(d, tok, &h->bias);
  case KEY_ALPHA: return hdr_number(d, tok, &h->alpha);
  case KEY_OUT:
    if (tok->type == GP__TOK_MAP)
      return gp__shmref_start(d, GP__REF_OUT);
    return reject_type(d, GP__K_HDR, tok, "out", "a region reference map");
  case KEY_BETA: return hdr_number(d, tok, &h->beta);
  case KEY_SCALE_A: return hdr_number(d, tok, &h->scale_a);
  case KEY_SCALE_B: return hdr_number(d, tok, &h->scale_b);
  case KEY_ALPHA_IM: return hdr_number(d, tok, &h->alpha_im);
  case KEY_BETA_IM: return hdr_number(d, tok, &h->beta_im);
  case KEY_CONJ_A: return hdr_bool(d, tok, &h->conj_a);
  case KEY_CONJ_B: return hdr_bool(d, tok, &h->conj_b);
  case KEY_LDA: return hdr_uint(d, tok, &h->ld[GP_OPERAND_A]);
  case KEY_LDB: return hdr_uint(d, tok, &h->ld[GP_OPERAND_B]);
  case KEY_LDC: return hdr_uint(d, tok, &h->ld[GP_OPERAND_C]);
  default: /* dtype, precision, activation, out_dtype */
    if (tok->type == GP__TOK_STR)
      return COLLECT;
    return reject_type(d, GP__K_HDR, tok, hdr_keys[d->cur_key], "a str");
  }
}

static void hdr_key_read(gp_decoder *d) {
  char name[64];
  int key = d->str_len <= GP__STR_CAP ? hdr_key_of(d->str, d->str_len) : -1;
  if (key < 0) {
    gp__printable(name, sizeof name, d->str, d->str_len);
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "hdr: unknown key \"%s\"", name);
    return;
  }
  if (d->keys_seen & (1u << key)) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "hdr: duplicate key \"%s\"", hdr_keys[key]);
    return;
  }
  d->keys_seen |= 1u << key;
  d->cur_key = key;
}

static void hdr_string_read(gp_decoder *d) {
  char value[64];
  size_t len = d->str_len <= GP__STR_CAP ? d->str_len : 0;
  if (d->cur_key == KEY_DTYPE && len > 0 && gp_dtype_from_name(d->str, len, &d->gemm.dtype) == 0)
    return;
  if (d->cur_key == KEY_OUT_DTYPE && len > 0 &&
      gp_dtype_from_name(d->str, len, &d->gemm.out_dtype) == 0) {
    d->gemm.has_out_dtype = true;
    return;
  }
  if (d->cur_key == KEY_PRECISION && len > 0 &&
      gp_precision_from_name(d->str, len, &d->gemm.precision) == 0)
    return;
  if (d->cur_key == KEY_ACTIVATION && len > 0 &&
      gp_act_from_name(d->str, len, &d->gemm.activation) == 0)
    return;
  gp__printable(value, sizeof value, d->str, d->str_len);
  if (d->cur_key == KEY_DTYPE || d->cur_key == KEY_OUT_DTYPE)
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: \"%s\" is not one of " GP_DTYPE_NAMES,
                hdr_keys[d->cur_key], value);
  else if (d->cur_key == KEY_ACTIVATION)
    gp__rejectf(d, GP_E_INVALID_ARGUMENT,
                "activation: \"%s\" is not one of none, relu, gelu, gelu_tanh", value);
  else
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "precision: \"%s\" is not one of exact, fast", value);
}

/* The header map closed: required keys, semantic checks, then the REQUEST event. */
static void hdr_done(gp_decoder *d) {
  static const int required[] = {KEY_M, KEY_N, KEY_K, KEY_DTYPE};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    if (!(d->keys_seen & (1u << required[i]))) {
      gp__rejectf(d, GP_E_INVALID_ARGUMENT, "hdr: missing %s", hdr_keys[required[i]]);
      return;
    }
  }
  gp_error err;
  if (gp_gemm_hdr_validate(&d->gemm, d->has_c, &d->limits, &err) != GP_OK) {
    gp__reject(d, &err);
    return;
  }
  /* The whole message, counting the shortest bin header for each operand: a client that
   * pads its bin headers may still cross the limit later, and is then closed. */
  uint64_t total = d->msg_bytes;
  for (gp_operand op = GP_OPERAND_A; op <= GP_OPERAND_C; op++) {
    if (op == GP_OPERAND_C && !d->has_c)
      break;
    gp_gemm_operand_bytes(&d->gemm, op, &d->operand_bytes[op]); /* cannot overflow: validated */
    uint8_t unused[GP_BIN_HEADER_MAX];
    total += gp_encode_bin_header(unused, d->operand_bytes[op]) + d->operand_bytes[op];
  }
  if (total > d->limits.max_message_bytes) {
    gp__rejectf(d, GP_E_RESOURCE_EXHAUSTED, "message: %llu bytes are over max_message_bytes (%llu)",
                (unsigned long long)total, (unsigned long long)d->limits.max_message_bytes);
    return;
  }
  gp_event *ev = gp__emit(d, GP_EV_REQUEST);
  ev->gemm = d->gemm;
  ev->has_c = d->has_c;
}

/* ---- the grammar ---- */

static gp__action server_on_value(gp_decoder *d, const gp__token *tok) {
  gp__frame *f = gp__parent(d);
  if (f == NULL)
    return gp__envelope_start(d, tok, "a request has 4 elements and a notification 3");
  switch (f->kind) {
  case GP__K_ENVELOPE:
    return envelope_element(d, f, tok);
  case GP__K_PARAMS_GEMM:
    return gemm_param(d, f, tok);
  case GP__K_PARAMS_AUTH:
    return auth_param(d, tok);
  case GP__K_HDR:
    return (f->index % 2 == 0) ? hdr_key(d, tok) : hdr_value(d, tok);
  case GP__K_PARAMS_SHM:
    return gp__shm_param(d, tok);
  case GP__K_PARAMS_PUT:
    return gp__put_param(d, f, tok);
  case GP__K_PUTHDR:
    return gp__puthdr_element(d, f, tok);
  case GP__K_SHMREF:
    return gp__shmref_element(d, f, tok);
  case GP__K_PARAMS_CUDA:
    return gp__cuda_param(d, tok);
  case GP__K_CUDAREG:
    return gp__cuda_element(d, f, tok);
  default:
    return gp__skip_action(f->kind, tok);
  }
}

static void server_on_string(gp_decoder *d) {
  gp__frame *f = gp__parent(d);
  if (f == NULL)
    return;
  if (f->kind == GP__K_ENVELOPE)
    method_read(d);

  else if (f->kind == GP__K_HDR && f->index % 2 == 0)
    hdr_key_read(d);
  else if (f->kind == GP__K_HDR)
    hdr_string_read(d);
  else if (f->kind == GP__K_SHMREF && f->index % 2 == 0)
    gp__shmref_key(d);
  else if (f->kind == GP__K_PUTHDR)
    gp__puthdr_string(d, f);
  else if (f->kind == GP__K_CUDAREG)
    gp__cuda_string(d, f);
}

static void server_on_close(gp_decoder *d, const gp__frame *closed) {
  if (d->silent)
    return;
  if (closed->kind == GP__K_HDR) {
    hdr_done(d);
    return;
  }
  if (closed->kind == GP__K_SHMREF) {
    gp__shmref_done(d);
    return;
  }
  if (closed->kind == GP__K_CUDAREG) {
    gp__cuda_done(d);
    return;
  }
  if (closed->kind == GP__K_PUTHDR) {
    gp__puthdr_done(d);
    return;
  }
  if (closed->kind != GP__K_ENVELOPE)
    return;
  if (d->msg_type == GP__MSG_NOTIFICATION) {
    gp__emit(d, GP_EV_NOTIFICATION);
  } else if (d->method == GP_METHOD_AUTH) {
    gp_event *ev = gp__emit(d, GP_EV_REQUEST);
    ev->token = (const uint8_t *)d->str; /* auth_param collected it: the only element */
    ev->token_len = d->str_len;
  } else if (d->method == GP_METHOD_CUDA_REGISTER) {
    gp__emit(d, GP_EV_REQUEST)->cuda = d->cuda;
  } else if (d->method != GP_METHOD_GEMM && d->method != GP_METHOD_PUT) {
    /* ping, info, stats: complete with their []; shm_register/unregister and free with their
     * one integer (put's REQUEST came with its header) */
    gp__emit(d, GP_EV_REQUEST)->arg = d->shm_arg;
  }
  gp__emit(d, GP_EV_MESSAGE_END);
}

const gp__grammar gp__server_grammar = {
    .on_value = server_on_value,
    .on_string = server_on_string,
    .on_close = server_on_close,
};
