/*
 * main.c - gemmd: parse the command line, read the config, then start in
 * order (backend, scheduler, listeners, signals, systemd notify), run the
 * loop, and tear down in reverse through one cleanup path.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gd_backend_cpu.h"
#include "gd_clock.h"
#include "gd_cli.h"
#include "gd_config.h"
#include "gd_daemon.h"
#include "gd_lifecycle.h"
#include "gd_listener.h"
#include "gd_log.h"
#include "gd_log_journal.h"
#include "gd_notify.h"
#include "gd_ops_http.h"
#include "gd_sched.h"
#include "gd_session.h"
#ifdef GEMMD_HAVE_CUDA
#include "gd_backend_gpu.h"
#endif

#ifndef GEMMD_VERSION
#define GEMMD_VERSION "0.0.0"
#endif

/* Reads the config: --config FILE, else the default path when it exists, else defaults. Sets
 * *path to the file used (NULL for defaults). */
static int load_config(const gd_cli *cli, gd_config *cfg, const char **path) {
  char err[GD_CONFIG_ERROR_MAX];
  gd_config_default(cfg);
  *path = cli->config_path;
  if (!*path && access(GD_CONFIG_DEFAULT_PATH, F_OK) == 0)
    *path = GD_CONFIG_DEFAULT_PATH;
  if (*path && gd_config_load_file(*path, cfg, err, sizeof err) != 0) {
    fprintf(stderr, "gemmd: %s\n", err);
    return -1;
  }
  if (gd_cli_apply(cli, cfg, err, sizeof err) != 0) {
    fprintf(stderr, "gemmd: %s\n", err);
    return -1;
  }
  return 0;
}

static int create_cpu(const gd_config *cfg, gd_backend **out) {
  gd_cpu_config cpu = {cfg->cpu_threads, cfg->blas_threads};
  gp_error err;
  gp_error_clear(&err);
  if (gd_backend_cpu_create(&cpu, out, &err) != 0) {
    gd_error("cpu backend: %s", err.message);
    return -1;
  }
  gd_info("backend: cpu (OpenBLAS)");
  return 0;
}

/* backend: cpu, gpu (refuse to start without one) or auto (GPU when found, else CPU). */
static int create_backend(const gd_config *cfg, gd_backend **out) {
  if (cfg->backend == GD_BACKEND_CPU)
    return create_cpu(cfg, out);
#ifdef GEMMD_HAVE_CUDA
  int gpus = gd_gpu_count();
  /* backend gpu tries even with no device counted: the backend's error says why there is none
   * ("no CUDA device found: <CUDA's reason>"), which is what an operator needs to read. */
  if (gpus > 0 || cfg->backend == GD_BACKEND_GPU) {
    gp_error err;
    gp_error_clear(&err);
    if (gd_backend_gpu_create(&cfg->gpu, out, &err) == 0) {
      gd_info("backend: gpu (%d devices found)", gpus);
      return 0;
    }
    if (cfg->backend == GD_BACKEND_GPU) {
      gd_error("backend gpu: %s", err.message);
      return -1;
    }
    gd_warn("backend auto: the GPU backend did not start (%s); using the CPU", err.message);
    return create_cpu(cfg, out);
  }
  gd_info("backend auto: no GPU found; using the CPU");
#else
  if (cfg->backend == GD_BACKEND_GPU) {
    gd_error("backend gpu: this gemmd was built without CUDA");
    return -1;
  }
#endif
  return create_cpu(cfg, out);
}

static int parse_listen(const gd_config *cfg, gd_addr *addrs) {
  for (size_t i = 0; i < cfg->listen_count; i++) {
    char why[256];
    if (gd_addr_parse(cfg->listen[i], &addrs[i], why, sizeof why) != 0) {
      gd_error("listen: %s", why);
      return -1;
    }
  }
  return 0;
}

/* Socket activation replaces the config's list unless --listen names addresses too. */
static size_t listen_count(const gd_cli *cli, const gd_config *cfg, bool *adopt) {
  *adopt = gd_listeners_systemd_count() > 0;
  if (*adopt && cli->listen_count == 0) {
    gd_info("socket activation: using the %d sockets from systemd", gd_listeners_systemd_count());
    return 0;
  }
  return cfg->listen_count;
}

