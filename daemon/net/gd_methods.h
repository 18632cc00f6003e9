/*
 * gd_methods.h - the small methods: ping, info and stats. (gemm is the
 * session's and the scheduler's.) A connection's loop thread, under the shared lock.
 *
 * info:  {version, protocol, backend, devices: [{id, name, memory, sms, cc}],
 *         kernels: [...], dtypes: [...], limits: {...}, backend_info: {...}}
 * stats: {uptime_s, requests: {total, gemm, ping, info, stats, unknown},
 *         notifications, gemm_ok, errors: {CODE: n, ...}, bytes_in, bytes_out,
 *         connections_total, connections_refused,
 *         latency_us: {queued|compute|total: {bounds_us, counts, count, sum_us, max_us}},
 *         queue_depth, jobs_running, reserved_bytes, connections, backend,
 *         backend_stats: {devices: [{id, busy_us, ...}]}}
 */
#ifndef GD_METHODS_H
#define GD_METHODS_H

#include <msgpack.h>
#include <stdint.h>

#include "gd_server.h"
#include "gp_error.h"
#include "gp_types.h"

/* Appends the whole reply to msgid for method (PING, INFO or STATS) to out. shm: the connection
 * may use shared memory (info's "features" then lists "shm"). 0, or a gp_code with err filled
 * (UNIMPLEMENTED for any other method, RESOURCE_EXHAUSTED when out of memory). Under the shared
 * lock (gd_server.h): it reads the daemon's limits and counts. */
int gd_methods_reply(gd_server *d, uint32_t msgid, gp_method method, bool shm,
                     msgpack_sbuffer *out, gp_error *err);

#endif /* GD_METHODS_H */
