/*
 * gd_problem.h - the one translation of a wire gemm (proto's gp_gemm_hdr: dtype, precision,
 * transposes, shape, scalars, leading dimensions, activation) into the kernels' gk_problem
 * (kernels/gk_problem.h), used by both backends. The enums are kept in step by static
 * assertions in gd_problem.c, so a value added to one and not the other stops the build.
 *
 * What differs per backend stays with the backend: the operand pointers, the bias row and the
 * output cast's work area.
 */
#ifndef GD_PROBLEM_H
#define GD_PROBLEM_H

#include "gk_problem.h"
#include "gp_types.h"

/* The kernels' dtype for a wire dtype. */
gk_dtype gd_problem_dtype(gp_dtype dtype);

/* Zeroes *p and fills every field hdr determines; a, b, c, bias, cast, out_dtype and work are
 * left to the caller. */
void gd_problem_from_hdr(const gp_gemm_hdr *hdr, gk_problem *p);

#endif /* GD_PROBLEM_H */
