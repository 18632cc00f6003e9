/*
 * gd_config.c - gemmd.yaml through libyaml's document API (see gd_config.h).
 *
 * The schema is a table of fields per section; one walker checks every key
 * against it, so an unknown or repeated key is found in one place.
 */
#include "gd_config.h"

#include <errno.h>
#include <grp.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#define KIB 1024ull
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)
#define TIB (1024ull * GIB)

/* Upper bounds of the size keys: far above any real use, low enough that no value switches a
 * limit off (UINT64_MAX used to) or overflows the sums made of it. */
#define MAX_BUFFERED_MAX (64 * GIB)    /* reply bytes queued for one connection */
#define MAX_MESSAGE_MAX (16 * GIB)     /* three 4 GiB - 1 operands and a header */
#define MAX_HEADER_MAX (64 * MIB)      /* one request less its payloads */
#define HOST_MEMORY_MAX (64 * TIB)     /* memory_budget, gpu.memory_bytes, memory_keep_bytes */
#define MAX_WORK_MAX (1ull << 62)      /* m*n*k*batch: 2*work flops still fit in 64 bits */

/* A config file is small; a bigger one is a mistake (or an attack on --check-config). */
#define GD_CONFIG_FILE_MAX (1024 * 1024)

void gd_config_default(gd_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  snprintf(cfg->listen[0], sizeof cfg->listen[0], "unix:/run/gemmd/gemmd.sock");
  cfg->listen_count = 1;
  cfg->unix_socket_mode = 0660;
  cfg->backend = GD_BACKEND_AUTO;
  cfg->log_level = GD_LOG_INFO;
  cfg->log_target = GD_LOG_TARGET_AUTO;
  cfg->max_connections = 1024;
  cfg->max_connections_per_peer = 768;
  cfg->reserved_fds = 32;
  cfg->max_requests_in_flight = 64;
  cfg->max_buffered_bytes = 256 * MIB;
  gp_limits_default(&cfg->proto);
  /* three full-size (max_operand_bytes) operands and their envelope, as in proto/ */
  cfg->proto.max_message_bytes = 3 * GIB + 64 * KIB;
  cfg->proto.max_header_bytes = (uint32_t)(64 * KIB);
  cfg->proto.max_depth = 8;
  cfg->proto.max_items = 4096;
  cfg->proto.max_string_bytes = (uint32_t)(4 * KIB);
  cfg->proto.max_dim = 65536;
  cfg->proto.max_batch = 65536;
  cfg->proto.max_work = 70368744177664ull; /* 2^46 */
  cfg->proto.max_operand_bytes = 1 * GIB;
  cfg->max_jobs = 256;
  cfg->memory_budget = 4 * GIB;
  cfg->connection_memory_share = 0.5;
  cfg->peer_memory_share = 0.75;
  cfg->peer_hold_share = 0.5;
  cfg->idle_ms = 300000;
  cfg->min_receive_rate = 1 * MIB;
  cfg->min_rate_bytes = 64 * MIB;
  cfg->min_rate_grace_ms = 5000;
  cfg->hold_stall_ms = 2000;
  cfg->auth_max_failures = 5;
  cfg->trim_idle_ms = 1000;
  cfg->request_ms = 60000;
  cfg->drain_ms = 30000;
  cfg->cpu_threads = 0;
  cfg->blas_threads = 1;
  cfg->cpu_min_part_mflop = 64;
  cfg->cpu_buffer_cache_bytes = 128 * MIB;
  gd_gpu_config_default(&cfg->gpu);
  cfg->shm.enabled = true;
  cfg->shm.max_regions_per_connection = 16;
  cfg->shm.max_bytes_per_connection = 2 * GIB;
  cfg->shm.max_bytes_total = 2 * GIB;
  cfg->shm.max_fds_per_peer = 64;
  cfg->resident.max_handles_per_connection = 64;
  cfg->resident.max_bytes_per_connection = 1 * GIB;
  cfg->resident.max_bytes_total = 2 * GIB;
  cfg->metrics_max_connections = 32;
  cfg->metrics_max_per_client = 4;
  cfg->metrics_request_timeout_ms = 5000;
  cfg->shm.cuda_enabled = true;
  cfg->shm.cuda_max_regions_per_connection = 16;
}

const char *gd_backend_kind_name(gd_backend_kind kind) {
  switch (kind) {
  case GD_BACKEND_AUTO: return "auto";
  case GD_BACKEND_GPU: return "gpu";
  case GD_BACKEND_CPU: return "cpu";
  }
  return "?";
}

int gd_backend_kind_from_name(const char *name, gd_backend_kind *out) {
  static const gd_backend_kind kinds[] = {GD_BACKEND_AUTO, GD_BACKEND_GPU, GD_BACKEND_CPU};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    if (strcmp(name, gd_backend_kind_name(kinds[i])) == 0) {
      *out = kinds[i];
      return 0;
    }
  }
  return -1;
}

/* ---- scalar forms -------------------------------------------------------- */

