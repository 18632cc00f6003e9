/* gemmd.yaml parsing (gd_config.h) and the command line (gd_cli.h). */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "gd_auth_setup.h"
#include "gd_cli.h"
#include "gd_config.h"
#include "gd_daemon.h"
#include "gd_lifecycle.h"
#include "gd_log.h"

static int load(const char *text, gd_config *cfg, gp_error *err) {
  gd_config_default(cfg);
  gp_error_clear(err);
  return gd_config_load_string("test.yaml", text, strlen(text), cfg, err);
}

static void load_ok(const char *text, gd_config *cfg) {
  gp_error err;
  ck_assert_msg(load(text, cfg, &err) == 0, "rejected: %s\n%s", err.message, text);
}

/* The error must carry FILE:LINE:COLUMN and mention what was wrong. */
static void load_bad(const char *text, const char *where, const char *contains) {
  gd_config cfg;
  gp_error err;
  ck_assert_msg(load(text, &cfg, &err) != 0, "accepted:\n%s", text);
  ck_assert_int_eq(err.code, GP_E_INVALID_ARGUMENT);
  ck_assert_msg(strncmp(err.message, where, strlen(where)) == 0,
                "error \"%s\" does not start with %s", err.message, where);
  ck_assert_msg(strstr(err.message, contains), "error \"%s\" lacks \"%s\"", err.message,
                contains);
}

static void assert_same(const gd_config *a, const gd_config *b) {
  ck_assert_uint_eq(a->listen_count, b->listen_count);
  for (size_t i = 0; i < a->listen_count; i++)
    ck_assert_str_eq(a->listen[i], b->listen[i]);
  ck_assert_uint_eq(a->unix_socket_mode, b->unix_socket_mode);
  ck_assert_str_eq(a->unix_socket_group, b->unix_socket_group);
  ck_assert_int_eq(a->backend, b->backend);
  ck_assert_int_eq(a->log_level, b->log_level);
  ck_assert_uint_eq(a->max_connections, b->max_connections);
  ck_assert_uint_eq(a->reserved_fds, b->reserved_fds);
  ck_assert_uint_eq(a->max_connections_per_peer, b->max_connections_per_peer);
  ck_assert_uint_eq(a->max_requests_in_flight, b->max_requests_in_flight);
  ck_assert_uint_eq(a->max_buffered_bytes, b->max_buffered_bytes);
  ck_assert_uint_eq(a->proto.max_message_bytes, b->proto.max_message_bytes);
  ck_assert_uint_eq(a->proto.max_header_bytes, b->proto.max_header_bytes);
  ck_assert_uint_eq(a->proto.max_depth, b->proto.max_depth);
  ck_assert_uint_eq(a->proto.max_items, b->proto.max_items);
  ck_assert_uint_eq(a->proto.max_string_bytes, b->proto.max_string_bytes);
  ck_assert_uint_eq(a->proto.max_dim, b->proto.max_dim);
  ck_assert_uint_eq(a->proto.max_batch, b->proto.max_batch);
  ck_assert_uint_eq(a->proto.max_work, b->proto.max_work);
  ck_assert_uint_eq(a->proto.max_operand_bytes, b->proto.max_operand_bytes);
  ck_assert_uint_eq(a->max_jobs, b->max_jobs);
  ck_assert_uint_eq(a->memory_budget, b->memory_budget);
  ck_assert(a->connection_memory_share == b->connection_memory_share);
  ck_assert(a->peer_memory_share == b->peer_memory_share);
  ck_assert_uint_eq(a->idle_ms, b->idle_ms);
  ck_assert_uint_eq(a->request_ms, b->request_ms);
  ck_assert_uint_eq(a->drain_ms, b->drain_ms);
  ck_assert_uint_eq(a->min_receive_rate, b->min_receive_rate);
  ck_assert_uint_eq(a->min_rate_bytes, b->min_rate_bytes);
  ck_assert_uint_eq(a->min_rate_grace_ms, b->min_rate_grace_ms);
  ck_assert_uint_eq(a->cpu_threads, b->cpu_threads);
  ck_assert_uint_eq(a->blas_threads, b->blas_threads);
  ck_assert_uint_eq(a->cpu_min_part_mflop, b->cpu_min_part_mflop);
  ck_assert_uint_eq(a->cpu_buffer_cache_bytes, b->cpu_buffer_cache_bytes);
  ck_assert_int_eq(a->gpu.devices_auto, b->gpu.devices_auto);
  ck_assert_uint_eq(a->gpu.device_count, b->gpu.device_count);
  ck_assert_uint_eq(a->gpu.staging_bytes, b->gpu.staging_bytes);
  ck_assert_uint_eq(a->gpu.staging_buffers, b->gpu.staging_buffers);
  ck_assert_uint_eq(a->gpu.staging_hold_ms, b->gpu.staging_hold_ms);
  ck_assert_double_eq(a->gpu.memory_fraction, b->gpu.memory_fraction);
  ck_assert_uint_eq(a->gpu.memory_bytes, b->gpu.memory_bytes);
  ck_assert_str_eq(a->gpu.kernel, b->gpu.kernel);
  ck_assert_uint_eq(a->gpu.memory_idle_ms, b->gpu.memory_idle_ms);
  ck_assert_uint_eq(a->gpu.memory_keep_bytes, b->gpu.memory_keep_bytes);
  ck_assert_uint_eq(a->gpu.kernel_pool_bytes, b->gpu.kernel_pool_bytes);
  ck_assert_uint_eq(a->gpu.small_job_bytes, b->gpu.small_job_bytes);
  ck_assert_uint_eq(a->gpu.small_slots, b->gpu.small_slots);
  ck_assert_uint_eq(a->gpu.small_poll_us, b->gpu.small_poll_us);
  ck_assert_uint_eq(a->gpu.max_batch_jobs, b->gpu.max_batch_jobs);
  ck_assert_uint_eq(a->gpu.max_queue_delay_us, b->gpu.max_queue_delay_us);
  ck_assert_uint_eq(a->gpu.resident_bytes, b->gpu.resident_bytes);
  ck_assert_int_eq(a->log_target, b->log_target);
  ck_assert_str_eq(a->metrics_listen, b->metrics_listen);
  ck_assert_int_eq(a->shm.enabled, b->shm.enabled);
  ck_assert_uint_eq(a->shm.max_regions_per_connection, b->shm.max_regions_per_connection);
  ck_assert_uint_eq(a->shm.max_bytes_per_connection, b->shm.max_bytes_per_connection);
  ck_assert_uint_eq(a->shm.max_bytes_total, b->shm.max_bytes_total);
  ck_assert_uint_eq(a->resident.max_handles_per_connection,
                    b->resident.max_handles_per_connection);
  ck_assert_uint_eq(a->resident.max_bytes_per_connection, b->resident.max_bytes_per_connection);
  ck_assert_uint_eq(a->resident.max_bytes_total, b->resident.max_bytes_total);
  ck_assert_str_eq(a->auth_token_file, b->auth_token_file);
  ck_assert_int_eq(a->allow_unauthenticated_tcp, b->allow_unauthenticated_tcp);
}

