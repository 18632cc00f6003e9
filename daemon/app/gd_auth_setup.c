/*
 * gd_auth_setup.c - see gd_auth_setup.h.
 */
#include "gd_auth_setup.h"

#include "gd_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads at most cap bytes of fd into buf; -1 on a read error. */
static ssize_t read_upto(int fd, uint8_t *buf, size_t cap) {
  size_t got = 0;
  while (got < cap) {
    ssize_t n = read(fd, buf + got, cap - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    if (n == 0)
      break;
    got += (size_t)n;
  }
  return (ssize_t)got;
}

/* The file's mode and kind, checked on the open descriptor (no race with a rename). */
static int check_file(int fd, const char *path, gp_error *err) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "auth.token_file %s: %s", path,
                        strerror(errno));
  if (!S_ISREG(st.st_mode))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "auth.token_file %s: not a regular file",
                        path);
  if (st.st_mode & (S_IRGRP | S_IROTH))
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "auth.token_file %s: mode %04o lets its "
                        "group or others read the token; chmod 0600 it", path,
                        (unsigned)(st.st_mode & 07777));
  return 0;
}

int gd_auth_load_token(const gd_config *cfg, gd_auth_token *out, gp_error *err) {
  const char *path = cfg->auth_token_file;
  out->len = 0;
  if (path[0] == '\0')
    return 0;
  /* O_NONBLOCK: a FIFO there must not freeze the loop until someone writes to it (it is then
   * refused as not a regular file) */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "auth.token_file %s: %s", path,
                        strerror(errno));
  uint8_t buf[GP_AUTH_TOKEN_MAX + 2]; /* a token of the largest size, its newline, one more */
  int rc = check_file(fd, path, err);
  ssize_t n = rc == 0 ? read_upto(fd, buf, sizeof buf) : 0;
  int saved = errno;
  close(fd);
  if (rc != 0)
    return rc;
  if (n < 0)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "auth.token_file %s: %s", path,
                        strerror(saved));
  size_t len = (size_t)n;
  if (len > 0 && buf[len - 1] == '\n')
    len--;
  if (len == 0 || len > GP_AUTH_TOKEN_MAX)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "auth.token_file %s: the token must be "
                        "1..%d bytes (one trailing newline is not counted), got %s", path,
                        GP_AUTH_TOKEN_MAX, len == 0 ? "none" : "more");
  memcpy(out->bytes, buf, len);
  out->len = len;
  return 0;
}

bool gd_auth_exposed(const gp_addr *addr) {
  return addr->kind == GP_ADDR_TCP && gd_auth_exposed_host(addr->host);
}

const char *gd_auth_first_exposed(const gd_config *cfg) {
  for (size_t i = 0; i < cfg->listen_count; i++) {
    gp_addr addr;
    if (gp_addr_parse(cfg->listen[i], GP_ADDR_LISTEN, &addr, NULL) == 0 &&
        gd_auth_exposed(&addr))
      return cfg->listen[i];
  }
  return NULL;
}

int gd_auth_check(const gd_config *cfg, gd_auth_token *token, gp_error *err) {
  gd_auth_token scratch;
  gd_auth_token *t = token ? token : &scratch;
  int rc = gd_auth_load_token(cfg, t, err);
  if (rc != 0)
    return rc;
  const char *exposed = gd_auth_first_exposed(cfg);
  if (exposed && t->len == 0 && !cfg->allow_unauthenticated_tcp)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "listen %s: a TCP address other machines "
                        "can reach needs auth.token_file (or auth.allow_unauthenticated_tcp: "
                        "true, to run without one on purpose)", exposed);
  return 0;
}

int gd_auth_check_held(const gd_config *cfg, const gd_auth_token *token, bool exposed_held,
                       gp_error *err) {
  if (!exposed_held || token->len > 0 || cfg->allow_unauthenticated_tcp)
    return 0;
  return gp_error_set(err, GP_E_INVALID_ARGUMENT, "gemmd holds a TCP socket other machines can "
                      "reach: it keeps needing auth.token_file (or "
                      "auth.allow_unauthenticated_tcp: true)");
}
