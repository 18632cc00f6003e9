/*
 * gk_cpu.h - the CPU path: OpenBLAS CBLAS for f32 and f64; f16 and bf16
 * converted to f32, multiplied with sgemm, and rounded back (round to nearest
 * even). Blocking; the daemon calls it from worker threads, never the loop.
 */
#ifndef GK_CPU_H
#define GK_CPU_H

#include "gk_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of scratch gk_cpu_gemm() allocates for p (0 for f32/f64): lets the caller count it
 * against a memory budget before running. */
size_t gk_cpu_scratch_bytes(const gk_problem *p);

/* Runs p on the calling thread. 0 on success, -ENOMEM when scratch cannot be allocated,
 * -EINVAL for a malformed problem. Name of the kernel used goes to *kernel (static string). */
int gk_cpu_gemm(const gk_problem *p, const char **kernel);

/* Part `part` of `parts` of p: the batch * m rows of C cut into `parts` near-equal runs, so that
 * several threads can share one problem (each writes only its own rows of C). The parts
 * together do exactly what gk_cpu_gemm does. Same return codes. */
int gk_cpu_gemm_part(const gk_problem *p, int64_t part, int64_t parts, const char **kernel);

/* Scratch of a problem run as `parts` parts side by side (each widens its own copy of B). */
size_t gk_cpu_scratch_bytes_split(const gk_problem *p, int64_t parts);

/* Threads OpenBLAS may use inside one call (the daemon runs several calls side by side). */
void gk_cpu_set_blas_threads(int threads);

#ifdef __cplusplus
}
#endif
#endif /* GK_CPU_H */
