/*
 * gk_complex.cu - the complex gemm (GK_C64, GK_C128) on the real kernels, by the real
 * embedding: C (m x n complex, interleaved) is, read as reals, an m x 2n matrix; op(A) read as
 * reals is m x 2k; and B expanded into 2k x 2n reals, each complex b (times alpha, conjugated
 * as asked) as the 2x2 block
 *
 *     [  b_re   b_im ]        (rows 2l and 2l+1, columns 2j and 2j+1)
 *     [ -b_im   b_re ]
 *
 * makes the one real product A_r · B_x the interleaved complex product, with the complex flop
 * count (8 m n k): C_re = a_re b_re - a_im b_im, C_im = a_re b_im + a_im b_re. conj(op(A))
 * negates the block's second row (a_im's), so both conjugations and alpha fold into the
 * expansion; op(A) itself is used in place when it is A as stored and packed, else gathered
 * packed first (trans_a, lda). A complex beta scales C first (then beta 1); a real one goes to
 * the real kernel as it is (0: C is not read). c64 runs on the f32 kernels (the request's
 * precision: TF32 only when fast), c128 on the f64 (DMMA) ones. The expansion and the copy of
 * A live in the context's pool for the launch (cudaMallocFromPoolAsync, freed on the stream).
 */
#include <math.h>

#include <cuda_runtime.h>

#include "gk_complex.h"
#include "gk_gpu.h"

namespace {

constexpr int kThreads = 256;

/* B expanded: entry z's op(B) (k x n complex, stored with ldb, transposed when trans_b) into
 * 2k x 2n reals at bx + z * 4kn, times alpha, conjugated per conj_b, the second rows negated
 * per conj_a. One thread per complex element of op(B). */
template <typename T>
__global__ void expand_b(const T *b, T *bx, int64_t k, int64_t n, int64_t ldb, int64_t stride,
                         bool trans_b, bool conj_b, bool conj_a, T ar, T ai)
{
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= k * n)
    return;
  const int64_t z = blockIdx.y, l = e / n, j = e % n;
  const int64_t src = z * stride + (trans_b ? j * ldb + l : l * ldb + j);
  const T br = b[2 * src], bi = conj_b ? -b[2 * src + 1] : b[2 * src + 1];
  const T xr = ar * br - ai * bi, xi = ar * bi + ai * br; /* alpha · b */
  const T s = conj_a ? T(-1) : T(1);
  T *row0 = bx + z * 4 * k * n + (2 * l) * (2 * n) + 2 * j, *row1 = row0 + 2 * n;
  row0[0] = xr;
  row0[1] = xi;
  row1[0] = -s * xi;
  row1[1] = s * xr;
}

/* op(A) gathered packed: entry z's m x k complex from A stored with lda (k x m when trans_a). */
template <typename T>
__global__ void pack_a(const T *a, T *ap, int64_t m, int64_t k, int64_t lda, int64_t stride,
                       bool trans_a)
{
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= m * k)
    return;
  const int64_t z = blockIdx.y, i = e / k, l = e % k;
  const int64_t src = z * stride + (trans_a ? l * lda + i : i * lda + l);
  T *dst = ap + 2 * (z * m * k + e);
  dst[0] = a[2 * src];
  dst[1] = a[2 * src + 1];
}

/* C *= beta (complex), every element of every entry (packed). */
template <typename T>
__global__ void scale_c(T *c, int64_t count, T br, T bi)
{
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= count)
    return;
  const T cr = c[2 * e], ci = c[2 * e + 1];
  c[2 * e] = br * cr - bi * ci;
  c[2 * e + 1] = br * ci + bi * cr;
}

/* A grid of `per` threads' worth of blocks in x, one row of blocks per entry in y (y is at most
 * 65535: entries beyond go in further launches by the caller's loop). */
dim3 grid_of(int64_t per, int64_t entries)
{
  return dim3((unsigned)((per + kThreads - 1) / kThreads), (unsigned)entries);
}

constexpr int64_t kMaxGridY = 65535;

