/*
 * gk_epilogue.h - the GEMM epilogue on the host (gk_problem.h: the bias row that replaces C's
 * rows before the product, and the activation after it), by row runs of one batch entry so
 * that the CPU path's parts each do their own rows. The GPU's is in gk_gpu.h.
 */
#ifndef GK_EPILOGUE_H
#define GK_EPILOGUE_H

#include "gk_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element i of a buffer of dtype, as double (f16/bf16 widened), and v stored there rounded to
 * dtype (nearest even, once: a double goes to f16/bf16 without a float between): the host
 * path's element access, also the fake CUDA runtime's. */
double gk_host_load(gk_dtype dtype, const void *base, int64_t i);
void gk_host_store(gk_dtype dtype, void *base, int64_t i, double v);
/* The integer gemm's element (GK_I8): alpha * acc + beta * c0 in 32-bit two's complement,
 * wrapping (c0 not read when beta is 0). acc is the exact dot product. */
int32_t gk_host_i32_axpby(int64_t alpha, int64_t acc, int64_t beta, int32_t c0);

/* Rows [r0, r0 + rows) of batch entry i: C's rows become the bias row (p->bias set and
 * beta != 0; otherwise nothing). Rows that are the bias row itself are left alone. */
void gk_host_bias_rows(const gk_problem *p, int64_t i, int64_t r0, int64_t rows);
/* The same rows: each element x of C becomes act(x) (nothing for GK_ACT_NONE). */
void gk_host_act_rows(const gk_problem *p, int64_t i, int64_t r0, int64_t rows);

/* The output cast (p->cast), the same rows. cast_in: C0 into the work area's rows, widened to
 * dtype (exactly): the bias row into each (with p->bias), else C's own rows; nothing when
 * beta == 0. cast_out: the work area's rows rounded once into C's out dtype. Each reads and
 * writes only its own rows, so that parts may run side by side. */
void gk_host_cast_in(const gk_problem *p, int64_t i, int64_t r0, int64_t rows);
void gk_host_cast_out(const gk_problem *p, int64_t i, int64_t r0, int64_t rows);

#ifdef __cplusplus
}
#endif
#endif /* GK_EPILOGUE_H */
