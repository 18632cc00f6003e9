/*
 * gp_fp8.h - the two fp8 wire dtypes (PROTOCOL.md, "The fp8 gemm"; the OCP 8-bit floating point
 * formats) to float and from double. One implementation for the daemon's CPU path, the clients
 * and the tests.
 *   e4m3  1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinity; S.1111.111 is NaN; the
 *         largest finite value is 448, the smallest subnormal 2^-9.
 *   e5m2  1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE 754 rules (infinity, NaNs); the
 *         largest finite value is 57344, the smallest subnormal 2^-16.
 *   widening   exact for every value;
 *   narrowing  round to nearest, ties to even, subnormals alike; a finite value beyond the
 *              largest saturates to it with its sign (CUDA's __NV_SATFINITE); infinity stays
 *              infinity in e5m2 and saturates in e4m3, which has none; NaN stays NaN.
 */
#ifndef GP_FP8_H
#define GP_FP8_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

float gp_e4m3_to_f32(uint8_t v);
float gp_e5m2_to_f32(uint8_t v);
uint8_t gp_f64_to_e4m3(double d);
uint8_t gp_f64_to_e5m2(double d);

#ifdef __cplusplus
}
#endif
#endif /* GP_FP8_H */
