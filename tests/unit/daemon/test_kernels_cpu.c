/*
 * The CPU path (gk_cpu.h): every dtype, both transposes, alpha and beta,
 * batch, odd sizes, against a float64 reference on fresh random inputs, with
 * the output poisoned so that an unwritten element fails (f16/bf16 through
 * gp_half.h, tested in tests/unit/proto/test_proto_half.c; fp8 through gp_fp8.h, tested in
 * tests/unit/proto/test_proto_fp8.c). GEMMD_TEST_SEED
 * replays a run.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gk_cpu.h"
#include "gp_fp8.h"
#include "gp_half.h"

static unsigned long seed;

static void seed_once(void) {
  const char *env = getenv("GEMMD_TEST_SEED");
  seed = env ? strtoul(env, NULL, 10) : (unsigned long)time(NULL);
  srand48((long)seed);
}

/* ---- element access by dtype -------------------------------------------- */

static double get(gk_dtype t, const void *p, int64_t i) {
  switch (t) {
  case GK_F32: return ((const float *)p)[i];
  case GK_F64: return ((const double *)p)[i];
  case GK_F16: return gp_f16_to_f32(((const uint16_t *)p)[i]);
  case GK_BF16: return gp_bf16_to_f32(((const uint16_t *)p)[i]);
  case GK_I8: return ((const int8_t *)p)[i];
  case GK_I32: return ((const int32_t *)p)[i];
  case GK_E4M3: return gp_e4m3_to_f32(((const uint8_t *)p)[i]);
  case GK_E5M2: return gp_e5m2_to_f32(((const uint8_t *)p)[i]);
  case GK_C64:
  case GK_C128: break; /* complex: the daemon tests take it (test_complex.py) */
  }
  return NAN;
}

static void set(gk_dtype t, void *p, int64_t i, double v) {
  switch (t) {
  case GK_F32: ((float *)p)[i] = (float)v; break;
  case GK_F64: ((double *)p)[i] = v; break;
  case GK_F16: ((uint16_t *)p)[i] = gp_f32_to_f16((float)v); break;
  case GK_BF16: ((uint16_t *)p)[i] = gp_f32_to_bf16((float)v); break;
  case GK_E4M3: ((uint8_t *)p)[i] = gp_f64_to_e4m3(v); break;
  case GK_E5M2: ((uint8_t *)p)[i] = gp_f64_to_e5m2(v); break;
  case GK_I8:
  case GK_I32: break; /* the integer gemm has its own test, below */
  case GK_C64:
  case GK_C128: break;
  }
}

static void poison(gk_dtype t, void *p, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    set(t, p, i, NAN);
}

static void fill_random(gk_dtype t, void *p, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    set(t, p, i, drand48() * 2.0 - 1.0);
}

/* unit roundoff of the output type and of the accumulation */
static double out_eps(gk_dtype t) {
  switch (t) {
  case GK_F32: return 0x1p-24;
  case GK_F64: return 0x1p-53;
  case GK_F16: return 0x1p-11;
  case GK_BF16: return 0x1p-8;
  case GK_I8:
  case GK_I32: return 0; /* exact */
  case GK_E4M3:
  case GK_E5M2: return 0x1p-24; /* the result is f32 */
  case GK_C64:
  case GK_C128: break;
  }
  return 1;
}
static double acc_eps(gk_dtype t) { return t == GK_F64 ? 0x1p-53 : 0x1p-24; }

/* ---- one problem ---------------------------------------------------------- */

/* Runs p whole (parts == 1), as `parts` parts in a scrambled order, as workers would, or
 * (parts == 0) as the plain pieces gk_problem_piece makes of a shared B, as the GPU does. */