/* Every field set to something else first: a key the file lacks would show. */
static void scramble(gd_config *cfg) {
  cfg->listen_count = 0;
  cfg->unix_socket_mode = 0;
  strcpy(cfg->unix_socket_group, "scrambled");
  cfg->backend = GD_BACKEND_CPU;
  cfg->log_level = GD_LOG_DEBUG;
  cfg->max_connections = cfg->max_requests_in_flight = 1;
  cfg->reserved_fds = 5;
  cfg->max_connections_per_peer = 5;
  cfg->max_buffered_bytes = 1;
  memset(&cfg->proto, 0, sizeof cfg->proto);
  cfg->max_jobs = 1;
  cfg->memory_budget = 1;
  cfg->connection_memory_share = cfg->peer_memory_share = 0.01;
  cfg->idle_ms = cfg->request_ms = cfg->drain_ms = 1;
  cfg->min_receive_rate = cfg->min_rate_bytes = cfg->min_rate_grace_ms = 3;
  cfg->cpu_threads = cfg->blas_threads = 3;
  cfg->gpu.devices_auto = false;
  cfg->gpu.staging_bytes = 1;
  cfg->gpu.staging_buffers = 9;
  cfg->gpu.staging_hold_ms = 1;
  cfg->gpu.memory_fraction = 0.1;
  cfg->gpu.memory_bytes = 1;
  strcpy(cfg->gpu.kernel, "x");
  cfg->gpu.memory_idle_ms = 1;
  cfg->gpu.memory_keep_bytes = 1;
  cfg->gpu.kernel_pool_bytes = 1;
  cfg->gpu.small_job_bytes = 1;
  cfg->gpu.small_slots = 1;
  cfg->gpu.small_poll_us = 1;
  cfg->gpu.max_batch_jobs = 7;
  cfg->gpu.max_queue_delay_us = 7;
  cfg->gpu.resident_bytes = 7;
  cfg->log_target = GD_LOG_TARGET_STDERR;
  strcpy(cfg->metrics_listen, "tcp:1.2.3.4:5");
  cfg->shm.enabled = false;
  cfg->shm.max_regions_per_connection = 1;
  cfg->shm.max_bytes_per_connection = cfg->shm.max_bytes_total = 1;
  cfg->resident.max_handles_per_connection = 1;
  cfg->resident.max_bytes_per_connection = cfg->resident.max_bytes_total = 1;
  strcpy(cfg->auth_token_file, "/x");
  cfg->allow_unauthenticated_tcp = true;
}

