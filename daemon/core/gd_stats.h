/*
 * gd_stats.h - the daemon's counters and latency histograms (the `stats`
 * method). Each loop thread (config key `loops`) keeps its own, and a reader (the stats method,
 * the metrics snapshot) adds them up (gd_stats_add) from another thread: each field is an atomic,
 * so no value is torn, and a loop's increments stay in its own cache lines. Counters of one
 * request need not agree with each other at every instant.
 *
 * Histograms have fixed log2 buckets in microseconds: bucket 0 counts values
 * < 1 us, bucket i (1 <= i < GD_HIST_BUCKETS - 1) counts [2^(i-1), 2^i) us,
 * and the last bucket counts everything from 2^(GD_HIST_BUCKETS - 2) us up.
 */
#ifndef GD_STATS_H
#define GD_STATS_H

#include <msgpack.h>
#include <stdatomic.h>
#include <stdint.h>

#include "gp_error.h"
#include "gp_types.h"

#define GD_HIST_BUCKETS 32
#define GD_STATS_CODES 10 /* index 0: OK, index -code for GP_E_* */
#define GD_STATS_METHODS 11 /* indexed by gp_method (UNKNOWN included) */

typedef _Atomic uint64_t gd_counter;

typedef struct {
  gd_counter counts[GD_HIST_BUCKETS];
  gd_counter count;
  gd_counter sum_us;
  gd_counter max_us;
} gd_hist;

typedef enum { GD_HIST_QUEUED = 0, GD_HIST_COMPUTE = 1, GD_HIST_TOTAL = 2 } gd_hist_kind;
#define GD_HIST_KINDS 3

typedef struct {
  uint64_t started_us;                    /* monotonic, for uptime */
  gd_counter requests;                    /* every request answered or refused */
  gd_counter requests_by_method[GD_STATS_METHODS];
  gd_counter replies[GD_STATS_METHODS][GD_STATS_CODES]; /* replies sent, by method and code */
  gd_counter notifications;
  gd_counter errors_by_code[GD_STATS_CODES];
  gd_counter bytes_in, bytes_out;
  gd_counter connections_total;           /* accepted since start */
  gd_counter connections_refused;         /* over max_connections */
  gd_counter connections_dropped;         /* accept failed (out of file descriptors) */
  gd_counter admission_waits;             /* gemm requests that waited for room to be admitted */
  gd_counter gemm_ok;
  gd_hist hist[GD_HIST_KINDS];
} gd_stats;

void gd_stats_init(gd_stats *s);
/* dst += src, counter by counter (each hist's max_us: the larger); dst's started_us stays. */
void gd_stats_add(gd_stats *dst, const gd_stats *src);
/* A copy of src, each counter read atomically (a plain struct copy would not be). */
void gd_stats_copy(gd_stats *dst, const gd_stats *src);
/* Bucket of a value (exposed for tests). */
unsigned gd_hist_bucket(uint64_t us);
/* Upper bound (exclusive) of bucket i in us; UINT64_MAX for the last. */
uint64_t gd_hist_bucket_limit(unsigned i);
void gd_hist_add(gd_hist *h, uint64_t us);

/* Counts an error reply with code (a GP_E_* value). */
void gd_stats_error(gd_stats *s, int code);
/* Counts a reply to a method with code (0: a result; else a GP_E_* value). */
void gd_stats_reply(gd_stats *s, gp_method method, int code);
/* Index of code in errors_by_code and replies (an unknown code counts as INTERNAL). */
unsigned gd_stats_code_index(int code);

/* Packs the histogram as {"bounds_us": [...], "counts": [...], "count", "sum_us", "max_us"};
 * bounds_us[i] is bucket i's exclusive upper bound, the last one omitted (open-ended). */
void gd_hist_pack(const gd_hist *h, msgpack_packer *pk);

/* Packs the daemon's own counters as GD_STATS_PAIRS map entries (not the map header): the
 * caller adds its own live fields (queue depth, connections). Returns GD_STATS_PAIRS. */
#define GD_STATS_PAIRS 12
unsigned gd_stats_pack_pairs(const gd_stats *s, uint64_t now_us, msgpack_packer *pk);

/* Packing helpers shared by the methods. */
void gd_pack_str(msgpack_packer *pk, const char *s);
void gd_pack_kv_u64(msgpack_packer *pk, const char *key, uint64_t v);
void gd_pack_kv_str(msgpack_packer *pk, const char *key, const char *v);

#endif /* GD_STATS_H */
