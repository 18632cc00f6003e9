/*
 * gc_addr.c - the daemon's address forms (DESIGN.md): "unix:PATH",
 * "tcp:HOST:PORT", "tcp:[IPV6]:PORT"; and connecting a socket to one.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gc_internal.h"

static int parse_port(const char *text, char out[8], gc_error *err) {
  size_t len = strlen(text);
  if (len == 0 || len > 5 || strspn(text, "0123456789") != len)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "port \"%s\" is not a number 1..65535", text);
  long port = strtol(text, NULL, 10);
  if (port < 1 || port > 65535)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "port %ld is out of range 1..65535", port);
  snprintf(out, 8, "%ld", port);
  return 0;
}

static int parse_tcp(const char *rest, gc__addr *out, gc_error *err) {
  const char *host = rest;
  size_t host_len;
  const char *port;
  if (rest[0] == '[') { /* [v6]:port */
    const char *close = strchr(rest, ']');
    if (close == NULL || close[1] != ':')
      return gc__error_set(err, GC_E_INVALID_ARGUMENT,
                           "\"tcp:%s\": expected tcp:[IPV6]:PORT", rest);
    host = rest + 1;
    host_len = (size_t)(close - host);
    port = close + 2;
  } else {
    const char *colon = strrchr(rest, ':');
    if (colon == NULL)
      return gc__error_set(err, GC_E_INVALID_ARGUMENT, "\"tcp:%s\": expected tcp:HOST:PORT",
                           rest);
    host_len = (size_t)(colon - rest);
    if (memchr(rest, ':', host_len) != NULL)
      return gc__error_set(err, GC_E_INVALID_ARGUMENT,
                           "\"tcp:%s\": an IPv6 address goes in brackets: tcp:[::1]:PORT", rest);
    port = colon + 1;
  }
  if (host_len == 0) return gc__error_set(err, GC_E_INVALID_ARGUMENT, "\"tcp:%s\": empty host", rest);
  if (host_len >= sizeof out->host)
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "host name longer than %zu bytes",
                         sizeof out->host - 1);
  memcpy(out->host, host, host_len);
  out->host[host_len] = '\0';
  return parse_port(port, out->port, err);
}

int gc__addr_parse(const char *text, gc__addr *out, gc_error *err) {
  memset(out, 0, sizeof *out);
  if (text == NULL || text[0] == '\0')
    return gc__error_set(err, GC_E_INVALID_ARGUMENT, "empty address");
  if (strncmp(text, "unix:", 5) == 0) {
    const char *path = text + 5;
    size_t len = strlen(path);
    if (len == 0) return gc__error_set(err, GC_E_INVALID_ARGUMENT, "\"%s\": empty socket path", text);
    if (len >= sizeof out->path)
      return gc__error_set(err, GC_E_INVALID_ARGUMENT,
                           "socket path is %zu bytes; a Unix socket path holds at most %zu", len,
                           sizeof out->path - 1);
    out->kind = GC__ADDR_UNIX;
    memcpy(out->path, path, len + 1);
    return 0;
  }
  if (strncmp(text, "tcp:", 4) == 0) {
    out->kind = GC__ADDR_TCP;
    return parse_tcp(text + 4, out, err);
  }
  return gc__error_set(err, GC_E_INVALID_ARGUMENT,
                       "\"%s\": an address is unix:PATH, tcp:HOST:PORT or tcp:[IPV6]:PORT", text);
}

/* Finishes a non-blocking connect: waits for writability, then reads SO_ERROR. */
static int finish_connect(int fd, int timeout_ms, int *error) {
  struct pollfd pfd = {.fd = fd, .events = POLLOUT};
  int ready;
  do {
    ready = poll(&pfd, 1, timeout_ms);
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) {
    *error = ETIMEDOUT;
    return -1;
  }
  if (ready < 0) {
    *error = errno;
    return -1;
  }
  socklen_t len = sizeof *error;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, error, &len) != 0) *error = errno;
  return *error == 0 ? 0 : -1;
}

/* One attempt: returns the connected fd or -1 with *error set. */
static int connect_one(int family, const struct sockaddr *sa, socklen_t salen, int timeout_ms,
                       int *error) {
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = errno;
    return -1;
  }
  int rc = connect(fd, sa, salen);
  /* EINPROGRESS: TCP handshake under way. (EAGAIN from a Unix socket means the daemon's
   * backlog is full: the socket is not connecting, so that is a failure.) */
  if (rc != 0 && errno == EINPROGRESS)
    rc = finish_connect(fd, timeout_ms, error);
  else if (rc != 0)
    *error = errno;
  if (rc != 0) {
    close(fd);
    return -1;
  }
  if (family != AF_UNIX) {
    /* Requests are written in one go and replies awaited: Nagle would only add delay. */
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

static int code_for_errno(int error) {
  if (error == ETIMEDOUT) return GC_E_DEADLINE_EXCEEDED;
  if (error == EMFILE || error == ENFILE || error == ENOMEM || error == ENOBUFS)
    return GC_E_RESOURCE_EXHAUSTED;
  return GC_E_UNAVAILABLE;
}

static int connect_unix(const gc__addr *addr, int timeout_ms, gc_error *err) {
  struct sockaddr_un sun;
  memset(&sun, 0, sizeof sun);
  sun.sun_family = AF_UNIX;
  memcpy(sun.sun_path, addr->path, strlen(addr->path) + 1);
  int error = 0;
  int fd = connect_one(AF_UNIX, (const struct sockaddr *)&sun, sizeof sun, timeout_ms, &error);
  if (fd < 0)
    return gc__error_set(err, code_for_errno(error), "connect unix:%s: %s", addr->path,
                         strerror(error));
  return fd;
}

static int connect_tcp(const gc__addr *addr, int timeout_ms, gc_error *err) {
  struct addrinfo hints, *list = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  /* no AI_ADDRCONFIG: it hides ::1 on hosts whose only IPv6 address is the loopback */
  hints.ai_flags = AI_NUMERICSERV;
  int gai = getaddrinfo(addr->host, addr->port, &hints, &list);
  if (gai != 0)
    return gc__error_set(err, gai == EAI_MEMORY ? GC_E_RESOURCE_EXHAUSTED : GC_E_UNAVAILABLE,
                         "resolve %s: %s", addr->host, gai_strerror(gai));
  int fd = -1, error = ENOENT;
  for (struct addrinfo *ai = list; ai != NULL && fd < 0; ai = ai->ai_next)
    fd = connect_one(ai->ai_family, ai->ai_addr, ai->ai_addrlen, timeout_ms, &error);
  freeaddrinfo(list);
  if (fd < 0)
    return gc__error_set(err, code_for_errno(error), "connect tcp:%s:%s: %s", addr->host,
                         addr->port, strerror(error));
  return fd;
}

int gc__addr_connect(const gc__addr *addr, int timeout_ms, gc_error *err) {
  return addr->kind == GC__ADDR_UNIX ? connect_unix(addr, timeout_ms, err)
                                     : connect_tcp(addr, timeout_ms, err);
}
