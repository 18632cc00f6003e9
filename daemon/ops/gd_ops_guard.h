/*
 * gd_ops_guard.h - who may hold a connection of the operations listener (gd_ops_http.h), so
 * that no client can lock /healthz and /readyz out:
 *   - at most max_per_client connections from one address (metrics.max_connections_per_client);
 *   - at most max_connections in all (metrics.max_connections); a newcomer over it first closes
 *     every connection that has not sent a whole request within request_timeout_ms of its start
 *     (or of its last answer: keep-alive), so clients trickling headers, or silent, give way;
 *   - refusals and closes are logged, counted, at most one line a second.
 * libmicrohttpd's inactivity timeout alone lets a client that sends a header line now and then
 * keep its connection for ever.
 *
 * Threads: every function runs on libmicrohttpd's one internal thread (its accept policy, its
 * connection notifications and its request handler): the guard takes no lock.
 */
#ifndef GD_OPS_GUARD_H
#define GD_OPS_GUARD_H

#include <microhttpd.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct {
  uint32_t max_connections;
  uint32_t max_per_client;
  uint64_t request_timeout_ms;
} gd_ops_guard_limits;

typedef struct gd_ops_guard gd_ops_guard;

/* NULL when out of memory. */
gd_ops_guard *gd_ops_guard_new(const gd_ops_guard_limits *lim);
void gd_ops_guard_free(gd_ops_guard *g);

/* The connection limit to give libmicrohttpd: room for those closed and not yet gone. */
unsigned gd_ops_guard_mhd_limit(const gd_ops_guard *g);

/* libmicrohttpd's accept policy (cls: the guard). */
enum MHD_Result gd_ops_guard_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);

/* libmicrohttpd's connection notification (cls: the guard). */
void gd_ops_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                         enum MHD_ConnectionNotificationCode code);

/* A request of conn was answered: its time starts again. */
void gd_ops_guard_answered(struct MHD_Connection *conn);

#endif /* GD_OPS_GUARD_H */
