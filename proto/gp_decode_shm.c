/*
 * gp_decode_shm.c - the server grammar's reference parts: the params of shm_register [size],
 * shm_unregister [region] and free [handle], and the reference map that stands for a gemm
 * operand (a, b, c: {"region": id, "offset": N} or a resident operand {"handle": N}), the
 * header's "out" or a put's data (region references only). Called from gp_decode_server.c.
 */
#include "gp_decode_internal.h"

#include <stdio.h>
#include <string.h>

enum { REF_REGION, REF_OFFSET, REF_HANDLE, REF_KEYS };
static const char *const ref_keys[REF_KEYS] = {"region", "offset", "handle"};

static const char *ref_name(const gp_decoder *d) {
  if (d->ref_target == GP__REF_OUT)
    return "out";
  if (d->ref_target == GP__REF_PUT)
    return "data";
  return gp_operand_name((gp_operand)d->ref_target);
}

/* The one integer param's name and the params' form, for messages. */
static const char *param_name(const gp_decoder *d) {
  if (d->method == GP_METHOD_SHM_REGISTER)
    return "size";
  return d->method == GP_METHOD_FREE ? "handle" : "region";
}

gp__action gp__shm_params(gp_decoder *d, const gp__token *tok) {
  if (tok->type == GP__TOK_ARRAY && tok->len == 1)
    return (gp__action){GP__K_PARAMS_SHM, GP__BODY_NONE};
  char want[16];
  snprintf(want, sizeof want, "[%s]", param_name(d));
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
                param_name(d), gp__tok_words(tok));
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
  d->ref_handle = 0;
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
  else if (d->cur_key == REF_OFFSET)
    d->ref_offset = tok->u;
  else
    d->ref_handle = tok->u;
  return (gp__action){GP__K_SKIP, GP__BODY_SKIP};
}

void gp__shmref_key(gp_decoder *d) {
  gp__map_key(d, ref_keys, REF_KEYS, &d->ref_seen, ref_name(d),
              "a reference has region and offset, or handle");
}

/* A resident operand {"handle": N}: only for a gemm's a, b, c, and alone. */
static void handle_done(gp_decoder *d) {
  if (d->ref_seen & ((1u << REF_REGION) | (1u << REF_OFFSET))) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: a reference has region (and offset) or handle, "
                "not both", ref_name(d));
    return;
  }
  if (d->ref_target == GP__REF_OUT || d->ref_target == GP__REF_PUT) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: must be a region reference, not a handle",
                ref_name(d));
    return;
  }
  if (d->gemm.ld[d->ref_target] != 0) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: a leading dimension (ld%s) is only for an operand "
                "in a shared-memory region or CUDA memory, not a resident one", ref_name(d),
                ref_name(d));
    return;
  }
  gp_event *ev = gp__emit(d, GP_EV_OPERAND_REF);
  ev->operand = (gp_operand)d->ref_target;
  ev->by_handle = true;
  ev->handle = d->ref_handle;
}

void gp__shmref_done(gp_decoder *d) {
  if (d->ref_seen & (1u << REF_HANDLE)) {
    handle_done(d);
    return;
  }
  if (!(d->ref_seen & (1u << REF_REGION))) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "%s: missing region (or handle)", ref_name(d));
    return;
  }
  if (d->ref_target == GP__REF_OUT) {
    d->gemm.has_out = true;
    d->gemm.out_region = d->ref_region;
    d->gemm.out_offset = d->ref_offset;
    return;
  }
  /* With ldc, C is updated where it lies: c, when sent, is the result's own place (a copy of
   * a strided c into the result would carry c's bytes between the rows over the result's). */
  if (d->ref_target == GP_OPERAND_C && d->gemm.ld[GP_OPERAND_C] != 0 &&
      (d->ref_region != d->gemm.out_region || d->ref_offset != d->gemm.out_offset)) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "c: with ldc, c must be the result's own place (out: "
                "region %llu, offset %llu): C is updated in place",
                (unsigned long long)d->gemm.out_region, (unsigned long long)d->gemm.out_offset);
    return;
  }
  gp_event *ev = gp__emit(d, GP_EV_OPERAND_REF);
  ev->operand = d->ref_target == GP__REF_PUT ? GP_OPERAND_A : (gp_operand)d->ref_target;
  ev->region = d->ref_region;
  ev->offset = d->ref_offset;
}
