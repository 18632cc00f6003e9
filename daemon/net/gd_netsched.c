/*
 * gd_netsched.c - net/'s one door into the scheduler (see gd_netsched.h).
 */
#include "gd_netsched.h"

/* ---- The job life (gd_call.c's records, the request's payload and its result) ---- */
gd_admit gd_netsched_admit(gd_sched *s, const gp_gemm_hdr *hdr, bool has_c, uint32_t msgid,
                           const gd_sched_share *share, gd_job_waiter *waiter, gd_job **out,
                           gp_error *err) {
  return gd_sched_admit(s, hdr, has_c, msgid, share, waiter, out, err);
}

bool gd_netsched_input_window(gd_sched *s, gd_job *job, gp_operand operand, uint64_t offset,
                              void **ptr, size_t *len) {
  return gd_sched_input_window(s, job, operand, offset, ptr, len);
}

int gd_netsched_input(gd_sched *s, gd_job *job, gp_operand operand, uint64_t offset,
                      const void *data, size_t len, bool *pause, gp_error *err) {
  return gd_sched_input(s, job, operand, offset, data, len, pause, err);
}

bool gd_netsched_input_resident(gd_sched *s, gd_job *job, gp_operand operand,
                                gd_resident_buf *res) {
  return gd_sched_input_resident(s, job, operand, res);
}

bool gd_netsched_input_mapped(gd_sched *s, gd_job *job, gp_operand operand, gd_region *r,
                              const uint8_t *ptr) {
  return gd_sched_input_mapped(s, job, operand, r, ptr);
}

bool gd_netsched_input_device(gd_sched *s, gd_job *job, gp_operand operand, gd_region *r,
                              uint64_t offset) {
  return gd_sched_input_device(s, job, operand, r, offset);
}

bool gd_netsched_output_mapped(gd_sched *s, gd_job *job, gd_region *r, uint8_t *ptr) {
  return gd_sched_output_mapped(s, job, r, ptr);
}

bool gd_netsched_output_device(gd_sched *s, gd_job *job, gd_region *r, uint64_t offset) {
  return gd_sched_output_device(s, job, r, offset);
}

int gd_netsched_submit(gd_sched *s, gd_job *job, gp_error *err) {
  return gd_sched_submit(s, job, err);
}

bool gd_netsched_chunks_in_job_memory(const gd_sched *s, const gd_job *job) {
  return gd_sched_chunks_in_job_memory(s, job);
}

void gd_netsched_chunk_done(gd_sched *s, gd_job *job, const void *chunk, size_t len) {
  gd_sched_chunk_done(s, job, chunk, len);
}

void gd_netsched_finish(gd_sched *s, gd_job *job, bool ok) {
  gd_sched_finish(s, job, ok);
}

void gd_netsched_abandon(gd_sched *s, gd_job *job) {
  gd_sched_abandon(s, job);
}

bool gd_netsched_operand_total(const gp_gemm_hdr *hdr, uint64_t operand_bytes[3], uint64_t *total) {
  return gd_sched_operand_total(hdr, operand_bytes, total);
}

/* ---- Budget bytes held outside jobs (regions, resident operands); the regions ---- */
int gd_netsched_reserve(gd_sched *s, uint64_t bytes, gp_error *err) {
  return gd_sched_reserve(s, bytes, err);
}

void gd_netsched_unreserve(gd_sched *s, uint64_t bytes) {
  gd_sched_unreserve(s, bytes);
}

void gd_netsched_region_added(gd_sched *s, gd_region *r) {
  gd_sched_region_added(s, r);
}

void gd_netsched_region_put(gd_sched *s, gd_region *r) {
  gd_sched_region_put(s, r);
}

int gd_netsched_device_region_open(gd_sched *s, gd_region *r, const char *pci_bus_id,
                                   gp_error *err) {
  return gd_sched_device_region_open(s, r, pci_bus_id, err);
}

void gd_netsched_resident_freed(gd_sched *s) {
  gd_sched_resident_freed(s);
}

/* ---- Each loop's port and the room callback ---- */
int gd_netsched_port_open(gd_sched *s, uv_loop_t *loop, gd_stats *stats, gd_sched_port **out,
                          gp_error *err) {
  return gd_sched_port_open(s, loop, stats, out, err);
}

gd_sched_port *gd_netsched_default_port(gd_sched *s) {
  return gd_sched_default_port(s);
}

void gd_netsched_port_on_room(gd_sched_port *p, void (*room)(void *arg), void *arg) {
  gd_sched_port_on_room(p, room, arg);
}

void gd_netsched_port_want_room(gd_sched_port *p, bool want) {
  gd_sched_port_want_room(p, want);
}

void gd_netsched_port_close(gd_sched_port *p) {
  gd_sched_port_close(p);
}

/* ---- The lock over what the loops share (gd_server.h) and the figures stats shows ---- */
void gd_netsched_lock(gd_sched *s) {
  gd_sched_lock(s);
}

void gd_netsched_unlock(gd_sched *s) {
  gd_sched_unlock(s);
}

gd_sched_limits gd_netsched_get_limits(const gd_sched *s) {
  return gd_sched_get_limits(s);
}

size_t gd_netsched_jobs(const gd_sched *s) {
  return gd_sched_jobs(s);
}

size_t gd_netsched_running(const gd_sched *s) {
  return gd_sched_running(s);
}

size_t gd_netsched_delivering(const gd_sched *s) {
  return gd_sched_delivering(s);
}

uint64_t gd_netsched_reserved_bytes(const gd_sched *s) {
  return gd_sched_reserved_bytes(s);
}
