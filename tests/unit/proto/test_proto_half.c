/*
 * The f16/bf16 conversions (gp_half.h) that the daemon's CPU path, gemmctl and the tests share:
 *   - bit for bit against NumPy's float16 (half_numpy.py): every f16 widened, and f32 inputs
 *     on every rounding boundary, tie, subnormal and the overflow edge, plus random patterns;
 *   - against independent float64 definitions of both formats on fresh random inputs
 *     (GEMMD_TEST_SEED replays a run);
 *   - named special values: zeros, the largest finite, overflow, subnormals, inf, NaN.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_half.h"
#include "tp_seed.h"

/* A check for loops over millions of values: Check's own assertions cost a call each even when
 * they pass, this one only on failure. */
#define EXPECT(cond, ...)          \
  do {                             \
    if (!(cond))                   \
      ck_abort_msg(__VA_ARGS__);   \
  } while (0)

#define F32_QUIET 0x00400000u
#define F16_QUIET 0x0200u


static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* ---- NumPy --------------------------------------------------------------------------------- */

static char dir[64];

/* Reads DIR/name, which must hold count elements of elem_size bytes when count is nonzero;
 * returns the data (malloc'd) and its element count. */
static void *read_all(const char *name, size_t elem_size, size_t *count) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "%s", path);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  long bytes = ftell(f);
  ck_assert_int_gt(bytes, 0);
  ck_assert_int_eq(bytes % (long)elem_size, 0);
  ck_assert_int_eq(fseek(f, 0, SEEK_SET), 0);
  void *data = malloc((size_t)bytes);
  ck_assert_ptr_nonnull(data);
  ck_assert_uint_eq(fread(data, 1, (size_t)bytes, f), (size_t)bytes);
  fclose(f);
  if (*count)
    ck_assert_uint_eq((size_t)bytes / elem_size, *count);
  *count = (size_t)bytes / elem_size;
  return data;
}

static void numpy_setup(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/gp_half_XXXXXX", tmp != NULL && strlen(tmp) < 40 ? tmp : "/tmp");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s %s %s", TP_PYTHON, TP_HALF_SCRIPT, dir);
  ck_assert_int_eq(system(cmd), 0);
}

static void numpy_teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* Every f16 bit pattern widens to NumPy's float, bit for bit. A signalling NaN may come back
 * quiet from a NumPy that uses the CPU's F16C, so there the quiet bit is not compared. */
START_TEST(widen_matches_numpy) {
  size_t n = 65536;
  uint32_t *want = read_all("widen.u32", 4, &n);
  for (uint32_t h = 0; h < 65536; h++) {
    uint32_t got = f32_bits(gp_f16_to_f32((uint16_t)h));
    uint32_t mask = (h & 0x7e00u) == 0x7c00u && (h & 0x3ffu) ? ~F32_QUIET : ~0u;
    EXPECT((got & mask) == (want[h] & mask), "f16 0x%04x: 0x%08x, numpy 0x%08x", h, got,
                  want[h]);
  }
  free(want);
}
END_TEST

/* Narrowing matches NumPy bit for bit for every non-NaN input and every quiet NaN. A
 * signalling NaN becomes a quiet NaN with NumPy's sign (NumPy keeps it signalling). */
START_TEST(narrow_matches_numpy) {
  size_t n = 0;
  uint32_t *in = read_all("narrow.u32", 4, &n);
  uint16_t *want = read_all("narrow.u16", 2, &n);
  size_t nans = 0;
  for (size_t i = 0; i < n; i++) {
    float f = bits_f32(in[i]);
    uint16_t got = gp_f32_to_f16(f);
    if (isnan(f) && !(in[i] & F32_QUIET)) {
      nans++;
      EXPECT((got & 0x7e00u) == 0x7e00u && (got & 0x8000u) == (want[i] & 0x8000u),
                    "signalling NaN 0x%08x: 0x%04x, numpy 0x%04x", in[i], got, want[i]);
      continue;
    }
    EXPECT(got == want[i], "f32 0x%08x (%a): 0x%04x, numpy 0x%04x", in[i], (double)f, got,
                  want[i]);
  }
  ck_assert_uint_gt(nans, 0); /* the inputs reach every class */
  free(in);
  free(want);
}
END_TEST

/* ---- float64 definitions ------------------------------------------------------------------ */

/* An independent f16 decoder in float64 (the IEEE binary16 definition). */
static double f16_value(uint16_t h) {
  int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double mag = exp == 0 ? ldexp(mant, -24) : exp == 31 ? (mant ? NAN : INFINITY)
                                                        : ldexp(mant | 0x400, exp - 25);
  return (h & 0x8000) ? -mag : mag;
}