START_TEST(default_file_equals_builtin) {
  gd_config builtin, file;
  gp_error err;
  gd_config_default(&builtin);
  gd_config_default(&file);
  scramble(&file);
  ck_assert_msg(gd_config_load_file(GEMMD_DEFAULT_CONFIG, &file, &err) == 0, "%s", err.message);
  assert_same(&builtin, &file);
  ck_assert_str_eq(builtin.listen[0], "unix:/run/gemmd/gemmd.sock");
  ck_assert_uint_eq(builtin.unix_socket_mode, 0660);
  /* three full-size 1 GiB operands fit, with room for their envelope (proto/'s default) */
  gp_limits lib;
  gp_limits_default(&lib);
  ck_assert_uint_eq(builtin.proto.max_message_bytes, 3ull * (1u << 30) + 64u * 1024u);
  ck_assert_uint_eq(builtin.proto.max_message_bytes, lib.max_message_bytes);
  ck_assert_uint_eq(builtin.proto.max_string_bytes, lib.max_string_bytes);
}
END_TEST

START_TEST(every_key_parses) {
  gd_config cfg;
  load_ok("listen:\n  - unix:/tmp/x.sock\n  - tcp:127.0.0.1:7000\n  - tcp:[::1]:7001\n"
          "unix_socket_mode: \"0600\"\nunix_socket_group: gemmd\nbackend: cpu\nloops: 6\n"
          "log_level: debug\n"
          "limits:\n  max_connections: 10\n  reserved_fds: 8\n  max_connections_per_peer: 6\n  max_requests_in_flight: 3\n"
          "  max_buffered_bytes: 1MiB\n  max_message_bytes: 2GiB\n  max_header_bytes: 4KiB\n"
          "  max_depth: 5\n  max_items: 100\n  max_string_bytes: 1KiB\n  max_dim: 4096\n  max_batch: 7\n  max_work: 12345\n"
          "  max_operand_bytes: \"512 MiB\"\n"
          "queue: {max_jobs: 9, memory_budget: 3GiB, connection_memory_share: 0.25,\n"
          "        peer_memory_share: 0.5}\n"
          "timeouts: {idle_ms: 0, request_ms: 5, drain_ms: 6, min_receive_rate: 64KiB,\n"
          "           min_rate_bytes: 1MiB, min_rate_grace_ms: 250}\n"
          "cpu: {threads: 4, blas_threads: 2}\n"
          "gpu:\n  devices: [1, 0]\n  staging_bytes: 8MiB\n  staging_buffers: 3\n"
          "  staging_hold_ms: 7\n  memory_fraction: 0.5\n  memory_bytes: 2GiB\n  kernel: cublas\n"
          "  memory_idle_ms: 1500\n  memory_keep_bytes: 64MiB\n  kernel_pool_bytes: 0\n"
          "  small_job_bytes: 256KiB\n  small_slots: 8\n  small_poll_us: 0\n  max_batch_jobs: 4\n"
          "  max_queue_delay_us: 250\n  resident_bytes: 1GiB\n"
          "log_target: journal\nmetrics: {listen: \"tcp:127.0.0.1:9464\"}\n"
          "shm: {enabled: false, max_regions_per_connection: 0, max_bytes_per_connection: 1MiB,"
          " max_bytes_total: 2GiB}\n"
          "resident: {max_handles_per_connection: 3, max_bytes_per_connection: 5MiB,"
          " max_bytes_total: 7MiB}\n"
          "auth: {token_file: /etc/gemmd/token, allow_unauthenticated_tcp: true}\n",
          &cfg);
  ck_assert(!cfg.shm.enabled);
  ck_assert_uint_eq(cfg.loops, 6);
  ck_assert_uint_eq(cfg.shm.max_regions_per_connection, 0);
  ck_assert_uint_eq(cfg.shm.max_bytes_per_connection, 1u << 20);
  ck_assert_uint_eq(cfg.shm.max_bytes_total, 2ull << 30);
  ck_assert_uint_eq(cfg.resident.max_handles_per_connection, 3);
  ck_assert_uint_eq(cfg.resident.max_bytes_per_connection, 5u << 20);
  ck_assert_uint_eq(cfg.resident.max_bytes_total, 7u << 20);
  ck_assert_str_eq(cfg.auth_token_file, "/etc/gemmd/token");
  ck_assert(cfg.allow_unauthenticated_tcp);
  ck_assert_uint_eq(cfg.gpu.memory_idle_ms, 1500);
  ck_assert_uint_eq(cfg.gpu.memory_keep_bytes, 64u << 20);
  ck_assert_uint_eq(cfg.gpu.kernel_pool_bytes, 0);
  ck_assert_uint_eq(cfg.gpu.small_job_bytes, 256u << 10);
  ck_assert_uint_eq(cfg.gpu.small_slots, 8);
  ck_assert_uint_eq(cfg.gpu.small_poll_us, 0);
  ck_assert_uint_eq(cfg.gpu.max_batch_jobs, 4);
  ck_assert_uint_eq(cfg.gpu.max_queue_delay_us, 250);
  ck_assert_uint_eq(cfg.gpu.resident_bytes, 1u << 30);
  ck_assert_int_eq(cfg.log_target, GD_LOG_TARGET_JOURNAL);
  ck_assert_str_eq(cfg.metrics_listen, "tcp:127.0.0.1:9464");
  ck_assert_uint_eq(cfg.listen_count, 3);
  ck_assert_str_eq(cfg.listen[2], "tcp:[::1]:7001");
  ck_assert_uint_eq(cfg.unix_socket_mode, 0600);
  ck_assert_str_eq(cfg.unix_socket_group, "gemmd");
  ck_assert_int_eq(cfg.backend, GD_BACKEND_CPU);
  ck_assert_int_eq(cfg.log_level, GD_LOG_DEBUG);
  ck_assert_uint_eq(cfg.max_connections, 10);
  ck_assert_uint_eq(cfg.reserved_fds, 8);
  ck_assert_uint_eq(cfg.max_connections_per_peer, 6);
  ck_assert(cfg.connection_memory_share == 0.25 && cfg.peer_memory_share == 0.5);
  ck_assert_uint_eq(cfg.min_receive_rate, 64 * 1024);
  ck_assert_uint_eq(cfg.min_rate_bytes, 1 << 20);
  ck_assert_uint_eq(cfg.min_rate_grace_ms, 250);
  ck_assert_uint_eq(cfg.max_requests_in_flight, 3);
  ck_assert_uint_eq(cfg.max_buffered_bytes, 1u << 20);
  ck_assert_uint_eq(cfg.proto.max_message_bytes, 2ull << 30);
  ck_assert_uint_eq(cfg.proto.max_header_bytes, 4096);
  ck_assert_uint_eq(cfg.proto.max_depth, 5);
  ck_assert_uint_eq(cfg.proto.max_items, 100);
  ck_assert_uint_eq(cfg.proto.max_string_bytes, 1024);
  ck_assert_uint_eq(cfg.proto.max_dim, 4096);
  ck_assert_uint_eq(cfg.proto.max_batch, 7);
  ck_assert_uint_eq(cfg.proto.max_work, 12345);
  ck_assert_uint_eq(cfg.proto.max_operand_bytes, 512u << 20);
  ck_assert_uint_eq(cfg.max_jobs, 9);
  ck_assert_uint_eq(cfg.memory_budget, 3ull << 30);
  ck_assert_uint_eq(cfg.idle_ms, 0);
  ck_assert_uint_eq(cfg.request_ms, 5);
  ck_assert_uint_eq(cfg.drain_ms, 6);
  ck_assert_uint_eq(cfg.cpu_threads, 4);
  ck_assert_uint_eq(cfg.blas_threads, 2);
  ck_assert(!cfg.gpu.devices_auto);
  ck_assert_uint_eq(cfg.gpu.device_count, 2);
  ck_assert_int_eq(cfg.gpu.devices[0], 1);
  ck_assert_int_eq(cfg.gpu.devices[1], 0);
  ck_assert_uint_eq(cfg.gpu.staging_bytes, 8u << 20);
  ck_assert_uint_eq(cfg.gpu.staging_buffers, 3);
  ck_assert_uint_eq(cfg.gpu.staging_hold_ms, 7);
  ck_assert_double_eq(cfg.gpu.memory_fraction, 0.5);
  ck_assert_uint_eq(cfg.gpu.memory_bytes, 2ull << 30);
  ck_assert_str_eq(cfg.gpu.kernel, "cublas");
}
END_TEST