static void run_problem(const gk_problem *p, int64_t parts) {
  const char *kernel = NULL;
  if (parts == 0) {
    int64_t pieces = gk_problem_pieces(p);
    ck_assert_int_eq(pieces, p->b_shared && p->trans_a ? p->batch : 1);
    for (int64_t i = 0; i < pieces; i++) {
      gk_problem q = gk_problem_piece(p, i);
      ck_assert(!q.b_shared);
      ck_assert_int_eq(gk_cpu_gemm(&q, NULL), 0);
    }
    return;
  }
  if (parts == 1) {
    ck_assert_int_eq(gk_cpu_gemm(p, &kernel), 0);
    ck_assert_str_eq(kernel, "openblas");
    return;
  }
  int64_t start = (int64_t)(drand48() * (double)parts); /* last to first, from a random part */
  for (int64_t i = 0; i < parts; i++)
    ck_assert_int_eq(gk_cpu_gemm_part(p, (start + parts - i) % parts, parts, NULL), 0);
}

/* shared_b: one B for every batch entry (b_shared), allocated one matrix long. */
static void check_problem_parts(gk_dtype t, int64_t m, int64_t n, int64_t k, int64_t batch,
                                bool ta, bool tb, double alpha, double beta, int64_t parts,
                                bool shared_b) {
  size_t es = gk_dtype_size(t);
  gk_problem p = {.dtype = t, .trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k,
                  .batch = batch, .b_shared = shared_b, .alpha = alpha, .beta = beta};
  int64_t na = m * k, nb = k * n, nc = m * n, b_count = shared_b ? 1 : batch;
  void *a = malloc((size_t)(na * batch) * es), *b = malloc((size_t)(nb * b_count) * es);
  void *c = malloc((size_t)(nc * batch) * es), *c0 = malloc((size_t)(nc * batch) * es);
  ck_assert(a && b && c && c0);
  fill_random(t, a, na * batch);
  fill_random(t, b, nb * b_count);
  if (beta != 0.0)
    fill_random(t, c, nc * batch);
  else
    poison(t, c, nc * batch); /* beta == 0: C must not be read, and every element written */
  memcpy(c0, c, (size_t)(nc * batch) * es);
  p.a = a;
  p.b = b;
  p.c = c;
  run_problem(&p, parts);
  for (int64_t q = 0; q < batch; q++) {
    for (int64_t i = 0; i < m; i++) {
      for (int64_t j = 0; j < n; j++) {
        double sum = 0, mag = 0;
        for (int64_t l = 0; l < k; l++) {
          /* A stored k x m when transposed, B stored n x k */
          double av = get(t, a, q * na + (ta ? l * m + i : i * k + l));
          double bv = get(t, b, (shared_b ? 0 : q * nb) + (tb ? j * k + l : l * n + j));
          sum += av * bv;
          mag += fabs(av * bv);
        }
        double c_in = beta != 0.0 ? get(t, c0, q * nc + i * n + j) : 0.0;
        double want = alpha * sum + beta * c_in;
        double scale = fabs(alpha) * mag + fabs(beta * c_in);
        double tol = (out_eps(t) + (double)(k + 2) * acc_eps(t)) * scale * 2 + 1e-30 +
                     out_eps(t) * 1e-4;
        double got = get(t, c, q * nc + i * n + j);
        ck_assert_msg(isfinite(got) && fabs(got - want) <= tol,
                      "%s m=%lld n=%lld k=%lld batch=%lld ta=%d tb=%d alpha=%g beta=%g "
                      "parts=%lld: "
                      "C[%lld][%lld][%lld] = %.17g, want %.17g (tol %.3g, seed %lu)",
                      gk_dtype_name(t), (long long)m, (long long)n, (long long)k,
                      (long long)batch, ta, tb, alpha, beta, (long long)parts, (long long)q,
                      (long long)i,
                      (long long)j, got, want, tol, seed);
      }
    }
  }
  free(a);
  free(b);
  free(c);
  free(c0);
}

static void check_problem(gk_dtype t, int64_t m, int64_t n, int64_t k, int64_t batch, bool ta,
                          bool tb, double alpha, double beta) {
  check_problem_parts(t, m, n, k, batch, ta, tb, alpha, beta, 1, false);
}

/* Parts of one problem together equal the whole, however the rows fall across batch elements
 * (runs that start mid-matrix and cross into the next), and a part count above the rows. */
