/*
 * gk_complex.h - the complex gemm (GK_C64, GK_C128) on the GPU, expressed over the real
 * kernels (gk_complex.cu says how). gk_gpu_gemm calls it for every complex problem.
 */
#ifndef GK_COMPLEX_H
#define GK_COMPLEX_H

#include <cuda_runtime_api.h>

#include "gk_gpu.h"
#include "gk_problem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device bytes the launch takes from the context's pool for p: B expanded (4 k n reals per
 * entry of B) and, unless op(A) is A packed, op(A) gathered (2 m k reals per entry). */
size_t gk_complex_scratch_bytes(const gk_problem *p);

/* p (complex, checked by gk_problem_check) on stream: cudaSuccess or the first error; *used
 * (may be NULL) gets the real kernel that ran. No epilogue, no cast, ldc packed. */
cudaError_t gk_gpu_gemm_complex(gk_gpu_ctx *ctx, const gk_problem *p, const char *preference,
                                cudaStream_t stream, const gk_kernel **used);

#ifdef __cplusplus
}
#endif
#endif /* GK_COMPLEX_H */
