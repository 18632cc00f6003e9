/*
 * gd_ops_http.c - see gd_ops_http.h. HTTP is libmicrohttpd's (Debian's
 * libmicrohttpd12); this file only routes three paths.
 */
#include "gd_ops_http.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <uv.h>

#include "gd_auth.h"
#include "gd_daemon.h"
#include "gd_log.h"
#include "gd_metrics.h"
#include "gd_ops_guard.h"
#include "gp_addr.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct gd_ops_http {
  gd_daemon *d;                 /* loop thread only */
  uv_async_t async;             /* HTTP thread -> loop: collect a snapshot */
  gd_metrics_snapshot scratch;  /* loop thread only: collected here, then copied under mu */
  struct MHD_Daemon *mhd;
  gd_ops_guard *guard;          /* the HTTP thread's: who may hold a connection */

  pthread_mutex_t mu;
  pthread_cond_t fresh;         /* signalled when snap.generation moves */
  uint64_t wanted;              /* (mu) the generation the last request asked for */
  bool stopping;                /* (mu) no more snapshots will come */
  gd_metrics_snapshot snap;     /* (mu) */
};

/* ---- the loop side -------------------------------------------------------- */

static void on_collect(uv_async_t *async) {
  gd_ops_http *h = async->data;
  pthread_mutex_lock(&h->mu);
  uint64_t wanted = h->wanted;
  pthread_mutex_unlock(&h->mu);
  gd_metrics_collect(h->d, &h->scratch);
  pthread_mutex_lock(&h->mu);
  h->snap = h->scratch;
  h->snap.generation = wanted;
  pthread_cond_broadcast(&h->fresh);
  pthread_mutex_unlock(&h->mu);
}

/* ---- the HTTP thread ------------------------------------------------------ */

/* A snapshot at least as new as this request, or the last one after GD_OPS_HTTP_FRESH_MS (the
 * loop is busy, or stopping). NULL when out of memory. */
static gd_metrics_snapshot *fresh_snapshot(gd_ops_http *h) {
  gd_metrics_snapshot *copy = malloc(sizeof *copy);
  if (!copy)
    return NULL;
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_nsec += GD_OPS_HTTP_FRESH_MS * 1000000L;
  deadline.tv_sec += deadline.tv_nsec / 1000000000L;
  deadline.tv_nsec %= 1000000000L;
  pthread_mutex_lock(&h->mu);
  uint64_t want = ++h->wanted;
  bool ask = !h->stopping;
  pthread_mutex_unlock(&h->mu);
  if (ask && uv_async_send(&h->async) != 0)
    ask = false;
  pthread_mutex_lock(&h->mu);
  while (ask && !h->stopping && h->snap.generation < want)
    if (pthread_cond_timedwait(&h->fresh, &h->mu, &deadline) == ETIMEDOUT)
      break;
  *copy = h->snap;
  pthread_mutex_unlock(&h->mu);
  return copy;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type,
                             void *body, size_t len, enum MHD_ResponseMemoryMode mode) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
  if (!resp) {
    if (mode == MHD_RESPMEM_MUST_FREE)
      free(body);
    return MHD_NO;
  }
  enum MHD_Result rc = MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (rc == MHD_YES)
    rc = MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (rc == MHD_YES)
    rc = MHD_queue_response(conn, status, resp);
  MHD_destroy_response(resp);
  return rc;
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status,
                                  const char *text) {
  return reply(conn, status, "text/plain; charset=utf-8", (void *)text, strlen(text),
               MHD_RESPMEM_PERSISTENT);
}

static enum MHD_Result serve_metrics(gd_ops_http *h, struct MHD_Connection *conn) {
  gd_metrics_snapshot *snap = fresh_snapshot(h);
  size_t len = 0;
  char *body = snap ? gd_metrics_render(snap, &len) : NULL;
  free(snap);
  if (!body)
    return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
  return reply(conn, MHD_HTTP_OK, METRICS_CONTENT_TYPE, body, len, MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result serve_ready(gd_ops_http *h, struct MHD_Connection *conn) {
  gd_metrics_snapshot *snap = fresh_snapshot(h);
  if (!snap)
    return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
  const char *why = NULL;
  bool ready = gd_metrics_ready(snap, &why);
  free(snap);
  if (ready)
    return reply_text(conn, MHD_HTTP_OK, "ready\n");
  char text[96];
  int n = snprintf(text, sizeof text, "not ready: %s\n", why);
  char *body = n > 0 ? strdup(text) : NULL;
  if (!body)
    return reply_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "not ready\n");
  return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", body,
               strlen(body), MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  gd_ops_http *h = cls;
  (void)version;
  (void)upload_data;
  (void)upload_data_size;
  (void)con_cls;
  gd_ops_guard_answered(conn); /* the request is whole: its answer comes now */
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
    return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
  if (strcmp(url, "/metrics") == 0)
    return serve_metrics(h, conn);
  if (strcmp(url, "/healthz") == 0)
    return reply_text(conn, MHD_HTTP_OK, "ok\n");
  if (strcmp(url, "/readyz") == 0)
    return serve_ready(h, conn);
  return reply_text(conn, MHD_HTTP_NOT_FOUND, "not found: try /metrics, /healthz, /readyz\n");
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char line[512];
  vsnprintf(line, sizeof line, fmt, ap);
  size_t n = strlen(line);
  while (n > 0 && line[n - 1] == '\n')
    line[--n] = '\0';
  gd_warn("metrics: %s", line);
}

/* ---- start and stop ------------------------------------------------------- */

static int resolve(const gp_addr *addr, struct sockaddr_storage *ss, gp_error *err) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  char port[8];
  snprintf(port, sizeof port, "%u", (unsigned)addr->port);
  int rc = getaddrinfo(addr->host, port, &hints, &res);
  if (rc != 0 || !res)
    return gp_error_set(err, GP_E_UNAVAILABLE, "metrics.listen: cannot resolve %s: %s",
                        addr->host, rc ? gai_strerror(rc) : "no address");
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return 0;
}