template <typename T>
cudaError_t launch_typed(gk_gpu_ctx *ctx, const gk_problem *p, const char *preference,
                         cudaStream_t stream, const gk_kernel **used)
{
  const int64_t m = p->m, n = p->n, k = p->k, batch = p->batch;
  const int64_t b_entries = p->b_shared ? 1 : batch;
  const bool a_in_place = !p->trans_a && gk_problem_lda(p) == k;
  const size_t bx_bytes = (size_t)(b_entries * 4 * k * n) * sizeof(T);
  const size_t ap_bytes = a_in_place ? 0 : (size_t)(batch * 2 * m * k) * sizeof(T);
  const size_t bx_round = (bx_bytes + 255) & ~(size_t)255;
  cudaMemPool_t pool = gk_gpu_ctx_pool(ctx);
  void *scratch = NULL;
  if (pool == NULL)
    return cudaErrorMemoryAllocation;
  cudaError_t err = cudaMallocFromPoolAsync(&scratch, bx_round + ap_bytes, pool, stream);
  if (err != cudaSuccess)
    return err;
  T *bx = static_cast<T *>(scratch);
  T *ap = a_in_place ? NULL : reinterpret_cast<T *>(static_cast<char *>(scratch) + bx_round);
  const T *b = static_cast<const T *>(p->b), *a = static_cast<const T *>(p->a);
  const int64_t b_stride = gk_problem_b_stride(p), a_stride = gk_problem_a_stride(p);
  for (int64_t z0 = 0; z0 < b_entries && err == cudaSuccess; z0 += kMaxGridY) {
    const int64_t count = b_entries - z0 < kMaxGridY ? b_entries - z0 : kMaxGridY;
    expand_b<T><<<grid_of(k * n, count), kThreads, 0, stream>>>(
        b + 2 * z0 * b_stride, bx + z0 * 4 * k * n, k, n, gk_problem_ldb(p), b_stride,
        p->trans_b, p->conj_b, p->conj_a, (T)p->alpha, (T)p->alpha_im);
    err = cudaGetLastError();
  }
  for (int64_t z0 = 0; !a_in_place && z0 < batch && err == cudaSuccess; z0 += kMaxGridY) {
    const int64_t count = batch - z0 < kMaxGridY ? batch - z0 : kMaxGridY;
    pack_a<T><<<grid_of(m * k, count), kThreads, 0, stream>>>(
        a + 2 * z0 * a_stride, ap + 2 * z0 * m * k, m, k, gk_problem_lda(p), a_stride,
        p->trans_a);
    err = cudaGetLastError();
  }
  const bool beta_complex = p->beta_im != 0.0;
  if (err == cudaSuccess && beta_complex) {
    const int64_t count = batch * m * n;
    scale_c<T><<<(unsigned)((count + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        static_cast<T *>(p->c), count, (T)p->beta, (T)p->beta_im);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) {
    gk_problem real = *p;
    real.dtype = sizeof(T) == sizeof(float) ? GK_F32 : GK_F64;
    real.trans_a = real.trans_b = false;
    real.conj_a = real.conj_b = false;
    real.n = 2 * n;
    real.k = 2 * k;
    real.alpha = 1.0;
    real.alpha_im = real.beta_im = 0.0;
    real.beta = beta_complex ? 1.0 : p->beta;
    real.a = a_in_place ? p->a : ap;
    real.b = bx;
    real.lda = real.ldb = real.ldc = 0;
    err = gk_gpu_gemm(ctx, &real, preference, stream, used);
  }
  const cudaError_t freed = cudaFreeAsync(scratch, stream);
  return err != cudaSuccess ? err : freed;
}

} // namespace

extern "C" size_t gk_complex_scratch_bytes(const gk_problem *p)
{
  const size_t size = p->dtype == GK_C64 ? sizeof(float) : sizeof(double);
  const int64_t b_entries = p->b_shared ? 1 : p->batch;
  const bool a_in_place = !p->trans_a && gk_problem_lda(p) == p->k;
  return (size_t)(b_entries * 4 * p->k * p->n) * size + 256 +
         (a_in_place ? 0 : (size_t)(p->batch * 2 * p->m * p->k) * size);
}

extern "C" cudaError_t gk_gpu_gemm_complex(gk_gpu_ctx *ctx, const gk_problem *p,
                                           const char *preference, cudaStream_t stream,
                                           const gk_kernel **used)
{
  /* no epilogue, no cast, C packed: the real kernels write C as m x 2n reals */
  if (p->cast || p->bias != NULL || p->act != GK_ACT_NONE || gk_problem_ldc(p) != p->n)
    return cudaErrorInvalidValue;
  if (!isfinite(p->alpha_im) || !isfinite(p->beta_im))
    return cudaErrorInvalidValue;
  return p->dtype == GK_C64 ? launch_typed<float>(ctx, p, preference, stream, used)
                            : launch_typed<double>(ctx, p, preference, stream, used);
}
