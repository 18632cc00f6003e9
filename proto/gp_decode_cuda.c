/*
 * gp_decode_cuda.c - the server grammar's cuda_register params:
 * [{"handle": bin 64, "pci_bus_id": str, "bytes": N, "device": ordinal}] ("device" optional).
 * Only the form is checked here (types, the handle's length, the bus id's length, required
 * keys); the daemon checks the rest. Called from gp_decode_server.c.
 */
#include "gp_decode_internal.h"

#include <string.h>

enum { CK_HANDLE, CK_BUS, CK_BYTES, CK_DEVICE, CK_COUNT };
static const char *const cuda_keys[CK_COUNT] = {"handle", "pci_bus_id", "bytes", "device"};

static const gp__action COLLECT = {GP__K_SKIP, GP__BODY_COLLECT};
static const gp__action NOTHING = {GP__K_SKIP, GP__BODY_SKIP};

static gp__action reject_value(gp_decoder *d, const gp__token *tok, const char *expected) {
  gp__rejectf(d, GP_E_INVALID_ARGUMENT, "cuda_register: %s: must be %s, got %s",
              cuda_keys[d->cur_key], expected, gp__tok_words(tok));
  return gp__skip_action(GP__K_CUDAREG, tok);
}

gp__action gp__cuda_params(gp_decoder *d, const gp__token *tok) {
  if (tok->type == GP__TOK_ARRAY && tok->len == 1)
    return (gp__action){GP__K_PARAMS_CUDA, GP__BODY_NONE};
  gp__rejectf(d, GP_E_INVALID_ARGUMENT,
              "params: cuda_register takes [{\"handle\", \"pci_bus_id\", \"bytes\"}], got %s",
              gp__tok_words(tok));
  return gp__skip_action(GP__K_ENVELOPE, tok);
}

gp__action gp__cuda_param(gp_decoder *d, const gp__token *tok) {
  if (tok->type != GP__TOK_MAP) {
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "cuda_register: params[0] must be a map, got %s",
                gp__tok_words(tok));
    return gp__skip_action(GP__K_PARAMS_CUDA, tok);
  }
  memset(&d->cuda, 0, sizeof d->cuda);
  d->cuda.device = -1;
  d->cuda_seen = 0;
  d->cur_key = -1;
  return (gp__action){GP__K_CUDAREG, GP__BODY_NONE};
}

gp__action gp__cuda_element(gp_decoder *d, const gp__frame *f, const gp__token *tok) {
  if (f->index % 2 == 0) {
    if (tok->type == GP__TOK_STR)
      return COLLECT;
    gp__rejectf(d, GP_E_INVALID_ARGUMENT, "cuda_register: a key must be a str, got %s",
                gp__tok_words(tok));
    return gp__skip_action(GP__K_CUDAREG, tok);
  }
  switch (d->cur_key) {
  case CK_HANDLE:
    if (tok->type != GP__TOK_BIN)
      return reject_value(d, tok, "a bin (cudaIpcMemHandle_t)");
    if (tok->len != GP_CUDA_IPC_HANDLE_BYTES) {
      gp__rejectf(d, GP_E_INVALID_ARGUMENT, "cuda_register: handle: must be %d bytes, got %u",
                  GP_CUDA_IPC_HANDLE_BYTES, tok->len);
      return gp__skip_action(GP__K_CUDAREG, tok);
    }
    return COLLECT;
  case CK_BUS:
    if (tok->type != GP__TOK_STR)
      return reject_value(d, tok, "a str (cudaDeviceGetPCIBusId)");
    if (tok->len == 0 || tok->len >= GP_CUDA_BUS_ID_MAX) {
      gp__rejectf(d, GP_E_INVALID_ARGUMENT, "cuda_register: pci_bus_id: must be 1..%d bytes, "
                  "got %u", GP_CUDA_BUS_ID_MAX - 1, tok->len);
      return gp__skip_action(GP__K_CUDAREG, tok);
    }
    return COLLECT;
  case CK_BYTES:
    if (tok->type != GP__TOK_INT || tok->neg)
      return reject_value(d, tok, "a non-negative integer");
    d->cuda.bytes = tok->u;
    return NOTHING;
  default: /* CK_DEVICE: what the client calls it; the bus id decides */
    if (tok->type != GP__TOK_INT)
      return reject_value(d, tok, "an integer");
    d->cuda.device = tok->neg ? tok->i : (int64_t)(tok->u > INT32_MAX ? INT32_MAX : tok->u);
    return NOTHING;
  }
}

static void key_read(gp_decoder *d) {
  for (int i = 0; i < CK_COUNT; i++) {
    if (d->str_len == strlen(cuda_keys[i]) && memcmp(d->str, cuda_keys[i], d->str_len) == 0) {
      if (d->cuda_seen & (1u << i)) {
        gp__rejectf(d, GP_E_INVALID_ARGUMENT, "cuda_register: duplicate key \"%s\"",
                    cuda_keys[i]);
        return;
      }
      d->cuda_seen |= 1u << i;
      d->cur_key = i;
      return;
    }
  }
  char name[64];
  gp__printable(name, sizeof name, d->str, d->str_len);
  gp__rejectf(d, GP_E_INVALID_ARGUMENT, "cuda_register: unknown key \"%s\"", name);
}

void gp__cuda_string(gp_decoder *d, const gp__frame *f) {
  if (f->index % 2 == 0) {
    key_read(d);
    return;
  }
  /* the lengths were checked when the value started */
  if (d->cur_key == CK_HANDLE && d->str_len == GP_CUDA_IPC_HANDLE_BYTES) {
    memcpy(d->cuda.handle, d->str, GP_CUDA_IPC_HANDLE_BYTES);
  } else if (d->cur_key == CK_BUS && d->str_len < GP_CUDA_BUS_ID_MAX) {
    memcpy(d->cuda.pci_bus_id, d->str, d->str_len);
    d->cuda.pci_bus_id[d->str_len] = '\0';
  }
}

void gp__cuda_done(gp_decoder *d) {
  for (int i = CK_HANDLE; i <= CK_BYTES; i++) {
    if (!(d->cuda_seen & (1u << i))) {
      gp__rejectf(d, GP_E_INVALID_ARGUMENT, "cuda_register: missing \"%s\"", cuda_keys[i]);
      return;
    }
  }
}
