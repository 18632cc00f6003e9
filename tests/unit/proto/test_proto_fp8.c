/*
 * The fp8 conversions (gp_fp8.h) that the daemon's CPU path, the clients and the tests share:
 *   - every one of the 256 codes of each format widened, against a float64 definition of the
 *     format (sign, exponent, mantissa by ldexp);
 *   - every finite code narrowed back to itself, and the midpoint between each pair of
 *     neighbours rounded to the even one, a hair either side to the nearer;
 *   - fresh random doubles over the formats' range (GEMMD_TEST_SEED replays a run) against a
 *     brute-force nearest code, ties to even;
 *   - named special values: zeros, the largest finite, saturation, infinity, NaN.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "gp_fp8.h"
#include "tp_seed.h"

typedef struct {
  const char *name;
  int mant_bits, bias;
  float (*widen)(uint8_t);
  uint8_t (*narrow)(double);
} format;

static const format formats[2] = {{"e4m3", 3, 7, gp_e4m3_to_f32, gp_f64_to_e4m3},
                                  {"e5m2", 2, 15, gp_e5m2_to_f32, gp_f64_to_e5m2}};

/* NaN (and for e5m2 infinity) by the formats' rules. */
static bool is_nan_code(const format *f, unsigned code) {
  unsigned abs = code & 0x7f;
  return f->mant_bits == 3 ? abs == 0x7f : abs > 0x7c;
}
static bool is_inf_code(const format *f, unsigned code) {
  return f->mant_bits == 2 && (code & 0x7f) == 0x7c;
}

/* The value of a finite code from its fields. */
static double definition(const format *f, unsigned code) {
  int exp = (int)((code & 0x7f) >> f->mant_bits);
  double mant = (double)(code & ((1u << f->mant_bits) - 1));
  double mag = exp == 0 ? ldexp(mant, 1 - f->bias - f->mant_bits)
                        : ldexp(1.0 + mant / (double)(1u << f->mant_bits), exp - f->bias);
  return code & 0x80 ? -mag : mag;
}

static bool is_finite_code(const format *f, unsigned code) {
  return !is_nan_code(f, code) && !is_inf_code(f, code);
}

START_TEST(every_code_widens) {
  const format *f = &formats[_i];
  for (unsigned code = 0; code < 256; code++) {
    float got = f->widen((uint8_t)code);
    if (is_nan_code(f, code)) {
      ck_assert_msg(isnan(got), "%s 0x%02x: %g, want NaN", f->name, code, got);
      ck_assert_int_eq(signbit(got) != 0, (code & 0x80) != 0);
    } else if (is_inf_code(f, code)) {
      ck_assert_msg(isinf(got) && (got < 0) == ((code & 0x80) != 0), "%s 0x%02x", f->name, code);
    } else {
      ck_assert_msg((double)got == definition(f, code) && !signbit(got) == !signbit(definition(f, code)),
                    "%s 0x%02x: %.9g, want %.9g", f->name, code, got, definition(f, code));
    }
  }
}
END_TEST

/* Finite codes in increasing order of magnitude: 0x00 .. the largest, positive side. */
static unsigned largest_code(const format *f) { return f->mant_bits == 3 ? 0x7e : 0x7b; }

START_TEST(round_trips_and_ties) {
  const format *f = &formats[_i];
  for (unsigned code = 0; code < 256; code++)
    if (is_finite_code(f, code))
      ck_assert_msg(f->narrow(definition(f, code)) == code, "%s 0x%02x does not round-trip",
                    f->name, code);
  for (unsigned code = 0; code < largest_code(f); code++) {
    double lo = definition(f, code), hi = definition(f, code + 1), mid = (lo + hi) / 2;
    unsigned even = code % 2 == 0 ? code : code + 1; /* the code's low bit is the mantissa's */
    for (int s = 0; s < 2; s++) {
      unsigned sign = s ? 0x80u : 0u;
      double m = s ? -mid : mid;
      ck_assert_msg(f->narrow(m) == (even | sign), "%s midpoint %.9g: 0x%02x, want 0x%02x",
                    f->name, m, f->narrow(m), even | sign);
      ck_assert_uint_eq(f->narrow(s ? -nextafter(mid, 0) : nextafter(mid, 0)), code | sign);
      ck_assert_uint_eq(f->narrow(s ? -nextafter(mid, INFINITY) : nextafter(mid, INFINITY)),
                        (code + 1) | sign);
    }
  }
}
END_TEST