/* Every shape (m, n, k, batch) by every part count and both transposes. */
static void check_grid(gk_dtype t, const int64_t (*shapes)[4], size_t nshapes,
                       const int64_t *parts, size_t nparts, bool shared_b) {
  for (size_t s = 0; s < nshapes; s++)
    for (size_t pi = 0; pi < nparts; pi++)
      for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
          check_problem_parts(t, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], ta, tb,
                              ta ? -0.75 : 1.0, tb ? 0.5 : 0.0, parts[pi], shared_b);
}

START_TEST(split_into_parts) {
  static const int64_t shapes[][4] = {{7, 5, 3, 1}, {13, 9, 17, 3}, {1, 9, 4, 5}, {33, 17, 65, 2}};
  static const int64_t parts[] = {2, 3, 7, 40};
  check_grid((gk_dtype)_i, shapes, 4, parts, 4, false);
}
END_TEST

/* One B for every batch entry (a 2-D B broadcast): whole, in parts, and as the pieces the GPU
 * launches (folded into m, or one per batch entry when A is transposed). */
START_TEST(shared_b) {
  static const int64_t shapes[][4] = {{7, 5, 3, 4}, {13, 9, 17, 3}, {1, 9, 4, 5}, {5, 6, 7, 1}};
  static const int64_t parts[] = {0, 1, 3};
  check_grid((gk_dtype)_i, shapes, 4, parts, 3, true);
}
END_TEST

START_TEST(every_form) {
  static const int64_t shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {1, 9, 17}, {13, 1, 5},
                                      {33, 17, 65}, {2, 70, 1}};
  static const double alphas[] = {1.0, -0.75};
  static const double betas[] = {0.0, 0.5};
  gk_dtype t = (gk_dtype)_i;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (size_t ai = 0; ai < 2; ai++)
          for (size_t bi = 0; bi < 2; bi++)
            check_problem(t, shapes[s][0], shapes[s][1], shapes[s][2], 1 + (int64_t)((s + bi) % 3),
                          ta, tb, alphas[ai], betas[bi]);
}
END_TEST

START_TEST(bigger_than_any_tile) {
  gk_dtype t = (gk_dtype)_i;
  check_problem(t, 129, 67, 257, 2, true, false, 1.5, 0.25);
}
END_TEST

START_TEST(malformed_problems) {
  float x[4] = {0};
  gk_problem p = {.dtype = GK_F32, .m = 1, .n = 1, .k = 1, .batch = 1, .alpha = 1,
                  .a = x, .b = x, .c = x};
  ck_assert_int_eq(gk_cpu_gemm(&p, NULL), 0);
  p.m = 0;
  ck_assert_int_lt(gk_cpu_gemm(&p, NULL), 0);
  p.m = 1;
  p.batch = 0;
  ck_assert_int_lt(gk_cpu_gemm(&p, NULL), 0);
  p.batch = 1;
  p.c = NULL;
  ck_assert_int_lt(gk_cpu_gemm(&p, NULL), 0);
  p.c = x;
  ck_assert_int_lt(gk_cpu_gemm_part(&p, 1, 1, NULL), 0); /* part past the last */
  ck_assert_int_lt(gk_cpu_gemm_part(&p, -1, 2, NULL), 0);
  ck_assert_int_lt(gk_cpu_gemm_part(&p, 0, 0, NULL), 0);
  p.k = (int64_t)1 << 40; /* does not fit CBLAS's int */
  ck_assert_int_lt(gk_cpu_gemm(&p, NULL), 0);
}
END_TEST

/* ---- the output cast ------------------------------------------------------ */

static double act_of(gk_act act, double x) {
  if (act == GK_ACT_RELU)
    return x < 0 ? 0 : x;
  if (act == GK_ACT_GELU)
    return 0.5 * x * (1.0 + erf(x * M_SQRT1_2));
  return x;
}

/* An f32 / f64 problem whose C (C0 and the result) and bias are f16 / bf16: C0 (or the bias
 * row) widened, the product and the epilogue in the compute dtype, each element rounded once
 * into C. Checked against float64 with the out dtype's rounding on top of the compute one. */
