/*
 * gd_backend.h - the seam between the scheduler and whatever multiplies.
 *
 * A backend (CPU: OpenBLAS worker pool; GPU: one worker per device with its own streams and
 * pinned staging) implements gd_backend_ops. Only the scheduler calls them (gd_sched.h), on a
 * loop thread (see Threads below), and they must not block: no CUDA synchronisation, no BLAS,
 * no file I/O. Work happens on the backend's own threads (or in CUDA streams); results come
 * back to the job's loop through gd_completion_post() (gd_completion.h).
 *
 * Life of a job, as the scheduler drives it (all on the loop thread that admitted it):
 *
 *   prepare(job)         header admitted: reserve memory for a, b, c (and scratch) and pick a
 *                        device (job->device holds the scheduler's pick: the in-service device
 *                        with the least outstanding work; prepare may change it). May fail with
 *                        GP_E_RESOURCE_EXHAUSTED: the request is refused before any payload byte
 *                        is read. When it fails it undoes its own reservations: release is not
 *                        called.
 *   input_window(job,..) where the next payload bytes should land; the connection reads the
 *                        socket straight into it.
 *   input(job, ...)      payload bytes arrived (at the window, or elsewhere: then the backend
 *                        copies them). May set *pause: the connection stops reading until the
 *                        backend posts GD_EV_INPUT_RESUME (staging full).
 *   submit(job)          all payloads landed: run it when a worker is free. The backend checks
 *                        job->deadline_us when the job starts, and completes it with
 *                        DEADLINE_EXCEEDED if late. When submit fails, release follows (the job
 *                        never ran).
 *   ... backend posts GD_EV_OUTPUT_CHUNK (one or more, the last flagged) or GD_EV_FAILED ...
 *   output_consumed(job, chunk) a chunk has been written to the socket (or dropped: client
 *                        gone); its memory may be reused (GPU: refill that staging slot).
 *   release(job)         once, last, and only when the backend holds no more reference to the
 *                        job: before submit (refused, rejected or the client vanished
 *                        mid-payload), or after the backend's final event (the OUTPUT_CHUNK
 *                        flagged last, or FAILED) reached the loop and every chunk was consumed.
 *                        A job whose client vanished while it ran is run to its final event and
 *                        its chunks consumed by the scheduler: the backend needs no special path.
 *
 * destroy() may be called with jobs not yet released (shutdown after drain_ms): it stops the
 * workers (a running job may finish first), drops queued jobs without posting, and frees every
 * backend_data it still holds. The scheduler then frees its jobs without calling release(), and
 * drops events posted but not delivered.
 *
 * Where an operand lies, when it is not fed through input() (all optional: a backend without
 * `locate` gets region and resident operands through input() and writes results into
 * OUTPUT_CHUNKs the connection copies into the region). One op, locate(job, where), offers the
 * backend one operand (or the result's place, where->out) in one of three kinds of place
 * (gd_where_kind); true: the backend takes it from (or writes it) there, false: as usual.
 *
 *   GD_WHERE_MAPPED, out: right after prepare, before any input: C is to land at where->ptr
 *                        (the whole result_bytes, inside region where->r). true: the backend
 *                        writes C there itself and every OUTPUT_CHUNK it posts points at ptr +
 *                        offset, with the bytes already in place; ordering and output_consumed
 *                        stay as above (each chunk is still given back, after which the backend
 *                        writes no more). false: chunks in the backend's memory, as usual.
 *   GD_WHERE_MAPPED, operand: before submit, at most once per operand, instead of any input()
 *                        for it: the operand's bytes lie whole at where->ptr, inside where->r.
 *                        true: the backend reads them from there whenever it runs the job (they
 *                        count as landed); false: the connection hands them to input_window /
 *                        input as usual.
 *   GD_WHERE_DEVICE      like MAPPED for an operand (or C) at where->offset in a DEVICE region
 *                        (a client's CUDA memory, gd_region.h; checked to fit). The job was
 *                        admitted on r->device (device_fixed). false: the backend cannot (another
 *                        device, a job it batches); the caller refuses the request, as nothing
 *                        can copy the bytes on the host.
 *   GD_WHERE_RESIDENT    instead of input() for one operand: the bytes of a resident operand
 *                        (protocol put, where->res), which the backend may keep a copy of (GPU:
 *                        in device memory, per device) and reference; false: feed them through
 *                        input().
 *
 * The scheduler holds a reference to where->r for every job whose backend said true to a MAPPED
 * or DEVICE place, from that call until release(), so the place stays mapped for the job's whole
 * life whatever its client does. The client promises not to change an input nor read the result
 * until the reply (PROTOCOL.md).
 *
 * The regions themselves (optional):
 *
 *   region_added(r)      a client registered region r (a loop thread, right after the mapping).
 *                        The backend may start what makes in-place access fast (GPU: queue a DMA
 *                        registration on a worker); it must not block.
 *   region_gone(r)       the last reference to r went (the client unregistered it or hung up,
 *                        and every job that used it in place was released). The backend drops
 *                        what it keeps for r and then, from any thread, calls
 *                        gd_region_unmap(r) (never before: it may still be registered). Not
 *                        called after destroy(): the scheduler then unmaps itself.
 *   device_region_open(r, pci_bus_id, err)
 *                        a client registered a DEVICE region r (a loop thread): find the device
 *                        with that PCI bus id (set r->device) and start opening r->ipc_handle on
 *                        it (GPU: on that device's worker); must not block. 0, or an error
 *                        (unknown bus id, device out of service): then r is still the caller's
 *                        to free. Once it returned 0, region_gone closes it like any region.
 *                        Without it cuda_register is refused as UNIMPLEMENTED.
 *
 * Threads: the scheduler calls the ops under its lock, but for input_window, input and
 * output_consumed, which the loop threads (config key `loops`) may call at once for different
 * jobs (never for one job at once): a backend guards the state its jobs share in those itself
 * (the GPU backend: each device's mu; the CPU backend's touch only the job).
 *
 * input_window, locate, resident_freed, output_consumed, host_bytes, kernels, pack_info,
 * pack_stats, devices, busy, region_added, region_gone, device_region_open and shm_pinned_bytes
 * may be NULL.
 */
