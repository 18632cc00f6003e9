/*
 * gd_log.h - logging, one entry per event.
 *
 * By default each entry is a line on stderr: when stderr is the journal's
 * stream (JOURNAL_STREAM names it) it starts with a syslog priority "<3>".."<7>" that journald turns into
 * the entry's priority; otherwise with "error: ", "warn: ", "info: " or
 * "debug: ". Thread-safe (one fprintf per line; stderr is unbuffered, lines
 * do not interleave within PIPE_BUF).
 *
 * A sink (gd_log_set_sink) replaces the stderr line: the daemon installs the
 * journal's (gd_log_journal.h), which sends each entry with structured fields
 * taken from a gd_log_ctx. This file does not depend on libsystemd.
 */
#ifndef GD_LOG_H
#define GD_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
  GD_LOG_ERROR = 0,
  GD_LOG_WARN = 1,
  GD_LOG_INFO = 2,
  GD_LOG_DEBUG = 3,
} gd_log_level;

/* Where entries go (gemmd.yaml log_target). */
typedef enum {
  GD_LOG_TARGET_AUTO = 0,    /* the journal when JOURNAL_STREAM is set, else stderr */
  GD_LOG_TARGET_JOURNAL = 1, /* the journal, with structured fields */
  GD_LOG_TARGET_STDERR = 2,  /* lines on stderr */
} gd_log_target;

/* "auto", "journal", "stderr"; 0 or -1 when unknown. */
const char *gd_log_target_name(gd_log_target target);
int gd_log_target_from_name(const char *name, gd_log_target *out);

/* What an entry is about, for structured sinks; fields left 0/NULL are absent. */
typedef struct {
  uint64_t conn;        /* the connection's id (GEMMD_CONN; 0: none) */
  uint32_t msgid;       /* with conn: GEMMD_REQUEST_ID=CONN/MSGID */
  bool has_msgid;
  const char *peer;     /* the connection's peer (GEMMD_PEER) */
  const char *device;   /* "cuda:N" or "cpu" (GEMMD_DEVICE) */
  const char *code;     /* error code name (GEMMD_CODE) */
  uint64_t duration_us; /* GEMMD_DURATION_US */
  bool has_duration;
} gd_log_ctx;

/* Receives each entry that passes the level (msg formatted, without a newline). Any thread. */
typedef void (*gd_log_sink)(gd_log_level level, const gd_log_ctx *ctx, const char *msg);
/* NULL restores the stderr lines. Call before other threads start. */
void gd_log_set_sink(gd_log_sink sink);

/* True when stderr is the journal stream systemd connected (JOURNAL_STREAM names its device
 * and inode). */
bool gd_log_stderr_is_journal(void);

/* Reads JOURNAL_STREAM once; call before any other thread starts. */
void gd_log_init(gd_log_level level);
/* Changes the threshold (SIGHUP). Safe from any thread. */
void gd_log_set_level(gd_log_level level);
gd_log_level gd_log_get_level(void);
bool gd_log_enabled(gd_log_level level);

/* "error", "warn", "info", "debug" */
const char *gd_log_level_name(gd_log_level level);
/* Parses a level name of len bytes; 0 on success, -1 when unknown. */
int gd_log_level_from_name(const char *name, size_t len, gd_log_level *out);

void gd_log(gd_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with structured fields (ctx may be NULL). */
void gd_logx(gd_log_level level, const gd_log_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define gd_error(...) gd_log(GD_LOG_ERROR, __VA_ARGS__)
#define gd_warn(...) gd_log(GD_LOG_WARN, __VA_ARGS__)
#define gd_info(...) gd_log(GD_LOG_INFO, __VA_ARGS__)
#define gd_debug(...)                                                                              \
  do {                                                                                             \
    if (gd_log_enabled(GD_LOG_DEBUG))                                                              \
      gd_log(GD_LOG_DEBUG, __VA_ARGS__);                                                           \
  } while (0)

/* Copies up to n bytes of untrusted data into out (size out_size) as printable text: bytes
 * outside 0x20..0x7e become \xNN. For logging a peer's garbage. Returns out. */
char *gd_log_clean(char *out, size_t out_size, const void *data, size_t n);

#endif /* GD_LOG_H */