static void check_cast(gk_dtype t, gk_dtype out, int64_t m, int64_t n, int64_t k, int64_t batch,
                       bool ta, double beta, bool bias, gk_act act, int64_t parts) {
  size_t es = gk_dtype_size(t), os = gk_dtype_size(out);
  int64_t na = m * k, nb = k * n, nc = m * n;
  void *a = malloc((size_t)(na * batch) * es), *b = malloc((size_t)(nb * batch) * es);
  void *c = malloc((size_t)(nc * batch) * os), *c0 = malloc((size_t)(nc * batch) * os);
  void *row = malloc((size_t)n * os), *work = malloc((size_t)(nc * batch) * es);
  ck_assert(a && b && c && c0 && row && work);
  fill_random(t, a, na * batch);
  fill_random(t, b, nb * batch);
  fill_random(out, row, n);
  poison(t, work, nc * batch);
  if (beta != 0.0 && !bias)
    fill_random(out, c, nc * batch);
  else
    poison(out, c, nc * batch);
  memcpy(c0, c, (size_t)(nc * batch) * os);
  gk_problem p = {.dtype = t, .trans_a = ta, .m = m, .n = n, .k = k, .batch = batch,
                  .alpha = -0.75, .beta = beta, .a = a, .b = b, .c = c,
                  .bias = bias ? row : NULL, .act = act, .cast = true, .out_dtype = out,
                  .work = work};
  ck_assert_uint_eq(gk_problem_work_bytes(&p), (size_t)(nc * batch) * es);
  run_problem(&p, parts);
  for (int64_t q = 0; q < batch; q++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double sum = 0, mag = 0;
        for (int64_t l = 0; l < k; l++) {
          double av = get(t, a, q * na + (ta ? l * m + i : i * k + l)), bv = get(t, b, q * nb + l * n + j);
          sum += av * bv;
          mag += fabs(av * bv);
        }
        double c_in = beta == 0.0 ? 0.0 : bias ? get(out, row, j) : get(out, c0, q * nc + i * n + j);
        double want = act_of(act, -0.75 * sum + beta * c_in);
        double err = (double)(k + 2) * acc_eps(t) * (0.75 * mag + fabs(beta * c_in)) * 2;
        double tol = out_eps(out) * (fabs(want) + err) * 1.01 + err + 0x1p-24;
        double got = get(out, c, q * nc + i * n + j);
        ck_assert_msg(isfinite(got) && fabs(got - want) <= tol,
                      "%s->%s %lldx%lldx%lld batch %lld ta=%d beta=%g bias=%d act=%d parts=%lld: "
                      "C[%lld][%lld][%lld] = %.9g, want %.9g (tol %.3g, seed %lu)",
                      gk_dtype_name(t), gk_dtype_name(out), (long long)m, (long long)n,
                      (long long)k, (long long)batch, ta, beta, bias, act, (long long)parts,
                      (long long)q, (long long)i, (long long)j, got, want, tol, seed);
      }
  free(a), free(b), free(c), free(c0), free(row), free(work);
}

/* _i: the compute dtype (bit 0: f64) and the out dtype (bit 1: bf16). */
START_TEST(output_cast) {
  gk_dtype t = _i & 1 ? GK_F64 : GK_F32, out = _i & 2 ? GK_BF16 : GK_F16;
  static const int64_t shapes[][4] = {{1, 1, 1, 1}, {37, 29, 41, 1}, {13, 9, 17, 3}, {2, 70, 5, 2}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int form = 0; form < 4; form++) /* beta 0; beta with C0; bias + ReLU; bias + GELU */
      for (int64_t parts = 1; parts <= 3; parts += 2)
        check_cast(t, out, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], form & 1,
                   form == 0 ? 0.0 : form == 1 ? 0.5 : 1.0, form >= 2,
                   form == 2 ? GK_ACT_RELU : form == 3 ? GK_ACT_GELU : GK_ACT_NONE, parts);
}
END_TEST

/* A cast the kernels do not make (to a wider dtype, from a 16-bit one, without a work area)
 * is refused, not run. */
