/*
 * gd_netsched.h - net/'s one door into the scheduler (core/gd_sched.h): every call a connection,
 * a loop or a method makes into the scheduler goes through a function here, and no other file of
 * net/ includes gd_sched.h (scripts/check-layers.py checks both). Each function is the
 * scheduler's of the same name (gd_sched_X -> gd_netsched_X), with its contract, threads and
 * locking as gd_sched.h says; the scheduler's types (gd_sched, gd_sched_share, gd_sched_port,
 * gd_sched_limits, gd_admit) come with this header.
 */
#ifndef GD_NETSCHED_H
#define GD_NETSCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "gd_sched.h"

/* ---- The job life (gd_call.c's records, the request's payload and its result) ---- */
gd_admit gd_netsched_admit(gd_sched *s, const gp_gemm_hdr *hdr, bool has_c, uint32_t msgid,
                           const gd_sched_share *share, gd_job_waiter *waiter, gd_job **out,
                           gp_error *err);
bool gd_netsched_input_window(gd_sched *s, gd_job *job, gp_operand operand, uint64_t offset,
                              void **ptr, size_t *len);
int gd_netsched_input(gd_sched *s, gd_job *job, gp_operand operand, uint64_t offset,
                      const void *data, size_t len, bool *pause, gp_error *err);
bool gd_netsched_input_resident(gd_sched *s, gd_job *job, gp_operand operand,
                                gd_resident_buf *res);
bool gd_netsched_input_mapped(gd_sched *s, gd_job *job, gp_operand operand, gd_region *r,
                              const uint8_t *ptr);
bool gd_netsched_input_device(gd_sched *s, gd_job *job, gp_operand operand, gd_region *r,
                              uint64_t offset);
bool gd_netsched_output_mapped(gd_sched *s, gd_job *job, gd_region *r, uint8_t *ptr);
bool gd_netsched_output_device(gd_sched *s, gd_job *job, gd_region *r, uint64_t offset);
int gd_netsched_submit(gd_sched *s, gd_job *job, gp_error *err);
bool gd_netsched_chunks_in_job_memory(const gd_sched *s, const gd_job *job);
void gd_netsched_chunk_done(gd_sched *s, gd_job *job, const void *chunk, size_t len);
void gd_netsched_finish(gd_sched *s, gd_job *job, bool ok);
void gd_netsched_abandon(gd_sched *s, gd_job *job);
bool gd_netsched_operand_total(const gp_gemm_hdr *hdr, uint64_t operand_bytes[3], uint64_t *total);

/* ---- Budget bytes held outside jobs (regions, resident operands); the regions ---- */
int gd_netsched_reserve(gd_sched *s, uint64_t bytes, gp_error *err);
void gd_netsched_unreserve(gd_sched *s, uint64_t bytes);
void gd_netsched_region_added(gd_sched *s, gd_region *r);
void gd_netsched_region_put(gd_sched *s, gd_region *r);
int gd_netsched_device_region_open(gd_sched *s, gd_region *r, const char *pci_bus_id,
                                   gp_error *err);
void gd_netsched_resident_freed(gd_sched *s);

/* ---- Each loop's port and the room callback ---- */
int gd_netsched_port_open(gd_sched *s, uv_loop_t *loop, gd_stats *stats, gd_sched_port **out,
                          gp_error *err);
gd_sched_port *gd_netsched_default_port(gd_sched *s);
void gd_netsched_port_on_room(gd_sched_port *p, void (*room)(void *arg), void *arg);
void gd_netsched_port_want_room(gd_sched_port *p, bool want);
void gd_netsched_port_close(gd_sched_port *p);

/* ---- The lock over what the loops share (gd_server.h) and the figures stats shows ---- */
void gd_netsched_lock(gd_sched *s);
void gd_netsched_unlock(gd_sched *s);
gd_sched_limits gd_netsched_get_limits(const gd_sched *s);
size_t gd_netsched_jobs(const gd_sched *s);
size_t gd_netsched_running(const gd_sched *s);
size_t gd_netsched_delivering(const gd_sched *s);
uint64_t gd_netsched_reserved_bytes(const gd_sched *s);

#endif /* GD_NETSCHED_H */
