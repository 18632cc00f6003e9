/*
 * main.c - gemmd: parse the command line, read the config, then start in
 * order (backend, scheduler, listeners, signals, systemd notify), run the
 * loop, and tear down in reverse through one cleanup path.
 *
 * Every step reports failure as a gp_error (uv_loop_init's libuv code is turned into one where
 * it is called), and the one log line of a failed start-up is written in run().
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gd_auth_setup.h"
#include "gd_trim.h"
#include "gd_backend_cpu.h"
#include "gd_clock.h"
#include "gd_cli.h"
#include "gd_config.h"
#include "gd_daemon.h"
#include "gd_lifecycle.h"
#include "gd_listener.h"
#include "gd_log.h"
#include "gd_log_journal.h"
#include "gd_netloop.h"
#include "gd_notify.h"
#include "gd_ops_http.h"
#include "gd_sched.h"
#include "gd_sessions.h"
#ifdef GEMMD_HAVE_CUDA
#include "gd_backend_gpu.h"
#endif

#ifndef GEMMD_VERSION
#define GEMMD_VERSION "0.0.0"
#endif

/* Reads the config: --config FILE, else the default path when it exists, else defaults. Sets
 * *path to the file used (NULL for defaults). */
static int load_config(const gd_cli *cli, gd_config *cfg, const char **path, gp_error *err) {
  gd_config_default(cfg);
  *path = cli->config_path;
  if (!*path && access(GD_CONFIG_DEFAULT_PATH, F_OK) == 0)
    *path = GD_CONFIG_DEFAULT_PATH;
  if (*path && gd_config_load_file(*path, cfg, err) != 0)
    return err->code;
  return gd_cli_apply(cli, cfg, err);
}

static int create_cpu(const gd_config *cfg, gd_backend **out, gp_error *err) {
  gd_cpu_config cpu = {cfg->cpu_threads, cfg->blas_threads, cfg->cpu_min_part_mflop,
                       cfg->cpu_buffer_cache_bytes};
  gp_error cpu_err;
  gp_error_clear(&cpu_err);
  if (gd_backend_cpu_create(&cpu, out, &cpu_err) != 0)
    return gp_error_set(err, cpu_err.code, "cpu backend: %s", cpu_err.message);
  gd_info("backend: cpu (OpenBLAS)");
  return 0;
}

/* backend: cpu, gpu (refuse to start without one) or auto (GPU when found, else CPU). */
static int create_backend(const gd_config *cfg, gd_backend **out, gp_error *err) {
  if (cfg->backend == GD_BACKEND_CPU)
    return create_cpu(cfg, out, err);
#ifdef GEMMD_HAVE_CUDA
  int gpus = gd_gpu_count();
  /* backend gpu tries even with no device counted: the backend's error says why there is none
   * ("no CUDA device found: <CUDA's reason>"), which is what an operator needs to read. */
  if (gpus > 0 || cfg->backend == GD_BACKEND_GPU) {
    gp_error gpu_err;
    gp_error_clear(&gpu_err);
    if (gd_backend_gpu_create(&cfg->gpu, out, &gpu_err) == 0) {
      gd_info("backend: gpu (%d devices found)", gpus);
      return 0;
    }
    if (cfg->backend == GD_BACKEND_GPU)
      return gp_error_set(err, gpu_err.code, "backend gpu: %s", gpu_err.message);
    gd_warn("backend auto: the GPU backend did not start (%s); using the CPU", gpu_err.message);
    return create_cpu(cfg, out, err);
  }
  gd_info("backend auto: no GPU found; using the CPU");
#else
  if (cfg->backend == GD_BACKEND_GPU)
    return gp_error_set(err, GP_E_UNAVAILABLE, "backend gpu: this gemmd was built without CUDA");
#endif
  return create_cpu(cfg, out, err);
}