START_TEST(bad_casts) {
  float a = 1, b = 1, w = 0;
  uint16_t c = 0;
  gk_problem p = {.dtype = GK_F32, .m = 1, .n = 1, .k = 1, .batch = 1, .alpha = 1, .a = &a,
                  .b = &b, .c = &c, .cast = true, .out_dtype = GK_BF16, .work = &w};
  ck_assert_int_eq(gk_cpu_gemm(&p, NULL), 0);
  ck_assert_uint_eq(c, 0x3f80);
  p.work = NULL;
  ck_assert_int_lt(gk_cpu_gemm(&p, NULL), 0);
  p.work = &w, p.out_dtype = GK_F64;
  ck_assert_int_lt(gk_cpu_gemm(&p, NULL), 0);
  p.out_dtype = GK_F16, p.dtype = GK_BF16;
  ck_assert_int_lt(gk_cpu_gemm(&p, NULL), 0);
}
END_TEST

/* ---- the integer gemm ------------------------------------------------------ */

/* alpha * acc + beta * c0 wrapped to 32 bits, then ReLU: the reference, in 64-bit unsigned
 * arithmetic (wraps mod 2^64, so mod 2^32 too). */
static int32_t i8_want(int64_t alpha, int64_t acc, int64_t beta, int32_t c0, bool relu) {
  uint64_t v = (uint64_t)alpha * (uint64_t)acc + (uint64_t)beta * (uint64_t)(int64_t)c0;
  int32_t r = (int32_t)(uint32_t)v;
  return relu && r < 0 ? 0 : r;
}

typedef struct {
  int64_t m, n, k, batch;
  bool ta, tb, shared_b, bias, relu;
  int64_t alpha, beta, parts;
} i8_case;

/* An i8 problem against the exact reference, bit for bit: random int8 operands over the whole
 * range, C0 random int32 (or poisoned when beta is 0, or the bias row's case). */
static void check_i8(const i8_case *t) {
  int64_t na = t->m * t->k, nb = t->k * t->n, nc = t->m * t->n, bcount = t->shared_b ? 1 : t->batch;
  int8_t *a = malloc((size_t)(na * t->batch)), *b = malloc((size_t)(nb * bcount));
  int32_t *c = malloc((size_t)(nc * t->batch) * 4), *c0 = malloc((size_t)(nc * t->batch) * 4);
  int32_t *row = malloc((size_t)t->n * 4);
  ck_assert(a && b && c && c0 && row);
  for (int64_t i = 0; i < na * t->batch; i++)
    a[i] = (int8_t)(lrand48() % 256 - 128);
  for (int64_t i = 0; i < nb * bcount; i++)
    b[i] = (int8_t)(lrand48() % 256 - 128);
  for (int64_t i = 0; i < nc * t->batch; i++)
    c[i] = (int32_t)mrand48();
  for (int64_t j = 0; j < t->n; j++)
    row[j] = (int32_t)mrand48();
  memcpy(c0, c, (size_t)(nc * t->batch) * 4);
  gk_problem p = {.dtype = GK_I8, .trans_a = t->ta, .trans_b = t->tb, .m = t->m, .n = t->n,
                  .k = t->k, .batch = t->batch, .b_shared = t->shared_b,
                  .alpha = (double)t->alpha, .beta = (double)t->beta, .a = a, .b = b, .c = c,
                  .bias = t->bias ? row : NULL, .act = t->relu ? GK_ACT_RELU : GK_ACT_NONE};
  ck_assert_int_eq(gk_problem_c_dtype(&p), GK_I32);
  run_problem(&p, t->parts);
  for (int64_t q = 0; q < t->batch; q++)
    for (int64_t i = 0; i < t->m; i++)
      for (int64_t j = 0; j < t->n; j++) {
        int64_t acc = 0;
        for (int64_t l = 0; l < t->k; l++)
          acc += (int64_t)a[q * na + (t->ta ? l * t->m + i : i * t->k + l)] *
                 b[(t->shared_b ? 0 : q * nb) + (t->tb ? j * t->k + l : l * t->n + j)];
        int32_t from = t->bias ? row[j] : c0[q * nc + i * t->n + j];
        int32_t want = i8_want(t->alpha, acc, t->beta, t->beta != 0 ? from : 0, t->relu);
        int32_t got = c[q * nc + i * t->n + j];
        ck_assert_msg(got == want,
                      "i8 %lldx%lldx%lld batch %lld ta=%d tb=%d alpha=%lld beta=%lld bias=%d "
                      "relu=%d parts=%lld: C[%lld][%lld][%lld] = %d, want %d (seed %lu)",
                      (long long)t->m, (long long)t->n, (long long)t->k, (long long)t->batch,
                      t->ta, t->tb, (long long)t->alpha, (long long)t->beta, t->bias, t->relu,
                      (long long)t->parts, (long long)q, (long long)i, (long long)j, got, want,
                      seed);
      }
  free(a), free(b), free(c), free(c0), free(row);
}

