/*
 * gp_error.h - the one table of gemmd error codes.
 *
 * Every code has a wire name (gRPC's spelling, sent in the error map of a
 * reply), a human message (what strerror-style functions return) and a
 * negative value (what C functions return). All three come from the X-macro
 * below, so they cannot drift apart. 0 is success.
 */
#ifndef GP_ERROR_H
#define GP_ERROR_H

#include <stdarg.h>
#include <stddef.h>

/* X(suffix, value, message) */
#define GP_ERROR_MAP(X)                                                              \
  X(INVALID_ARGUMENT, -1, "invalid argument")                                        \
  X(RESOURCE_EXHAUSTED, -2, "resource exhausted")                                    \
  X(UNAVAILABLE, -3, "service unavailable")                                          \
  X(DEADLINE_EXCEEDED, -4, "deadline exceeded")                                      \
  X(CANCELLED, -5, "cancelled")                                                      \
  X(UNAUTHENTICATED, -6, "unauthenticated")                                          \
  X(NOT_FOUND, -7, "not found")                                                      \
  X(UNIMPLEMENTED, -8, "unimplemented")                                              \
  X(INTERNAL, -9, "internal error")

typedef enum {
  GP_OK = 0,
#define GP__ERRNO(name, value, msg) GP_E_##name = (value),
  GP_ERROR_MAP(GP__ERRNO)
#undef GP__ERRNO
} gp_code;

#define GP_ERROR_MESSAGE_MAX 256

/* An error as a value: a code and a message naming what was wrong. */
typedef struct {
  int code;                            /* GP_OK or a GP_E_* value */
  char message[GP_ERROR_MESSAGE_MAX];  /* NUL-terminated, "" when code is GP_OK */
} gp_error;

/* Wire name of a code ("INVALID_ARGUMENT"); "OK" for 0; "UNKNOWN" for anything else. */
const char *gp_code_name(int code);

/* Short human message for a code ("invalid argument"). Never NULL. */
const char *gp_strerror(int code);

/* Code for a wire name of len bytes (not NUL-terminated). Unknown names map to GP_E_INTERNAL
 * (a peer speaking a newer protocol), never to GP_OK. */
int gp_code_from_name(const char *name, size_t len);

/* Sets err->code and formats err->message (truncated to fit). Returns code, so a function can
 * `return gp_error_set(err, GP_E_INVALID_ARGUMENT, "m must be >= 1");`. err may be NULL. */
int gp_error_set(gp_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int gp_error_vset(gp_error *err, int code, const char *fmt, va_list ap);

/* Resets err to GP_OK with an empty message. */
void gp_error_clear(gp_error *err);

#endif /* GP_ERROR_H */