START_TEST(partial_and_empty_files) {
  gd_config cfg, def;
  gd_config_default(&def);
  load_ok("", &cfg);
  assert_same(&cfg, &def);
  load_ok("# only a comment\n", &cfg);
  assert_same(&cfg, &def);
  load_ok("limits:\n# every key commented out\nqueue:\n", &cfg);
  assert_same(&cfg, &def);
  load_ok("listen: []\n", &cfg);
  ck_assert_uint_eq(cfg.listen_count, 0);
  load_ok("timeouts:\n  idle_ms: 1000\n", &cfg);
  ck_assert_uint_eq(cfg.idle_ms, 1000);
  ck_assert_uint_eq(cfg.request_ms, def.request_ms);
}
END_TEST

START_TEST(errors_name_line_and_column) {
  load_bad("backend: cpu\nbogus: 1\n", "test.yaml:2:1:", "unknown key \"bogus\"");
  load_bad("limits:\n  max_conections: 5\n", "test.yaml:2:3:", "limits.max_conections");
  load_bad("limits:\n  max_connections: 0\n", "test.yaml:2:20:", "out of range");
  load_bad("limits:\n  max_connections: lots\n", "test.yaml:2:20:", "integer");
  load_bad("limits:\n  max_connections: -5\n", "test.yaml:2:20:", "integer");
  load_bad("limits:\n  max_buffered_bytes: 12XB\n", "test.yaml:2:23:", "size");
  load_bad("shm:\n  enabled: yes\n", "test.yaml:2:12:", "expected true or false");
  load_bad("shm:\n  enabled: 1\n", "test.yaml:2:12:", "expected true or false");
  load_bad("shm:\n  max_regions_per_connection: 70000\n", "test.yaml:2:31:", "out of range");
  load_bad("limits:\n  max_operand_bytes: 8GiB\n", "test.yaml:2:22:", "out of range");
  load_bad("limits:\n  max_buffered_bytes: 99999999999999999999\n", "test.yaml:2:23:", "size");
  load_bad("backend: tpu\n", "test.yaml:1:10:", "auto, gpu or cpu");
  load_bad("loops: 65\n", "test.yaml:1:8:", "out of range");
  load_bad("log_level: loud\n", "test.yaml:1:12:", "error, warn, info or debug");
  load_bad("log_target: syslog\n", "test.yaml:1:13:", "auto, journal or stderr");
  load_bad("metrics:\n  listen: unix:/tmp/m.sock\n", "test.yaml:2:11:", "tcp:HOST:PORT");
  load_bad("metrics:\n  listen: tcp:127.0.0.1\n", "test.yaml:2:11:", "listen");
  load_bad("unix_socket_mode: \"0999\"\n", "test.yaml:1:19:", "octal");
  load_bad("listen: unix:/tmp/x\n", "test.yaml:1:9:", "list");
  load_bad("listen:\n  - ftp:x\n", "test.yaml:2:5:", "unix: or tcp:");
  load_bad("listen:\n  - tcp:[::1:80\n", "test.yaml:2:5:", "tcp:[V6]:PORT");
  load_bad("limits: 5\n", "test.yaml:1:9:", "mapping");
  load_bad("cpu:\n  threads: 1\n  threads: 2\n", "test.yaml:3:3:", "twice");
  load_bad("gpu:\n  devices: [0, 0]\n", "test.yaml:2:16:", "twice");
  load_bad("gpu:\n  devices: []\n", "test.yaml:2:12:", "empty");
  load_bad("gpu:\n  devices: some\n", "test.yaml:2:12:", "auto or a list");
  load_bad("gpu:\n  memory_fraction: 1.5\n", "test.yaml:2:20:", "(0, 1]");
  load_bad("gpu:\n  memory_fraction: 0\n", "test.yaml:2:20:", "(0, 1]");
  load_bad("gpu:\n  staging_buffers: 1\n", "test.yaml:2:20:", "out of range");
  load_bad("gpu:\n  kernel: \"\"\n", "test.yaml:2:11:", "name");
  load_bad("timeouts:\n  drain_ms:\n", "test.yaml:2:12:", "expected a value");
  load_bad("[1, 2]\n", "test.yaml:1:1:", "mapping");
  load_bad("backend: cpu\n---\nbackend: gpu\n", "test.yaml:3:1:", "more than one");
  load_bad("limits: {max_depth: 2\n", "test.yaml:", "YAML");
  load_bad("a: b: c\n", "test.yaml:1:5:", "YAML");
  load_bad("auth:\n  allow_unauthenticated_tcp: yes\n", "test.yaml:2:30:", "true or false");
  load_bad("auth:\n  token_file: [a]\n", "test.yaml:2:15:", "expected a value");
  load_bad("auth:\n  tokenfile: /x\n", "test.yaml:2:3:", "auth.tokenfile");
}
END_TEST