/* Every transpose, odd shapes, parts and pieces, alpha/beta that wrap (2^31 - 1 times a dot
 * product of ~k * 2^14), beta 0 over poison, the bias row with ReLU. */
START_TEST(integer_gemm) {
  static const int64_t shapes[][4] = {{1, 1, 1, 1}, {37, 29, 53, 1}, {13, 9, 300, 3}, {2, 70, 5, 2}};
  static const int64_t scalars[][2] = {{1, 0}, {-3, 2}, {2147483647, -2147483647 - 1}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int form = 0; form < 16; form++) {
      const int64_t *ab = scalars[(s + (size_t)form) % 3];
      i8_case t = {shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], form & 1, (form >> 1) & 1,
                   (form >> 2) & 1, ((form >> 3) & 1) && ab[1] != 0, (form >> 3) & 1,
                   ab[0], ab[1], 1 + (form % 3)};
      if (t.shared_b && form % 3 == 2)
        t.parts = 0; /* as the GPU's pieces */
      check_i8(&t);
    }
}
END_TEST

/* What the integer gemm refuses: GELU, a cast, i32 operands. */
START_TEST(integer_refusals) {
  int8_t a = 3, b = -4;
  int32_t c = 0;
  gk_problem p = {.dtype = GK_I8, .m = 1, .n = 1, .k = 1, .batch = 1, .alpha = 1, .a = &a,
                  .b = &b, .c = &c};
  ck_assert_int_eq(gk_cpu_gemm(&p, NULL), 0);
  ck_assert_int_eq(c, -12);
  p.act = GK_ACT_RELU;
  ck_assert_int_eq(gk_cpu_gemm(&p, NULL), 0);
  ck_assert_int_eq(c, 0);
  p.act = GK_ACT_GELU;
  ck_assert_int_lt(gk_cpu_gemm(&p, NULL), 0);
  p.act = GK_ACT_NONE, p.dtype = GK_I32;
  ck_assert_int_lt(gk_cpu_gemm(&p, NULL), 0);
  p.dtype = GK_I8; /* i8 is widened to f64: the scratch counts 8 bytes an element */
  p.m = 3, p.n = 5, p.k = 7, p.batch = 4;
  ck_assert_uint_eq(gk_cpu_scratch_bytes(&p), (3 * 7 + 7 * 5 + 3 * 5) * 8);
}
END_TEST

/* ---- the fp8 gemm ---------------------------------------------------------- */

typedef struct {
  gk_dtype dtype;
  int64_t m, n, k, batch;
  bool ta, tb, shared_b, bias;
  gk_act act;
  double alpha, beta;
  int64_t parts;
} fp8_case;

/* An fp8 problem (f32 C) against the float64 reference: random fp8 operands (uniform in
 * [-2, 2) rounded to the format, so subnormals of e4m3 and both signs occur), C0 random f32, or
 * poisoned when beta is 0. The CPU sums in double and rounds once, so the tolerance is f32's. */
