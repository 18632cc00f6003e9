/*
 * gd_backend_cpu.h - the CPU backend: a pool of cpu.threads worker pthreads
 * running gk_cpu_gemm_part (OpenBLAS) on jobs whose a, b and c live in plain host
 * buffers; a large job is cut into row runs of C that several workers share. The session reads payloads straight into those buffers
 * (input_window) and the reply's C goes out from the c buffer (no copies).
 */
#ifndef GD_BACKEND_CPU_H
#define GD_BACKEND_CPU_H

#include "gd_backend.h"
#include "gp_error.h"

typedef struct {
  unsigned threads;      /* workers; 0 = number of cores */
  unsigned blas_threads; /* OpenBLAS threads inside one job (process-wide setting) */
  unsigned min_part_mflop; /* a job is cut into parts of at least this much work, one per
                              idle worker at most; 0 = never cut */
  uint64_t buffer_cache_bytes; /* operand buffers kept for reuse (gd_cpu_bufcache.h) */
} gd_cpu_config;

/* Starts the workers. 0, or a gp_code with err filled (threads could not be created). */
int gd_backend_cpu_create(const gd_cpu_config *cfg, gd_backend **out, gp_error *err);

#endif /* GD_BACKEND_CPU_H */
