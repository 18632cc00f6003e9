/*
 * gk_problem.c - sizes of a batched GEMM problem (see gk_problem.h).
 */
#include "gk_problem.h"

size_t gk_dtype_size(gk_dtype dtype) {
  switch (dtype) {
  case GK_F32: return 4;
  case GK_F64: return 8;
  case GK_F16: return 2;
  case GK_BF16: return 2;
  }
  return 0;
}

const char *gk_dtype_name(gk_dtype dtype) {
  switch (dtype) {
  case GK_F32: return "f32";
  case GK_F64: return "f64";
  case GK_F16: return "f16";
  case GK_BF16: return "bf16";
  }
  return "?";
}

/* Stored shapes do not matter for the element count: m*k either way. */
int64_t gk_problem_a_elems(const gk_problem *p) { return p->m * p->k; }
int64_t gk_problem_b_elems(const gk_problem *p) { return p->k * p->n; }
int64_t gk_problem_c_elems(const gk_problem *p) { return p->m * p->n; }