static void check_fp8(const fp8_case *t) {
  int64_t na = t->m * t->k, nb = t->k * t->n, nc = t->m * t->n, bcount = t->shared_b ? 1 : t->batch;
  uint8_t *a = malloc((size_t)(na * t->batch)), *b = malloc((size_t)(nb * bcount));
  float *c = malloc((size_t)(nc * t->batch) * 4), *c0 = malloc((size_t)(nc * t->batch) * 4);
  float *row = malloc((size_t)t->n * 4);
  ck_assert(a && b && c && c0 && row);
  for (int64_t i = 0; i < na * t->batch; i++)
    set(t->dtype, a, i, (drand48() * 4.0 - 2.0) * (i % 7 == 0 ? 0x1p-6 : 1.0));
  for (int64_t i = 0; i < nb * bcount; i++)
    set(t->dtype, b, i, drand48() * 4.0 - 2.0);
  for (int64_t i = 0; i < nc * t->batch; i++)
    c[i] = t->beta != 0.0 && !t->bias ? (float)(drand48() * 2.0 - 1.0) : NAN;
  for (int64_t j = 0; j < t->n; j++)
    row[j] = (float)(drand48() * 2.0 - 1.0);
  memcpy(c0, c, (size_t)(nc * t->batch) * 4);
  gk_problem p = {.dtype = t->dtype, .trans_a = t->ta, .trans_b = t->tb, .m = t->m, .n = t->n,
                  .k = t->k, .batch = t->batch, .b_shared = t->shared_b, .alpha = t->alpha,
                  .beta = t->beta, .a = a, .b = b, .c = c, .bias = t->bias ? row : NULL,
                  .act = t->act};
  ck_assert_int_eq(gk_problem_c_dtype(&p), GK_F32);
  run_problem(&p, t->parts);
  for (int64_t q = 0; q < t->batch; q++)
    for (int64_t i = 0; i < t->m; i++)
      for (int64_t j = 0; j < t->n; j++) {
        double sum = 0, mag = 0;
        for (int64_t l = 0; l < t->k; l++) {
          double av = get(t->dtype, a, q * na + (t->ta ? l * t->m + i : i * t->k + l));
          double bv = get(t->dtype, b, (t->shared_b ? 0 : q * nb) + (t->tb ? j * t->k + l : l * t->n + j));
          sum += av * bv;
          mag += fabs(av * bv);
        }
        double from = t->beta == 0.0 ? 0.0 : t->bias ? row[j] : c0[q * nc + i * t->n + j];
        double pre = t->alpha * sum + t->beta * from;
        double want = t->act == GK_ACT_RELU ? (pre < 0 ? 0 : pre)
                      : t->act == GK_ACT_GELU ? 0.5 * pre * (1 + erf(pre / sqrt(2.0)))
                                              : pre;
        double tol = 0x1p-22 * (fabs(t->alpha) * mag + fabs(t->beta * from) + fabs(want)) + 1e-30;
        double got = c[q * nc + i * t->n + j];
        ck_assert_msg(isfinite(got) && fabs(got - want) <= tol,
                      "%s %lldx%lldx%lld batch %lld ta=%d tb=%d shared_b=%d alpha=%g beta=%g "
                      "bias=%d act=%d parts=%lld: C[%lld][%lld][%lld] = %.9g, want %.9g (tol "
                      "%.3g, seed %lu)",
                      gk_dtype_name(t->dtype), (long long)t->m, (long long)t->n, (long long)t->k,
                      (long long)t->batch, t->ta, t->tb, t->shared_b, t->alpha, t->beta, t->bias,
                      (int)t->act, (long long)t->parts, (long long)q, (long long)i, (long long)j,
                      got, want, tol, seed);
      }
  free(a), free(b), free(c), free(c0), free(row);
}

/* _i: e4m3 or e5m2. Every transpose, odd shapes, parts and pieces, alpha (the scales folded
 * in) and beta, beta 0 over poison, the bias row with ReLU or GELU. */
