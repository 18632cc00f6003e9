/*
 * gp_decode_shm.c - the server grammar's shared-memory parts: the params of shm_register
 * [size] and shm_unregister [region], and the reference map {"region": id, "offset": N} that
 * stands for a gemm operand (a, b, c) or the header's "out". Called from gp_decode_server.c.
 */
#include "gp_decode_internal.h"

#include <string.h>

enum { REF_REGION, REF_OFFSET, REF_KEYS };
static const char *const ref_keys[REF_KEYS] = {"region", "offset"};

static const char *ref_name(const gp_decoder *d) {
  return d->ref_target == GP__REF_OUT ? "out" : gp_operand_name((gp_operand)d->ref_target);
}

gp__action gp__shm_params(gp_decoder *d, const gp__token *tok) {
  if (tok->type == GP__TOK_ARRAY && tok->len == 1)
    return (gp__action){GP__K_PARAMS_SHM, GP__BODY_NONE};
  const char *want = d->method == GP_METHOD_SHM_REGISTER ? "[size]" : "[region]";
  if (tok->type == GP__TOK_ARRAY)
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "params: %s takes %s, got an array of %u elements",
                gp_method_name(d->method), want, tok->len);
  else
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "params: %s takes %s, got %s",
                gp_method_name(d->method), want, gp__tok_words(tok));
  return gp__skip_action(GP__K_ENVELOPE, tok);
}

gp__action gp__shm_param(gp_decoder *d, const gp__token *tok) {
  if (tok->type != GP__TOK_INT || tok->neg) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: must be a non-negative integer, got %s",
                d->method == GP_METHOD_SHM_REGISTER ? "size" : "region", gp__tok_words(tok));
    return gp__skip_action(GP__K_PARAMS_SHM, tok);
  }
  d->shm_arg = tok->u;
  return (gp__action){GP__K_SKIP, GP__BODY_SKIP};
}

gp__action gp__shmref_start(gp_decoder *d, int target) {
  d->ref_target = target;
  d->ref_seen = 0;
  d->ref_region = 0;
  d->ref_offset = 0;
  d->cur_key = -1;
  return (gp__action){GP__K_SHMREF, GP__BODY_NONE};
}

gp__action gp__shmref_element(gp_decoder *d, const gp__frame *f, const gp__token *tok) {
  if (f->index % 2 == 0) {
    if (tok->type == GP__TOK_STR)
      return (gp__action){GP__K_SKIP, GP__BODY_COLLECT};
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: a key must be a str, got %s", ref_name(d),
                gp__tok_words(tok));
    return gp__skip_action(GP__K_SHMREF, tok);
  }
  if (tok->type != GP__TOK_INT || tok->neg) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s.%s: must be a non-negative integer, got %s",
                ref_name(d), ref_keys[d->cur_key], gp__tok_words(tok));
    return gp__skip_action(GP__K_SHMREF, tok);
  }
  if (d->cur_key == REF_REGION)
    d->ref_region = tok->u;
  else
    d->ref_offset = tok->u;
  return (gp__action){GP__K_SKIP, GP__BODY_SKIP};
}

void gp__shmref_key(gp_decoder *d) {
  for (int i = 0; i < REF_KEYS; i++) {
    if (d->str_len == strlen(ref_keys[i]) && memcmp(d->str, ref_keys[i], d->str_len) == 0) {
      if (d->ref_seen & (1u << i)) {
        gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: duplicate key \"%s\"", ref_name(d),
                    ref_keys[i]);
        return;
      }
      d->ref_seen |= 1u << i;
      d->cur_key = i;
      return;
    }
  }
  char name[64];
  gp__printable(name, sizeof name, d->str, d->str_len);
  gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: unknown key \"%s\" (a reference has region and "
              "offset)", ref_name(d), name);
}

void gp__shmref_done(gp_decoder *d) {
  if (!(d->ref_seen & (1u << REF_REGION))) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: missing region", ref_name(d));
    return;
  }
  if (d->ref_target == GP__REF_OUT) {
    d->gemm.has_out = true;
    d->gemm.out_region = d->ref_region;
    d->gemm.out_offset = d->ref_offset;
    return;
  }
  gp_event *ev = gp__emit(d, GP_EV_OPERAND_REF);
  ev->operand = (gp_operand)d->ref_target;
  ev->region = d->ref_region;
  ev->offset = d->ref_offset;
}
