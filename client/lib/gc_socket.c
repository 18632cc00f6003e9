/*
 * gc_socket.c - connecting a socket to a parsed address (gp_addr.h): unix:PATH directly,
 * tcp:HOST:PORT through getaddrinfo, trying each result in turn, each within the timeout.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "gc_internal.h"

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

static int connect_unix(const gp_addr *addr, int timeout_ms, gc_error *err) {
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

static int connect_tcp(const gp_addr *addr, int timeout_ms, gc_error *err) {
  struct addrinfo hints, *list = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  /* no AI_ADDRCONFIG: it hides ::1 on hosts whose only IPv6 address is the loopback */
  hints.ai_flags = AI_NUMERICSERV;
  char port[8];
  snprintf(port, sizeof port, "%u", (unsigned)addr->port);
  int gai = getaddrinfo(addr->host, port, &hints, &list);
  if (gai != 0)
    return gc__error_set(err, gai == EAI_MEMORY ? GC_E_RESOURCE_EXHAUSTED : GC_E_UNAVAILABLE,
                         "resolve %s: %s", addr->host, gai_strerror(gai));
  int fd = -1, error = ENOENT;
  char text[GP_ADDR_TEXT_MAX];
  for (struct addrinfo *ai = list; ai != NULL && fd < 0; ai = ai->ai_next)
    fd = connect_one(ai->ai_family, ai->ai_addr, ai->ai_addrlen, timeout_ms, &error);
  freeaddrinfo(list);
  if (fd < 0)
    return gc__error_set(err, code_for_errno(error), "connect %s: %s",
                         gp_addr_format(addr, text, sizeof text), strerror(error));
  return fd;
}

int gc__socket_connect(const gp_addr *addr, int timeout_ms, gc_error *err) {
  return addr->kind == GP_ADDR_UNIX ? connect_unix(addr, timeout_ms, err)
                                     : connect_tcp(addr, timeout_ms, err);
}
