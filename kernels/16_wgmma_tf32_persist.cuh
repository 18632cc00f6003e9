/*
 * 16_wgmma_tf32_persist.cuh - the opening of 16's persistent TF32 kernel, which 21 (wgmma_f32x3)
 * runs on the same grid: the ring laid out and armed, the tile count of the batch chunk, the
 * producer warpgroup (one thread loads every tile's k tiles, gk__tf32_produce_tiles, then
 * returns), and each consumer's place: its index, warp, fragment group g and t4 and first
 * fragment row row_lo (+ 0, + 8). The design is in 16_wgmma_tf32_persist.cu's opening comment.
 *
 * A macro, so that both kernels compile exactly as when it was written out in each: it
 * declares smem_raw, ring, ring_ptr, warpgroup, wg_thread, tiles_r, tiles_s, total, k_tiles, r0,
 * s0, z, consumer, warp4, g, t4 and row_lo, and reads the kernel's map_x, map_y, args (rows,
 * cols, k) and problems. C: a gk__wgmma_tf32_cfg; X_MN: X is MN-major.
 *
 * Contract: included by .cu files only; use it inside #if GK_WGMMA_DEVICE.
 */
#ifndef GK_16_WGMMA_TF32_PERSIST_CUH
#define GK_16_WGMMA_TF32_PERSIST_CUH

#include "08_wgmma_tf32.cuh" /* the ring, gk__tf32_produce_tiles, setmaxnreg */

#define GK_TF32_PERSIST_PROLOGUE(C, X_MN)                                                          \
  extern __shared__ __align__(1024) unsigned char smem_raw[];                                      \
  const gk__ring ring = gk__ring_init<C>(smem_raw);                                                \
  unsigned char *ring_ptr = smem_raw + (ring.smem0 - gk__smem_addr(smem_raw));                     \
  const int warpgroup = threadIdx.x / 128, wg_thread = threadIdx.x % 128;                          \
  const int tiles_r = (args.rows + C::BR - 1) / C::BR, tiles_s = (args.cols + C::BS - 1) / C::BS;  \
  const int64_t total = (int64_t)tiles_r * tiles_s * problems;                                     \
  const int k_tiles = (args.k + C::BK - 1) / C::BK;                                                \
  int r0, s0, z;                                                                                   \
                                                                                                   \
  if (warpgroup == 0) { /* producer */                                                             \
    gk__setmaxnreg_dec<C::PRODUCER_REGS>();                                                        \
    if (wg_thread == 0)                                                                            \
      gk__tf32_produce_tiles<C, X_MN>(ring, &map_x, &map_y, tiles_r, tiles_s, total, k_tiles);     \
    return;                                                                                        \
  }                                                                                                \
                                                                                                   \
  gk__setmaxnreg_inc<C::CONSUMER_REGS>();                                                          \
  const int consumer = warpgroup - 1;                                                              \
  const int warp4 = wg_thread / 32, g = (wg_thread % 32) / 4, t4 = wg_thread % 4;                  \
  const int row_lo = consumer * 64 + warp4 * 16 + g

#endif /* GK_16_WGMMA_TF32_PERSIST_CUH */
