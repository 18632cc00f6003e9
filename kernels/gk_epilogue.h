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

/* The activation of one value, in double (the host path and the tests' reference). */
double gk_act_apply(gk_act act, double x);

/* Rows [r0, r0 + rows) of batch entry i: C's rows become the bias row (p->bias set and
 * beta != 0; otherwise nothing). Rows that are the bias row itself are left alone. */
void gk_host_bias_rows(const gk_problem *p, int64_t i, int64_t r0, int64_t rows);
/* The same rows: each element x of C becomes act(x) (nothing for GK_ACT_NONE). */
void gk_host_act_rows(const gk_problem *p, int64_t i, int64_t r0, int64_t rows);

#ifdef __cplusplus
}
#endif
#endif /* GK_EPILOGUE_H */
