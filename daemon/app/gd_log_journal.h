/*
 * gd_log_journal.h - log entries to the systemd journal with structured
 * fields (gemmd.yaml log_target): the gd_log sink that sends each entry with
 * sd_journal_sendv().
 *
 * Fields: MESSAGE, PRIORITY (syslog 3, 4, 6, 7), SYSLOG_IDENTIFIER=gemmd, and
 * where the entry has them GEMMD_CONN, GEMMD_REQUEST_ID (CONN/MSGID),
 * GEMMD_PEER, GEMMD_DEVICE, GEMMD_CODE, GEMMD_DURATION_US.
 */
#ifndef GD_LOG_JOURNAL_H
#define GD_LOG_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

#include "gd_log.h"

#define GD_LOG_JOURNAL_FIELDS 10
#define GD_LOG_JOURNAL_FIELD_MAX 1100 /* MESSAGE= and gd_log's 1024-byte line */

typedef struct {
  char text[GD_LOG_JOURNAL_FIELDS][GD_LOG_JOURNAL_FIELD_MAX];
  struct iovec iov[GD_LOG_JOURNAL_FIELDS];
} gd_log_journal_entry;

/* Builds the fields of one entry ("KEY=value", each in e->iov); returns how many. Values are
 * cut at GD_LOG_JOURNAL_FIELD_MAX; a newline in a value other than MESSAGE becomes a space
 * (the journal's native protocol takes such values only in its binary form). */
size_t gd_log_journal_build(gd_log_level level, const gd_log_ctx *ctx, const char *msg,
                            gd_log_journal_entry *e);

/* True when target says the journal: journal, or auto with stderr connected to the journal
 * (JOURNAL_STREAM names stderr's device and inode, as systemd sets it). */
bool gd_log_journal_wanted(gd_log_target target);

/* Installs the journal sink when gd_log_journal_wanted(target); call before other threads
 * start. Returns whether it did. */
bool gd_log_journal_setup(gd_log_target target);

#endif /* GD_LOG_JOURNAL_H */