/* Every size key has an upper bound: no value may switch a limit off (issue 17). */
START_TEST(size_keys_have_upper_bounds) {
  static const char *const keys[] = {
      "limits:\n  max_buffered_bytes: %s\n", "limits:\n  max_message_bytes: %s\n",
      "limits:\n  max_header_bytes: %s\n",   "limits:\n  max_string_bytes: %s\n",
      "limits:\n  max_work: %s\n",           "queue:\n  memory_budget: %s\n",
      "gpu:\n  memory_bytes: %s\n",          "gpu:\n  memory_keep_bytes: %s\n",
      "gpu:\n  kernel_pool_bytes: %s\n"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    char text[128];
    snprintf(text, sizeof text, keys[i], "18446744073709551615");
    load_bad(text, "test.yaml:2:", "out of range");
  }
  load_bad("limits:\n  max_message_bytes: 18446744073709551615\n", "test.yaml:2:22:",
           "out of range 64..17179869184");
  gd_config cfg;
  load_ok("limits:\n  max_message_bytes: 16GiB\n  max_buffered_bytes: 64GiB\n", &cfg);
  ck_assert_uint_eq(cfg.proto.max_message_bytes, 16ull << 30);
}
END_TEST

/* unix_socket_mode: permission bits only; world access parses but is warned about. */
START_TEST(socket_mode_range_and_warning) {
  load_bad("unix_socket_mode: \"7777\"\n", "test.yaml:1:19:", "no setuid, setgid or sticky");
  load_bad("unix_socket_mode: \"1777\"\n", "test.yaml:1:19:", "at most 0777");
  load_bad("unix_socket_mode: \"4660\"\n", "test.yaml:1:19:", "out of range");
  gd_config cfg;
  char out[1024];
  load_ok("unix_socket_mode: \"0777\"\n", &cfg);
  ck_assert_uint_eq(cfg.unix_socket_mode, 0777);
  load_ok("unix_socket_mode: \"0666\"\nlisten: [unix:/tmp/t.sock]\n", &cfg);
  ck_assert_int_eq(gd_config_check(&cfg, false, out, sizeof out), 0); /* a warning only */
  ck_assert_msg(strstr(out, "warning: unix_socket_mode 0666 lets every local user connect"),
                "%s", out);
  ck_assert_ptr_null(gd_config_socket_mode_warning(0660));
  ck_assert_ptr_null(gd_config_socket_mode_warning(0664)); /* read alone cannot connect */
  ck_assert_ptr_nonnull(gd_config_socket_mode_warning(0662));
  load_ok("listen: [unix:/tmp/t.sock]\n", &cfg);
  ck_assert_int_eq(gd_config_check(&cfg, false, out, sizeof out), 0);
  ck_assert_ptr_null(strstr(out, "warning"));
}
END_TEST

