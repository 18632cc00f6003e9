# The fast kernels, plugged into gemmkernels_gpu through the hook in kernels/gpu.cmake.
# One kernel per file, numbered by the idea it adds (see each file's opening comment and
# bench/RESULTS.md); a kernel whose template later kernels reuse keeps it in NN_name.cuh beside
# its NN_name.cu.
list(APPEND GK_GPU_SOURCES
  02_simt_f32.cu
  03_simt_f64.cu
  04_mma_f16.cu
  05_mma_tf32.cu
  06_dmma_f64.cu
  07_wgmma_f16.cu
  08_wgmma_tf32.cu
  09_simt_f32_splitk.cu
  10_dmma16_f64.cu
  11_simt_f32_small.cu
  12_mma_tf32_small.cu
  13_mma_f16_small.cu
  14_dmma_f64_small.cu
  15_wgmma_f16_persist.cu
  16_wgmma_tf32_persist.cu
  17_wgmma_i8_persist.cu
  18_mma_i8_small.cu
  19_wgmma_fp8_persist.cu
  20_mma_fp8_small.cu
  21_wgmma_f32x3.cu
  22_dmma_f64_tma.cu)
# The selector's order of preference: the one table. gk_select takes the first kernel whose
# supports() accepts the problem (dtype, precision, shape, alignment, compute capability), so a
# row only competes with the rows of its own dtype; after these rows gk_registry.cu appends
# tiled16 (01: every problem, the last resort) and cublas (00: the reference, never "auto").
# Within a dtype, the small-tile kernels come first (they take only the small-job lane's m and n,
# which the big tiles mostly pad), then the Hopper kernels (most specific first), then the
# kernels for every GPU from sm_80 on.
list(APPEND GK_FAST_KERNELS
  # i8: m, n <= 64, and every shape 17 cannot take (k % 16, unaligned, no Hopper); tiled16 only
  # where this does not run (no sm_80)
  gk_kernel_mma_i8_small
  # i8 on Hopper: the rest (TMA-describable A, B and C)
  gk_kernel_wgmma_i8_persist
  # e4m3/e5m2: as i8: m, n <= 64, and what 19 cannot take (sm_89 and up)
  gk_kernel_mma_fp8_small
  # e4m3/e5m2 on Hopper: the rest
  gk_kernel_wgmma_fp8_persist
  # f32 "fast", m, n <= 128: ahead of every f32 kernel (it refuses exact, which goes on below)
  gk_kernel_mma_tf32_small
  # f32 (exact, or fast where 12 declined), m, n <= 64
  gk_kernel_simt_f32_small
  # f16/bf16, m, n <= 128 (on Hopper above 64 only where 15 does not apply)
  gk_kernel_mma_f16_small
  # f64, m, n <= 32 (cc 9.0)
  gk_kernel_dmma_f64_small
  # f32 fast on Hopper, k <= 512 and C storable by TMA: the persistent form before 08
  gk_kernel_wgmma_tf32_persist
  # f32 fast on Hopper, TMA-describable A and B, every transpose but TN
  gk_kernel_wgmma_tf32
  # f32 fast: the rest (TN, unaligned rows, sm_80 and up)
  gk_kernel_mma_tf32
  # f32 exact on Hopper (three TF32 products, SGEMM's accuracy), every transpose but TN; it
  # hands the short grids with long k to 09
  gk_kernel_wgmma_f32x3
  # f32 exact, grids too short to fill the GPU, split over a cluster (cc >= 9.0), before 02
  gk_kernel_simt_f32_splitk
  # f32: every problem left
  gk_kernel_simt_f32
  # f16/bf16 on Hopper, when TMA can also store C: the persistent form before 07
  gk_kernel_wgmma_f16_persist
  # f16/bf16 on Hopper, TMA-describable A and B
  gk_kernel_wgmma_f16
  # f16/bf16: the rest (sm_80 and up)
  gk_kernel_mma_f16
  # f64 on Hopper, A and B describable by TMA: 22 (TMA-fed, warp-specialised, persistent: 93-103%
  # of cuBLAS's DGEMM on the H200 where 10 gives 78-100%)
  gk_kernel_dmma_f64_tma
  # f64 on cc 9.0: the sm_90 mma shapes (what TMA cannot describe: odd leading dimensions), before 06
  gk_kernel_dmma16_f64
  # f64 on cc >= 8.0 (DMMA m8n8k4)
  gk_kernel_dmma_f64
  # f64 on GPUs without DMMA
  gk_kernel_simt_f64)
