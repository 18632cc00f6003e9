/*
 * gd_listener.c - see gd_listener.h.
 *
 * libuv's accept path keeps a spare file descriptor for EMFILE (it closes
 * its reserve fd, accepts and closes the pending connections, reopens the
 * reserve), so a daemon out of descriptors sheds connections instead of
 * spinning on a readable listener, but it reports that to us only sometimes.
 * So gd_sessions_accept drops a connection before the descriptors run out
 * (limits.reserved_fds), counted and logged; an accept error libuv does
 * report is counted and logged the same way.
 */
#include "gd_listener.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "gd_auth.h"
#include "gd_clock.h"
#include "gd_log.h"
#include "gd_sessions.h"
#include "gd_uv_stream.h"

#define LISTEN_BACKLOG 511
#define LISTENERS_MAX 64

typedef struct {
  gd_uv_stream h;
  gd_listeners *set;
  char name[GP_ADDR_TEXT_MAX];
  char unlink_path[GP_ADDR_PATH_MAX]; /* socket file we created, removed on close */
  uint64_t last_error_log_us;
} listener;

struct gd_listeners {
  gd_server *d;
  listener items[LISTENERS_MAX];
  size_t count;
  size_t open_handles;
  bool closing;
};

/* Every failure to listen is UNAVAILABLE: the daemon cannot serve where it was asked to. */
static int fail(gp_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(gp_error *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int code = gp_error_vset(err, GP_E_UNAVAILABLE, fmt, ap);
  va_end(ap);
  return code;
}

static void on_connection(uv_stream_t *server, int status) {
  listener *l = server->data;
  gd_server *d = l->set->d;
  if (status == UV_EMFILE || status == UV_ENFILE) {
    gd_sessions_note_dropped(d, l->name); /* libuv shed the connection already */
    return;
  }
  if (status < 0) {
    uint64_t now = gd_now_us();
    if (now - l->last_error_log_us > 1000000u) {
      gd_warn("%s: accept failed: %s", l->name, uv_strerror(status));
      l->last_error_log_us = now;
    }
    return;
  }
  gp_error err;
  if (gd_sessions_accept(d, server, &err) != 0)
    gd_warn("%s: accept failed: %s", l->name, err.message);
}

static void on_listener_closed(uv_handle_t *handle) {
  listener *l = handle->data;
  gd_listeners *set = l->set;
  if (--set->open_handles == 0 && set->closing)
    free(set);
}

/* ---- unix ---------------------------------------------------------------- */

/* A socket file left by a dead daemon is removed; one a live daemon answers on is not. */
static int clear_stale_socket(const char *path, gp_error *err) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return errno == ENOENT ? 0 : fail(err, "unix:%s: %s", path, strerror(errno));
  if (!S_ISSOCK(st.st_mode))
    return fail(err, "unix:%s: exists and is not a socket; not replacing it", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return fail(err, "socket(): %s", strerror(errno));
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
  int saved = errno;
  close(fd);
  if (rc == 0)
    return fail(err, "unix:%s: another daemon is listening there", path);
  if (saved != ECONNREFUSED)
    return fail(err, "unix:%s: exists and cannot be checked (%s); not replacing it", path,
                strerror(saved));
  if (unlink(path) != 0 && errno != ENOENT)
    return fail(err, "unix:%s: cannot remove the stale socket: %s", path, strerror(errno));
  gd_info("unix:%s: removed a stale socket", path);
  return 0;
}

/* Binds under the umask that leaves exactly mode, so the file never exists with other
 * permissions and no chmod through the path (which could meanwhile be a symlink) is needed.
 * Start-up only: the umask is the process's. */
static int bind_with_mode(listener *l, const char *path, unsigned mode) {
  mode_t old = umask((mode_t)(~mode & 0777));
  int rc = uv_pipe_bind(&l->h.pipe, path);
  umask(old);
  return rc;
}

/* unix_socket_group: changes the path's own inode, never a symlink's target, and checks that
 * the path is still our socket. */
static int set_socket_group(listener *l, const char *path, long gid, gp_error *err) {
  if (gid < 0)
    return 0;
  if (fchownat(AT_FDCWD, path, (uid_t)-1, (gid_t)gid, AT_SYMLINK_NOFOLLOW) != 0)
    return fail(err, "%s: unix_socket_group: cannot give the socket group %ld: %s",
                l->name, gid, strerror(errno));
  struct stat st;
  if (lstat(path, &st) != 0 || !S_ISSOCK(st.st_mode))
    return fail(err, "%s: the socket file was replaced while being set up", l->name);
  return 0;
}

static int open_unix(gd_server *d, listener *l, const gp_addr *addr, gp_error *err) {
  int rc = clear_stale_socket(addr->path, err);
  if (rc != 0)
    return rc;
  rc = uv_pipe_init(d->loop, &l->h.pipe, 0);
  if (rc != 0)
    return fail(err, "%s: %s", l->name, uv_strerror(rc));
  l->set->open_handles++;
  rc = bind_with_mode(l, addr->path, d->limits.unix_socket_mode);
  if (rc != 0)
    return fail(err, "%s: bind: %s", l->name, uv_strerror(rc));
  snprintf(l->unlink_path, sizeof l->unlink_path, "%s", addr->path);
  return set_socket_group(l, addr->path, d->unix_socket_gid, err);
}

/* ---- tcp ----------------------------------------------------------------- */

static int open_tcp(gd_server *d, listener *l, const gp_addr *addr, gp_error *err) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = addr->ipv6_literal ? AF_INET6 : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  char port[8];
  snprintf(port, sizeof port, "%u", (unsigned)addr->port);
  /* Start-up only, before the loop runs: a blocking lookup is fine here. */
  int rc = getaddrinfo(addr->host, port, &hints, &res);
  if (rc != 0)
    return fail(err, "%s: %s", l->name, gai_strerror(rc));
  rc = uv_tcp_init(d->loop, &l->h.tcp);
  if (rc != 0) {
    freeaddrinfo(res);
    return fail(err, "%s: %s", l->name, uv_strerror(rc));
  }
  l->set->open_handles++;
  /* An IPv6 address means IPv6 only: tcp:[::]:P does not also take IPv4. */
  unsigned flags = res->ai_family == AF_INET6 ? UV_TCP_IPV6ONLY : 0;
  rc = uv_tcp_bind(&l->h.tcp, res->ai_addr, flags);
  freeaddrinfo(res);
  if (rc != 0)
    return fail(err, "%s: bind: %s", l->name, uv_strerror(rc));
  return 0;
}