static void free_http(gd_ops_http *h) {
  gd_ops_guard_free(h->guard);
  pthread_cond_destroy(&h->fresh);
  pthread_mutex_destroy(&h->mu);
  free(h);
}

static void on_async_closed(uv_handle_t *handle) { free_http(handle->data); }

static int start_mhd(gd_ops_http *h, const gp_addr *addr, gp_error *err) {
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  int rc = resolve(addr, &ss, err);
  if (rc != 0)
    return rc;
  /* AUTO: epoll on Linux; select() would refuse descriptors past FD_SETSIZE, which a daemon with
   * a thousand client connections open reaches. */
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
  if (ss.ss_family == AF_INET6)
    flags |= MHD_USE_IPv6;
  h->mhd = MHD_start_daemon(flags, addr->port, gd_ops_guard_accept, h->guard, on_request, h,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL, /* first: MHD wants */
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_LIMIT, gd_ops_guard_mhd_limit(h->guard),
                            MHD_OPTION_NOTIFY_CONNECTION, gd_ops_guard_notify, h->guard,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)GD_OPS_HTTP_TIMEOUT_S,
                            MHD_OPTION_END);
  if (!h->mhd) {
    char text[GP_ADDR_TEXT_MAX];
    return gp_error_set(err, GP_E_UNAVAILABLE, "metrics.listen: cannot serve HTTP on %s (in "
                        "use, or not an address of this host)",
                        gp_addr_format(addr, text, sizeof text));
  }
  return 0;
}

int gd_ops_http_start(gd_daemon *d, const char *listen, gd_ops_http **out, gp_error *err) {
  gp_addr addr;
  gp_error why;
  *out = NULL;
  if (gp_addr_parse(listen, GP_ADDR_LISTEN, &addr, &why) != 0)
    return gp_error_set(err, why.code, "metrics.listen: %s", why.message);
  if (addr.kind != GP_ADDR_TCP)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "metrics.listen: %s: expected tcp:HOST:PORT",
                        listen);
  gd_ops_http *h = calloc(1, sizeof *h);
  if (!h)
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "metrics: out of memory");
  h->d = d;
  gd_ops_guard_limits lim = {d->cfg.metrics_max_connections, d->cfg.metrics_max_per_client,
                             d->cfg.metrics_request_timeout_ms};
  h->guard = gd_ops_guard_new(&lim);
  if (!h->guard || pthread_mutex_init(&h->mu, NULL) != 0 ||
      pthread_cond_init(&h->fresh, NULL) != 0) {
    gd_ops_guard_free(h->guard);
    free(h);
    return gp_error_set(err, GP_E_INTERNAL, "metrics: cannot create its lock");
  }
  int rc = uv_async_init(d->loop, &h->async, on_collect);
  if (rc != 0) {
    free_http(h);
    return gp_error_set(err, GP_E_INTERNAL, "metrics: uv_async_init: %s", uv_strerror(rc));
  }
  h->async.data = h;
  uv_unref((uv_handle_t *)&h->async); /* the listener alone does not keep gemmd running */
  gd_metrics_collect(d, &h->snap);
  rc = start_mhd(h, &addr, err);
  if (rc != 0) {
    uv_close((uv_handle_t *)&h->async, on_async_closed);
    return rc;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
  gd_info("metrics: serving /metrics, /healthz and /readyz on %s (port %u)", listen,
          info ? (unsigned)info->port : (unsigned)addr.port);
  if (gd_auth_exposed_host(addr.host))
    gd_warn("metrics.listen %s: other machines can reach it, and it has no authentication: "
            "keep it on loopback or a network you trust", listen);
  *out = h;
  return 0;
}

void gd_ops_http_stop(gd_ops_http *h) {
  if (!h)
    return;
  pthread_mutex_lock(&h->mu);
  h->stopping = true;
  pthread_cond_broadcast(&h->fresh);
  pthread_mutex_unlock(&h->mu);
  MHD_stop_daemon(h->mhd); /* joins the HTTP thread: nobody sends on the async handle after */
  h->mhd = NULL;
  uv_close((uv_handle_t *)&h->async, on_async_closed);
}