static int parse_uint(const char *s, uint64_t *out) {
  uint64_t v = 0;
  if (*s == '\0')
    return -1;
  for (; *s; s++) {
    if (*s < '0' || *s > '9')
      return -1;
    unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10)
      return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

int gd_config_parse_size(const char *text, uint64_t *out) {
  static const struct { const char *suffix; uint64_t mult; } units[] = {
      {"", 1}, {"B", 1}, {"KiB", KIB}, {"MiB", MIB}, {"GiB", GIB},
      {"TiB", 1024ull * GIB}, {"PiB", 1024ull * 1024ull * GIB}, {"EiB", 1024ull * 1024ull * 1024ull * GIB}};
  char digits[32];
  size_t n = 0;
  while (text[n] >= '0' && text[n] <= '9') {
    if (n + 1 >= sizeof digits)
      return -1;
    digits[n] = text[n];
    n++;
  }
  digits[n] = '\0';
  const char *suffix = text + n;
  if (*suffix == ' ' && suffix[1] != '\0') /* "4 GiB"; but not "4 " */
    suffix++;
  uint64_t v;
  if (parse_uint(digits, &v) != 0)
    return -1;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcmp(suffix, units[i].suffix) == 0) {
      if (v > UINT64_MAX / units[i].mult)
        return -1;
      *out = v * units[i].mult;
      return 0;
    }
  }
  return -1;
}

/* ---- the schema ---------------------------------------------------------- */

typedef enum {
  F_U32,      /* integer into uint32_t */
  F_U64,      /* integer into uint64_t */
  F_SIZE,     /* size into uint64_t */
  F_SIZE32,   /* size into uint32_t */
  F_LEVEL,    /* log level */
  F_TARGET,   /* auto | journal | stderr */
  F_HTTP,     /* "" (off) or one tcp: address */
  F_BACKEND,  /* auto | gpu | cpu */
  F_MODE,     /* octal file mode */
  F_LISTEN,   /* list of addresses */
  F_DEVICES,  /* auto | [ids] */
  F_FRACTION, /* 0 < x <= 1 */
  F_KERNEL,   /* a name */
  F_GROUP,    /* a group name or number; empty = none */
  F_PATH,     /* a file path; "" = none */
  F_BOOL,     /* true | false */
  F_SECTION,  /* a nested mapping */
} field_type;

typedef struct field {
  const char *key;
  field_type type;
  size_t offset;
  uint64_t min, max;
  const struct field *sub; /* F_SECTION */
} field;

#define FLD(key, type, member, min, max) {key, type, offsetof(gd_config, member), min, max, NULL}

static const field limits_fields[] = {
    FLD("max_connections", F_U32, max_connections, 1, 1000000),
    FLD("max_connections_per_peer", F_U32, max_connections_per_peer, 1, 1000000),
    FLD("reserved_fds", F_U32, reserved_fds, 4, 65536),
    FLD("max_requests_in_flight", F_U32, max_requests_in_flight, 1, 1u << 20),
    FLD("max_buffered_bytes", F_SIZE, max_buffered_bytes, 1, MAX_BUFFERED_MAX),
    FLD("max_message_bytes", F_SIZE, proto.max_message_bytes, 64, MAX_MESSAGE_MAX),
    FLD("max_header_bytes", F_SIZE32, proto.max_header_bytes, 64, MAX_HEADER_MAX),
    /* a gemm request nests 3 deep ([0, id, "gemm", [hdr{...}, ...]]) */
    FLD("max_depth", F_U32, proto.max_depth, 3, 1024),
    FLD("max_items", F_U32, proto.max_items, 16, UINT32_MAX),
    /* method names and header keys are strings: "max_operand_bytes" is 17 bytes */
    FLD("max_string_bytes", F_SIZE32, proto.max_string_bytes, 32, MAX_HEADER_MAX),
    FLD("max_dim", F_U64, proto.max_dim, 1, UINT32_MAX),
    FLD("max_batch", F_U64, proto.max_batch, 1, UINT32_MAX),
    FLD("max_work", F_U64, proto.max_work, 1, MAX_WORK_MAX),
    /* msgpack bin32 carries at most 4 GiB - 1 */
    FLD("max_operand_bytes", F_SIZE, proto.max_operand_bytes, 1, UINT32_MAX),
    {NULL, 0, 0, 0, 0, NULL}};

static const field queue_fields[] = {
    FLD("max_jobs", F_U32, max_jobs, 1, 1u << 24),
    FLD("memory_budget", F_SIZE, memory_budget, 1, HOST_MEMORY_MAX),
    FLD("connection_memory_share", F_FRACTION, connection_memory_share, 0, 0),
    FLD("peer_memory_share", F_FRACTION, peer_memory_share, 0, 0),
    FLD("peer_hold_share", F_FRACTION, peer_hold_share, 0, 0),
    FLD("trim_idle_ms", F_U64, trim_idle_ms, 0, 7ull * 24 * 3600 * 1000), /* a week */
    {NULL, 0, 0, 0, 0, NULL}};

