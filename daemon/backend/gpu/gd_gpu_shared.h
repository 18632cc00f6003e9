/*
 * gd_gpu_shared.h - what the two halves of the GPU backend share: the command queue between
 * them, a job with its two halves, and the device and backend state they both reach under a
 * lock. Nothing else crosses from one half to the other.
 *
 * The halves
 * ----------
 *   loop/   (gd_gpu_loop.h) what the loop threads run: the ops table and the backend's start
 *           and stop (gd_gpu_backend.c), payload input into staging (gd_gpu_input.c), info
 *           and stats (gd_gpu_info.c), the small lane's slots (gd_gpu_small.c), resident
 *           operands noted in a job (gd_gpu_resident.c), shared-memory and CUDA IPC regions
 *           offered to a job (gd_gpu_shm.c, gd_gpu_ipc.c), splits made at submit
 *           (gd_gpu_split.c). It makes NO CUDA call but reading device properties at start:
 *           it reserves pool bytes and staging buffers by bookkeeping, copies bytes into pinned
 *           memory with memcpy (or lets the socket read land there), and queues commands.
 *   worker/ (gd_gpu_work.h) what each device's worker thread runs: its life and serving loop
 *           (gd_gpu_thread.c), each command (gd_gpu_worker.c), what every run shares
 *           (gd_gpu_run.c), pinned staging (gd_gpu_staging.c), the device memory pool
 *           (gd_gpu_mem.c), row blocks (gd_gpu_pieces.c), the small lane's runs
 *           (gd_gpu_small_run.c, gd_gpu_small_lane.c), resident operands' device copies
 *           (gd_gpu_replica.c), regions' DMA registration and IPC handles (gd_gpu_shm_reg.c,
 *           gd_gpu_ipc_open.c), a split's end (gd_gpu_split_end.c), NUMA binding
 *           (gd_gpu_numa.c). It made the device current once and makes every CUDA call for it:
 *           copies, events, the kernel, host funcs. It never synchronises on a stream while the
 *           daemon runs (only at destroy), so a command is handled in microseconds.
 *   here    the queue (gd_gpu_cmd.c), a job's life under its device's mu that both halves
 *           drive (gd_gpu_jobs.c: events, failure, references, the memory FIFO, a dead device),
 *           the regions' entries (gd_gpu_regions.h), device discovery (gd_gpu_device.c), the
 *           pool's offsets (gd_gpu_pool.c) and the config defaults (gd_gpu_config.c).
 * A loop-half file never includes gd_gpu_work.h, a worker-half file never gd_gpu_loop.h
 * (scripts/check-layers.py); the loop starts and stops the workers and pushes commands
 * through what this header declares.
 *
 * Threads and who may touch what
 * ------------------------------
 * Three kinds of threads touch a device's state: the loop threads (the loop half), the
 * device's worker (the worker half) and CUDA's own callback thread, which runs our
 * cudaLaunchHostFunc functions: CUDA forbids CUDA calls there, so they only queue a completion
 * command for the worker and signal it. A job's loop half (job->loop) is the loop's alone, its
 * worker half (job->work) the worker's alone; its fixed fields are read anywhere without a
 * lock; everything else below that more than one of them touches is guarded by the device's
 * mutex `mu`. A device likewise: its worker half (dev->work, gd__gpu_dev_work) is its worker's
 * alone, reached through gd__gpu_worker_of (worker/gd_gpu_work.h). Nobody holds `mu` across a CUDA call: a pageable copy or a stream query can wait
 * for our own host funcs, which take `mu`. Debug builds assert the owning thread where a
 * function is thread-bound (GD__GPU_ON_WORKER / GD__GPU_OFF_WORKER).
 *
 * Commands are intrusive nodes embedded in the object they concern (a staging buffer, a job, a
 * spill, a region's entry), so queueing never allocates and a completion can never be lost for
 * want of memory.
 */
#ifndef GD_GPU_SHARED_H
#define GD_GPU_SHARED_H

#include <assert.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gd_backend.h"
#include "gd_completion.h"
#include "gd_backend_gpu.h"
#include "gd_gpu_pool.h"
#include "gk_gpu.h"


