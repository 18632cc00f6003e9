/*
 * gp_fp8.c - see gp_fp8.h. Written by hand for the reason gp_half.c is: no Debian C library
 * converts the OCP fp8 formats, and the conversion must not depend on the FPU's rounding mode.
 * Bit arithmetic on the double's fields; one narrowing routine for both formats.
 */
#include "gp_fp8.h"

#include <string.h>

/* What tells one format from the other. */
typedef struct {
  int mant_bits, bias;
  uint32_t max_abs; /* the largest finite value's bits, sign cleared */
  uint32_t nan;     /* the NaN it writes, sign cleared */
  bool has_inf;     /* e5m2: exponent all ones and mantissa 0 is infinity */
} fp8_format;

static const fp8_format e4m3 = {3, 7, 0x7e, 0x7f, false};
static const fp8_format e5m2 = {2, 15, 0x7b, 0x7e, true};

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Finite, non-NaN encodings: exact as float (at most 4 significant bits, exponents in range). */
static float widen(uint8_t v, const fp8_format *fmt) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  uint32_t exp = (uint32_t)(v & 0x7fu) >> fmt->mant_bits;
  uint32_t mant = v & ((1u << fmt->mant_bits) - 1u);
  if (exp == 0) { /* subnormal: mant * 2^(1 - bias - mant_bits), exact in float */
    float tiny = (float)mant;
    for (int i = 0; i < fmt->bias - 1 + fmt->mant_bits; i++)
      tiny *= 0.5f;
    return sign ? -tiny : tiny;
  }
  return float_of(sign | (exp + 127u - (uint32_t)fmt->bias) << 23 | mant << (23 - fmt->mant_bits));
}

float gp_e4m3_to_f32(uint8_t v) {
  if ((v & 0x7fu) == e4m3.nan)
    return float_of((uint32_t)(v & 0x80u) << 24 | 0x7fc00000u);
  return widen(v, &e4m3);
}

float gp_e5m2_to_f32(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  if ((v & 0x7cu) == 0x7cu) /* exponent all ones: infinity, or NaN with its payload */
    return float_of(sign | 0x7f800000u | (uint32_t)(v & 0x3u) << 21);
  return widen(v, &e5m2);
}

/* Drops the low `shift` bits of value (shift >= 1), rounding to nearest with ties to even. */
static uint64_t round_shift(uint64_t value, unsigned shift) {
  if (shift >= 64)
    return 0; /* below half of the smallest step: value < 2^53 <= 2^63 */
  uint64_t kept = value >> shift, rest = value & ((1ull << shift) - 1u), half = 1ull << (shift - 1);
  return kept + (rest > half || (rest == half && (kept & 1u)));
}

static uint8_t narrow(double d, const fp8_format *fmt) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  uint8_t sign = (uint8_t)(u >> 56 & 0x80u);
  int exp = (int)(u >> 52 & 0x7ffu);
  uint64_t mant = u & ((1ull << 52) - 1u);
  if (exp == 0x7ff && mant != 0)
    return (uint8_t)(sign | fmt->nan);
  if (exp == 0x7ff) /* infinity */
    return (uint8_t)(sign | (fmt->has_inf ? 0x7cu : fmt->max_abs));
  if (exp == 0)
    return sign; /* zero, or a double subnormal: far below half of the smallest fp8 step */
  int e = exp - 1023, emin = 1 - fmt->bias;
  uint64_t full = mant | 1ull << 52;
  uint64_t bits; /* the result's magnitude bits; a carry out of the mantissa bumps the exponent */
  if (e >= emin)
    bits = ((uint64_t)(e + fmt->bias) << fmt->mant_bits) +
           (round_shift(full, (unsigned)(52 - fmt->mant_bits)) - (1ull << fmt->mant_bits));
  else /* subnormal: steps of 2^(emin - mant_bits) */
    bits = round_shift(full, (unsigned)(52 - fmt->mant_bits + (emin - e)));
  if (bits > fmt->max_abs)
    bits = fmt->max_abs;
  return (uint8_t)(sign | bits);
}

uint8_t gp_f64_to_e4m3(double d) { return narrow(d, &e4m3); }
uint8_t gp_f64_to_e5m2(double d) { return narrow(d, &e5m2); }
