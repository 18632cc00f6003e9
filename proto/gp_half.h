/*
 * gp_half.h - the two 16-bit wire dtypes (PROTOCOL.md: f16 is IEEE 754 binary16, bf16 is the
 * top half of a binary32) to and from float. One implementation for the daemon's CPU path,
 * gemmctl and the tests. Bit arithmetic only: no F16C, no _Float16, no dependence on the FPU's
 * rounding mode or flush-to-zero.
 *   widening (to f32)  exact for every value, NaN payloads kept;
 *   narrowing (to 16)  round to nearest, ties to even; subnormal results rounded likewise;
 *                      overflow gives inf with the sign (f16: from 65520 up); a NaN stays a
 *                      NaN with its sign and top payload bits, made quiet (as x86's vcvtps2ph).
 * For every non-NaN float and every quiet NaN this is bit for bit NumPy's astype(float16).
 */
#ifndef GP_HALF_H
#define GP_HALF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

float gp_f16_to_f32(uint16_t h);
uint16_t gp_f32_to_f16(float f);
float gp_bf16_to_f32(uint16_t h);
uint16_t gp_f32_to_bf16(float f);
/* From a double, rounded once (never through a rounded float), as the output cast needs. */
uint16_t gp_f64_to_f16(double d);
uint16_t gp_f64_to_bf16(double d);

#ifdef __cplusplus
}
#endif
#endif /* GP_HALF_H */