typedef struct gd__gpu_backend gd__gpu_backend;
typedef struct gd__gpu_dev gd__gpu_dev;
typedef struct gd__gpu_job gd__gpu_job;
typedef struct gd__gpu_buf gd__gpu_buf;
typedef struct gd__gpu_cmd gd__gpu_cmd;
typedef struct gd__gpu_slot gd__gpu_slot;
typedef struct gd__gpu_reg gd__gpu_reg;
typedef struct gd__gpu_res gd__gpu_res;
typedef struct gd__gpu_split gd__gpu_split;
typedef struct gd__gpu_ipc gd__gpu_ipc;

#define GD__GPU_BATCH_BUCKETS GD_BATCH_BUCKETS

typedef enum {
  GD__CMD_ALLOC,    /* loop: pool memory was assigned: take the job's device block (job) */
  GD__CMD_COPY_IN,  /* loop: an input staging buffer is full: copy it to the device (buf) */
  GD__CMD_SPILL_IN, /* loop: bytes that found no staging buffer: pageable copy (spill) */
  GD__CMD_RUN,      /* loop: every input byte was queued: compute, then send C back (job) */
  GD__CMD_DROP,     /* loop: the client left before RUN: free the job's device memory (job) */
  GD__CMD_OUT_FREE, /* loop: an output chunk went out: its staging buffer is free (buf) */
  GD__CMD_IN_DONE,  /* host func: a staging buffer's copy to the device finished (buf) */
  GD__CMD_OUT_DONE, /* host func: a chunk of C reached its output staging buffer (buf) */
  GD__CMD_SMALL_RUN, /* loop: a small job's payload is in its slot: copy, compute, copy (job) */
  GD__CMD_REG,      /* loop: a shared-memory region to register for DMA (gd_gpu_shm.c) */
  GD__CMD_UNREG,    /* loop: its last reference went: unregister, unmap, forget it */
  GD__CMD_SPLIT_DONE, /* the other device: a split job's rows there are done (gd_gpu_split.c) */
  GD__CMD_IPC_OPEN, /* loop: a CUDA IPC region to open on this device (gd_gpu_ipc.c) */
  GD__CMD_IPC_CLOSE, /* loop: its last reference went: close it, forget it */
} gd__gpu_cmd_type;

struct gd__gpu_cmd {
  gd__gpu_cmd_type type;
  gd__gpu_cmd *next;
  gd__gpu_job *job;
  gd__gpu_buf *buf;
};

/* Bytes handed to input() while no staging buffer was free: kept in ordinary memory and
 * copied (pageable) by the worker. The session is paused meanwhile, so at most one read's
 * worth of bytes is ever spilled per job. */
typedef struct gd__gpu_spill {
  gd__gpu_cmd cmd;               /* GD__CMD_SPILL_IN; first member: the node is the spill */
  struct gd__gpu_spill *next;    /* pending list of a job still waiting for device memory */
  uint64_t dst;                  /* byte offset in the device pool (accounting: gd_gpu_mem.c) */
  size_t len;
  uint8_t data[];
} gd__gpu_spill;

typedef enum {
  GD__BUF_FREE,
  GD__BUF_FILLING, /* input: a job's bytes are landing in it (loop) */
  GD__BUF_BUSY,    /* input: copy queued or in flight; output: chunk copying or posted */
} gd__gpu_buf_state;

struct gd__gpu_buf {
  gd__gpu_dev *dev;
  bool is_out;
  uint8_t *host; /* pinned, cap bytes */
  size_t cap;
  gd__gpu_buf_state state;
  gd__gpu_job *job;   /* the job it belongs to while not free (holds a reference) */
  uint64_t dst;       /* input: device pool offset of host[0]; output: offset within C */
  size_t fill;        /* input: bytes landed; output: bytes of the chunk */
  gp_operand operand; /* input: which operand */
  uint64_t op_offset; /* input: offset of host[0] within the operand */
  bool last;          /* output: the final chunk */
  bool posted;        /* output: handed to the loop, waiting for output_consumed() */
  cudaEvent_t ev_start, ev_end; /* timing of its copy (worker) */
  gd__gpu_cmd cmd;    /* COPY_IN or OUT_FREE */
  gd__gpu_cmd done;   /* IN_DONE or OUT_DONE */
};


/* A job's loop half: what only the loop thread that feeds it touches (gd_gpu_loop.h's files),
 * from prepare to RUN or DROP. */
typedef struct gd__gpu_job_loop {
  uint64_t received;    /* payload bytes handed to input() */
  gd__gpu_buf *cur;     /* the input staging buffer it is filling */
  bool dropped;         /* DROP pushed: the client left before RUN */
} gd__gpu_job_loop;