#ifndef GD_BACKEND_H
#define GD_BACKEND_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gd_job.h"
#include "gd_resident_buf.h"
#include "gp_error.h"
#include "gp_types.h"

/* Batched launches counted by size: 1, 2-3, 4-7, 8-15, 16-31 and 32+ jobs. */
#define GD_BATCH_BUCKETS 6
static inline const char *gd_batch_bucket_name(int bucket) {
  static const char *const names[GD_BATCH_BUCKETS] = {"1", "2-3", "4-7", "8-15", "16-31", "32+"};
  return names[bucket];
}

/* Described in `info`. */
typedef struct {
  int id;                     /* CUDA ordinal, -1 for the CPU */
  char name[128];
  uint64_t memory_bytes;
  int sm_count;
  int cc_major, cc_minor;
  bool in_service;            /* false after a sticky device error */
  /* Live figures, filled by devices() (0 where a backend has none): */
  uint64_t busy_us;           /* time spent computing */
  uint64_t memory_limit;      /* device bytes the backend may reserve for jobs (its cap) */
  uint64_t memory_reserved;   /* device bytes reserved now */
  uint64_t memory_in_use;     /* of those, held by jobs now */
  uint64_t batches[GD_BATCH_BUCKETS]; /* launches by jobs batched in them (0: none batched) */
  uint64_t split_parts;       /* parts of split jobs computed here */
  uint64_t resident_replicas; /* device copies of resident operands held now */
  uint64_t resident_bytes;    /* their bytes */
  uint64_t resident_evictions; /* copies let go of to make room for others */
} gd_device_info;

/* The kinds of place locate() is offered (see the top). */
typedef enum {
  GD_WHERE_MAPPED,   /* a shared-memory region's pages, at ptr */
  GD_WHERE_DEVICE,   /* a DEVICE region (a client's CUDA memory), at offset */
  GD_WHERE_RESIDENT, /* a resident operand's buffer, res */
} gd_where_kind;

