/*
 * 09_simt_f32_splitk.cu - "simt_f32_splitk": f32 exact GEMM on the CUDA cores for grids too short
 * to fill the GPU, k split over a thread-block cluster (Hopper).
 *
 * Tiling: 02's (128 x 128 block tile, BK = 8, 256 threads, 8 x 8 outputs per thread, cp.async
 * for the operand that needs no transpose), S = 2..8 blocks per tile as one cluster, one block
 * per SM (115 KB of shared memory asked, 167 registers), block r over the r-th slice of k; the S
 * partial tiles are summed through distributed shared memory, each block reducing and writing
 * BM/S rows; one launch, or two where whole rounds of clusters leave tiles over
 * (09_simt_f32_splitk.cuh).
 *
 * What changed over 02: 02 runs one block per tile, so 1024^3 (64 tiles) or 1000x1200x800 (80)
 * leaves 52-68 of the 132 SMs idle; its per-SM rate with one block was already ~90% of a full
 * machine's, so spreading the same tiles over S times the blocks should gain nearly S-fold where
 * S * tiles fits the machine, less the reduction (64 KB of shared-memory traffic per block).
 *
 * Measured (H200, bench_kernels, run 5 at 27cb90d, against cuBLAS at its best in the same run):
 * 1024^3 32.6 TFLOP/s = 105% (S = 2; 02: 19.6 = 56%), 1000x1200x800 26.4 = 98% (66 tiles as
 * 2-clusters, then 14 as 8-clusters; 02: 21.9 = 78%); 94-99% over the other runs
 * (bench/RESULTS.md, "09 simt_f32_splitk", with what did not help: two blocks per SM, S = 3).
 *
 * Selection: supports() accepts f32 on compute capability >= 9.0 (clusters) when the cost model
 * (gk__simt_plan, with the H200's 132 SMs and cluster occupancy) splits k; registered before
 * simt_f32, so `auto` takes it exactly there. At launch the model runs again with the device's
 * own SM count and cluster occupancy, and when that says "do not split" the problem goes to
 * simt_f32 unchanged.
 *
 * Contract: as 02: any m, n, k, both transposes, alpha/beta (beta == 0: C not read), any batch,
 * scalar loads for rows that are not 16-byte aligned. Results are deterministic (fixed slices,
 * fixed summation order).
 */
#include "09_simt_f32_splitk.cuh"
#include "gk_gpu.h"

extern "C" const gk_kernel gk_kernel_simt_f32; /* 02: the problems that do not split */

namespace {

using splitk_f32 = gk__simt_splitk_launcher<float, 128, 128, 8, true>;

constexpr int kTunedSms = 132; /* H100 SXM and H200 */

bool simt_f32_splitk_supports(const gk_problem *p, int cc) {
  return p->dtype == GK_F32 && cc >= 90 && gk__fits_int32(p) &&
         splitk_f32::plan(p, kTunedSms, gk__splitk_h200_clusters).s1 > 1;
}

cudaError_t simt_f32_splitk_launch(gk_gpu_ctx *ctx, const gk_problem *p, cudaStream_t stream) {
  if (p->dtype != GK_F32) return cudaErrorInvalidValue;
  if (!gk__fits_int32(p)) return cudaErrorInvalidValue;
  int clusters[GK_SPLITK_MAX + 1];
  cudaError_t err = splitk_f32::clusters_at_once(clusters);
  if (err != cudaSuccess) return err;
  const int sms = ctx != NULL ? gk_gpu_ctx_props(ctx)->multiProcessorCount : kTunedSms;
  const gk__splitk_plan plan = splitk_f32::plan(p, sms, clusters);
  if (plan.s1 <= 1) return gk_kernel_simt_f32.launch(ctx, p, stream);
  return splitk_f32::launch_plan(p, plan, stream);
}

} // namespace

extern "C" const gk_kernel gk_kernel_simt_f32_splitk = {
    "simt_f32_splitk",
    "f32 exact, CUDA cores, short grids: 02's 128x128x8 tile with k split over a 2-8 block "
    "cluster, summed in distributed shared memory (09)",
    simt_f32_splitk_supports,
    simt_f32_splitk_launch,
    0,
};