/* A job's worker half: what only its device's worker thread touches (gd_gpu_work.h's files),
 * from ALLOC or RUN to the worker letting go of it. */
typedef struct gd__gpu_job_work {
    bool started;         /* RUN handled */
    bool in_outq;         /* chunks of C still to be issued */
    int inflight_out;     /* chunks copying */
    uint64_t out_next;    /* next byte of C to copy out */
    double in_ms;         /* staging copies in, summed from their events */
    uint64_t first_out_len; /* bytes of the first chunk out (its rate times C: transfer_out_us) */
    cudaEvent_t ev_in, ev_c0, ev_c1;
    cudaEvent_t ev_d0;    /* before the copies straight from regions (mapped_in) */
    cudaEvent_t ev_o0, ev_o1; /* around the copy straight into the region (mapped_out) */
    bool direct_in;       /* copies straight from regions were queued */
    uint32_t pieces;      /* row blocks it runs in (gd_gpu_pieces.c); 1: at once */
    uint64_t out_early;   /* bytes of C already queued straight into its region by the blocks
                           * before the last; the last chunk copies the rest */
    cudaEvent_t ev_p_in, ev_p_c; /* a block's copy in and kernel ended (recorded per block) */
    bool events_made;
    gd__gpu_job *out_next_job; /* the device's FIFO of jobs copying C out */
    gp_gemm_result_hdr result;
    uint8_t *dptr;        /* its device block (alloc_len bytes at pool offset dev_off) */
} gd__gpu_job_work;

/* A job on one device. Fields are grouped by who may touch them: fixed at prepare (read
 * anywhere without a lock), under the device's mu (the loop and the worker, through
 * gd_gpu_jobs.c), the loop half (the loop thread only), the worker half (the worker thread
 * only). The loop and the worker hand a job to each other only through commands (GD__CMD_RUN,
 * GD__CMD_DROP, ...). */
struct gd__gpu_job {
  /* Fixed at prepare. A copy of what the worker needs: the scheduler's gd_job is not
   * touched off the loop. */
  gd__gpu_dev *dev;
  uint64_t id;
  gp_gemm_hdr hdr;
  bool has_c;
  uint64_t bytes[3];      /* a, b, c as sent */
  uint64_t c_bytes;       /* C as computed and returned */
  uint64_t work_bytes;    /* the output cast's work area: C in the compute dtype (0: no cast) */
  uint64_t admitted_us, deadline_us;
  uint64_t alloc_len;     /* pool bytes reserved for a, b, c and the work area */
  double load;            /* its share of the device load estimate */
  gd__gpu_slot *slot;     /* the small-job slot it lives in (gd_gpu_small.c), or NULL */

  /* Under the device's mu. */
  gd_job *owner;          /* the scheduler's job; NULL after release() */
  int refs;               /* loop (until release) + worker (from mem assignment to finish) +
                             one per staging buffer holding it */
  gd__gpu_job *prev, *next; /* the device's list of live jobs */
  gd__gpu_job *wait_next;   /* the device's FIFO of jobs waiting for pool memory */
  bool mem_ready;         /* pool bytes assigned: dev_off valid */
  bool waiting_mem;       /* in the device's FIFO for pool memory */
  bool submitted, run_queued;
  uint64_t submit_us;     /* when submit() came (a small batch's delay counts from it) */
  bool paused;            /* input() set *pause: a GD_EV_INPUT_RESUME is owed */
  bool retired;           /* its load was taken off the device */
  bool failed;            /* a FAILED event was posted (or would have been) */
  bool final_posted;      /* its final event (the last chunk of C, or FAILED) was posted:
                             nothing more may follow, not even a device's failure */
  bool mem_freed;
  bool finished;          /* the worker let go of it */
  uint64_t dev_off;       /* pool offset of the job's block */
  uint64_t op_dev[3];     /* pool offsets of a, b, c (fixed once mem_ready) */
  uint64_t work_dev;      /* pool offset of the work area (work_bytes > 0) */
  gd__gpu_spill *pending, **pending_tail; /* spills waiting for mem_ready */
  gd_resident_buf *res[3]; /* resident operands (referenced), set on the loop before submit:
                             the worker takes them from the device's cache */
  gd__gpu_cmd run_cmd;    /* RUN or DROP: pushed once */
  /* Shared memory in place (gd_gpu_shm.c), set on the loop before submit under mu: operands
   * the worker copies straight from a registered region at RUN (NULL: through staging), and
   * where C goes straight from the device (NULL: through output staging), with the buffer
   * that stands for that one chunk (its host is the region: it is posted, consumed and freed as
   * a staging buffer is). */
  const uint8_t *mapped_in[3];
  uint8_t *mapped_out;
  gd__gpu_buf direct_out;
  /* CUDA IPC regions (gd_gpu_ipc.c), set on the loop before submit under mu: operands and C
   * in a client's device memory, at these offsets. At RUN the worker turns them into
   * mapped_in / mapped_out (device pointers: the copies are device to device). */
  gd__gpu_ipc *ipc_in[3];
  uint64_t ipc_in_off[3];
  gd__gpu_ipc *ipc_out;
  uint64_t ipc_out_off;
  gd__gpu_cmd alloc_cmd;  /* GD__CMD_ALLOC: pushed once, when mem_ready */
  /* Split across two devices by rows of C (gd_gpu_split.c), set on the loop before RUN: the
   * parent owns split and computes the first rows; a child (split_child) computes the rest on
   * another device and posts no event of its own. */
  gd__gpu_split *split;
  bool split_child;
  bool split_told;        /* child, under mu: its parent was told it ended (once); its
                             owner (the parent's) is cleared then */
  gd__gpu_job *kill_next; /* dev_kill's list of children to tell their parents about */