/* Reference rounding: the nearest binary16 by search over the finite ones, ties to even, and
 * overflow to inf from half an ulp past the largest (65520). */
static uint16_t f16_reference(float f) {
  double ax = fabs((double)f);
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  if (ax >= 65520.0)
    return sign | 0x7c00;
  uint16_t lo = 0, hi = 0x7bff; /* largest h with f16_value(h) <= ax */
  while (lo < hi) {
    uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
    if (f16_value(mid) <= ax)
      lo = mid;
    else
      hi = (uint16_t)(mid - 1);
  }
  double below = f16_value(lo);
  double above = lo == 0x7bff ? 65536.0 : f16_value((uint16_t)(lo + 1));
  double dl = ax - below, dh = above - ax;
  if (dl < dh || (dl == dh && !(lo & 1)))
    return sign | lo;
  return (uint16_t)(sign | (lo + 1));
}

START_TEST(f16_every_value_round_trips) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = gp_f16_to_f32((uint16_t)h);
    double ref = f16_value((uint16_t)h);
    if (isnan(ref)) {
      EXPECT(isnan(f), "0x%04x", h);
      EXPECT(isnan(gp_f16_to_f32(gp_f32_to_f16(f))), "0x%04x", h);
      continue;
    }
    EXPECT((double)f == ref && !signbit(f) == !signbit(ref), "0x%04x: %g, want %g", h, f,
                  ref);
    EXPECT(gp_f32_to_f16(f) == h, "0x%04x -> %g -> 0x%04x", h, f, gp_f32_to_f16(f));
  }
}
END_TEST

/* The float with bits u narrows as the float64 reference says; a NaN stays a NaN. */
static void check_narrowing(uint32_t u, uint16_t (*narrow)(float), float (*widen)(uint16_t),
                            uint16_t (*reference)(float)) {
  float f = bits_f32(u);
  uint16_t got = narrow(f);
  if (isnan(f)) {
    EXPECT(isnan(widen(got)), "NaN 0x%08x: 0x%04x", u, got);
    return;
  }
  uint16_t want = reference(f);
  EXPECT(got == want, "%a (0x%08x): got 0x%04x, want 0x%04x (seed %lu)", (double)f, u, got,
         want, tp_seed);
}

START_TEST(f16_rounds_to_nearest_even) {
  /* random bit patterns, and values around every f16 boundary (ties included) */
  for (int i = 0; i < 100000; i++) {
    uint32_t u;
    if (i & 1) {
      u = (uint32_t)mrand48();
    } else {
      /* an f16 value in f32 plus an offset near half an f16 ulp */
      uint16_t h = (uint16_t)lrand48();
      float f = gp_f16_to_f32(h);
      u = f32_bits(f) + (uint32_t)(lrand48() % 8192) - 4096 + ((i & 2) ? 4096 : 0);
    }
    check_narrowing(u, gp_f32_to_f16, gp_f16_to_f32, f16_reference);
  }
}
END_TEST

/* bf16 reference: the nearest of the two bf16 neighbours in float64, ties to even. */
static uint16_t bf16_reference(float f) {
  uint32_t u = f32_bits(f);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
  double x = f, dl = fabs(x - gp_bf16_to_f32(lo));
  float fh = gp_bf16_to_f32(hi);
  /* past the largest bf16 the next step is 2^128 (rounding there overflows to inf) */
  double dh = fabs(x - (isinf(fh) ? copysign(0x1p128, fh) : (double)fh));
  if (dl < dh || (dl == dh && !(lo & 1)))
    return lo;
  return hi;
}

START_TEST(bf16_rounds_to_nearest_even) {
  for (int i = 0; i < 100000; i++) {
    uint32_t u = (uint32_t)mrand48();
    if (i % 4 == 0)
      u = (u & 0xffff0000u) | 0x8000u; /* exact ties */
    check_narrowing(u, gp_f32_to_bf16, gp_bf16_to_f32, bf16_reference);
  }
  ck_assert_uint_eq(gp_f32_to_bf16(1.0f), 0x3f80);
  ck_assert_uint_eq(gp_f32_to_bf16(-0.0f), 0x8000);
  ck_assert_uint_eq(gp_f32_to_bf16(INFINITY), 0x7f80);
}
END_TEST

/* ---- named values -------------------------------------------------------------------------- */

