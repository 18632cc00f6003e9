/*
 * gd_lifecycle.h - signals and shutdown.
 *
 * SIGTERM / SIGINT: stop accepting (listeners closed), refuse new gemm
 * requests with UNAVAILABLE, let the jobs in flight finish and their replies
 * go out, within timeouts.drain_ms; what has not been answered by then gets
 * UNAVAILABLE. Then every connection and handle is closed so that uv_run()
 * returns, and main exits 0. A second SIGTERM/SIGINT cuts the drain short.
 *
 * SIGHUP: re-reads the config file (synchronously on the loop: the file is
 * small and this is rare, so the pause is accepted), applies the command-line
 * overrides again, applies what can change live (log_level, limits.*, queue.*,
 * timeouts.*) and logs each changed key that needs a restart (listen,
 * unix_socket_mode, backend, cpu.*, gpu.*). A file that does not parse
 * changes nothing.
 *
 * Loop 0's thread only.
 */
#ifndef GD_LIFECYCLE_H
#define GD_LIFECYCLE_H

#include "gd_cli.h"
#include "gd_daemon.h"
#include "gd_notify.h"

typedef struct gd_lifecycle gd_lifecycle;

/* config_path: the file the config came from (NULL: built-in defaults; SIGHUP then re-applies
 * the defaults and the command line). cli must outlive the lifecycle. 0, or a gp code with err
 * filled ("signal handlers: <libuv's reason>"). */
int gd_lifecycle_start(gd_daemon *d, const gd_cli *cli, const char *config_path,
                       gd_notify *notify, gd_lifecycle **out, gp_error *err);

/* The config keys connections obey (net/gd_server.h), from cfg: at start-up and on SIGHUP. */
void gd_daemon_net_limits(const gd_config *cfg, gd_net_limits *out);

/* The SIGHUP logic, exposed for tests: compares next with d->cfg, applies what can change live,
 * logs the rest. Returns the number of keys that needed a restart. */
int gd_lifecycle_apply_config(gd_daemon *d, const gd_config *next);

/* Starts the shutdown as SIGTERM does (also used when a fatal error needs a clean exit). */
void gd_lifecycle_shutdown(gd_lifecycle *lc, const char *why);

/* Closes the signal handlers and timers (after shutdown or on a start-up failure). */
void gd_lifecycle_close(gd_lifecycle *lc);

#endif /* GD_LIFECYCLE_H */