  gd__gpu_job_loop loop;   /* the loop thread only */


  gd__gpu_job_work work;   /* the worker thread only */
};

/* A small-job slot (gd_gpu_small.c): one job's a, b and c side by side in pinned host memory,
 * with the events of a pass (copy in, kernel, copy out) when it leads a batch. The job is
 * embedded, so a small job costs no allocation. On the device, a batch's operands lie in the
 * lane's batch area (gd_gpu_small_run.c). */

struct gd__gpu_slot {
  gd__gpu_job job;        /* valid while in_use */
  uint8_t *host;          /* slot_bytes, pinned */
  uint64_t off[3];        /* a, b, c within the slot (fixed at prepare) */
  uint64_t in_len;        /* bytes copied in: a and b, and c when sent */
  cudaEvent_t ev[4];      /* before the copy in, before the kernel, after it, after the copy out */
  bool in_use;            /* under mu */
  bool posted;            /* under mu: C handed to the loop, until output_consumed() */
  gd__gpu_slot *next_free; /* under mu */
  /* The worker only. */
  gd__gpu_slot *next_run;  /* the FIFO of batches in flight on the small stream (leaders) */
  gd__gpu_slot *batch_next; /* the next job of its batch */
  uint32_t batch_n;       /* leader: jobs in the batch */
  uint64_t dev_off[3];    /* its a, b, c in the batch area */
  uint64_t work_off;      /* its work area there (job.work_bytes > 0) */
};

/* A device's worker half: the CUDA objects and lists only its worker thread touches, from its
 * start-up to its exit (gd__gpu_worker_of asserts that thread in Debug builds). */
typedef struct gd__gpu_dev_work {
  gk_gpu_ctx *kctx;
  cudaStream_t s_in, s_compute, s_out;
  cudaMemPool_t mempool;        /* where jobs' device blocks come from (gd_gpu_mem.c) */
  gd__gpu_job *outq_head, *outq_tail;
  cudaStream_t s_small;         /* the small-job lane's stream (NULL when the lane is off) */
  gk_gpu_ctx *kctx_small;       /* the lane's own kernel context: a cuBLAS handle (and its
                                 * workspace) is not shared between concurrent streams */
  gd__gpu_slot *small_head, *small_tail; /* batches in flight on s_small, in stream order */
  uint8_t *small_area;          /* device memory of the batch in flight: max_batch_jobs slots */
  gd__gpu_slot *forming, *forming_tail; /* a batch waiting gpu.max_queue_delay_us for more */
  uint32_t forming_n;
  uint32_t small_inflight;      /* batches queued on s_small and not yet seen done */
  uint64_t watchdog_us;         /* when the watchdog last looked at the streams */
  gd__gpu_res *res_cache;       /* device copies of resident operands (gd_gpu_resident.c) */
  uint64_t res_tick;            /* runs that placed operands: the copies' LRU clock */
  struct gd__gpu_ipc_map *ipc_maps; /* the IPC handles open on it (gd_gpu_ipc_open.c) */
  uint8_t *slot_host;           /* the small slots' pinned memory, one allocation */
} gd__gpu_dev_work;

