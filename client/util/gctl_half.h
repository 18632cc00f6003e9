/*
 * gctl_half.h - IEEE binary16 and bfloat16 conversions for gemmctl and the
 * client tests (round to nearest even; NaN stays NaN, overflow goes to inf).
 */
#ifndef GCTL_HALF_H
#define GCTL_HALF_H

#include <stdint.h>

float gctl_f16_to_f32(uint16_t h);
uint16_t gctl_f32_to_f16(float f);
float gctl_bf16_to_f32(uint16_t h);
uint16_t gctl_f32_to_bf16(float f);

#endif /* GCTL_HALF_H */
