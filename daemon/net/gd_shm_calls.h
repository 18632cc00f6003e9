/*
 * gd_shm_calls.h - what the protocol layer (gd_rpc.c) does with shared memory: the
 * shm_register / shm_unregister methods, a gemm operand given as a region reference (read by
 * the backend in place when it can, else copied from the mapping through the backend's input
 * seam, the way socket bytes are), and a result written into a region instead of onto the
 * socket (by the backend in place when it can, else copied there chunk by chunk). The regions
 * themselves are gd_shm.h's.
 * The connection's loop thread only.
 */
#ifndef GD_SHM_CALLS_H
#define GD_SHM_CALLS_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "gd_call.h"
#include "gd_netsched.h"
#include "gd_shm.h"
#include "gp_decode.h"

/* An operand being copied from a region into its job (it may span pauses of the backend). */
typedef struct {
  gp_operand operand;
  const uint8_t *src;   /* the operand's first byte in the mapping */
  uint64_t done, left;
} gd_shm_feed;

/* Replies to shm_register [size] or shm_unregister [region] into out: 0, or a GP_E_* code with
 * err. calls: the connection's gemm calls (a region a call writes its result into stays). */
int gd_shm_calls_method(gd_shm *t, const gd_shm_limits *lim, const gd_calls *calls,
                        uint32_t msgid, gp_method method, uint64_t arg, msgpack_sbuffer *out,
                        gp_error *err);

/* Replies to cuda_register (gd_cuda_ipc.h) into out: {"region": id, "size": bytes}. */
int gd_shm_calls_cuda(gd_shm *t, const gd_shm_limits *lim, uint32_t msgid,
                      const gp_cuda_reg *reg, msgpack_sbuffer *out, gp_error *err);

/* At admission of a gemm with "out": the region exists and holds the whole result. */
int gd_shm_calls_check_out(const gd_shm *t, const gp_gemm_hdr *hdr, gp_error *err);

/* Right after admitting call, whose result goes into a region: offers the backend to write it
 * there in place (gd_sched_output_mapped); else chunks are copied (gd_shm_calls_output). */
void gd_shm_calls_out_mapped(const gd_shm *t, gd_call *call);

/* An OPERAND_REF of call: checks the range and that it does not overlap the call's output,
 * offers the operand to the backend in place (gd_sched_input_mapped: then *feed has nothing
 * left) and sets up *feed. 0, or a GP_E_* code with err. */
int gd_shm_calls_ref(const gd_shm *t, const gd_call *call, const gp_event *ev,
                     gd_shm_feed *feed, gp_error *err);

/* Copies what is left of feed into call's job until done or the backend asks to pause
 * (*pause). 0, or the backend's error. */
int gd_shm_calls_feed(gd_sched *sched, gd_call *call, gd_shm_feed *feed, bool *pause,
                      gp_error *err);

/* A result chunk of a call whose result goes into a region: copied there (unless it is there
 * already: the backend wrote in place). 0, or -1 when the
 * region is gone (an internal error: it cannot be unregistered while the call is in flight). */
int gd_shm_calls_output(const gd_shm *t, const gd_call *call, uint64_t offset, const void *data,
                        size_t len);

/* The reply of a call whose result is all in its region: [out_hdr + "out", nil] into out. */
int gd_shm_calls_reply(const gd_call *call, msgpack_sbuffer *out);

#endif /* GD_SHM_CALLS_H */
