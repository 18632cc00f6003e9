/*
 * gd_log_journal.c - see gd_log_journal.h.
 */
#include "gd_log_journal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-journal.h>

static const int level_priority[] = {3, 4, 6, 7}; /* LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG */

static void add(gd_log_journal_entry *e, size_t *n, bool one_line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void add(gd_log_journal_entry *e, size_t *n, bool one_line, const char *fmt, ...) {
  if (*n >= GD_LOG_JOURNAL_FIELDS)
    return;
  char *text = e->text[*n];
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(text, GD_LOG_JOURNAL_FIELD_MAX, fmt, ap);
  va_end(ap);
  if (len < 0)
    return;
  if ((size_t)len >= GD_LOG_JOURNAL_FIELD_MAX)
    len = GD_LOG_JOURNAL_FIELD_MAX - 1;
  if (one_line)
    for (int i = 0; i < len; i++)
      if (text[i] == '\n')
        text[i] = ' ';
  e->iov[*n].iov_base = text;
  e->iov[*n].iov_len = (size_t)len;
  (*n)++;
}

size_t gd_log_journal_build(gd_log_level level, const gd_log_ctx *ctx, const char *msg,
                            gd_log_journal_entry *e) {
  size_t n = 0;
  int priority = (int)level >= 0 && level <= GD_LOG_DEBUG ? level_priority[level] : 6;
  add(e, &n, false, "MESSAGE=%s", msg);
  add(e, &n, true, "PRIORITY=%d", priority);
  add(e, &n, true, "SYSLOG_IDENTIFIER=gemmd");
  if (!ctx)
    return n;
  if (ctx->conn)
    add(e, &n, true, "GEMMD_CONN=%" PRIu64, ctx->conn);
  if (ctx->conn && ctx->has_msgid)
    add(e, &n, true, "GEMMD_REQUEST_ID=%" PRIu64 "/%" PRIu32, ctx->conn, ctx->msgid);
  if (ctx->peer && *ctx->peer)
    add(e, &n, true, "GEMMD_PEER=%s", ctx->peer);
  if (ctx->device && *ctx->device)
    add(e, &n, true, "GEMMD_DEVICE=%s", ctx->device);
  if (ctx->code && *ctx->code)
    add(e, &n, true, "GEMMD_CODE=%s", ctx->code);
  if (ctx->has_duration)
    add(e, &n, true, "GEMMD_DURATION_US=%" PRIu64, ctx->duration_us);
  return n;
}

bool gd_log_journal_wanted(gd_log_target target) {
  return target == GD_LOG_TARGET_JOURNAL ||
         (target == GD_LOG_TARGET_AUTO && gd_log_stderr_is_journal());
}

static void journal_sink(gd_log_level level, const gd_log_ctx *ctx, const char *msg) {
  gd_log_journal_entry *e = malloc(sizeof *e); /* 11 KB: not on a worker thread's stack */
  int rc = -1;
  if (e) {
    size_t n = gd_log_journal_build(level, ctx, msg, e);
    rc = sd_journal_sendv(e->iov, (int)n);
    free(e);
  }
  if (rc < 0) /* no journal after all (or no memory): the line still goes somewhere */
    fprintf(stderr, "%s: %s\n", gd_log_level_name(level), msg);
}

bool gd_log_journal_setup(gd_log_target target) {
  if (!gd_log_journal_wanted(target))
    return false;
  gd_log_set_sink(journal_sink);
  return true;
}