/* 0 disables the idle and request timeouts; a week is the longest anything may wait. */
#define WEEK_MS (7ull * 24 * 3600 * 1000)
static const field timeouts_fields[] = {
    FLD("idle_ms", F_U64, idle_ms, 0, WEEK_MS),
    FLD("request_ms", F_U64, request_ms, 0, WEEK_MS),
    FLD("drain_ms", F_U64, drain_ms, 0, WEEK_MS),
    FLD("min_receive_rate", F_SIZE, min_receive_rate, 0, MAX_MESSAGE_MAX),
    FLD("min_rate_bytes", F_SIZE, min_rate_bytes, 1, MAX_MESSAGE_MAX),
    FLD("min_rate_grace_ms", F_U64, min_rate_grace_ms, 0, WEEK_MS),
    FLD("hold_stall_ms", F_U64, hold_stall_ms, 0, WEEK_MS),
    {NULL, 0, 0, 0, 0, NULL}};

static const field cpu_fields[] = {
    FLD("threads", F_U32, cpu_threads, 0, 4096),
    FLD("blas_threads", F_U32, blas_threads, 1, 4096),
    FLD("min_part_mflop", F_U32, cpu_min_part_mflop, 0, 1000000),
    FLD("buffer_cache_bytes", F_SIZE, cpu_buffer_cache_bytes, 0, HOST_MEMORY_MAX),
    {NULL, 0, 0, 0, 0, NULL}};

static const field gpu_fields[] = {
    FLD("devices", F_DEVICES, gpu, 0, 0),
    FLD("staging_bytes", F_SIZE, gpu.staging_bytes, 4096, GIB), /* the GPU backend's range */
    FLD("staging_buffers", F_U32, gpu.staging_buffers, 2, 64),
    FLD("staging_hold_ms", F_U64, gpu.staging_hold_ms, 0, WEEK_MS),
    FLD("memory_fraction", F_FRACTION, gpu.memory_fraction, 0, 0),
    FLD("memory_bytes", F_SIZE, gpu.memory_bytes, 0, HOST_MEMORY_MAX),
    FLD("kernel", F_KERNEL, gpu.kernel, 0, 0),
    FLD("memory_idle_ms", F_U64, gpu.memory_idle_ms, 0, WEEK_MS),
    FLD("memory_keep_bytes", F_SIZE, gpu.memory_keep_bytes, 0, HOST_MEMORY_MAX),
    FLD("kernel_pool_bytes", F_SIZE, gpu.kernel_pool_bytes, 0, HOST_MEMORY_MAX),
    FLD("small_job_bytes", F_SIZE, gpu.small_job_bytes, 0, 64ull << 20),
    FLD("resident_bytes", F_SIZE, gpu.resident_bytes, 0, HOST_MEMORY_MAX),
    FLD("small_slots", F_U32, gpu.small_slots, 1, 4096),
    FLD("small_poll_us", F_U64, gpu.small_poll_us, 0, 1000000),
    FLD("max_batch_jobs", F_U32, gpu.max_batch_jobs, 1, 1024),
    FLD("max_queue_delay_us", F_U64, gpu.max_queue_delay_us, 0, 1000000),
    FLD("small_passes", F_U32, gpu.small_passes, 0, 1024),
    FLD("shm_pieces", F_U32, gpu.shm_pieces, 1, 64),
    FLD("split_min_rows", F_U64, gpu.split_min_rows, 0, 1ull << 31),
    FLD("split_max_parts", F_U32, gpu.split_max_parts, 1, 64),
    {NULL, 0, 0, 0, 0, NULL}};

static const field shm_fields[] = {
    FLD("enabled", F_BOOL, shm.enabled, 0, 0),
    FLD("max_regions_per_connection", F_U32, shm.max_regions_per_connection, 0, 1u << 16),
    FLD("max_bytes_per_connection", F_SIZE, shm.max_bytes_per_connection, 0, HOST_MEMORY_MAX),
    FLD("max_bytes_total", F_SIZE, shm.max_bytes_total, 0, HOST_MEMORY_MAX),
    FLD("max_fds_per_peer", F_U32, shm.max_fds_per_peer, 1, 1u << 20),
    /* the GPU backend's, read at start (regions pinned for DMA: gd_gpu_shm.c) */
    FLD("gpu_register_max_bytes", F_SIZE, gpu.shm_register_bytes, 0, HOST_MEMORY_MAX),
    {NULL, 0, 0, 0, 0, NULL}};

static const field resident_fields[] = {
    FLD("max_handles_per_connection", F_U32, resident.max_handles_per_connection, 0, 1u << 16),
    FLD("max_bytes_per_connection", F_SIZE, resident.max_bytes_per_connection, 0,
        HOST_MEMORY_MAX),
    FLD("max_bytes_total", F_SIZE, resident.max_bytes_total, 0, HOST_MEMORY_MAX),
    {NULL, 0, 0, 0, 0, NULL},
};
/* CUDA memory of a client's process (cuda_register), kept in the shm table */
static const field cuda_ipc_fields[] = {
    FLD("enabled", F_BOOL, shm.cuda_enabled, 0, 0),
    FLD("max_regions_per_connection", F_U32, shm.cuda_max_regions_per_connection, 0, 1u << 16),
    {NULL, 0, 0, 0, 0, NULL}};