/* unix_socket_group: a name or a number, resolved at start (and by --check-config). */
START_TEST(socket_group) {
  gd_config cfg;
  char out[1024];
  gp_error why;
  long gid;
  load_ok("unix_socket_group: \"\"\n", &cfg);
  ck_assert_int_eq(gd_config_socket_gid(&cfg, &gid, &why), 0);
  ck_assert_int_eq(gid, -1); /* none: the process's group */
  load_ok("unix_socket_group:\n", &cfg);
  ck_assert_str_eq(cfg.unix_socket_group, "");
  load_ok("unix_socket_group: 4242\n", &cfg);
  ck_assert_int_eq(gd_config_socket_gid(&cfg, &gid, &why), 0);
  ck_assert_int_eq(gid, 4242);
  load_ok("unix_socket_group: root\n", &cfg); /* in every group database */
  ck_assert_int_eq(gd_config_socket_gid(&cfg, &gid, &why), 0);
  ck_assert_int_eq(gid, 0);
  load_ok("unix_socket_group: no-such-group-here\nlisten: [unix:/tmp/t.sock]\n", &cfg);
  ck_assert_int_eq(gd_config_socket_gid(&cfg, &gid, &why), GP_E_INVALID_ARGUMENT);
  ck_assert_msg(strstr(why.message, "no group \"no-such-group-here\""), "%s", why.message);
  ck_assert_int_eq(gd_config_check(&cfg, false, out, sizeof out), 1);
  load_bad("unix_socket_group: \"a b\"\n", "test.yaml:1:20:", "not a group name");
  load_bad("unix_socket_group: \"-x\"\n", "test.yaml:1:20:", "not a group name");
  load_ok("unix_socket_group: 4294967295\n", &cfg); /* (gid_t)-1 means "no change" */
  ck_assert_int_eq(gd_config_socket_gid(&cfg, &gid, &why), GP_E_INVALID_ARGUMENT);
}
END_TEST

START_TEST(failed_load_leaves_config_alone) {
  gd_config cfg;
  gp_error err;
  gd_config_default(&cfg);
  const char *text = "log_level: debug\nbogus: 1\n";
  ck_assert_int_ne(gd_config_load_string("t", text, strlen(text), &cfg, &err), 0);
  ck_assert_int_eq(cfg.log_level, GD_LOG_INFO);
  ck_assert_int_ne(gd_config_load_file("/nonexistent/gemmd.yaml", &cfg, &err), 0);
  ck_assert_msg(strstr(err.message, "/nonexistent/gemmd.yaml: "), "%s", err.message);
}
END_TEST

START_TEST(sizes) {
  uint64_t v;
  ck_assert_int_eq(gd_config_parse_size("0", &v), 0);
  ck_assert_uint_eq(v, 0);
  ck_assert_int_eq(gd_config_parse_size("123", &v), 0);
  ck_assert_uint_eq(v, 123);
  ck_assert_int_eq(gd_config_parse_size("7B", &v), 0);
  ck_assert_uint_eq(v, 7);
  ck_assert_int_eq(gd_config_parse_size("64KiB", &v), 0);
  ck_assert_uint_eq(v, 65536);
  ck_assert_int_eq(gd_config_parse_size("64MiB", &v), 0);
  ck_assert_uint_eq(v, 64ull << 20);
  ck_assert_int_eq(gd_config_parse_size("4 GiB", &v), 0);
  ck_assert_uint_eq(v, 4ull << 30);
  ck_assert_int_eq(gd_config_parse_size("2TiB", &v), 0);
  ck_assert_uint_eq(v, 2ull << 40);
  ck_assert_int_eq(gd_config_parse_size("15EiB", &v), 0);
  ck_assert_uint_eq(v, 15ull << 60);
  ck_assert_int_ne(gd_config_parse_size("16EiB", &v), 0);   /* overflows */
  ck_assert_int_ne(gd_config_parse_size("18446744073709551616", &v), 0);
  ck_assert_int_eq(gd_config_parse_size("18446744073709551615", &v), 0);
  ck_assert_uint_eq(v, UINT64_MAX);
  const char *bad[] = {"", "MiB", "1.5GiB", "-1", "1 ", "1  MiB", "1mib", "1MB", "1K", "0x10",
                       " 1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ck_assert_msg(gd_config_parse_size(bad[i], &v) != 0, "\"%s\" accepted", bad[i]);
}
END_TEST

