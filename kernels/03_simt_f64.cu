/*
 * 03_simt_f64.cu - "simt_f64": f64 GEMM on the CUDA cores, register tiled.
 *
 * Tiling: 64 x 64 block tile, BK = 8, 64 threads (two 64x32 warp tiles), 8 x 8 doubles per
 * thread; otherwise the kernel of 02 (02_simt_f32.cuh) instantiated for double.
 *
 * What changed over 02: the element type, and a smaller block tile. Why: 64 double
 * accumulators already take 128 registers per thread; a 128x128 tile with 256 threads would
 * allow one block per SM and no latency hiding, 64x64 with 64 threads lets several blocks share
 * an SM. cuBLAS DGEMM uses the FP64 tensor cores (DMMA) and will stay about twice as fast; this
 * kernel is the correct, not-naive f64 path.
 *
 * Measured (H200, bench_kernels, run 2): 17.2 / 18.0 / 18.8 TFLOP/s at 2048^3 / 4096^3 / 8192^3
 * = 30% / 29% / 29% of cuBLAS DGEMM. Superseded by 06_dmma_f64.cu on compute capability >= 8.0
 * (the selector prefers 06); kept as the history's step and for the record.
 *
 * Contract: as 02, for f64.
 */
#include "02_simt_f32.cuh"
#include "gk_gpu.h"

namespace {

using simt_f64 = gk__simt_launcher<double, 64, 64, 8, 4>;

bool simt_f64_supports(const gk_problem *p, int cc) {
  (void)cc;
  return p->dtype == GK_F64 && gk__fits_int32(p);
}

cudaError_t simt_f64_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  (void)ctx;
  if (p->dtype != GK_F64) return cudaErrorInvalidValue;
  return simt_f64::launch(p, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_simt_f64 = {
    "simt_f64",
    "f64, CUDA cores: 64x64x8 block tile, 8x8 per thread, double-buffered (03)",
    simt_f64_supports,
    simt_f64_launch,
    0,
};