static int parse_listen(const gd_config *cfg, gp_addr *addrs, gp_error *err) {
  for (size_t i = 0; i < cfg->listen_count; i++) {
    gp_error why;
    if (gp_addr_parse(cfg->listen[i], GP_ADDR_LISTEN, &addrs[i], &why) != 0)
      return gp_error_set(err, why.code, "listen: %s", why.message);
  }
  return 0;
}

/* The token, and the refusal of exposed TCP without one (gd_auth_setup.h). */
static int start_auth(const gd_config *cfg, gd_auth_token *token, gp_error *err) {
  if (gd_auth_check(cfg, token, err) != 0)
    return err->code;
  const char *exposed = gd_auth_first_exposed(cfg);
  if (exposed && token->len == 0)
    gd_warn("listen %s: TCP without authentication (auth.allow_unauthenticated_tcp: true): "
            "anyone who can reach it can use this daemon", exposed);
  else if (token->len > 0)
    gd_info("auth: TCP connections must authenticate (token from %s)", cfg->auth_token_file);
  return 0;
}

/* bind() through libuv reports a missing directory as "permission denied": say what it is. */
static int check_socket_dirs(const gd_config *cfg, const gp_addr *addrs, size_t n,
                             gp_error *err) {
  for (size_t i = 0; i < n; i++) {
    gp_error why;
    if (addrs[i].kind == GP_ADDR_UNIX &&
        gd_config_check_socket_dir(addrs[i].path, false, &why) != 0)
      return gp_error_set(err, why.code, "listen %s: %s", cfg->listen[i], why.message);
  }
  return 0;
}

/* `loops`: as configured, or auto (0): one loop thread per 4 CPUs, 1 to 4. One loop serves
 * ~60k small requests a second; more loops only help where cores are left for them. */
static size_t loop_threads(const gd_config *cfg) {
  if (cfg->loops > 0)
    return cfg->loops;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  size_t n = cpus > 0 ? (size_t)cpus / 4 : 1;
  return n < 1 ? 1 : n > 4 ? 4 : n;
}

/* RLIMIT_NOFILE's soft limit, what accept runs into; 0 when unlimited or unknown. */
static uint64_t fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    return 0;
  return (uint64_t)rl.rlim_cur;
}

/* A socket mode that lets anyone connect is allowed (a lab machine may want it), not quietly. */
static void warn_socket_mode(const gd_config *cfg, const gp_addr *addrs, size_t n) {
  const char *warning = gd_config_socket_mode_warning(cfg->unix_socket_mode);
  for (size_t i = 0; i < n && warning; i++) {
    if (addrs[i].kind == GP_ADDR_UNIX) {
      gd_warn("unix_socket_mode %04o %s", cfg->unix_socket_mode, warning);
      return;
    }
  }
}

/* The backend the config asks for, where that can be known without starting it. */
static int check_backend(const gd_config *cfg) {
#ifdef GEMMD_HAVE_CUDA
  int gpus = gd_gpu_count();
  if (cfg->backend == GD_BACKEND_GPU && gpus == 0) {
    fprintf(stderr, "backend: gpu, but no CUDA device is usable here (use auto or cpu)\n");
    return 1;
  }
  if (cfg->backend == GD_BACKEND_AUTO)
    printf("note: backend auto: %d GPU(s) found; %s\n", gpus,
           gpus > 0 ? "gemmd will use them" : "gemmd will serve from the CPU");
#else
  if (cfg->backend == GD_BACKEND_GPU) {
    fprintf(stderr, "backend: gpu, but this gemmd was built without CUDA (use auto or cpu)\n");
    return 1;
  }
#endif
  return 0;
}

/* --check-config: the file parses (done by now), and what can be checked without starting
 * is checked. Exit 0 with "configuration ok", else 1 with every problem found. */
