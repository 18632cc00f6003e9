/*
 * gc_token.c - where the TCP token comes from: the connect options, $GEMMD_TOKEN, or a file
 * ($GEMMD_TOKEN_FILE or gc_connect_opts.token_file) read whole, its trailing newline dropped.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gc_internal.h"

static int copy_token(const char *text, size_t len, char **out, gc_error *err) {
  if (len > GC__TOKEN_MAX)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "token: longer than %d bytes",
                         GC__TOKEN_MAX);
  char *copy = malloc(len + 1);
  if (copy == NULL) return gc__error_set(err, GC_E_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(copy, text, len);
  copy[len] = '\0';
  *out = copy;
  return 0;
}

/* Reads at most cap bytes of path into buf; the count, or -1 (errno set). */
static ssize_t read_small_file(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t have = 0;
  while (have < cap) {
    ssize_t got = read(fd, buf + have, cap - have);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int saved = errno;
      close(fd);
      errno = saved;
      return -1;
    }
    if (got == 0) break;
    have += (size_t)got;
  }
  close(fd);
  return (ssize_t)have;
}

/* source names where the path came from in messages ("" or "GEMMD_TOKEN_FILE: "). */
static int token_from_file(const char *path, const char *source, char **out, gc_error *err) {
  char buf[GC__TOKEN_MAX + 2];
  ssize_t len = read_small_file(path, buf, GC__TOKEN_MAX + 2);
  if (len < 0)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "%stoken file %s: %s", source, path,
                         strerror(errno));
  /* one trailing newline is not part of the token (as the daemon reads auth.token_file) */
  if (len > 0 && buf[len - 1] == '\n') len--;
  if (len > GC__TOKEN_MAX)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "%stoken file %s: longer than %d bytes",
                         source, path, GC__TOKEN_MAX);
  if (len == 0)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "%stoken file %s is empty", source, path);
  if (memchr(buf, '\0', (size_t)len) != NULL) /* the token travels as a C string */
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "%stoken file %s holds a NUL byte", source,
                         path);
  return copy_token(buf, (size_t)len, out, err);
}

static const char *env_nonempty(const char *name) {
  const char *value = getenv(name);
  return value != NULL && value[0] != '\0' ? value : NULL;
}

int gc__token_resolve(const char *token, const char *token_file, char **out, gc_error *err) {
  *out = NULL;
  if (token != NULL) return token[0] == '\0' ? 0 : copy_token(token, strlen(token), out, err);
  if (token_file != NULL) return token_from_file(token_file, "", out, err);
  const char *env = env_nonempty("GEMMD_TOKEN");
  if (env != NULL) return copy_token(env, strlen(env), out, err);
  env = env_nonempty("GEMMD_TOKEN_FILE");
  if (env != NULL) return token_from_file(env, "GEMMD_TOKEN_FILE: ", out, err);
  return 0;
}