static const field metrics_fields[] = {
    FLD("listen", F_HTTP, metrics_listen, 0, 0),
    FLD("max_connections", F_U32, metrics_max_connections, 1, 4096),
    FLD("max_connections_per_client", F_U32, metrics_max_per_client, 1, 4096),
    FLD("request_timeout_ms", F_U64, metrics_request_timeout_ms, 100, 3600000),
    {NULL, 0, 0, 0, 0, NULL}};

static const field auth_fields[] = {
    FLD("token_file", F_PATH, auth_token_file, 0, 0),
    FLD("allow_unauthenticated_tcp", F_BOOL, allow_unauthenticated_tcp, 0, 0),
    FLD("max_failures_per_second", F_U32, auth_max_failures, 0, 1000000),
    {NULL, 0, 0, 0, 0, NULL}};

static const field root_fields[] = {
    FLD("listen", F_LISTEN, listen, 0, 0),
    /* permission bits only: setuid, setgid and sticky mean nothing good on a socket */
    FLD("unix_socket_mode", F_MODE, unix_socket_mode, 0, 0777),
    FLD("unix_socket_group", F_GROUP, unix_socket_group, 0, 0),
    FLD("backend", F_BACKEND, backend, 0, 0),
    FLD("loops", F_U32, loops, 0, 64), /* 0: auto */
    FLD("log_level", F_LEVEL, log_level, 0, 0),
    FLD("log_target", F_TARGET, log_target, 0, 0),
    {"limits", F_SECTION, 0, 0, 0, limits_fields},
    {"queue", F_SECTION, 0, 0, 0, queue_fields},
    {"timeouts", F_SECTION, 0, 0, 0, timeouts_fields},
    {"cpu", F_SECTION, 0, 0, 0, cpu_fields},
    {"gpu", F_SECTION, 0, 0, 0, gpu_fields},
    {"shm", F_SECTION, 0, 0, 0, shm_fields},
    {"resident", F_SECTION, 0, 0, 0, resident_fields},
    {"cuda_ipc", F_SECTION, 0, 0, 0, cuda_ipc_fields},
    {"metrics", F_SECTION, 0, 0, 0, metrics_fields},
    {"auth", F_SECTION, 0, 0, 0, auth_fields},
    {NULL, 0, 0, 0, 0, NULL}};

/* ---- the walker ---------------------------------------------------------- */

typedef struct {
  const char *file;
  yaml_document_t *doc;
  gd_config *cfg;
  gp_error *err;
} walker;

static int node_error(walker *w, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int node_error(walker *w, const yaml_node_t *node, const char *fmt, ...) {
  char msg[GD_CONFIG_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return gp_error_set(w->err, GP_E_INVALID_ARGUMENT, "%s:%zu:%zu: %s", w->file,
                      node->start_mark.line + 1, node->start_mark.column + 1, msg);
}

static const char *scalar_text(const yaml_node_t *node) {
  return (const char *)node->data.scalar.value;
}

/* A plain (unquoted) ~, null or empty scalar. */
static bool is_null(const yaml_node_t *node) {
  if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
    return false;
  const char *s = scalar_text(node);
  return *s == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
         strcmp(s, "NULL") == 0;
}

static int want_scalar(walker *w, const yaml_node_t *node, const char *key) {
  if (node->type != YAML_SCALAR_NODE || is_null(node))
    return node_error(w, node, "%s: expected a value", key);
  /* a NUL inside a quoted scalar would silently cut the text short */
  if (strlen(scalar_text(node)) != node->data.scalar.length)
    return node_error(w, node, "%s: NUL byte in value", key);
  return 0;
}

static int get_uint(walker *w, const yaml_node_t *node, const field *f, bool size, uint64_t *v) {
  if (want_scalar(w, node, f->key) != 0)
    return -1;
  int rc = size ? gd_config_parse_size(scalar_text(node), v) : parse_uint(scalar_text(node), v);
  if (rc != 0)
    return node_error(w, node, size ? "%s: expected a size in bytes such as 1048576 or \"64MiB\", got \"%s\""
                                    : "%s: expected a non-negative integer, got \"%s\"",
                      f->key, scalar_text(node));
  if (*v < f->min || *v > f->max)
    return node_error(w, node, "%s: %llu is out of range %llu..%llu", f->key,
                      (unsigned long long)*v, (unsigned long long)f->min,
                      (unsigned long long)f->max);
  return 0;
}

static int set_listen(walker *w, const yaml_node_t *node, gd_config *cfg) {
  if (node->type != YAML_SEQUENCE_NODE && !is_null(node))
    return node_error(w, node, "listen: expected a list of addresses (unix:PATH, tcp:HOST:PORT)");
  cfg->listen_count = 0;
  if (node->type != YAML_SEQUENCE_NODE)
    return 0;
  for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top;
       it++) {
    yaml_node_t *item = yaml_document_get_node(w->doc, *it);
    if (!item || want_scalar(w, item, "listen") != 0)
      return item ? -1 : node_error(w, node, "listen: bad item");
    if (cfg->listen_count == GD_CONFIG_LISTEN_MAX)
      return node_error(w, item, "listen: more than %d addresses", GD_CONFIG_LISTEN_MAX);
    gp_addr addr;
    gp_error why;
    if (gp_addr_parse(scalar_text(item), GP_ADDR_LISTEN, &addr, &why) != 0)
      return node_error(w, item, "listen: %s", why.message);
    snprintf(cfg->listen[cfg->listen_count++], GP_ADDR_TEXT_MAX, "%s", scalar_text(item));
  }
  return 0;
}

static int set_devices(walker *w, const yaml_node_t *node, gd_gpu_config *gpu) {
  if (node->type == YAML_SCALAR_NODE && strcmp(scalar_text(node), "auto") == 0) {
    gpu->devices_auto = true;
    gpu->device_count = 0;
    return 0;
  }
  if (node->type != YAML_SEQUENCE_NODE)
    return node_error(w, node, "devices: expected auto or a list of GPU ordinals such as [0, 1]");
  gpu->devices_auto = false;
  gpu->device_count = 0;
  for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top;
       it++) {
    yaml_node_t *item = yaml_document_get_node(w->doc, *it);
    static const field f = {"devices", F_U32, 0, 0, GD_GPU_MAX_DEVICES - 1, NULL};
    uint64_t id;
    if (!item)
      return node_error(w, node, "devices: bad item");
    if (get_uint(w, item, &f, false, &id) != 0)
      return -1;
    for (size_t i = 0; i < gpu->device_count; i++)
      if (gpu->devices[i] == (int)id)
        return node_error(w, item, "devices: %llu listed twice", (unsigned long long)id);
    if (gpu->device_count == GD_GPU_MAX_DEVICES)
      return node_error(w, item, "devices: more than %d entries", GD_GPU_MAX_DEVICES);
    gpu->devices[gpu->device_count++] = (int)id;
  }
  if (gpu->device_count == 0)
    return node_error(w, node, "devices: empty list (write auto for every GPU)");
  return 0;
}