static int check_config(const gd_cli *cli, const gd_config *cfg, const char *config_path) {
  const char *name = config_path ? config_path : "built-in defaults";
  char problems[4 * GD_CONFIG_ERROR_MAX];
  bool activated = gd_listeners_systemd_count() > 0 && cli->listen_count == 0;
  int count = gd_config_check(cfg, activated, problems, sizeof problems);
  fputs(problems, stderr);
  count += check_backend(cfg);
  gp_error why;
  if (gd_auth_check(cfg, NULL, &why) != 0) {
    fprintf(stderr, "%s\n", why.message);
    count++;
  } else if (gd_auth_first_exposed(cfg) && !cfg->auth_token_file[0]) {
    printf("note: listen %s: TCP without a token (auth.allow_unauthenticated_tcp: true)\n",
           gd_auth_first_exposed(cfg));
  }
  if (count > 0) {
    fprintf(stderr, "%s: %d problem%s: gemmd would not work with this configuration\n", name,
            count, count == 1 ? "" : "s");
    return 1;
  }
  printf("%s: configuration ok\n", name);
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

/* SIGTERM, SIGINT and SIGHUP that come during start-up are noted here and raised again once the
 * loop's handlers (gd_lifecycle) are in place: with the default action one that came while the
 * listeners already existed killed the process with no drain (seen under ASan). A handler, not
 * a signal mask: OpenBLAS starts threads before main, and any of them may take the signal. */
static const int held_signals[] = {SIGTERM, SIGINT, SIGHUP};
static volatile sig_atomic_t signal_during_start;

static void note_signal(int sig) { signal_during_start = sig; }

static void hold_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = note_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof held_signals / sizeof held_signals[0]; i++)
    if (sigaction(held_signals[i], &sa, NULL) != 0)
      gd_warn("sigaction(%d): %s", held_signals[i], strerror(errno));
}

/* The loop's handlers replaced note_signal: a signal noted meanwhile is delivered to them. */
static void release_signals(void) {
  if (signal_during_start != 0 && raise(signal_during_start) != 0)
    gd_warn("raise(%d): %s", (int)signal_during_start, strerror(errno));
}

