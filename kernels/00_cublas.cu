/*
 * 00_cublas.cu - "cublas": cuBLAS behind the kernel interface.
 *
 * The reference every kernel of ours is checked and timed against, and a
 * kernel a config may name; "auto" never picks it.
 *
 * Row-major through a column-major library: a row-major m x n matrix C is,
 * read column-major, C^T (n x m, leading dimension n). So C = op(A) op(B)
 * becomes C^T = op(B)^T op(A)^T, which cuBLAS computes with the operands
 * swapped (B first, then A), the dimensions swapped (n, m, k) and each
 * operand's own transpose flag kept as it is: a row-major X read column-major
 * is already X^T. Leading dimensions are the stored row lengths.
 *
 * Types: f32 in/out with f32 compute (TF32 tensor cores when precision is
 * "fast"), f64 with f64 compute, f16 and bf16 in/out with f32 compute, i8 in
 * with i32 out and compute; alpha and beta are passed in the compute type
 * (double for f64, int32 for i8, float otherwise).
 * cuBLAS does not read C when beta == 0, matching gk_problem's contract.
 */
#include <cublas_v2.h>
#include <limits.h>
#include <stdint.h>

#include "gk_gpu.h"

namespace {

cudaError_t from_cublas(cublasStatus_t status)
{
  switch (status) {
  case CUBLAS_STATUS_SUCCESS: return cudaSuccess;
  case CUBLAS_STATUS_NOT_INITIALIZED: return cudaErrorInitializationError;
  case CUBLAS_STATUS_ALLOC_FAILED: return cudaErrorMemoryAllocation;
  case CUBLAS_STATUS_INVALID_VALUE: return cudaErrorInvalidValue;
  case CUBLAS_STATUS_ARCH_MISMATCH: return cudaErrorNotSupported;
  case CUBLAS_STATUS_NOT_SUPPORTED: return cudaErrorNotSupported;
  case CUBLAS_STATUS_EXECUTION_FAILED: return cudaErrorLaunchFailure;
  default: return cudaErrorUnknown;
  }
}

bool cublas_supports(const gk_problem *p, int cc)
{
  (void)cc;
  /* The 32-bit API: dimensions and batch count are int. */
  return (p->dtype == GK_F32 || p->dtype == GK_F64 || p->dtype == GK_F16 || p->dtype == GK_BF16 ||
          p->dtype == GK_I8) &&
         p->m <= INT_MAX && p->n <= INT_MAX && p->k <= INT_MAX && p->batch <= INT_MAX;
}

cudaError_t cublas_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream)
{
  cudaError_t err = gk_problem_check(p);
  if (err != cudaSuccess)
    return err;
  if (!cublas_supports(p, gk_gpu_ctx_cc(ctx)))
    return cudaErrorNotSupported;
  cublasHandle_t handle = gk_gpu_ctx_cublas(ctx);
  if (handle == NULL)
    return cudaErrorInitializationError;
  cublasStatus_t status = cublasSetStream(handle, stream);
  if (status != CUBLAS_STATUS_SUCCESS)
    return from_cublas(status);

  cudaDataType_t type, c_type;
  cublasComputeType_t compute;
  switch (p->dtype) {
  case GK_F32: type = CUDA_R_32F; compute = p->fast ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; break;
  case GK_F64: type = CUDA_R_64F; compute = CUBLAS_COMPUTE_64F; break;
  case GK_F16: type = CUDA_R_16F; compute = CUBLAS_COMPUTE_32F; break;
  case GK_BF16: type = CUDA_R_16BF; compute = CUBLAS_COMPUTE_32F; break;
  case GK_I8: type = CUDA_R_8I; compute = CUBLAS_COMPUTE_32I; break;
  default: return cudaErrorInvalidValue;
  }
  c_type = p->dtype == GK_I8 ? CUDA_R_32I : type;
  /* Scalars in the compute type; host pointer mode (the handle's default) reads them now. */
  const float alpha_f = (float)p->alpha, beta_f = (float)p->beta;
  const double alpha_d = p->alpha, beta_d = p->beta;
  const int32_t alpha_i = (int32_t)p->alpha, beta_i = (int32_t)p->beta; /* checked integers */
  const void *alpha = p->dtype == GK_F64 ? (const void *)&alpha_d
                      : p->dtype == GK_I8 ? (const void *)&alpha_i
                                          : (const void *)&alpha_f;
  const void *beta = p->dtype == GK_F64 ? (const void *)&beta_d
                     : p->dtype == GK_I8 ? (const void *)&beta_i
                                         : (const void *)&beta_f;

  const int m = (int)p->m, n = (int)p->n, k = (int)p->k;
  /* Column-major view, see the comment at the top: first operand B, second A. */
  const cublasOperation_t op_b = p->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = p->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ld_b = p->trans_b ? k : n; /* stored row length of B (n x k when transposed) */
  const int ld_a = p->trans_a ? m : k; /* stored row length of A (k x m when transposed) */
  status = cublasGemmStridedBatchedEx(handle, op_b, op_a, n, m, k, alpha, p->b, type, ld_b,
                                      (long long)p->k * p->n, p->a, type, ld_a,
                                      (long long)p->m * p->k, beta, p->c, c_type, n,
                                      (long long)p->m * p->n, (int)p->batch, compute,
                                      CUBLAS_GEMM_DEFAULT);
  return from_cublas(status);
}

} // namespace

extern "C" const gk_kernel gk_kernel_cublas = {
    "cublas",
    "cuBLAS (cublasGemmStridedBatchedEx): the reference; used only when named",
    cublas_supports,
    cublas_launch,
    0,
};