/* The nearest finite code to x by search, ties to the even code; beyond the largest, it. */
static unsigned nearest(const format *f, double x) {
  unsigned best = 0;
  double best_err = INFINITY;
  for (unsigned code = 0; code <= largest_code(f); code++) {
    double err = fabs(fabs(x) - definition(f, code));
    if (err < best_err || (err == best_err && code % 2 == 0)) {
      best = code;
      best_err = err;
    }
  }
  return best | (signbit(x) ? 0x80u : 0u);
}

START_TEST(random_values_round_to_nearest) {
  const format *f = &formats[_i];
  double top = f->mant_bits == 3 ? 512.0 : 65536.0;
  for (int i = 0; i < 200000; i++) {
    double x = ldexp(drand48() * 2 - 1, -(int)(lrand48() % 28)) * top;
    unsigned got = f->narrow(x), want = nearest(f, x);
    if (got != want)
      ck_abort_msg("%s %.17g: 0x%02x, want 0x%02x (seed %lu)", f->name, x, got, want, tp_seed);
  }
}
END_TEST

START_TEST(special_values) {
  ck_assert_uint_eq(gp_f64_to_e4m3(0.0), 0x00);
  ck_assert_uint_eq(gp_f64_to_e4m3(-0.0), 0x80);
  ck_assert_uint_eq(gp_f64_to_e4m3(448.0), 0x7e);
  ck_assert_uint_eq(gp_f64_to_e4m3(1e6), 0x7e); /* saturates: e4m3 has no infinity */
  ck_assert_uint_eq(gp_f64_to_e4m3(-INFINITY), 0xfe);
  ck_assert_uint_eq(gp_f64_to_e4m3(NAN) & 0x7f, 0x7f);
  ck_assert_uint_eq(gp_f64_to_e4m3(0x1p-9), 0x01); /* the smallest subnormal */
  ck_assert_uint_eq(gp_f64_to_e4m3(0x1p-10), 0x00); /* half of it: a tie, to even (zero) */
  ck_assert_uint_eq(gp_f64_to_e4m3(0x1p-1000), 0x00);
  ck_assert_uint_eq(gp_f64_to_e5m2(57344.0), 0x7b);
  ck_assert_uint_eq(gp_f64_to_e5m2(-1e9), 0xfb); /* saturates */
  ck_assert_uint_eq(gp_f64_to_e5m2(INFINITY), 0x7c);
  ck_assert_uint_eq(gp_f64_to_e5m2(-INFINITY), 0xfc);
  ck_assert(isnan(gp_e5m2_to_f32(gp_f64_to_e5m2(NAN))));
  ck_assert_uint_eq(gp_f64_to_e5m2(0x1p-16), 0x01);
  ck_assert(gp_e4m3_to_f32(0x7e) == 448.0f && gp_e5m2_to_f32(0x7b) == 57344.0f);
  ck_assert(gp_e4m3_to_f32(0x38) == 1.0f && gp_e5m2_to_f32(0x3c) == 1.0f);
}
END_TEST

static Suite *fp8_suite(void) {
  Suite *s = suite_create("fp8");
  TCase *t = tcase_create("formats");
  tcase_set_timeout(t, 60);
  tcase_add_loop_test(t, every_code_widens, 0, 2);
  tcase_add_loop_test(t, round_trips_and_ties, 0, 2);
  tcase_add_loop_test(t, random_values_round_to_nearest, 0, 2);
  tcase_add_test(t, special_values);
  suite_add_tcase(s, t);
  return s;
}

TP_SEEDED_MAIN(fp8_suite)