/* ---- systemd ------------------------------------------------------------- */

int gd_listeners_systemd_count(void) {
  int n = sd_listen_fds(0);
  return n > 0 ? n : 0;
}

/* A TCP socket from systemd is held to the rule of the config's listen addresses: reachable
 * from other machines only with a token or on purpose (gd_auth.h). */
static int check_adopted_tcp(const gd_server *d, int fd, gp_error *err) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
    return fail(err, "systemd fd %d: getsockname: %s", fd, strerror(errno));
  if (!d->exposed_tcp_ok && gd_auth_exposed_sockaddr(&ss))
    return fail(err, "systemd fd %d: a TCP socket other machines can reach needs "
                "auth.token_file (or auth.allow_unauthenticated_tcp: true)", fd);
  return 0;
}

static int adopt_fd(gd_server *d, listener *l, int fd, gp_error *err) {
  int rc;
  if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) > 0) {
    snprintf(l->name, sizeof l->name, "systemd fd %d (unix)", fd);
    rc = uv_pipe_init(d->loop, &l->h.pipe, 0);
    if (rc == 0) {
      l->set->open_handles++;
      rc = uv_pipe_open(&l->h.pipe, fd);
    }
  } else if (sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 1) > 0) {
    rc = check_adopted_tcp(d, fd, err);
    if (rc != 0)
      return rc;
    snprintf(l->name, sizeof l->name, "systemd fd %d (tcp)", fd);
    rc = uv_tcp_init(d->loop, &l->h.tcp);
    if (rc == 0) {
      l->set->open_handles++;
      rc = uv_tcp_open(&l->h.tcp, fd);
    }
  } else {
    return fail(err, "systemd fd %d is not a listening stream socket", fd);
  }
  if (rc != 0)
    return fail(err, "%s: %s", l->name, uv_strerror(rc));
  return 0;
}