START_TEST(f16_special_values) {
  static const struct {
    uint32_t f32;
    uint16_t f16;
  } cases[] = {
      {0x00000000u, 0x0000}, /* +0 */
      {0x80000000u, 0x8000}, /* -0 keeps its sign */
      {0x3f800000u, 0x3c00}, /* 1 */
      {0xc0000000u, 0xc000}, /* -2 */
      {0x477fe000u, 0x7bff}, /* 65504, the largest finite */
      {0x477fefffu, 0x7bff}, /* just under 65520 */
      {0x477ff000u, 0x7c00}, /* 65520: the tie past 65504 rounds to inf */
      {0xc77ff000u, 0xfc00}, /* and -65520 to -inf */
      {0x7f7fffffu, 0x7c00}, /* FLT_MAX */
      {0x7f800000u, 0x7c00}, /* inf */
      {0xff800000u, 0xfc00}, /* -inf */
      {0x38800000u, 0x0400}, /* 2^-14, the smallest normal */
      {0x387fc000u, 0x03ff}, /* the largest subnormal */
      {0x387fe000u, 0x0400}, /* half-way up from it: ties to even, into the normals */
      {0x33800000u, 0x0001}, /* 2^-24, the smallest subnormal */
      {0x33000000u, 0x0000}, /* 2^-25: the tie goes to even, 0 */
      {0x33000001u, 0x0001}, /* just over it */
      {0x33c00000u, 0x0002}, /* 1.5 * 2^-24: tie to even, 2 * 2^-24 */
      {0x00000001u, 0x0000}, /* an f32 subnormal */
      {0x80000001u, 0x8000},
      {0x7fc00000u, 0x7e00}, /* NaN */
      {0xffc00000u, 0xfe00}, /* -NaN keeps its sign */
      {0x7f800001u, 0x7e00}, /* a signalling NaN comes back quiet */
      {0x7fffe000u, 0x7fff}, /* the payload's top bits are kept */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = gp_f32_to_f16(bits_f32(cases[i].f32));
    ck_assert_msg(got == cases[i].f16, "0x%08x: 0x%04x, want 0x%04x", cases[i].f32, got,
                  cases[i].f16);
  }
  ck_assert_uint_eq(f32_bits(gp_f16_to_f32(0x0001)), 0x33800000u);
  ck_assert_uint_eq(f32_bits(gp_f16_to_f32(0x83ff)), 0xb87fc000u);
  ck_assert_uint_eq(f32_bits(gp_f16_to_f32(0x7bff)), 0x477fe000u);
  ck_assert_uint_eq(f32_bits(gp_f16_to_f32(0xfc00)), 0xff800000u);
  ck_assert_uint_eq(f32_bits(gp_f16_to_f32(0x7e01)), 0x7fc02000u); /* payload kept */
}
END_TEST

START_TEST(bf16_special_values) {
  static const struct {
    uint32_t f32;
    uint16_t bf16;
  } cases[] = {
      {0x00000000u, 0x0000}, {0x80000000u, 0x8000}, /* zeros */
      {0x3f800000u, 0x3f80},                        /* 1 */
      {0x3f808000u, 0x3f80},                        /* a tie: to even */
      {0x3f818000u, 0x3f82},                        /* a tie: to even, upwards */
      {0x3f808001u, 0x3f81},                        /* just over a tie */
      {0x7f7f7fffu, 0x7f7f},                        /* just under the tie past the largest */
      {0x7f7f8000u, 0x7f80},                        /* that tie: to even, inf */
      {0x7f7fffffu, 0x7f80},                        /* FLT_MAX rounds to inf */
      {0xff7fffffu, 0xff80},
      {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80}, /* infs */
      {0x00008000u, 0x0000},                        /* subnormal tie to even */
      {0x00018000u, 0x0002},
      {0x7fc00000u, 0x7fc0}, {0xffc00000u, 0xffc0}, /* NaNs keep their sign */
      {0x7f800001u, 0x7fc0},                        /* a signalling NaN comes back quiet... */
      {0x7f810000u, 0x7fc1},                        /* ...with its payload's top bits */
      {0x7fffffffu, 0x7fff},                        /* never rounded into the next pattern */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t got = gp_f32_to_bf16(bits_f32(cases[i].f32));
    ck_assert_msg(got == cases[i].bf16, "0x%08x: 0x%04x, want 0x%04x", cases[i].f32, got,
                  cases[i].bf16);
  }
  /* widening is the top half: every pattern, exactly, NaN payloads included */
  for (uint32_t h = 0; h < 65536; h++)
    EXPECT(f32_bits(gp_bf16_to_f32((uint16_t)h)) == h << 16, "bf16 0x%04x", h);
}
END_TEST