static int set_fraction(walker *w, const yaml_node_t *node, const field *f, double *out) {
  if (want_scalar(w, node, f->key) != 0)
    return -1;
  char *end;
  errno = 0;
  double v = strtod(scalar_text(node), &end);
  if (errno != 0 || *end != '\0' || end == scalar_text(node) || !isfinite(v) || v <= 0.0 ||
      v > 1.0)
    return node_error(w, node, "%s: expected a number in (0, 1], got \"%s\"", f->key,
                      scalar_text(node));
  *out = v;
  return 0;
}

static int set_name(walker *w, const yaml_node_t *node, const field *f, char *out, size_t size) {
  if (want_scalar(w, node, f->key) != 0)
    return -1;
  size_t len = strlen(scalar_text(node));
  if (len == 0 || len >= size)
    return node_error(w, node, "%s: expected a name of 1..%zu characters", f->key, size - 1);
  memcpy(out, scalar_text(node), len + 1);
  return 0;
}

/* A group name as useradd/groupadd allow it ([A-Za-z0-9_.-], not starting with '-'; a trailing
 * '$' for machine accounts), or a number; an empty value means none. */
static int set_group(walker *w, const yaml_node_t *node, const field *f, char *out, size_t size) {
  if (is_null(node)) {
    out[0] = '\0';
    return 0;
  }
  if (want_scalar(w, node, f->key) != 0)
    return -1;
  const char *s = scalar_text(node);
  size_t len = strlen(s);
  if (len >= size)
    return node_error(w, node, "%s: longer than %zu characters", f->key, size - 1);
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || (c == '-' && i > 0) || (c == '$' && i == len - 1 && i > 0);
    if (!ok)
      return node_error(w, node, "%s: \"%s\" is not a group name or number", f->key, s);
  }
  memcpy(out, s, len + 1);
  return 0;
}

static int set_mode(walker *w, const yaml_node_t *node, const field *f, unsigned *out) {
  if (want_scalar(w, node, f->key) != 0)
    return -1;
  const char *s = scalar_text(node);
  unsigned v = 0;
  if (*s == '\0' || strlen(s) > 5)
    return node_error(w, node, "%s: expected an octal mode such as \"0660\"", f->key);
  for (; *s; s++) {
    if (*s < '0' || *s > '7')
      return node_error(w, node, "%s: expected an octal mode such as \"0660\"", f->key);
    v = v * 8 + (unsigned)(*s - '0');
  }
  if (v > f->max)
    return node_error(w, node, "%s: mode %04o is out of range: permission bits only, at most "
                      "0777 (no setuid, setgid or sticky bit)", f->key, v);
  *out = v;
  return 0;
}

static int walk_mapping(walker *w, const yaml_node_t *node, const field *fields,
                        const char *section);

/* A null or "" value of a key where that means off (an empty string into out). */
static bool off_value(const yaml_node_t *node, char *out) {
  if (!is_null(node) && !(node->type == YAML_SCALAR_NODE && *scalar_text(node) == '\0'))
    return false;
  out[0] = '\0';
  return true;
}

/* metrics.listen: empty (off) or one tcp: address; a Unix path is refused (the HTTP server
 * binds TCP only). */
