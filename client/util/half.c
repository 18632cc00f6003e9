/*
 * half.c - binary16 and bfloat16 <-> float, bit by bit (no F16C needed).
 */
#include <string.h>

#include "gctl_half.h"

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

float gctl_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return float_of(sign | 0x7f800000u | (mant << 13)); /* inf, NaN */
  if (exp != 0) return float_of(sign | ((exp + 112) << 23) | (mant << 13));
  /* zero or subnormal: mant * 2^-24, exact in float */
  float v = (float)mant * float_of(0x33800000u); /* 2^-24 */
  return float_of(sign | bits_of(v));
}

uint16_t gctl_f32_to_f16(float f) {
  uint32_t u = bits_of(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf */
  if (abs < 0x38800000u) { /* below 2^-14: subnormal or zero; round at 2^-24 */
    float scaled = float_of(abs) * float_of(0x4b800000u); /* * 2^24 */
    /* float to int conversion truncates; add 0.5 ties-to-even by hand */
    uint32_t whole = (uint32_t)scaled;
    float frac = scaled - (float)whole;
    if (frac > 0.5f || (frac == 0.5f && (whole & 1u))) whole++;
    return (uint16_t)(sign | whole);
  }
  uint32_t exp = (abs >> 23) - 112;
  uint32_t mant = abs & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* carries into exp correctly */
  return (uint16_t)(sign | h);
}

float gctl_bf16_to_f32(uint16_t h) { return float_of((uint32_t)h << 16); }

uint16_t gctl_f32_to_bf16(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  uint32_t lsb = (u >> 16) & 1u;
  return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}