/* |d - v| for a 16-bit value v, in long double (exact for these magnitudes on x86). */
static long double gap(double d, float v) { return fabsl((long double)d - (long double)v); }

/* From a double the narrowing rounds once: the nearest 16-bit value, ties to even. A float in
 * between would round twice (1 + 2^-11 + 2^-40 is above f16's tie, but its float is the tie). */
static void check_f64_once(uint16_t (*narrow)(double), float (*widen)(uint16_t), double lo,
                           double hi, const char *name) {
  for (int i = 0; i < 200000; i++) {
    double d = lo * pow(hi / lo, drand48());
    if (i & 1)
      d = -d;
    uint16_t h = narrow(d);
    float v = widen(h), below = widen((uint16_t)(h - 1)), above = widen((uint16_t)(h + 1));
    long double g = gap(d, v);
    EXPECT(g <= gap(d, below) && g <= gap(d, above), "%s(%.17g) = 0x%04x: not the nearest", name,
           d, h);
    EXPECT(!(g == gap(d, below) || g == gap(d, above)) || (h & 1) == 0,
           "%s(%.17g) = 0x%04x: a tie not to even", name, d, h);
  }
}

START_TEST(f64_rounds_once) {
  const double tiny = ldexp(1.0, -40);
  ck_assert_uint_eq(gp_f64_to_f16(1.0 + ldexp(1.0, -11) + tiny), 0x3c01);
  ck_assert_uint_eq(gp_f64_to_f16(1.0 + ldexp(1.0, -11) - tiny), 0x3c00);
  ck_assert_uint_eq(gp_f64_to_f16(1.0 + ldexp(1.0, -11)), 0x3c00);
  ck_assert_uint_eq(gp_f64_to_bf16(1.0 + ldexp(1.0, -8) + tiny), 0x3f81);
  ck_assert_uint_eq(gp_f64_to_bf16(-(1.0 + ldexp(1.0, -8) + tiny)), 0xbf81);
  ck_assert_uint_eq(gp_f64_to_bf16(1.0 + ldexp(1.0, -8)), 0x3f80);
  ck_assert_uint_eq(gp_f64_to_f16(65520.0), 0x7c00);
  ck_assert_uint_eq(gp_f64_to_f16(65519.99), 0x7bff);
  ck_assert_uint_eq(gp_f64_to_bf16(1e300), 0x7f80);
  ck_assert_uint_eq(gp_f64_to_bf16(-1e300), 0xff80);
  ck_assert_uint_eq(gp_f64_to_f16(1e-300), 0x0000);
  ck_assert_uint_eq(gp_f64_to_f16(-1e-300), 0x8000);
  ck_assert_uint_eq(gp_f64_to_bf16(ldexp(1.0, -140)), gp_f32_to_bf16(ldexpf(1.0f, -140)));
  ck_assert((gp_f64_to_f16(NAN) & 0x7c00) == 0x7c00 && (gp_f64_to_f16(NAN) & 0x3ff) != 0);
  ck_assert_uint_eq(gp_f64_to_bf16(INFINITY), 0x7f80);
  check_f64_once(gp_f64_to_f16, gp_f16_to_f32, ldexp(1.0, -14), 65000.0, "f16");
  check_f64_once(gp_f64_to_bf16, gp_bf16_to_f32, ldexp(1.0, -120), 1e38, "bf16");
}
END_TEST

static Suite *half_suite(void) {
  Suite *s = suite_create("proto_half");
  TCase *numpy = tcase_create("numpy");
  tcase_add_checked_fixture(numpy, numpy_setup, numpy_teardown);
  tcase_set_timeout(numpy, 120);
  tcase_add_test(numpy, widen_matches_numpy);
  tcase_add_test(numpy, narrow_matches_numpy);
  suite_add_tcase(s, numpy);
  TCase *ref = tcase_create("float64");
  tcase_set_timeout(ref, 60);
  tcase_add_test(ref, f16_every_value_round_trips);
  tcase_add_test(ref, f16_rounds_to_nearest_even);
  tcase_add_test(ref, bf16_rounds_to_nearest_even);
  tcase_add_test(ref, f16_special_values);
  tcase_add_test(ref, bf16_special_values);
  tcase_add_test(ref, f64_rounds_once);
  suite_add_tcase(s, ref);
  return s;
}

TP_SEEDED_MAIN(half_suite)