static int run(const gd_cli *cli, gd_config *cfg, const char *config_path) {
  int status = 1;
  uv_loop_t loop;
  gd_daemon d;
  gd_lifecycle *lc = NULL;
  gd_notify *notify = NULL;
  gd_ops_http *ops_http = NULL;
  gd_addr addrs[GD_CONFIG_LISTEN_MAX];
  bool adopt;
  char err[512];
  int rc;

  memset(&d, 0, sizeof d);
  d.cfg = *cfg;
  gd_stats_init(&d.stats);
  d.stats.started_us = gd_now_us();
  if ((rc = uv_loop_init(&loop)) != 0) {
    gd_error("uv_loop_init: %s", uv_strerror(rc));
    return 1;
  }
  d.loop = &loop;
  if (parse_listen(&d.cfg, addrs) != 0 || create_backend(&d.cfg, &d.backend) != 0)
    goto out_loop;
  gd_sched_limits limits = {d.cfg.max_jobs, d.cfg.memory_budget};
  if ((rc = gd_sched_new(&loop, d.backend, &limits, &gd_session_hooks, &d.stats, &d.sched)) != 0) {
    gd_error("scheduler: %s", uv_strerror(rc));
    goto out_backend;
  }
  size_t n = listen_count(cli, &d.cfg, &adopt);
  if (gd_listeners_open(&d, addrs, n, adopt, &d.listeners, err, sizeof err) != 0) {
    gd_error("%s", err);
    goto out_sched;
  }
  if (d.cfg.metrics_listen[0] &&
      gd_ops_http_start(&d, d.cfg.metrics_listen, &ops_http, err, sizeof err) != 0) {
    gd_error("%s", err);
    goto out_listeners;
  }
  if ((rc = gd_notify_start(&loop, &notify)) != 0) {
    gd_error("watchdog timer: %s", uv_strerror(rc));
    goto out_listeners;
  }
  if ((rc = gd_lifecycle_start(&d, cli, config_path, notify, &lc)) != 0) {
    gd_error("signal handlers: %s", uv_strerror(rc));
    gd_notify_close(notify);
    goto out_listeners;
  }
  gd_info("gemmd %s ready: backend %s, config %s", GEMMD_VERSION, d.backend->ops->name,
          config_path ? config_path : "built-in defaults");
  gd_notify_ready("serving");
  /* Returns when the lifecycle closed every handle (shutdown). */
  rc = uv_run(&loop, UV_RUN_DEFAULT);
  status = 0;
  gd_ops_http_stop(ops_http);
  goto out_sched;

out_listeners:
  gd_ops_http_stop(ops_http);
  gd_listeners_close(d.listeners);
  d.listeners = NULL;
  gd_sessions_close_all(&d, "start-up failed");
  uv_run(&loop, UV_RUN_DEFAULT);
out_sched:
  /* Backend first: its workers may still post; then the completion queue. */
  d.backend->ops->destroy(d.backend);
  d.backend = NULL;
  gd_sched_close(d.sched);
  uv_run(&loop, UV_RUN_DEFAULT);
  gd_sched_free(d.sched);
  goto out_loop;
out_backend:
  d.backend->ops->destroy(d.backend);
out_loop:
  if (uv_loop_close(&loop) != 0)
    gd_warn("event loop closed with handles still open");
  if (status == 0)
    gd_info("gemmd stopped");
  return status;
}

int main(int argc, char **argv) {
  gd_cli cli;
  gd_config cfg;
  const char *config_path;
  char err[512];

  gd_log_init(GD_LOG_INFO);
  if (gd_cli_parse(argc, argv, &cli, err, sizeof err) != 0) {
    fprintf(stderr, "gemmd: %s\n%s", err, gd_cli_usage());
    return 2;
  }
  if (cli.help) {
    fputs(gd_cli_usage(), stdout);
    return 0;
  }
  if (cli.version) {
    printf("gemmd %s (protocol %d)\n", GEMMD_VERSION, GP_PROTOCOL_VERSION);
    return 0;
  }
  if (load_config(&cli, &cfg, &config_path) != 0)
    return 1;
  if (cli.check_config) {
    printf("%s: configuration ok\n", config_path ? config_path : "built-in defaults");
    return 0;
  }
  gd_log_set_level(cfg.log_level);
  gd_log_journal_setup(cfg.log_target);
  /* A client that closes while we write must cost an EPIPE, not the process. */
  if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
    gd_warn("cannot ignore SIGPIPE");
  return run(&cli, &cfg, config_path);
}
