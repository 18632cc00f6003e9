# The fast kernels, plugged into gemmkernels_gpu through the hook in kernels/gpu.cmake.
# One kernel per file, numbered by the idea it adds (see each file's opening comment and
# bench/RESULTS.md). Registration order is the selector's preference within a dtype: the
# TF32 kernels first (they only accept f32 with precision "fast"; the Hopper ones, 16 (persistent,
# k <= 512 and when TMA can also store C) and 08, take cc 9.0, TMA-describable operands and every transpose
# but TN, before mma.sync, 05), then for f32 exact the Hopper kernel 21 (three TF32 products
# on the tensor cores with SGEMM's accuracy: cc 9.0, TMA-describable operands, every transpose
# but TN; it hands the short grids with long k to 09), then the
# exact SIMT f32 kernels (09, split-K over a cluster, takes only the short grids it splits on
# cc >= 9.0; 02 the rest);
# for f64 the Hopper tensor-core kernels (22, TMA-fed, warp-specialised and persistent: 93-103% of
# cuBLAS's DGEMM on the H200 against 10's 78-100%, on every shape measured; then 10, sm_90 mma
# shapes, for operands TMA cannot describe), then 06 (m8n8k4, cc >= 8.0), then
# the SIMT one (03, kept for GPUs without DMMA); for
# f16/bf16 the Hopper kernels (15, persistent, when TMA can also store C; then 07, cc 9.0 and
# TMA-describable operands only) before mma.sync (04).
# For i8, the small-problem kernel (18: m, n <= 64, and every shape 17 cannot take), then the
# Hopper kernel (17); tiled16 only where 18 does not run (no sm_80). For fp8 likewise: 20
# (m, n <= 64, and what 19 cannot take; sm_89 and up), then 19 (Hopper).
# Ahead of all of them, the small-tile kernels (11-14): they take only problems with m and n of
# at most 64 (128 for tf32 and f16/bf16, 32 for f64), the small-job lane's batches, which the
# big tiles mostly pad.
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
list(APPEND GK_FAST_KERNELS
  gk_kernel_mma_i8_small
  gk_kernel_wgmma_i8_persist
  gk_kernel_mma_fp8_small
  gk_kernel_wgmma_fp8_persist
  gk_kernel_mma_tf32_small
  gk_kernel_simt_f32_small
  gk_kernel_mma_f16_small
  gk_kernel_dmma_f64_small
  gk_kernel_wgmma_tf32_persist
  gk_kernel_wgmma_tf32
  gk_kernel_mma_tf32
  gk_kernel_wgmma_f32x3
  gk_kernel_simt_f32_splitk
  gk_kernel_simt_f32
  gk_kernel_wgmma_f16_persist
  gk_kernel_wgmma_f16
  gk_kernel_mma_f16
  gk_kernel_dmma_f64_tma
  gk_kernel_dmma16_f64
  gk_kernel_dmma_f64
  gk_kernel_simt_f64)
