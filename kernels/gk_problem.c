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
  case GK_I8: return 1;
  case GK_I32: return 4;
  case GK_E4M3: return 1;
  case GK_E5M2: return 1;
  case GK_C64: return 8;
  case GK_C128: return 16;
  }
  return 0;
}

const char *gk_dtype_name(gk_dtype dtype) {
  switch (dtype) {
  case GK_F32: return "f32";
  case GK_F64: return "f64";
  case GK_F16: return "f16";
  case GK_BF16: return "bf16";
  case GK_I8: return "i8";
  case GK_I32: return "i32";
  case GK_E4M3: return "e4m3";
  case GK_E5M2: return "e5m2";
  case GK_C64: return "c64";
  case GK_C128: return "c128";
  }
  return "?";
}

const char *gk_act_name(gk_act act) {
  switch (act) {
  case GK_ACT_NONE: return "none";
  case GK_ACT_RELU: return "relu";
  case GK_ACT_GELU: return "gelu";
  case GK_ACT_GELU_TANH: return "gelu_tanh";
  }
  return "?";
}

bool gk_dtype_is_fp8(gk_dtype dtype) { return dtype == GK_E4M3 || dtype == GK_E5M2; }

bool gk_dtype_is_complex(gk_dtype dtype) { return dtype == GK_C64 || dtype == GK_C128; }

gk_dtype gk_dtype_result(gk_dtype dtype) {
  if (dtype == GK_I8)
    return GK_I32;
  return gk_dtype_is_fp8(dtype) ? GK_F32 : dtype;
}

gk_dtype gk_problem_c_dtype(const gk_problem *p) {
  return p->cast ? p->out_dtype : gk_dtype_result(p->dtype);
}

bool gk_problem_cast_ok(const gk_problem *p) {
  if (!p->cast)
    return true;
  gk_dtype result = gk_dtype_result(p->dtype);
  return (result == GK_F32 || result == GK_F64) &&
         (p->out_dtype == GK_F16 || p->out_dtype == GK_BF16) && p->work != NULL;
}

size_t gk_problem_work_bytes(const gk_problem *p) {
  if (!p->cast)
    return 0;
  return (size_t)(p->batch * gk_problem_c_elems(p)) * gk_dtype_size(gk_dtype_result(p->dtype));
}

gk_problem gk_problem_uncast(const gk_problem *p) {
  gk_problem q = *p;
  q.cast = false;
  q.work = NULL;
  q.c = p->work;
  if (p->bias != NULL) {
    q.bias = p->work;
    q.bias_stride = p->bias_stride > 0 ? gk_problem_c_elems(p) : 0;
  }
  return q;
}

/* Stored shapes do not matter for the element count: m*k either way. */
int64_t gk_problem_a_elems(const gk_problem *p) { return p->m * p->k; }
int64_t gk_problem_b_elems(const gk_problem *p) { return p->k * p->n; }
int64_t gk_problem_c_elems(const gk_problem *p) { return p->m * p->n; }

int64_t gk_problem_lda(const gk_problem *p) {
  return p->lda > 0 ? p->lda : (p->trans_a ? p->m : p->k);
}
int64_t gk_problem_ldb(const gk_problem *p) {
  return p->ldb > 0 ? p->ldb : (p->trans_b ? p->k : p->n);
}
int64_t gk_problem_ldc(const gk_problem *p) { return p->ldc > 0 ? p->ldc : p->n; }

int64_t gk_problem_a_stride(const gk_problem *p) {
  return (p->trans_a ? p->k : p->m) * gk_problem_lda(p);
}
int64_t gk_problem_c_stride(const gk_problem *p) { return p->m * gk_problem_ldc(p); }

int64_t gk_problem_b_stride(const gk_problem *p) {
  return p->b_shared ? 0 : (p->trans_b ? p->n : p->k) * gk_problem_ldb(p);
}

bool gk_problem_strided(const gk_problem *p) {
  return gk_problem_lda(p) != (p->trans_a ? p->m : p->k) ||
         gk_problem_ldb(p) != (p->trans_b ? p->k : p->n) || gk_problem_ldc(p) != p->n;
}

int64_t gk_problem_pieces(const gk_problem *p) {
  return p->b_shared && p->trans_a && p->batch > 1 ? p->batch : 1;
}

gk_problem gk_problem_piece(const gk_problem *p, int64_t i) {
  gk_problem q = *p;
  q.b_shared = false;
  if (!p->b_shared || p->batch == 1)
    return q;
  if (!p->trans_a) { /* batch entries of A and C are consecutive row blocks */
    q.m = p->m * p->batch;
    q.batch = 1;
    return q;
  }
  size_t es = gk_dtype_size(p->dtype), ces = gk_dtype_size(gk_problem_c_dtype(p));
  q.batch = 1;
  q.a = (const char *)p->a + (size_t)i * (size_t)gk_problem_a_stride(p) * es;
  q.c = (char *)p->c + (size_t)i * (size_t)gk_problem_c_stride(p) * ces;
  if (p->work != NULL)
    q.work = (char *)p->work + (size_t)i * (size_t)gk_problem_c_elems(p) * es;
  return q;
}