static int set_http(walker *w, const yaml_node_t *node, const field *f, char *out) {
  if (off_value(node, out))
    return 0;
  if (want_scalar(w, node, f->key) != 0)
    return -1;
  gp_addr addr;
  gp_error why;
  if (gp_addr_parse(scalar_text(node), GP_ADDR_LISTEN, &addr, &why) != 0)
    return node_error(w, node, "%s: %s", f->key, why.message);
  if (addr.kind != GP_ADDR_TCP)
    return node_error(w, node, "%s: expected tcp:HOST:PORT (the metrics server speaks HTTP "
                      "over TCP only), got \"%s\"", f->key, scalar_text(node));
  snprintf(out, GP_ADDR_TEXT_MAX, "%s", scalar_text(node));
  return 0;
}

/* A path, or "" / null for none. */
static int set_path(walker *w, const yaml_node_t *node, const field *f, char *out) {
  if (off_value(node, out))
    return 0;
  if (want_scalar(w, node, f->key) != 0)
    return -1;
  if (strlen(scalar_text(node)) >= GD_CONFIG_PATH_MAX)
    return node_error(w, node, "%s: a path longer than %d bytes", f->key, GD_CONFIG_PATH_MAX - 1);
  snprintf(out, GD_CONFIG_PATH_MAX, "%s", scalar_text(node));
  return 0;
}

/* YAML 1.2's core booleans only: a "yes" or "on" that means something else is refused. */
static int set_bool(walker *w, const yaml_node_t *node, const field *f, bool *out) {
  if (want_scalar(w, node, f->key) != 0)
    return -1;
  const char *s = scalar_text(node);
  if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0)
    *out = true;
  else if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0)
    *out = false;
  else
    return node_error(w, node, "%s: expected true or false, got \"%s\"", f->key, s);
  return 0;
}

static int set_field(walker *w, const yaml_node_t *value, const field *f) {
  char *base = (char *)w->cfg;
  uint64_t v;
  switch (f->type) {
  case F_U32:
  case F_SIZE32:
    if (get_uint(w, value, f, f->type == F_SIZE32, &v) != 0)
      return -1;
    *(uint32_t *)(base + f->offset) = (uint32_t)v;
    return 0;
  case F_U64:
  case F_SIZE:
    if (get_uint(w, value, f, f->type == F_SIZE, &v) != 0)
      return -1;
    *(uint64_t *)(base + f->offset) = v;
    return 0;
  case F_LEVEL:
    if (want_scalar(w, value, f->key) != 0)
      return -1;
    if (gd_log_level_from_name(scalar_text(value), strlen(scalar_text(value)),
                               &w->cfg->log_level) != 0)
      return node_error(w, value, "log_level: expected error, warn, info or debug, got \"%s\"",
                        scalar_text(value));
    return 0;
  case F_BACKEND:
    if (want_scalar(w, value, f->key) != 0)
      return -1;
    if (gd_backend_kind_from_name(scalar_text(value), &w->cfg->backend) != 0)
      return node_error(w, value, "backend: expected auto, gpu or cpu, got \"%s\"",
                        scalar_text(value));
    return 0;
  case F_TARGET:
    if (want_scalar(w, value, f->key) != 0)
      return -1;
    if (gd_log_target_from_name(scalar_text(value), &w->cfg->log_target) != 0)
      return node_error(w, value, "log_target: expected auto, journal or stderr, got \"%s\"",
                        scalar_text(value));
    return 0;
  case F_HTTP: return set_http(w, value, f, base + f->offset);
  case F_PATH: return set_path(w, value, f, base + f->offset);
  case F_BOOL: return set_bool(w, value, f, (bool *)(base + f->offset));
  case F_MODE: return set_mode(w, value, f, &w->cfg->unix_socket_mode);
  case F_GROUP:
    return set_group(w, value, f, w->cfg->unix_socket_group, sizeof w->cfg->unix_socket_group);
  case F_LISTEN: return set_listen(w, value, w->cfg);
  case F_DEVICES: return set_devices(w, value, &w->cfg->gpu);
  case F_FRACTION: return set_fraction(w, value, f, (double *)((char *)w->cfg + f->offset));
  case F_KERNEL: return set_name(w, value, f, w->cfg->gpu.kernel, sizeof w->cfg->gpu.kernel);
  case F_SECTION: return walk_mapping(w, value, f->sub, f->key);
  }
  return node_error(w, value, "%s: internal error: unknown field type", f->key);
}

static const field *find_field(const field *fields, const char *key) {
  for (const field *f = fields; f->key; f++)
    if (strcmp(f->key, key) == 0)
      return f;
  return NULL;
}

