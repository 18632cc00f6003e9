/*
 * gp_decode_put.c - the server grammar's put: params [put_hdr, data], the header map
 * {"dtype", "rows", "cols", "batch"} and the data (a bin of exactly the header's bytes, or a
 * region reference). The data streams out as PAYLOAD events of operand a, the way a gemm's a
 * does. Called from gp_decode_server.c.
 */
#include "gp_decode_internal.h"
#include "gp_encode.h"

#include <string.h>

enum { PK_DTYPE, PK_ROWS, PK_COLS, PK_BATCH, PK_COUNT };
static const char *const put_keys[PK_COUNT] = {"dtype", "rows", "cols", "batch"};

static gp__action reject_put(gp_decoder *d, gp__kind parent, const gp__token *tok,
                             const char *field, const char *expected) {
  gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: must be %s, got %s", field, expected,
              gp__tok_words(tok));
  return gp__skip_action(parent, tok);
}

gp__action gp__put_params(gp_decoder *d, const gp__token *tok) {
  if (tok->type == GP__TOK_ARRAY && tok->len == 2)
    return (gp__action){GP__K_PARAMS_PUT, GP__BODY_NONE};
  if (tok->type == GP__TOK_ARRAY)
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "params: put takes [hdr, data], got %u elements",
                tok->len);
  else
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "params: put takes [hdr, data], got %s",
                gp__tok_words(tok));
  return gp__skip_action(GP__K_ENVELOPE, tok);
}

gp__action gp__put_param(gp_decoder *d, const gp__frame *f, const gp__token *tok) {
  if (f->index == 0) {
    if (tok->type == GP__TOK_MAP)
      return (gp__action){GP__K_PUTHDR, GP__BODY_NONE};
    return reject_put(d, GP__K_PARAMS_PUT, tok, "hdr", "a map");
  }
  if (tok->type == GP__TOK_MAP)
    return gp__shmref_start(d, GP__REF_PUT);
  if (tok->type != GP__TOK_BIN)
    return reject_put(d, GP__K_PARAMS_PUT, tok, "data", "a bin or a region reference map");
  if (tok->len != d->operand_bytes[GP_OPERAND_A]) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "data: expected %llu bytes (batch * rows * cols of "
                "%s), got %u", (unsigned long long)d->operand_bytes[GP_OPERAND_A],
                gp_dtype_name(d->put.dtype), tok->len);
    return (gp__action){GP__K_SKIP, GP__BODY_PAYLOAD_SKIP};
  }
  d->body_operand = GP_OPERAND_A;
  return (gp__action){GP__K_SKIP, GP__BODY_PAYLOAD};
}

gp__action gp__puthdr_element(gp_decoder *d, const gp__frame *f, const gp__token *tok) {
  if (f->index % 2 == 0) {
    if (tok->type == GP__TOK_STR)
      return (gp__action){GP__K_SKIP, GP__BODY_COLLECT};
    return reject_put(d, GP__K_PUTHDR, tok, "hdr: a key", "a str");
  }
  const char *key = put_keys[d->cur_key];
  if (d->cur_key == PK_DTYPE) {
    if (tok->type == GP__TOK_STR)
      return (gp__action){GP__K_SKIP, GP__BODY_COLLECT};
    return reject_put(d, GP__K_PUTHDR, tok, key, "a str");
  }
  if (tok->type != GP__TOK_INT || tok->neg)
    return reject_put(d, GP__K_PUTHDR, tok, key, "a positive integer");
  uint64_t *slot = d->cur_key == PK_ROWS   ? &d->put.rows
                   : d->cur_key == PK_COLS ? &d->put.cols
                                           : &d->put.batch;
  *slot = tok->u;
  return (gp__action){GP__K_SKIP, GP__BODY_SKIP};
}

void gp__puthdr_string(gp_decoder *d, const gp__frame *f) {
  if (f->index % 2 == 0) {
    gp__map_key(d, put_keys, PK_COUNT, &d->put_seen, "hdr",
                "put takes dtype, rows, cols and batch");
    return;
  }
  size_t len = d->str_len <= GP__STR_CAP ? d->str_len : 0;
  if (len > 0 && gp_dtype_from_name(d->str, len, &d->put.dtype) == 0)
    return;
  char value[64];
  gp__printable(value, sizeof value, d->str, d->str_len);
  gp__rejectf(d, GP_E_INVALID_ARGUMENT, "dtype: \"%s\" is not one of " GP_DTYPE_NAMES, value);
}

void gp__puthdr_done(gp_decoder *d) {
  static const int required[] = {PK_DTYPE, PK_ROWS, PK_COLS};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    if (!(d->put_seen & (1u << required[i]))) {
      gp__rejectf(d, GP_E_INVALID_ARGUMENT, "hdr: missing %s", put_keys[required[i]]);
      return;
    }
  }
  gp_error err;
  if (gp_put_hdr_validate(&d->put, &d->limits, &err) != GP_OK) {
    gp__reject(d, &err);
    return;
  }
  uint64_t bytes;
  gp_put_bytes(&d->put, &bytes); /* cannot overflow: validated */
  uint8_t unused[GP_BIN_HEADER_MAX];
  uint64_t total = d->msg_bytes + gp_encode_bin_header(unused, bytes) + bytes;
  if (total > d->limits.max_message_bytes) {
    gp__rejectf(d, GP_E_RESOURCE_EXHAUSTED, "message: %llu bytes are over max_message_bytes (%llu)",
                (unsigned long long)total, (unsigned long long)d->limits.max_message_bytes);
    return;
  }
  d->operand_bytes[GP_OPERAND_A] = bytes;
  gp_event *ev = gp__emit(d, GP_EV_REQUEST);
  ev->put = d->put;
}