START_TEST(fp8_gemm) {
  gk_dtype t = _i ? GK_E5M2 : GK_E4M3;
  static const int64_t shapes[][4] = {{1, 1, 1, 1}, {37, 29, 53, 1}, {13, 9, 300, 3}, {2, 70, 5, 2}};
  static const double scalars[][2] = {{1, 0}, {-0.375, 0.5}, {3.0 * 0.0625, -2}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int form = 0; form < 16; form++) {
      const double *ab = scalars[(s + (size_t)form) % 3];
      bool bias = ((form >> 3) & 1) && ab[1] != 0;
      fp8_case c = {t, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], form & 1,
                    (form >> 1) & 1, (form >> 2) & 1, bias,
                    (form >> 3) & 1 ? (form & 1 ? GK_ACT_GELU : GK_ACT_RELU) : GK_ACT_NONE,
                    ab[0], ab[1], 1 + (form % 3)};
      if (c.shared_b && form % 3 == 2)
        c.parts = 0; /* as the GPU's pieces */
      check_fp8(&c);
    }
}
END_TEST

/* The fp8 gemm's result is f32 (a bf16 cast goes through the work area), its scratch 8 bytes
 * an element; fp8 is no result dtype. */
START_TEST(fp8_result_and_cast) {
  uint8_t a = gp_f64_to_e4m3(1.5), b = gp_f64_to_e4m3(-0.25); /* exact in e4m3 */
  float c = NAN, w = 0;
  gk_problem p = {.dtype = GK_E4M3, .m = 1, .n = 1, .k = 1, .batch = 1, .alpha = 2, .a = &a,
                  .b = &b, .c = &c};
  ck_assert_int_eq(gk_cpu_gemm(&p, NULL), 0);
  ck_assert(c == -0.75f);
  uint16_t h = 0;
  p.c = &h, p.cast = true, p.out_dtype = GK_BF16, p.work = &w;
  ck_assert_int_eq(gk_problem_work_bytes(&p), 4);
  ck_assert_int_eq(gk_cpu_gemm(&p, NULL), 0);
  ck_assert_uint_eq(h, gp_f32_to_bf16(-0.75f));
  p.out_dtype = GK_E4M3;
  ck_assert_int_lt(gk_cpu_gemm(&p, NULL), 0);
  p.cast = false, p.m = 3, p.n = 5, p.k = 7, p.batch = 4;
  ck_assert_uint_eq(gk_cpu_scratch_bytes(&p), (3 * 7 + 7 * 5 + 3 * 5) * 8);
}
END_TEST

START_TEST(scratch_sizes) {
  gk_problem p = {.dtype = GK_F32, .m = 3, .n = 5, .k = 7, .batch = 4};
  ck_assert_uint_eq(gk_cpu_scratch_bytes(&p), 0);
  p.dtype = GK_F64;
  ck_assert_uint_eq(gk_cpu_scratch_bytes(&p), 0);
  p.dtype = GK_BF16; /* one batch element of a, b and c in f32 */
  ck_assert_uint_eq(gk_cpu_scratch_bytes(&p), (3 * 7 + 7 * 5 + 3 * 5) * 4);
}
END_TEST

int main(void) {
  seed_once();
  gk_cpu_set_blas_threads(1); /* as the daemon runs it; and idle BLAS threads would only spin */
  printf("seed %lu (GEMMD_TEST_SEED replays it)\n", seed);
  Suite *s = suite_create("kernels_cpu");
  TCase *gemm = tcase_create("gemm");
  tcase_set_timeout(gemm, 60);
  tcase_add_loop_test(gemm, every_form, GK_F32, GK_BF16 + 1);
  tcase_add_loop_test(gemm, split_into_parts, GK_F32, GK_BF16 + 1);
  tcase_add_loop_test(gemm, shared_b, GK_F32, GK_BF16 + 1);
  tcase_add_loop_test(gemm, bigger_than_any_tile, GK_F32, GK_BF16 + 1);
  tcase_add_test(gemm, malformed_problems);
  tcase_add_test(gemm, scratch_sizes);
  tcase_add_loop_test(gemm, output_cast, 0, 4);
  tcase_add_test(gemm, bad_casts);
  tcase_add_test(gemm, integer_gemm);
  tcase_add_test(gemm, integer_refusals);
  tcase_add_loop_test(gemm, fp8_gemm, 0, 2);
  tcase_add_test(gemm, fp8_result_and_cast);
  suite_add_tcase(s, gemm);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
