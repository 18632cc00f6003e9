/*
 * gd_ops_http.h - the operations listener (gemmd.yaml metrics.listen): an
 * HTTP server, libmicrohttpd on its own thread, answering
 *   GET /metrics   the Prometheus text exposition of gd_metrics.h
 *   GET /healthz   200 "ok" while the process runs
 *   GET /readyz    200 while serving (a device in service, not draining),
 *                  503 with the reason otherwise
 * and 404 / 405 for anything else. Off unless metrics.listen names an
 * address; it has no authentication, so keep it on loopback or a trusted
 * network (an address other machines can reach is logged as a warning). Who may hold its
 * connections: gd_ops_guard.h.
 *
 * The HTTP thread never touches loop state: for each request it asks the loop
 * for a fresh snapshot through a uv_async handle and waits for it (at most
 * GD_OPS_HTTP_FRESH_MS, then it serves the last one), copying it under a
 * mutex. The loop never waits for the HTTP thread.
 */
#ifndef GD_OPS_HTTP_H
#define GD_OPS_HTTP_H

#include <stddef.h>

#include "gp_error.h"

struct gd_daemon;
typedef struct gd_ops_http gd_ops_http;

#define GD_OPS_HTTP_FRESH_MS 250
#define GD_OPS_HTTP_TIMEOUT_S 10

/* Loop thread, before uv_run: binds listen (tcp:HOST:PORT) and starts the server. 0, or a gp
 * code with the reason in err ("metrics.listen: ..." or "metrics: ..."). */
int gd_ops_http_start(struct gd_daemon *d, const char *listen, gd_ops_http **out,
                      gp_error *err);

/* Loop thread, after uv_run returned (or on a start-up failure): stops the server (joining its
 * thread) and closes the async handle; the loop must run once more to finish closing it.
 * NULL is fine. */
void gd_ops_http_stop(gd_ops_http *h);

#endif /* GD_OPS_HTTP_H */