static int run(const gd_cli *cli, gd_config *cfg, const char *config_path) {
  int status = 1;
  uv_loop_t loop;
  gd_daemon d;
  gd_lifecycle *lc = NULL;
  gd_notify *notify = NULL;
  gd_ops_http *ops_http = NULL;
  gd_trim *trim = NULL;
  gp_addr addrs[GD_CONFIG_LISTEN_MAX];
  bool adopt;
  gp_error err;
  int rc;

  gp_error_clear(&err);
  memset(&d, 0, sizeof d);
  d.cfg = *cfg;
  gd_stats_init(&d.stats);
  d.stats.started_us = gd_now_us();
  if ((rc = uv_loop_init(&loop)) != 0) {
    gp_error_set(&err, GP_E_INTERNAL, "uv_loop_init: %s", uv_strerror(rc));
    gd_error("%s", err.message);
    return 1;
  }
  d.loop = &loop;
  d.srv.loop = &loop;
  d.srv.stats = &d.stats;
  d.srv.unix_socket_gid = -1; /* until the config names one: never root's group by default */
  d.srv.fd_limit = fd_limit();
  gd_daemon_net_limits(&d.cfg, &d.srv.limits);
  if (parse_listen(&d.cfg, addrs, &err) != 0 || start_auth(&d.cfg, &d.srv.token, &err) != 0 ||
      create_backend(&d.cfg, &d.backend, &err) != 0)
    goto out_loop;
  d.srv.exposed_tcp_ok = d.srv.token.len > 0 || d.cfg.allow_unauthenticated_tcp;
  gd_sched_limits limits = {d.cfg.max_jobs, d.cfg.memory_budget};
  if (gd_sched_new(&loop, d.backend, &limits, &d.stats, &d.sched, &err) != 0)
    goto out_backend;
  d.srv.backend = d.backend;
  d.srv.sched = d.sched;
  if (gd_sessions_start(&d.srv, &loop, loop_threads(&d.cfg), &err) != 0)
    goto out_sched;
  size_t n = listen_count(cli, &d.cfg, &adopt);
  if (check_socket_dirs(&d.cfg, addrs, n, &err) != 0)
    goto out_sched;
  if (gd_config_socket_gid(&d.cfg, &d.srv.unix_socket_gid, &err) != 0)
    goto out_sched;
  warn_socket_mode(&d.cfg, addrs, n);
  /* /metrics first: whoever can reach the socket can reach it too (a test that saw the socket
   * met a refused metrics port while the other loop threads slowed start-up under TSan). */
  if (d.cfg.metrics_listen[0] &&
      gd_ops_http_start(&d, d.cfg.metrics_listen, &ops_http, &err) != 0)
    goto out_sched;
  if (gd_listeners_open(&d.srv, addrs, n, adopt, &d.listeners, &err) != 0)
    goto out_listeners; /* stops /metrics; no listener is open */
  if (gd_notify_start(&loop, &notify, &err) != 0)
    goto out_listeners;
  if (gd_lifecycle_start(&d, cli, config_path, notify, &lc, &err) != 0) {
    gd_notify_close(notify);
    goto out_listeners;
  }
  gp_error trim_err;
  if (gd_trim_start(&loop, &d, d.cfg.trim_idle_ms, &trim, &trim_err) != 0)
    gd_warn("%s", trim_err.message); /* not worth stopping */
  release_signals();
  gd_info("gemmd %s ready: backend %s, config %s", GEMMD_VERSION, d.backend->ops->name,
          config_path ? config_path : "built-in defaults");
  gd_notify_ready("serving");
  /* Returns when the lifecycle closed every handle (shutdown). */
  rc = uv_run(&loop, UV_RUN_DEFAULT);
  status = 0;
  gd_trim_close(trim);
  gd_ops_http_stop(ops_http);
  goto out_sched;

out_listeners:
  gd_ops_http_stop(ops_http);
  gd_listeners_close(d.listeners);
  d.listeners = NULL;
  gd_sessions_close_all(&d.srv, "start-up failed");
  uv_run(&loop, UV_RUN_DEFAULT);
out_sched:
  gd_sessions_stop(&d.srv); /* the drop timer; the other loops end once their connections are closed */
  /* Backend first: its workers may still post; then the completion queues. */
  d.backend->ops->destroy(d.backend);
  d.backend = NULL;
  gd_sched_close(d.sched);
  uv_run(&loop, UV_RUN_DEFAULT);
  gd_netloops_free(&d.srv);
  gd_sched_free(d.sched);
  goto out_loop;
out_backend:
  d.backend->ops->destroy(d.backend);
out_loop:
  if (err.code != GP_OK)
    gd_error("%s", err.message);
  if (uv_loop_close(&loop) != 0)
    gd_warn("event loop closed with handles still open");
  gd_peers_free(&d.srv.peers);
  if (status == 0)
    gd_info("gemmd stopped");
  return status;
}

int main(int argc, char **argv) {
  gd_cli cli;
  gd_config cfg;
  const char *config_path;
  gp_error err;

  gd_log_init(GD_LOG_INFO);
  if (gd_cli_parse(argc, argv, &cli, &err) != 0) {
    fprintf(stderr, "gemmd: %s\n%s", err.message, gd_cli_usage());
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
  if (load_config(&cli, &cfg, &config_path, &err) != 0) {
    fprintf(stderr, "gemmd: %s\n", err.message);
    return 1;
  }
  if (cli.check_config)
    return check_config(&cli, &cfg, config_path);
  gd_log_set_level(cfg.log_level);
  gd_log_journal_setup(cfg.log_target);
  /* A client that closes while we write must cost an EPIPE, not the process. */
  if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
    gd_warn("cannot ignore SIGPIPE");
  hold_signals();
  return run(&cli, &cfg, config_path);
}