/* One operand's (or the result's) place, for locate(). */
typedef struct {
  gd_where_kind kind;
  bool out;             /* the result's place (MAPPED, DEVICE); else operand's */
  gp_operand operand;   /* which operand, when !out */
  gd_region *r;         /* MAPPED, DEVICE: the region it lies in */
  uint8_t *ptr;         /* MAPPED: where it lies (an operand's bytes are only read) */
  uint64_t offset;      /* DEVICE: where it lies in r */
  gd_resident_buf *res; /* RESIDENT */
} gd_where;

typedef struct {
  const char *name; /* "cpu", "gpu" */
  /* true: OUTPUT_CHUNK data is the job's own memory, kept until release, so the connection writes
   * it in place however slowly the client reads (CPU). false (default): it is memory shared
   * between jobs (GPU staging): the connection writes what the socket takes at once, copies the
   * rest, and calls output_consumed right away, so that a client that does not read cannot
   * hold a staging slot that other jobs need. */
  bool output_in_job_memory;
  /* true: it takes leading dimensions (the header's lda, ldb, ldc: operands and the result
   * strided where they lie in place); info then lists the "ld" feature. false: it refuses
   * them in prepare. */
  bool leading_dims;

  int (*prepare)(gd_backend *b, gd_job *job, gp_error *err);
  /* Where up to *len bytes of `operand` starting at `offset` may land; false when the backend
   * wants them handed to input() from elsewhere (then it copies). */
  bool (*input_window)(gd_backend *b, gd_job *job, gp_operand operand, uint64_t offset,
                       void **ptr, size_t *len);
  int (*input)(gd_backend *b, gd_job *job, gp_operand operand, uint64_t offset,
               const void *data, size_t len, bool *pause, gp_error *err);
  /* optional: an operand of job (or its result) lies at *where, all of it (see the top); true
   * when the backend takes it from (or writes it) there */
  bool (*locate)(gd_backend *b, gd_job *job, const gd_where *where);
  /* optional: a resident buffer was freed (its `freed` is set): drop copies of freed ones soon */
  void (*resident_freed)(gd_backend *b);
  int (*submit)(gd_backend *b, gd_job *job, gp_error *err);
  void (*output_consumed)(gd_backend *b, gd_job *job, const void *chunk, size_t len);
  void (*release)(gd_backend *b, gd_job *job);

  /* optional: shared-memory and DEVICE regions (see the top) */
  void (*region_added)(gd_backend *b, gd_region *r);
  void (*region_gone)(gd_backend *b, gd_region *r);
  int (*device_region_open)(gd_backend *b, gd_region *r, const char *pci_bus_id, gp_error *err);
  /* optional: bytes of regions it holds pinned for DMA now (metrics); any thread */
  uint64_t (*shm_pinned_bytes)(gd_backend *b);

  /* optional: host bytes this job will hold (a, b, c, scratch); NULL = a + b + c */
  uint64_t (*host_bytes)(gd_backend *b, const gd_job *job);
  /* optional: kernel names for `info`; returns how many there are (may exceed max) */
  size_t (*kernels)(gd_backend *b, const char **names, size_t max);

  /* info and stats: packs one msgpack map of the backend's own fields (info: "backend_info",
   * stats: "backend_stats" in the reply). pack_stats' map holds "devices": an array of maps
   * with at least "id" and "busy_us" (time spent computing on that device). */
  void (*pack_info)(gd_backend *b, msgpack_packer *pk);
  void (*pack_stats)(gd_backend *b, msgpack_packer *pk);
  /* devices, for the scheduler's load spreading and `info` */
  size_t (*devices)(gd_backend *b, gd_device_info *out, size_t max);
  /* jobs submitted and not yet completed */
  size_t (*busy)(gd_backend *b);

  /* stop taking work, finish or fail what is running, join threads, free everything */
  void (*destroy)(gd_backend *b);
} gd_backend_ops;

/* Backend-independent part; backends embed it first. */
struct gd_backend {
  const gd_backend_ops *ops;
  struct gd_completion *sink; /* where the backend posts its events (gd_completion_post), set
                                 by the scheduler */
};

#endif /* GD_BACKEND_H */
