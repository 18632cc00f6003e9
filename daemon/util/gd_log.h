/*
 * gd_log.h - logging to stderr, one line per event.
 *
 * Under systemd (JOURNAL_STREAM set) each line starts with a syslog priority
 * "<3>".."<7>" that journald turns into the entry's priority; otherwise with
 * "error: ", "warn: ", "info: " or "debug: ". Thread-safe (one fprintf per
 * line; stderr is unbuffered, lines do not interleave within PIPE_BUF).
 */
#ifndef GD_LOG_H
#define GD_LOG_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
  GD_LOG_ERROR = 0,
  GD_LOG_WARN = 1,
  GD_LOG_INFO = 2,
  GD_LOG_DEBUG = 3,
} gd_log_level;

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