struct gd__gpu_dev {
  gd__gpu_backend *be;
  int ordinal;
  gd_device_info info;
  double speed;                 /* SMs x clock (kHz): its share of a split job's rows */
  bool pci_known;               /* pci: domain, bus, device of its PCI function (cuda_register) */
  unsigned pci[3];

  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  gd__gpu_cmd *q_head, *q_tail; /* worker's command FIFO */
  bool stopping;
  bool init_done;               /* the worker finished start-up (init_err says how) */
  gp_error init_err;

  bool in_service;              /* false after a sticky error: prepare() skips it */
  bool dead;                    /* its CUDA context is unusable: the worker makes no more calls */

  gd__gpu_dev_work work;        /* the worker thread only (gd__gpu_worker_of) */

  /* Under mu. */
  gd__gpu_pool pool;
  gd__gpu_buf *in_bufs, *out_bufs; /* staging_buffers of each */
  uint32_t nbuf;
  size_t staging_bytes;
  gd__gpu_job *jobs;            /* every live job of this device */
  gd__gpu_job *wait_head, *wait_tail; /* waiting for pool memory, FIFO */
  double load;                  /* estimated seconds of queued work */
  size_t active;                /* prepared and not finished by the worker */
  int inflight_in;              /* staging copies in flight (for the watchdog) */
  gd__gpu_slot *slots;          /* small_slots of them, or NULL when the lane is off */
  uint32_t nslots;
  size_t slot_bytes;
  gd__gpu_slot *slot_free;      /* free slots */

  /* Stats, under mu. */
  uint64_t busy_us, jobs_done, jobs_failed, bytes_h2d, bytes_d2h;
  uint64_t small_jobs;          /* jobs that took the small lane */
  uint64_t res_uploads;         /* resident operands copied to this device */
  uint64_t res_replicas;        /* copies in res_cache now (written by the worker under mu) */
  uint64_t res_evictions;       /* copies let go of to make room for another */
  uint64_t split_parts;         /* parts of split jobs computed here (parent or child) */
  uint64_t split_rows;          /* their rows of C */
  bool res_sweep;               /* a resident buffer was freed: the worker sweeps its cache */
  uint64_t res_bytes;           /* bytes of res_cache, at most gpu.resident_bytes (written by
                                   the worker under mu; it reads them without) */
  uint64_t small_batches[GD__GPU_BATCH_BUCKETS]; /* batches of 1, 2-3, 4-7, ... 32+ jobs */
  uint64_t mem_reserved;        /* device bytes the pool holds now (the worker updates it) */
  uint64_t last_work_us;        /* the worker last handled a command or had work in flight */
  bool trimmed;                 /* the pool was trimmed since last_work_us */

  /* For the thread asserts (last, so the fields above keep their places). */
  pthread_t worker_tid;         /* the worker's own id, set by it before init_done */
  bool worker_started;          /* worker_tid is set */
};

struct gd__gpu_backend {
  gd_backend base; /* first: the daemon sees a gd_backend */
  gd_gpu_config cfg;
  gd__gpu_dev *devs;
  size_t ndev;
  /* Shared-memory regions registered for DMA (gd_gpu_shm.c), under reg_mu. */
  pthread_mutex_t reg_mu;
  gd__gpu_reg *regs;            /* every entry not yet unregistered */
  uint64_t reg_regions, reg_bytes; /* registered or registering now: count against
                                 * shm.gpu_register_max_bytes */
  uint64_t pinned_regions, pinned_bytes; /* of them, registered (stats) */
  uint64_t reg_failures;        /* cudaHostRegister failed */
  uint64_t reg_refused;         /* not tried: over shm.gpu_register_max_bytes */
  bool reg_over_logged, reg_fail_logged;
  uint64_t direct_in_bytes, direct_out_bytes; /* copied straight from or into regions */
  uint64_t pieced_jobs;         /* jobs run in row blocks (gd_gpu_pieces.c) */
  uint64_t split_jobs;          /* jobs split across two devices (gd_gpu_split.c) */
  /* CUDA IPC regions (gd_gpu_ipc.c), under reg_mu. */
  gd__gpu_ipc *ipcs;            /* every entry not yet closed */
  uint64_t ipc_open, ipc_opened, ipc_failures, ipc_in_bytes, ipc_out_bytes;
};

