/*
 * progress.c - a one-line progress bar on stderr for long transfers. Only on
 * a terminal, and only once a transfer has taken more than half a second, so
 * that quick requests and scripts see nothing.
 */
#include <unistd.h>

#include "gemmctl.h"

#define SHOW_AFTER_US 500000
#define BAR_WIDTH 30

void gctl_progress_init(gctl_progress *p, const char *label) {
  p->enabled = isatty(STDERR_FILENO) == 1;
  p->shown = false;
  p->start_us = gctl_now_us();
  p->label = label;
  p->rows = false;
}

void gctl_progress_update(gctl_progress *p, uint64_t done, uint64_t total) {
  if (!p->enabled || total == 0) return;
  int64_t elapsed = gctl_now_us() - p->start_us;
  if (!p->shown && elapsed < SHOW_AFTER_US) return;
  p->shown = true;
  int filled = (int)((double)done / (double)total * BAR_WIDTH);
  if (filled > BAR_WIDTH) filled = BAR_WIDTH;
  if (p->rows) { /* a computation here, counted in rows */
    fprintf(stderr, "\r%s [%.*s%*s] %5.1f%% %llu of %llu rows", p->label, filled,
            "##############################", BAR_WIDTH - filled, "",
            100.0 * (double)done / (double)total, (unsigned long long)done,
            (unsigned long long)total);
    fflush(stderr);
    return;
  }
  double mib = (double)done / (1024.0 * 1024.0);
  double rate = elapsed > 0 ? mib / ((double)elapsed / 1e6) : 0;
  fprintf(stderr, "\r%s [%.*s%*s] %5.1f%% %.1f MiB %.1f MiB/s", p->label, filled,
          "##############################", BAR_WIDTH - filled, "",
          100.0 * (double)done / (double)total, mib, rate);
  fflush(stderr);
}

void gctl_progress_end(gctl_progress *p) {
  if (p->shown) fputs("\n", stderr);
  p->shown = false;
}