static int walk_mapping(walker *w, const yaml_node_t *node, const field *fields,
                        const char *section) {
  if (section && is_null(node))
    return 0; /* "limits:" with every key commented out */
  if (node->type != YAML_MAPPING_NODE)
    return node_error(w, node, "%s: expected a mapping of keys", section ? section : "config");
  uint64_t seen = 0; /* bit i: fields[i] was given (each table has < 64 keys) */
  for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
       p++) {
    yaml_node_t *key = yaml_document_get_node(w->doc, p->key);
    yaml_node_t *value = yaml_document_get_node(w->doc, p->value);
    if (!key || !value)
      return node_error(w, node, "malformed mapping");
    if (key->type != YAML_SCALAR_NODE)
      return node_error(w, key, "keys must be plain names");
    const field *f = find_field(fields, scalar_text(key));
    if (!f)
      return node_error(w, key, "unknown key \"%s%s%s\"", section ? section : "",
                        section ? "." : "", scalar_text(key));
    uint64_t bit = 1ull << (f - fields);
    if (seen & bit)
      return node_error(w, key, "key \"%s\" given twice", f->key);
    seen |= bit;
    if (set_field(w, value, f) != 0)
      return -1;
  }
  return 0;
}

/* ---- entry points -------------------------------------------------------- */

static int parser_error(const char *name, const yaml_parser_t *parser, gp_error *err) {
  const yaml_mark_t *mark = parser->context ? &parser->context_mark : &parser->problem_mark;
  if (parser->problem)
    mark = &parser->problem_mark;
  return gp_error_set(err, GP_E_INVALID_ARGUMENT, "%s:%zu:%zu: YAML: %s%s%s", name,
                      mark->line + 1, mark->column + 1,
                      parser->problem ? parser->problem : "syntax error",
                      parser->context ? " " : "", parser->context ? parser->context : "");
}

int gd_config_load_string(const char *name, const char *text, size_t len, gd_config *cfg,
                          gp_error *err) {
  yaml_parser_t parser;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&parser))
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "%s: out of memory", name);
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) {
    int rc = parser_error(name, &parser, err);
    yaml_parser_delete(&parser);
    return rc;
  }
  gd_config next = *cfg;
  walker w = {name, &doc, &next, err};
  int rc = 0;
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (root && !is_null(root))
    rc = walk_mapping(&w, root, root_fields, NULL);
  /* A second document in the same file would be silently ignored: refuse it. */
  if (rc == 0 && root) {
    yaml_document_t extra;
    if (yaml_parser_load(&parser, &extra)) {
      yaml_node_t *extra_root = yaml_document_get_root_node(&extra);
      if (extra_root)
        rc = node_error(&w, extra_root, "more than one YAML document");
      yaml_document_delete(&extra);
    } else {
      rc = parser_error(name, &parser, err);
    }
  }
  yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
  if (rc == 0)
    *cfg = next;
  return rc;
}

int gd_config_load_file(const char *path, gd_config *cfg, gp_error *err) {
  FILE *fp = fopen(path, "rb");
  if (!fp)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "%s: %s", path, strerror(errno));
  char *text = malloc(GD_CONFIG_FILE_MAX + 1);
  if (!text) {
    fclose(fp);
    return gp_error_set(err, GP_E_RESOURCE_EXHAUSTED, "%s: out of memory", path);
  }
  size_t len = fread(text, 1, GD_CONFIG_FILE_MAX + 1, fp);
  int read_error = ferror(fp);
  fclose(fp);
  int rc;
  if (read_error)
    rc = gp_error_set(err, GP_E_INVALID_ARGUMENT, "%s: read error", path);
  else if (len > GD_CONFIG_FILE_MAX)
    rc = gp_error_set(err, GP_E_INVALID_ARGUMENT, "%s: larger than %d bytes", path,
                      GD_CONFIG_FILE_MAX);
  else
    rc = gd_config_load_string(path, text, len, cfg, err);
  free(text);
  return rc;
}

/* ---- checks beyond the schema ------------------------------------------- */

/* Appends one line to a problem list; returns 1 (a count of problems). */
static int problem(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int problem(char *out, size_t size, const char *fmt, ...) {
  size_t used = strlen(out);
  if (used + 1 >= size)
    return 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out + used, size - used, fmt, ap);
  va_end(ap);
  used = strlen(out);
  if (used + 1 < size) {
    out[used] = '\n';
    out[used + 1] = '\0';
  }
  return 1;
}

/* "1024 (1 KiB)" for sizes that are whole binary units, else the number. */
static const char *size_text(uint64_t bytes, char *buf, size_t size) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
  int unit = -1;
  uint64_t v = bytes;
  while (unit < 3 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    unit++;
  }
  if (unit < 0)
    snprintf(buf, size, "%llu", (unsigned long long)bytes);
  else
    snprintf(buf, size, "%llu (%llu %s)", (unsigned long long)bytes, (unsigned long long)v,
             units[unit]);
  return buf;
}

int gd_config_check_socket_dir(const char *path, bool need_write, gp_error *err) {
  char dir[GP_ADDR_PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == dir)
    dir[1] = '\0';
  else
    *slash = '\0';
  struct stat st;
  if (stat(dir, &st) != 0) {
    if (errno == ENOENT)
      return gp_error_set(err, GP_E_UNAVAILABLE, "the directory %s does not exist", dir);
    return gp_error_set(err, GP_E_UNAVAILABLE, "the directory %s: %s", dir, strerror(errno));
  }
  if (!S_ISDIR(st.st_mode))
    return gp_error_set(err, GP_E_UNAVAILABLE, "%s is not a directory", dir);
  if (need_write && access(dir, W_OK | X_OK) != 0)
    return gp_error_set(err, GP_E_UNAVAILABLE, "the directory %s is not writable for uid %u (%s)",
                        dir, (unsigned)geteuid(), strerror(errno));
  return 0;
}