/* ---- gd_gpu_split.c: one job across the idle devices by rows of C ---- */
/* A job split in parts: the parent (the scheduler's job) computes the first rows on its device,
 * one child per other device the next rows there, straight between the client's regions and
 * each device. The parent's final event (its whole C as one chunk, or FAILED) waits until every
 * child's device work is over, so the regions outlive every copy. */
struct gd__gpu_split {
  gd__gpu_job *parent;
  uint32_t parts;             /* devices it runs on, the parent's included */
  int ordinals[GD_GPU_MAX_DEVICES]; /* theirs: the parent's, then the children's in row order */
  uint64_t m, c_bytes;        /* the whole job's rows and C, as its reply reports them */
  pthread_mutex_t mu;         /* a leaf lock, for the three below */
  uint32_t ends_owed;         /* children started whose device work is not over yet, plus one
                               * while split_try still starts them; SPLIT_DONE at zero */
  bool child_failed;          /* the first failure of a child, and why */
  gp_error child_err;
  /* Under the parent's device mu. */
  bool pushed;                /* done_cmd was pushed on the parent's FIFO */
  bool handled;               /* the parent's worker took the children's end in */
  bool fail_pending;          /* the parent failed: FAILED (fail_err) waits for every end */
  bool final_posted;
  gp_error fail_err;
  gd__gpu_buf *held;          /* the parent's own rows, copied out, waiting for the children */
  gd__gpu_cmd done_cmd;       /* GD__CMD_SPLIT_DONE */
};

/* ---- gd_gpu_cmd.c: the command queue, the only channel to a worker ---- */
/* Under mu: appends a command and wakes the worker. */
void gd__gpu_cmd_push(gd__gpu_dev *dev, gd__gpu_cmd *cmd);
/* Under mu, the worker: the oldest command, or NULL. */
gd__gpu_cmd *gd__gpu_cmd_pop(gd__gpu_dev *dev);

/* ---- worker/gd_gpu_thread.c: the queue's consumer, started and stopped by the loop ---- */
/* Starts the worker and waits for its start-up (device, context, streams, pool, staging). */
int gd__gpu_worker_start(gd__gpu_dev *dev, gp_error *err);
/* Stops it: finishes the work in flight (synchronising its streams), joins, frees. */
void gd__gpu_worker_stop(gd__gpu_dev *dev);

/* ---- gd_gpu_device.c ---- */
/* Fills info from cudaGetDeviceProperties (any thread; no context is created). */
int gd__gpu_device_describe(int ordinal, gd_device_info *info, gp_error *err);
/* Its speed for splitting a job's rows (gd_gpu_split.c): SMs times clock (kHz), the SMs alone
 * where the clock cannot be read. Any thread. */
double gd__gpu_device_speed(const gd_device_info *info);
/* Resolves the configured device list into ordinals. 0, or an error naming the bad entry. */
int gd__gpu_device_resolve(const gd_gpu_config *cfg, int *ordinals, size_t *count, gp_error *err);
/* Budget of pool bytes for a device with free_bytes free. */
uint64_t gd__gpu_device_budget(const gd_gpu_config *cfg, uint64_t free_bytes);
/* True for errors after which the device's context cannot be used again. */
bool gd__gpu_error_is_sticky(cudaError_t e);

