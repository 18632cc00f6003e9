/*
 * gp_half.c - see gp_half.h. Written by hand because no Debian C library offers a portable,
 * correctly rounded binary16/bfloat16 conversion (C23's _Float16 is compiler- and
 * target-specific, and bfloat16 has no standard C type).
 */
#include "gp_half.h"

#include <string.h>

#define F32_EXP_MASK 0x7f800000u
#define F32_ABS_MASK 0x7fffffffu
#define F16_INF 0x7c00u
#define F16_QUIET 0x0200u
#define BF16_QUIET 0x0040u

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Drops the low `shift` bits of value, rounding to nearest with ties to even. */
static uint32_t round_shift(uint32_t value, uint32_t shift) {
  uint32_t kept = value >> shift;
  uint32_t rest = value & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  return kept + (rest > half || (rest == half && (kept & 1u)));
}

float gp_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) /* inf, or NaN with its payload */
    return float_of(sign | F32_EXP_MASK | (mant << 13));
  if (exp != 0) /* normal: rebias 15 -> 127 */
    return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0)
    return float_of(sign);
  /* subnormal, mant * 2^-24: shift the leading 1 up to the hidden bit, lowering the exponent */
  uint32_t exp32 = 113;
  while (!(mant & 0x400u)) {
    mant <<= 1;
    exp32--;
  }
  return float_of(sign | (exp32 << 23) | ((mant & 0x3ffu) << 13));
}

uint16_t gp_f32_to_f16(float f) {
  uint32_t u = bits_of(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t abs = u & F32_ABS_MASK;
  if (abs > F32_EXP_MASK) /* NaN */
    return (uint16_t)(sign | F16_INF | F16_QUIET | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) /* 65520 and up (inf included) round past 65504 */
    return (uint16_t)(sign | F16_INF);
  if (abs >= 0x38800000u) /* 2^-14 and up: normal; a carry into the exponent is right */
    return (uint16_t)(sign | round_shift(abs - 0x38000000u, 13));
  if (abs < 0x33000000u) /* below 2^-25, half the smallest subnormal: rounds to 0 */
    return sign;
  /* subnormal: the significand with its hidden bit, in units of 2^-24 */
  uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - (abs >> 23); /* 14..24 */
  return (uint16_t)(sign | round_shift(mant, shift));
}

float gp_bf16_to_f32(uint16_t h) { return float_of((uint32_t)h << 16); }

uint16_t gp_f32_to_bf16(float f) {
  uint32_t u = bits_of(f);
  if ((u & F32_ABS_MASK) > F32_EXP_MASK) /* NaN: keep sign and payload's top, make it quiet */
    return (uint16_t)((u >> 16) | BF16_QUIET);
  /* below inf, no overflow of u: the largest finite rounds up to 0x7f80 (inf) as it should */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* d as a float rounded "to odd": the nearer-to-zero neighbour, its last bit set when any dropped
 * bit was. A float keeps 13 (f16) or 16 (bf16) bits past either 16-bit format, so rounding this
 * float to nearest even rounds d itself once (the double rounding of a plain (float)d can be
 * off by one ulp at a tie it made). (float)d may round either way: only its neighbour matters. */
static float f64_to_f32_odd(double d) {
  float f = (float)d;
  if (d != d || (double)f == d)
    return f; /* NaN, or exact */
  uint32_t u = bits_of(f);
  if (d > 0 ? (double)f > d : (double)f < d)
    u--; /* it rounded away from zero (inf included): step back to the truncated neighbour */
  return float_of(u | 1u);
}

uint16_t gp_f64_to_f16(double d) { return gp_f32_to_f16(f64_to_f32_odd(d)); }

uint16_t gp_f64_to_bf16(double d) { return gp_f32_to_bf16(f64_to_f32_odd(d)); }
