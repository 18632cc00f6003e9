/*
 * gc_error.c - the client's error codes and messages: the same table as the
 * daemon's (proto/gp_error.h), re-exported under the gc_ prefix because the
 * proto headers are not installed.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gc_internal.h"

/* The public GC_E_* values must be the wire table's values. */
#define GC__SAME(name, value, msg) \
  _Static_assert(GC_E_##name == GP_E_##name, "GC_E_" #name " must equal GP_E_" #name);
GP_ERROR_MAP(GC__SAME)
#undef GC__SAME
_Static_assert(GC_ERROR_MESSAGE_MAX == GP_ERROR_MESSAGE_MAX, "gc_error and gp_error messages differ");

const char *gc_strerror(int code) { return gp_strerror(code); }

const char *gc_code_name(int code) { return gp_code_name(code); }

unsigned gc_version(void) { return GC_VERSION_NUM; }

int gc__error_set(gc_error *err, int code, const char *fmt, ...) {
  if (err == NULL) return code;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
  return code;
}

void gc__error_clear(gc_error *err) {
  err->code = GC_OK;
  err->message[0] = '\0';
}

gc_error *gc__thread_error(void) {
  static _Thread_local gc_error thread_error;
  return &thread_error;
}

const gc_error *gc_last_error(const gc_conn *conn) {
  return conn != NULL ? &conn->last_error : gc__thread_error();
}

int gc__conn_fail(gc_conn *conn, const gc_error *err) {
  conn->last_error = *err;
  return err->code;
}

int gc__conn_failf(gc_conn *conn, int code, const char *fmt, ...) {
  conn->last_error.code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(conn->last_error.message, sizeof conn->last_error.message, fmt, ap);
  va_end(ap);
  return code;
}
