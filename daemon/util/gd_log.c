/*
 * gd_log.c - see gd_log.h.
 */
#include "gd_log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_int log_level = GD_LOG_INFO;
static bool log_journal;

static gd_log_sink log_sink;

static const char *const target_names[] = {"auto", "journal", "stderr"};
static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const int level_priority[] = {3, 4, 6, 7}; /* LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG */

/* JOURNAL_STREAM is "DEVICE:INODE" of the stream systemd connected; it counts only while
 * stderr is still that stream (not redirected by whoever started us). */
bool gd_log_stderr_is_journal(void) {
  const char *js = getenv("JOURNAL_STREAM");
  unsigned long long dev, ino;
  struct stat st;
  if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) != 0)
    return false;
  return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void gd_log_init(gd_log_level level) {
  log_journal = gd_log_stderr_is_journal();
  gd_log_set_level(level);
}

void gd_log_set_sink(gd_log_sink sink) { log_sink = sink; }

const char *gd_log_target_name(gd_log_target target) {
  if ((int)target < 0 || target > GD_LOG_TARGET_STDERR)
    return "?";
  return target_names[target];
}

int gd_log_target_from_name(const char *name, gd_log_target *out) {
  for (int i = 0; i <= GD_LOG_TARGET_STDERR; i++) {
    if (strcmp(target_names[i], name) == 0) {
      *out = (gd_log_target)i;
      return 0;
    }
  }
  return -1;
}

void gd_log_set_level(gd_log_level level) { atomic_store(&log_level, (int)level); }

gd_log_level gd_log_get_level(void) { return (gd_log_level)atomic_load(&log_level); }

bool gd_log_enabled(gd_log_level level) { return (int)level <= atomic_load(&log_level); }

const char *gd_log_level_name(gd_log_level level) {
  if ((int)level < 0 || level > GD_LOG_DEBUG)
    return "?";
  return level_names[level];
}

int gd_log_level_from_name(const char *name, size_t len, gd_log_level *out) {
  for (int i = 0; i <= GD_LOG_DEBUG; i++) {
    if (strlen(level_names[i]) == len && memcmp(level_names[i], name, len) == 0) {
      *out = (gd_log_level)i;
      return 0;
    }
  }
  return -1;
}

static void log_v(gd_log_level level, const gd_log_ctx *ctx, const char *fmt, va_list ap) {
  char line[1024];
  int n = vsnprintf(line, sizeof line, fmt, ap);
  if (n < 0)
    return;
  if (log_sink) {
    log_sink(level, ctx, line);
    return;
  }
  /* One fprintf per line so that lines from worker threads do not interleave. */
  if (log_journal)
    fprintf(stderr, "<%d>%s\n", level_priority[level], line);
  else
    fprintf(stderr, "%s: %s\n", level_names[level], line);
}

void gd_log(gd_log_level level, const char *fmt, ...) {
  if (!gd_log_enabled(level))
    return;
  va_list ap;
  va_start(ap, fmt);
  log_v(level, NULL, fmt, ap);
  va_end(ap);
}

void gd_logx(gd_log_level level, const gd_log_ctx *ctx, const char *fmt, ...) {
  if (!gd_log_enabled(level))
    return;
  va_list ap;
  va_start(ap, fmt);
  log_v(level, ctx, fmt, ap);
  va_end(ap);
}

char *gd_log_clean(char *out, size_t out_size, const void *data, size_t n) {
  const unsigned char *p = data;
  size_t o = 0;
  if (out_size == 0)
    return out;
  for (size_t i = 0; i < n && o + 5 < out_size; i++) {
    if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\')
      out[o++] = (char)p[i];
    else
      o += (size_t)snprintf(out + o, out_size - o, "\\x%02x", p[i]);
  }
  out[o] = '\0';
  return out;
}
