/*
 * gd_config.h - gemmd.yaml: the schema, its defaults, and the parser.
 *
 * The defaults equal config/gemmd.yaml. Parsing is strict: an unknown key, a
 * duplicate key, a value of the wrong type or out of range is an error
 * reported as "FILE:LINE:COLUMN: message" (1-based), and nothing is guessed.
 * Sizes are integers (bytes) or strings with a binary suffix ("64MiB");
 * durations are integer milliseconds.
 *
 * Not thread-safe; the daemon parses on loop 0's thread (start-up, SIGHUP).
 */
#ifndef GD_CONFIG_H
#define GD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_addr.h"
#include "gp_error.h"
#include "gd_backend_gpu.h"
#include "gd_log.h"
#include "gd_resident.h"
#include "gd_shm.h"
#include "gp_types.h"

#define GD_CONFIG_LISTEN_MAX 32
#define GD_CONFIG_ERROR_MAX 512
#define GD_CONFIG_GROUP_MAX 64
#define GD_CONFIG_PATH_MAX 1024 /* a file path in the config, NUL included */
#define GD_CONFIG_DEFAULT_PATH "/etc/gemmd/gemmd.yaml"
/* The service's runtime directory (gemmd.service's RuntimeDirectory=, tmpfiles.d/gemmd.conf). */
#define GD_CONFIG_RUNTIME_DIR "/run/gemmd"

typedef enum { GD_BACKEND_AUTO = 0, GD_BACKEND_GPU = 1, GD_BACKEND_CPU = 2 } gd_backend_kind;

typedef struct {
  char listen[GD_CONFIG_LISTEN_MAX][GP_ADDR_TEXT_MAX]; /* each parsed by gp_addr_parse */
  size_t listen_count;
  unsigned unix_socket_mode;       /* e.g. 0660 */
  char unix_socket_group[GD_CONFIG_GROUP_MAX]; /* name or number; "" = the process's group */
  gd_backend_kind backend;
  uint32_t loops;                  /* loop threads serving connections; 0: auto */
  gd_log_level log_level;
  gd_log_target log_target;        /* auto: the journal when JOURNAL_STREAM is set */

  /* limits: */
  uint32_t max_connections;
  uint32_t max_connections_per_peer; /* one uid (Unix) or address (TCP) */
  uint32_t reserved_fds;           /* file descriptors a new connection must leave free */
  uint32_t max_requests_in_flight; /* per connection */
  uint64_t max_buffered_bytes;     /* per connection: reply bytes queued for writing */
  gp_limits proto;                 /* message, header, depth, items, dim, batch, work, operand */

  /* queue: */
  uint32_t max_jobs;               /* daemon-wide, admitted and not yet answered */
  uint64_t memory_budget;
  double connection_memory_share;  /* (0, 1] of memory_budget */
  double peer_hold_share;          /* (0, 1]: a peer's resident operands and regions */
  double peer_memory_share;          /* host bytes of jobs in flight */

  /* timeouts: (0 disables idle_ms and request_ms) */
  uint64_t idle_ms, request_ms, drain_ms;
  uint64_t min_receive_rate, min_rate_bytes, min_rate_grace_ms;
  uint64_t hold_stall_ms;
  uint32_t auth_max_failures;          /* auth.max_failures_per_second */
  uint64_t trim_idle_ms;               /* queue.trim_idle_ms: 0 = never */             /* 0: a stalled request may hold room others wait for */

  /* cpu: */
  uint32_t cpu_threads;            /* 0 = number of cores */
  uint32_t blas_threads;
  uint32_t cpu_min_part_mflop;
  uint64_t cpu_buffer_cache_bytes;

  gd_gpu_config gpu;

  gd_shm_limits shm;               /* shm: (gd_shm.h) */
  gd_resident_limits resident;     /* resident: (gd_resident.h) */
  /* auth: (gd_auth_setup.h) */
  char auth_token_file[GD_CONFIG_PATH_MAX]; /* "" = no token */
  bool allow_unauthenticated_tcp;  /* non-loopback TCP without a token, on purpose */

  /* metrics: (gd_ops_http.h) */
  char metrics_listen[GP_ADDR_TEXT_MAX]; /* tcp:HOST:PORT of /metrics, /healthz, /readyz; "" = off */
  uint32_t metrics_max_connections, metrics_max_per_client; /* its connections (gd_ops_guard.h) */
  uint64_t metrics_request_timeout_ms;
} gd_config;

/* The built-in defaults (equal to config/gemmd.yaml). */
void gd_config_default(gd_config *cfg);

/* Parses the file at path over the defaults. 0 on success; a gp code with "FILE:LINE:COLUMN:
 * message" (or "FILE: reason" when it cannot be read) in err. cfg is only written on success. */
int gd_config_load_file(const char *path, gd_config *cfg, gp_error *err);

/* Same for text held in memory; name is used in messages. */
int gd_config_load_string(const char *name, const char *text, size_t len, gd_config *cfg,
                          gp_error *err);

/* "123", "64MiB", "4 GiB", "16KiB", "1B" (suffixes B KiB MiB GiB TiB PiB EiB). 0 or -1 on a bad
 * form or overflow. */
int gd_config_parse_size(const char *text, uint64_t *out);

/* What a parsed config cannot do here, beyond what the parser checks: an empty listen list
 * (without socket activation), a Unix socket whose directory is missing or not writable (but
 * GD_CONFIG_RUNTIME_DIR, which systemd creates, may be missing: a "note: " line), limits that
 * contradict each other. One line per problem (and note) into out; returns the problems. */
int gd_config_check(const gd_config *cfg, bool socket_activated, char *out, size_t size);

/* 0 when the directory of the Unix socket path exists (and with need_write, this process may
 * create files there); else a gp code with the real cause in err. */
int gd_config_check_socket_dir(const char *path, bool need_write, gp_error *err);

/* The gid of unix_socket_group: 0 with *gid (-1: none configured, leave the process's group),
 * or a gp code with the cause in err (no such group). Reads the group database: start-up only. */
int gd_config_socket_gid(const gd_config *cfg, long *gid, gp_error *err);

/* Why unix_socket_mode is risky (world-writable: anyone may connect), or NULL. */
const char *gd_config_socket_mode_warning(unsigned mode);

const char *gd_backend_kind_name(gd_backend_kind kind);
int gd_backend_kind_from_name(const char *name, gd_backend_kind *out);

#endif /* GD_CONFIG_H */