static int cli(gd_cli *out, gp_error *err, int argc, ...) {
  char *argv[16];
  va_list ap;
  va_start(ap, argc);
  for (int i = 0; i < argc; i++)
    argv[i] = va_arg(ap, char *);
  va_end(ap);
  argv[argc] = NULL;
  return gd_cli_parse(argc, argv, out, err);
}

START_TEST(command_line) {
  gd_cli c;
  gp_error err;
  ck_assert_int_eq(cli(&c, &err, 1, "gemmd"), 0);
  ck_assert_ptr_null(c.config_path);
  ck_assert_uint_eq(c.listen_count, 0);
  ck_assert_int_eq(cli(&c, &err, 9, "gemmd", "--config", "/x.yaml", "--listen", "unix:/a",
                       "--listen=tcp:[::1]:5", "--backend", "cpu", "--check-config"), 0);
  ck_assert_str_eq(c.config_path, "/x.yaml");
  ck_assert_uint_eq(c.listen_count, 2);
  ck_assert_str_eq(c.listen[1], "tcp:[::1]:5");
  ck_assert(c.has_backend && c.backend == GD_BACKEND_CPU && c.check_config);
  ck_assert_int_eq(cli(&c, &err, 3, "gemmd", "--log-level", "warn"), 0);
  ck_assert(c.has_log_level && c.log_level == GD_LOG_WARN);
  ck_assert_int_ne(cli(&c, &err, 3, "gemmd", "--backend", "tpu"), 0);
  ck_assert_ptr_nonnull(strstr(err.message, "tpu"));
  ck_assert_int_ne(cli(&c, &err, 3, "gemmd", "--log-level", "loud"), 0);
  ck_assert_int_ne(cli(&c, &err, 2, "gemmd", "--frobnicate"), 0);
  ck_assert_ptr_nonnull(strstr(err.message, "--frobnicate"));
  ck_assert_int_ne(cli(&c, &err, 2, "gemmd", "--config"), 0);
  ck_assert_int_ne(cli(&c, &err, 2, "gemmd", "stray"), 0);
}
END_TEST

START_TEST(command_line_overrides) {
  gd_cli c;
  gd_config cfg;
  gp_error err;
  load_ok("listen: [unix:/file.sock, tcp:127.0.0.1:1]\nbackend: gpu\nlog_level: error\n", &cfg);
  ck_assert_int_eq(cli(&c, &err, 1, "gemmd"), 0);
  ck_assert_int_eq(gd_cli_apply(&c, &cfg, &err), 0);
  ck_assert_uint_eq(cfg.listen_count, 2); /* nothing given: the file stays */
  ck_assert_int_eq(cli(&c, &err, 7, "gemmd", "--listen", "unix:/cli.sock", "--backend", "cpu",
                       "--log-level", "debug"), 0);
  ck_assert_int_eq(gd_cli_apply(&c, &cfg, &err), 0);
  ck_assert_uint_eq(cfg.listen_count, 1); /* --listen replaces the file's list */
  ck_assert_str_eq(cfg.listen[0], "unix:/cli.sock");
  ck_assert_int_eq(cfg.backend, GD_BACKEND_CPU);
  ck_assert_int_eq(cfg.log_level, GD_LOG_DEBUG);
  ck_assert_int_eq(cli(&c, &err, 3, "gemmd", "--listen", "tcp:nope"), 0);
  ck_assert_int_ne(gd_cli_apply(&c, &cfg, &err), 0);
  ck_assert_ptr_nonnull(strstr(err.message, "--listen"));
}
END_TEST

/* SIGHUP: what can change live changes; the rest is counted (and logged) as needing a restart. */
/* Which listen addresses other machines can reach (gd_auth_setup.h). */
START_TEST(exposed_addresses) {
  static const struct { const char *addr; bool exposed; } cases[] = {
      {"unix:/tmp/x.sock", false},  {"tcp:127.0.0.1:1", false},   {"tcp:127.9.8.7:1", false},
      {"tcp:[::1]:1", false},       {"tcp:localhost:1", false},   {"tcp:[::ffff:127.0.0.1]:1", false},
      {"tcp:0.0.0.0:1", true},      {"tcp:[::]:1", true},         {"tcp:10.0.0.2:1", true},
      {"tcp:128.0.0.1:1", true},    {"tcp:gpu-box-1:1", true},    {"tcp:[::ffff:10.0.0.1]:1", true},
      {"tcp:[fe80::1%lo]:1", true}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    gp_addr addr;
    ck_assert_int_eq(gp_addr_parse(cases[i].addr, GP_ADDR_LISTEN, &addr, NULL), 0);
    ck_assert_msg(gd_auth_exposed(&addr) == cases[i].exposed, "%s", cases[i].addr);
  }
}
END_TEST

