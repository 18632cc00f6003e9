/*
 * gp_error.c - names and messages of the error codes, from the one table in
 * gp_error.h, and the error-as-value helpers.
 */
#include "gp_error.h"

#include <stdio.h>
#include <string.h>

const char *gp_code_name(int code) {
  switch (code) {
  case GP_OK:
    return "OK";
#define GP__NAME(name, value, msg) \
  case GP_E_##name:                \
    return #name;
    GP_ERROR_MAP(GP__NAME)
#undef GP__NAME
  default:
    return "UNKNOWN";
  }
}

const char *gp_strerror(int code) {
  switch (code) {
  case GP_OK:
    return "success";
#define GP__MSG(name, value, msg) \
  case GP_E_##name:               \
    return msg;
    GP_ERROR_MAP(GP__MSG)
#undef GP__MSG
  default:
    return "unknown error";
  }
}

int gp_code_from_name(const char *name, size_t len) {
  if (name == NULL)
    return GP_E_INTERNAL;
#define GP__FROM(sym, value, msg)                                 \
  if (len == sizeof(#sym) - 1 && memcmp(name, #sym, len) == 0) \
    return GP_E_##sym;
  GP_ERROR_MAP(GP__FROM)
#undef GP__FROM
  /* "OK" on the wire in an error map is a peer bug; a code newer than us is
   * still an error. Neither may become success. */
  return GP_E_INTERNAL;
}

int gp_error_vset(gp_error *err, int code, const char *fmt, va_list ap) {
  if (err == NULL)
    return code;
  err->code = code;
  if (fmt == NULL) {
    err->message[0] = '\0';
    return code;
  }
  int n = vsnprintf(err->message, sizeof err->message, fmt, ap);
  if (n < 0)
    err->message[0] = '\0'; /* an encoding error: keep the code, lose the text */
  return code;
}

int gp_error_set(gp_error *err, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  gp_error_vset(err, code, fmt, ap);
  va_end(ap);
  return code;
}

void gp_error_clear(gp_error *err) {
  if (err == NULL)
    return;
  err->code = GP_OK;
  err->message[0] = '\0';
}
