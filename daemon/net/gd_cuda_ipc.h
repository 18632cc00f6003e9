/*
 * gd_cuda_ipc.h - CUDA memory of a client's process as gemm operands (protocol: cuda_register,
 * and {"region": id, "offset": N} naming such a region).
 *
 * A region made by cuda_register is a DEVICE region (gd_region.h) in the connection's shm
 * table (gd_shm.h), so that ids, range checks, unregistering and the connection's close serve
 * both kinds. The daemon never touches its bytes on the host: the backend opens the IPC handle
 * on the device with the client's PCI bus id (the ordinal each process sees differs with
 * CUDA_VISIBLE_DEVICES; the bus id does not), and a job naming such a region runs on that
 * device (its "out" must be a CUDA IPC region there: the scheduler places the job by it), and
 * reads and writes the client's memory there. Nothing is reserved against
 * queue.memory_budget (the memory is the client's); cuda_ipc.max_regions_per_connection bounds
 * how many a connection holds. The connection's loop thread only.
 */
#ifndef GD_CUDA_IPC_H
#define GD_CUDA_IPC_H

#include <stdint.h>

#include "gd_netsched.h"
#include "gd_shm.h"
#include "gp_error.h"
#include "gp_types.h"

/* cuda_register: checks the connection, the quota and the size, lets the backend find the
 * device and open the handle, and enters the region. 0 with *id, or a GP_E_* code with err. */
int gd_cuda_ipc_register(gd_shm *t, const gd_shm_limits *lim, const gp_cuda_reg *reg,
                         uint64_t *id, gp_error *err);

/* Where a gemm must run: 1 + the device of its "out" region when that is a DEVICE region, else
 * 0 (gd_sched_share.fixed_device). */
int gd_cuda_ipc_fixed_device(const gd_shm *t, const gp_gemm_hdr *hdr);

/* An operand of job in DEVICE region r (id region, range checked): the backend reads it there,
 * or INVALID_ARGUMENT saying why it cannot (no CUDA IPC "out", another device). */
int gd_cuda_ipc_ref(gd_sched *sched, gd_job *job, gp_operand operand, gd_region *r,
                    uint64_t region, uint64_t offset, gp_error *err);

/* Right after admission: job's result goes at offset in DEVICE region r. */
void gd_cuda_ipc_out(gd_sched *sched, gd_job *job, gd_region *r, uint64_t offset);

#endif /* GD_CUDA_IPC_H */