static void write_token(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fputs(text, f) >= 0, 1);
  ck_assert_int_eq(fclose(f), 0);
  ck_assert_int_eq(chmod(path, mode), 0);
}

START_TEST(token_file_and_exposed_tcp) {
  char dir[] = "/tmp/gemmd-auth-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  gd_config cfg;
  gd_config_default(&cfg);
  snprintf(cfg.auth_token_file, sizeof cfg.auth_token_file, "%s/token", dir);
  gp_error why;
  gd_auth_token token;
  write_token(cfg.auth_token_file, "abc\n", 0600);
  ck_assert_int_eq(gd_auth_load_token(&cfg, &token, &why), 0);
  ck_assert_uint_eq(token.len, 3); /* one newline stripped */
  ck_assert_int_eq(memcmp(token.bytes, "abc", 3), 0);
  write_token(cfg.auth_token_file, "abc", 0640);
  ck_assert_int_ne(gd_auth_load_token(&cfg, &token, &why), 0);
  ck_assert_msg(strstr(why.message, "group or others"), "%s", why.message);
  write_token(cfg.auth_token_file, "\n", 0600);
  ck_assert_int_ne(gd_auth_load_token(&cfg, &token, &why), 0);
  ck_assert_msg(strstr(why.message, "1..256 bytes"), "%s", why.message);
  /* exposed TCP: refused without a token, allowed with one or on purpose */
  strcpy(cfg.listen[0], "tcp:0.0.0.0:7453");
  cfg.auth_token_file[0] = '\0';
  ck_assert_int_ne(gd_auth_check(&cfg, &token, &why), 0);
  ck_assert_msg(strstr(why.message, "tcp:0.0.0.0:7453") && strstr(why.message, "auth.token_file"), "%s", why.message);
  cfg.allow_unauthenticated_tcp = true;
  ck_assert_int_eq(gd_auth_check(&cfg, &token, &why), 0);
  ck_assert_uint_eq(token.len, 0);
  snprintf(cfg.auth_token_file, sizeof cfg.auth_token_file, "%s/token", dir);
  write_token(cfg.auth_token_file, "zz", 0600);
  cfg.allow_unauthenticated_tcp = false;
  ck_assert_int_eq(gd_auth_check(&cfg, &token, &why), 0);
  ck_assert_uint_eq(token.len, 2);
  unlink(cfg.auth_token_file);
  rmdir(dir);
}
END_TEST

START_TEST(reload_applies_live_keys) {
  gd_daemon d;
  memset(&d, 0, sizeof d);
  gd_config_default(&d.cfg);
  gd_config next;
  load_ok("log_level: error\nlimits: {max_connections: 5, max_dim: 100}\n"
          "queue: {max_jobs: 3}\ntimeouts: {idle_ms: 10}\n", &next);
  ck_assert_int_eq(gd_lifecycle_apply_config(&d, &next), 0);
  ck_assert_int_eq(d.cfg.log_level, GD_LOG_ERROR);
  ck_assert_int_eq(gd_log_get_level(), GD_LOG_ERROR);
  ck_assert_uint_eq(d.cfg.max_connections, 5);
  ck_assert_uint_eq(d.cfg.proto.max_dim, 100);
  ck_assert_uint_eq(d.cfg.max_jobs, 3);
  ck_assert_uint_eq(d.cfg.idle_ms, 10);
  load_ok("listen: [unix:/elsewhere.sock]\nbackend: gpu\nunix_socket_mode: \"0600\"\n"
          "cpu: {threads: 7, blas_threads: 2}\ngpu: {staging_bytes: 1MiB}\nlog_level: warn\n",
          &next);
  ck_assert_int_eq(gd_lifecycle_apply_config(&d, &next), 6);
  ck_assert_str_eq(d.cfg.listen[0], "unix:/run/gemmd/gemmd.sock"); /* kept until a restart */
  ck_assert_int_eq(d.cfg.backend, GD_BACKEND_AUTO);
  ck_assert_uint_eq(d.cfg.cpu_threads, 0);
  ck_assert_int_eq(d.cfg.log_level, GD_LOG_WARN);
  gd_log_set_level(GD_LOG_INFO);
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_config");
  TCase *tc = tcase_create("config");
  tcase_add_test(tc, default_file_equals_builtin);
  tcase_add_test(tc, every_key_parses);
  tcase_add_test(tc, partial_and_empty_files);
  tcase_add_test(tc, errors_name_line_and_column);
  tcase_add_test(tc, failed_load_leaves_config_alone);
  tcase_add_test(tc, size_keys_have_upper_bounds);
  tcase_add_test(tc, socket_mode_range_and_warning);
  tcase_add_test(tc, socket_group);
  tcase_add_test(tc, sizes);
  tcase_add_test(tc, command_line);
  tcase_add_test(tc, command_line_overrides);
  tcase_add_test(tc, reload_applies_live_keys);
  tcase_add_test(tc, exposed_addresses);
  tcase_add_test(tc, token_file_and_exposed_tcp);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