/* A socket directly in the service's runtime directory, which does not exist before systemd
 * first creates it: not a problem yet. */
static bool runtime_dir_pending(const char *path) {
  size_t len = strlen(GD_CONFIG_RUNTIME_DIR);
  struct stat st;
  return strncmp(path, GD_CONFIG_RUNTIME_DIR "/", len + 1) == 0 &&
         strchr(path + len + 1, '/') == NULL && stat(GD_CONFIG_RUNTIME_DIR, &st) != 0 &&
         errno == ENOENT;
}

static int check_listen(const gd_config *cfg, bool socket_activated, char *out, size_t size) {
  int count = 0;
  if (cfg->listen_count == 0 && !socket_activated)
    count += problem(out, size, "listen: the list is empty: gemmd would have nothing to listen on "
                                "(an empty list works only under systemd socket activation)");
  for (size_t i = 0; i < cfg->listen_count && !socket_activated; i++) {
    gp_addr addr;
    gp_error why;
    gp_error dir_err;
    if (gp_addr_parse(cfg->listen[i], GP_ADDR_LISTEN, &addr, &why) != 0)
      count += problem(out, size, "listen: %s", why.message);
    else if (addr.kind == GP_ADDR_UNIX && runtime_dir_pending(addr.path))
      problem(out, size, "note: listen %s: %s does not exist yet; systemd creates it "
              "(tmpfiles.d/gemmd.conf, RuntimeDirectory=)", cfg->listen[i], GD_CONFIG_RUNTIME_DIR);
    else if (addr.kind == GP_ADDR_UNIX &&
             gd_config_check_socket_dir(addr.path, true, &dir_err) != 0)
      count += problem(out, size, "listen %s: %s", cfg->listen[i], dir_err.message);
  }
  return count;
}

/* Limits that contradict each other: each alone is in range, together they refuse what the
 * other allows. */
static int check_limits(const gd_config *cfg, char *out, size_t size) {
  const gp_limits *p = &cfg->proto;
  char a[64], b[64];
  int count = 0;
  if (p->max_message_bytes < p->max_header_bytes)
    count += problem(out, size, "limits.max_message_bytes %s is smaller than "
                     "limits.max_header_bytes %s: no header of the allowed size could arrive",
                     size_text(p->max_message_bytes, a, sizeof a),
                     size_text(p->max_header_bytes, b, sizeof b));
  if (p->max_message_bytes < p->max_operand_bytes)
    count += problem(out, size, "limits.max_message_bytes %s is smaller than "
                     "limits.max_operand_bytes %s: every request is refused long before its "
                     "operands reach their limit; raise max_message_bytes (3 x max_operand_bytes "
                     "+ max_header_bytes carries a full request) or lower max_operand_bytes",
                     size_text(p->max_message_bytes, a, sizeof a),
                     size_text(p->max_operand_bytes, b, sizeof b));
  return count;
}

int gd_config_socket_gid(const gd_config *cfg, long *gid, gp_error *err) {
  const char *name = cfg->unix_socket_group;
  *gid = -1;
  if (!name[0])
    return 0;
  uint64_t number;
  if (parse_uint(name, &number) == 0) {
    if (number >= (uint64_t)(gid_t)-1) /* (gid_t)-1 means "no change" to chown */
      return gp_error_set(err, GP_E_INVALID_ARGUMENT, "unix_socket_group: %s is not a valid gid",
                          name);
    *gid = (long)number;
    return 0;
  }
  struct group grp, *found = NULL;
  char buf[16384];
  int rc = getgrnam_r(name, &grp, buf, sizeof buf, &found);
  if (rc != 0 || !found)
    return gp_error_set(err, GP_E_INVALID_ARGUMENT, "unix_socket_group: no group \"%s\"%s%s",
                        name, rc ? ": " : "", rc ? strerror(rc) : "");
  *gid = (long)found->gr_gid;
  return 0;
}

const char *gd_config_socket_mode_warning(unsigned mode) {
  /* connecting to a Unix socket takes write permission on it */
  if (mode & 0002)
    return "lets every local user connect (others may write); use 0660 and a group";
  return NULL;
}

int gd_config_check(const gd_config *cfg, bool socket_activated, char *out, size_t size) {
  if (size > 0)
    out[0] = '\0';
  const char *warning = gd_config_socket_mode_warning(cfg->unix_socket_mode);
  if (warning && cfg->listen_count > 0)
    problem(out, size, "warning: unix_socket_mode %04o %s", cfg->unix_socket_mode, warning);
  int count = 0;
  long gid;
  gp_error gid_err;
  if (gd_config_socket_gid(cfg, &gid, &gid_err) != 0)
    count += problem(out, size, "%s", gid_err.message);
  return count + check_listen(cfg, socket_activated, out, size) + check_limits(cfg, out, size);
}