/* ---- the set ------------------------------------------------------------- */

static int start_listening(listener *l, gp_error *err) {
  l->h.handle.data = l;
  int rc = uv_listen(&l->h.stream, LISTEN_BACKLOG, on_connection);
  if (rc != 0)
    return fail(err, "%s: listen: %s", l->name, uv_strerror(rc));
  gd_info("listening on %s", l->name);
  return 0;
}

static listener *next_slot(gd_listeners *set, gp_error *err) {
  if (set->count == LISTENERS_MAX) {
    fail(err, "more than %d listeners", LISTENERS_MAX);
    return NULL;
  }
  listener *l = &set->items[set->count++];
  l->set = set;
  l->h.handle.data = l;
  return l;
}

/* A TCP listener whose bound address other machines can reach is noted (gd_server.h): a
 * reload may not take the token away from it, whether the config or systemd gave it. */
static void note_exposed(gd_server *d, listener *l) {
  struct sockaddr_storage ss;
  int len = (int)sizeof ss;
  if (l->h.handle.type != UV_TCP)
    return;
  if (uv_tcp_getsockname(&l->h.tcp, (struct sockaddr *)&ss, &len) != 0 ||
      gd_auth_exposed_sockaddr(&ss))
    d->exposed_tcp_held = true; /* unknown counts as exposed */
}

static int open_all(gd_listeners *set, const gp_addr *addrs, size_t count, bool adopt_systemd,
                    gp_error *err) {
  gd_server *d = set->d;
  int fds = adopt_systemd ? sd_listen_fds(1) : 0;
  if (fds < 0)
    return fail(err, "sd_listen_fds: %s", strerror(-fds));
  for (int i = 0; i < fds; i++) {
    listener *l = next_slot(set, err);
    if (!l)
      return GP_E_UNAVAILABLE;
    int rc = adopt_fd(d, l, SD_LISTEN_FDS_START + i, err);
    if (rc != 0 || (rc = start_listening(l, err)) != 0)
      return rc;
    note_exposed(d, l);
  }
  for (size_t i = 0; i < count; i++) {
    listener *l = next_slot(set, err);
    if (!l)
      return GP_E_UNAVAILABLE;
    gp_addr_format(&addrs[i], l->name, sizeof l->name);
    int rc = addrs[i].kind == GP_ADDR_UNIX ? open_unix(d, l, &addrs[i], err)
                                           : open_tcp(d, l, &addrs[i], err);
    if (rc != 0 || (rc = start_listening(l, err)) != 0)
      return rc;
    note_exposed(d, l);
  }
  if (set->count == 0)
    return fail(err, "nothing to listen on: give --listen or a listen: list");
  return 0;
}

int gd_listeners_open(gd_server *d, const gp_addr *addrs, size_t count, bool adopt_systemd,
                      gd_listeners **out, gp_error *err) {
  gd_listeners *set = calloc(1, sizeof *set);
  if (!set)
    return fail(err, "out of memory");
  set->d = d;
  int rc = open_all(set, addrs, count, adopt_systemd, err);
  if (rc != 0) {
    gd_listeners_close(set);
    return rc;
  }
  *out = set;
  return 0;
}

void gd_listeners_close(gd_listeners *set) {
  if (!set || set->closing)
    return;
  set->closing = true;
  for (size_t i = 0; i < set->count; i++) {
    listener *l = &set->items[i];
    if (l->unlink_path[0] && unlink(l->unlink_path) != 0 && errno != ENOENT)
      gd_warn("%s: cannot remove the socket file: %s", l->name, strerror(errno));
    if (l->h.handle.type != UV_UNKNOWN_HANDLE && !uv_is_closing(&l->h.handle)) {
      l->h.handle.data = l;
      uv_close(&l->h.handle, on_listener_closed);
    }
  }
  if (set->open_handles == 0)
    free(set);
}