/* ---- gd_gpu_jobs.c (helpers the loop and the worker call, under mu) ---- */
/* Posts ev for job when the job is still attached to a session; returns true when posted. */
bool gd__gpu_post(gd__gpu_job *job, gd_backend_event *ev);
/* Posts GD_EV_FAILED once (code, message) and marks the job failed. */
void gd__gpu_fail(gd__gpu_job *job, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Under mu, when the job goes (gd_gpu_jobs.c): lets go of its resident buffers. */
void gd__gpu_job_drop_resident(gd__gpu_job *job);
/* References on a job (under mu); unref frees it at zero. */
void gd__gpu_job_ref(gd__gpu_job *job);
void gd__gpu_job_unref(gd__gpu_job *job);
/* From job->hdr: c_bytes (C as computed and returned), work_bytes (the output cast's C in the
 * compute dtype) and alloc_len (pool bytes for a, b, c and the work area, each rounded); 0, or
 * RESOURCE_EXHAUSTED (err set) when an operand is too large. */
int gd__gpu_job_sizes(gd__gpu_job *job, gp_error *err);
/* Under mu: job joins the device's live jobs and its load (until retired). */
void gd__gpu_dev_add_job(gd__gpu_dev *dev, gd__gpu_job *job);
/* A split's parent going away frees the split (a child's is its parent's). */
void gd__gpu_job_free_split(gd__gpu_job *job);
/* Takes the job's load off its device, once. */
void gd__gpu_job_retire(gd__gpu_job *job);
/* Gives the job's pool bytes back and hands memory to the jobs waiting for it. */
void gd__gpu_job_free_mem(gd__gpu_job *job);
/* A staging buffer was freed: wake the sessions paused for one. */
void gd__gpu_staging_freed(gd__gpu_dev *dev);
/* Without mu: whether the device's context is unusable. */
bool gd__gpu_dev_dead(gd__gpu_dev *dev);
/* A sticky error: out of service, every job of the device fails. */
void gd__gpu_dev_kill(gd__gpu_dev *dev, const char *what, cudaError_t e);
/* Frees the spills still waiting in the job's pending list, dropping the reference of each. */
void gd__gpu_job_free_spills(gd__gpu_job *job);
/* Pool memory at off arrived for the job: its pending spills (and RUN, once submitted) go to the
 * worker; a paused session is resumed. Takes the worker's reference. */
void gd__gpu_job_assign_mem(gd__gpu_job *job, uint64_t off);
/* Takes the job out of its device's FIFO of jobs waiting for pool memory. */
void gd__gpu_wait_remove(gd__gpu_job *job);
/* Under mu: a free staging buffer of that direction, or NULL. */
gd__gpu_buf *gd__gpu_staging_take(gd__gpu_dev *dev, bool out);
bool gd__gpu_staging_any_free(gd__gpu_dev *dev, bool out);
/* Under the job's mu: C goes straight into ptr, in one chunk: a registered region's pages, or
 * a client's device memory (a CUDA IPC region, set at RUN by gd__gpu_ipc_resolve). */
void gd__gpu_direct_out_set(gd__gpu_job *gj, uint8_t *ptr);
/* Whether any operand or the result of job is in a CUDA IPC region (set before submit). Such a
 * job is never run in row blocks nor split: those copy to and from host pages, and its handles
 * are open on its own device only. */
bool gd__gpu_job_has_ipc(const gd__gpu_job *job);
/* In gd_gpu_jobs.c (failing and dying meet splits there):
 * Any thread holding no device mu: a child's device work is over (failed: why), once per child
 * (and once for split_try's own hold); the last end pushes SPLIT_DONE. */
void gd__gpu_split_child_ended(gd__gpu_split *split, bool failed, const gp_error *err);
/* Under the child's device mu (gd__gpu_fail): the child failed; its parent hears of it when
 * the child's work is over (job_finish, or dev_kill). */
void gd__gpu_split_child_failed(gd__gpu_job *child, const gp_error *err);
/* Under the parent's mu (gd__gpu_fail): true when the parent's FAILED must wait (kept in the
 * split) until the child's work and its own are both over, false when it may be posted now. */
bool gd__gpu_split_defer_fail(gd__gpu_job *parent, const gp_error *err);
/* Under the parent's mu: posts a FAILED that waited, once both ends are over. */
void gd__gpu_split_maybe_final(gd__gpu_job *parent);

/* The backend's job behind the scheduler's (NULL for NULL or after release). */
static inline gd__gpu_job *gd__gpu_job_of(gd_job *job) {
  return job ? (gd__gpu_job *)job->backend_data : NULL;
}

/* The worker thread of dev, stored by the worker itself before its start-up is reported (so
 * every thread that saw the start sees it). Debug builds assert a thread-bound function's
 * thread with these. */
static inline bool gd__gpu_on_worker(const gd__gpu_dev *dev) {
  return dev->worker_started && pthread_equal(pthread_self(), dev->worker_tid);
}
#define GD__GPU_ON_WORKER(dev) assert(gd__gpu_on_worker(dev))
#define GD__GPU_OFF_WORKER(dev) assert(!gd__gpu_on_worker(dev))

#endif /* GD_GPU_SHARED_H */
