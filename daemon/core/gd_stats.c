/*
 * gd_stats.c - see gd_stats.h.
 */
#include "gd_stats.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

void gd_stats_init(gd_stats *s) { memset(s, 0, sizeof *s); }

/* Every field after started_us is a gd_counter, hists included: added and copied as one array
 * of COUNTERS of them, from `requests` on. */
_Static_assert((sizeof(gd_stats) - offsetof(gd_stats, requests)) % sizeof(gd_counter) == 0,
               "gd_stats is started_us and counters");
#define COUNTERS ((sizeof(gd_stats) - offsetof(gd_stats, requests)) / sizeof(gd_counter))

void gd_stats_add(gd_stats *dst, const gd_stats *src) {
  uint64_t max[GD_HIST_KINDS];
  for (int i = 0; i < GD_HIST_KINDS; i++)
    max[i] = atomic_load(&dst->hist[i].max_us);
  const gd_counter *from = &src->requests;
  gd_counter *to = &dst->requests;
  for (size_t i = 0; i < COUNTERS; i++)
    atomic_fetch_add_explicit(&to[i], atomic_load_explicit(&from[i], memory_order_relaxed),
                              memory_order_relaxed);
  for (int i = 0; i < GD_HIST_KINDS; i++) { /* the largest, not the sum */
    uint64_t theirs = atomic_load(&src->hist[i].max_us);
    atomic_store(&dst->hist[i].max_us, theirs > max[i] ? theirs : max[i]);
  }
}

void gd_stats_copy(gd_stats *dst, const gd_stats *src) {
  dst->started_us = src->started_us;
  const gd_counter *from = &src->requests;
  gd_counter *to = &dst->requests;
  for (size_t i = 0; i < COUNTERS; i++)
    atomic_store_explicit(&to[i], atomic_load_explicit(&from[i], memory_order_relaxed),
                          memory_order_relaxed);
}

unsigned gd_hist_bucket(uint64_t us) {
  unsigned b = 0;
  while (us > 0 && b < GD_HIST_BUCKETS - 1) {
    us >>= 1;
    b++;
  }
  return b;
}

uint64_t gd_hist_bucket_limit(unsigned i) {
  if (i >= GD_HIST_BUCKETS - 1)
    return UINT64_MAX;
  return 1ull << i;
}

void gd_hist_add(gd_hist *h, uint64_t us) {
  h->counts[gd_hist_bucket(us)]++;
  h->count++;
  h->sum_us += us;
  uint64_t max = atomic_load_explicit(&h->max_us, memory_order_relaxed);
  while (us > max && !atomic_compare_exchange_weak(&h->max_us, &max, us))
    ; /* another loop raised it meanwhile: max now holds its value */
}

unsigned gd_stats_code_index(int code) {
  if (code == 0)
    return 0;
  int index = -code;
  if (index <= 0 || index >= GD_STATS_CODES)
    index = -GP_E_INTERNAL;
  return (unsigned)index;
}

void gd_stats_error(gd_stats *s, int code) {
  s->errors_by_code[gd_stats_code_index(code ? code : GP_E_INTERNAL)]++;
}

void gd_stats_reply(gd_stats *s, gp_method method, int code) {
  unsigned m = (unsigned)method < GD_STATS_METHODS ? (unsigned)method : GP_METHOD_UNKNOWN;
  s->replies[m][gd_stats_code_index(code)]++;
}

void gd_pack_str(msgpack_packer *pk, const char *s) {
  size_t len = strlen(s);
  msgpack_pack_str(pk, len);
  msgpack_pack_str_body(pk, s, len);
}

void gd_pack_kv_u64(msgpack_packer *pk, const char *key, uint64_t v) {
  gd_pack_str(pk, key);
  msgpack_pack_uint64(pk, v);
}

void gd_pack_kv_str(msgpack_packer *pk, const char *key, const char *v) {
  gd_pack_str(pk, key);
  gd_pack_str(pk, v);
}

void gd_hist_pack(const gd_hist *h, msgpack_packer *pk) {
  msgpack_pack_map(pk, 5);
  gd_pack_str(pk, "bounds_us");
  msgpack_pack_array(pk, GD_HIST_BUCKETS - 1);
  for (unsigned i = 0; i < GD_HIST_BUCKETS - 1; i++)
    msgpack_pack_uint64(pk, gd_hist_bucket_limit(i));
  gd_pack_str(pk, "counts");
  msgpack_pack_array(pk, GD_HIST_BUCKETS);
  for (unsigned i = 0; i < GD_HIST_BUCKETS; i++)
    msgpack_pack_uint64(pk, h->counts[i]);
  gd_pack_kv_u64(pk, "count", h->count);
  gd_pack_kv_u64(pk, "sum_us", h->sum_us);
  gd_pack_kv_u64(pk, "max_us", h->max_us);
}

static void pack_errors(const gd_stats *s, msgpack_packer *pk) {
  msgpack_pack_map(pk, GD_STATS_CODES - 1);
  for (int i = 1; i < GD_STATS_CODES; i++)
    gd_pack_kv_u64(pk, gp_code_name(-i), s->errors_by_code[i]);
}

static void pack_requests(const gd_stats *s, msgpack_packer *pk) {
  static const gp_method methods[] = {GP_METHOD_GEMM, GP_METHOD_PING, GP_METHOD_INFO,
                                      GP_METHOD_STATS, GP_METHOD_SHM_REGISTER,
                                      GP_METHOD_SHM_UNREGISTER, GP_METHOD_AUTH, GP_METHOD_PUT,
                                      GP_METHOD_FREE, GP_METHOD_CUDA_REGISTER};
  msgpack_pack_map(pk, 2 + sizeof methods / sizeof methods[0]);
  gd_pack_kv_u64(pk, "total", s->requests);
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
    gd_pack_kv_u64(pk, gp_method_name(methods[i]), s->requests_by_method[methods[i]]);
  gd_pack_kv_u64(pk, "unknown", s->requests_by_method[GP_METHOD_UNKNOWN]);
}

unsigned gd_stats_pack_pairs(const gd_stats *s, uint64_t now_us, msgpack_packer *pk) {
  static const char *const hist_names[GD_HIST_KINDS] = {"queued", "compute", "total"};
  gd_pack_kv_u64(pk, "uptime_s", (now_us - s->started_us) / 1000000u);
  gd_pack_str(pk, "requests");
  pack_requests(s, pk);
  gd_pack_kv_u64(pk, "notifications", s->notifications);
  gd_pack_kv_u64(pk, "gemm_ok", s->gemm_ok);
  gd_pack_str(pk, "errors");
  pack_errors(s, pk);
  gd_pack_kv_u64(pk, "bytes_in", s->bytes_in);
  gd_pack_kv_u64(pk, "bytes_out", s->bytes_out);
  gd_pack_kv_u64(pk, "connections_total", s->connections_total);
  gd_pack_kv_u64(pk, "connections_refused", s->connections_refused);
  gd_pack_kv_u64(pk, "connections_dropped", s->connections_dropped);
  gd_pack_kv_u64(pk, "admission_waits", s->admission_waits);
  gd_pack_str(pk, "latency_us");
  msgpack_pack_map(pk, GD_HIST_KINDS);
  for (int i = 0; i < GD_HIST_KINDS; i++) {
    gd_pack_str(pk, hist_names[i]);
    gd_hist_pack(&s->hist[i], pk);
  }
  return GD_STATS_PAIRS;
}
