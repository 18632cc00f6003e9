#!/usr/bin/python3
"""dmma_f64_tma_layout.py - a model of kernel 22's data path (kernels/22_dmma_f64_tma.cu), off the GPU.

Writes each k tile's TMA boxes into a stage as the copy engine does (dense box, 128-byte swizzle:
byte offset bits 4-6 xor bits 7-9, zeros past the matrix's edges), reads every lane's mma
fragments from it with the kernel's offsets (phys_k, frag_offsets), multiplies them with
mma.sync m16n8k8 / m16n8k16's register semantics and stores the accumulators as the epilogue
does; checks the result against NumPy for every configuration and layout on ragged shapes, with
and without alpha/beta, and that no fragment load of a half-warp hits a bank twice; and that the
persistent walk's grouped order (tile_origin) visits every tile once for each group size, and
that the ring's mbarrier protocol (one and two fragment sets) neither deadlocks nor lets a load
read a refilled stage, and that frag_offsets' one-offset form (ONE) gives the same offsets.
The formulas are transcribed from the kernel: change them together.

    /usr/bin/python3 bench/dmma_f64_tma_layout.py      # exit 0: all match, no bank conflicts
"""
import sys

import numpy as np


def phys_k(t, j):
    """The physical k (of a stage's 16) holding logical k t + 4j."""
    t0, t1, j0, j1 = t & 1, t >> 1, j & 1, j >> 1
    return t0 | (j0 ^ t1) << 1 | (j1 ^ t0) << 2 | t1 << 3


def frag_offsets(mn, base, g, t):
    """frag_offsets<MN>(base, g, t).off: [j] -> (offset for c % 16 < 8, offset for the odd 8)."""
    off = {}
    for j in range(4):
        k = phys_k(t, j)
        if mn:
            o = (base >> 4) * 2048 + k * 128 + (((g >> 1) ^ (k & 7)) << 4) + ((g & 1) << 3)
            off[j] = (o, o ^ 64)
        else:
            o = base * 128 + (((k >> 1) ^ g) << 4) + ((k & 1) << 3)
            off[j] = (o, o)
    return off


def at(mn, off, c, j):
    return off[j][(c >> 3) & 1] + (c >> 4) * 2048 if mn else off[j][0] + c * 128


def at_one(mn, off, c, j):
    """frag_offsets<MN, ONE = true>.at: off[0][0] alone, the rest XORed in."""
    o = off[0][0]
    return (o ^ (j << 8) ^ (j << 5) ^ ((c & 8) << 3)) + (c >> 4) * 2048 if mn else (o ^ (j << 4)) + c * 128


def one_offsets_ok():
    """The ONE form of frag_offsets gives at()'s offsets for every lane, warp tile and column."""
    for mn in (False, True):
        for first in range(0, 256, 16):
            for lane in range(32):
                g, t = lane // 4, lane % 4
                off = frag_offsets(mn, first + g, g, t)
                for j in range(4):
                    for c in range(0, 128, 8):
                        if at_one(mn, off, c, j) != at(mn, off, c, j):
                            print(f"frag_offsets ONE, {'MN' if mn else 'K'}-major: FAIL")
                            return False
    print("frag_offsets ONE: the same offsets: PASS")
    return True


def swizzle(o):
    return o ^ (((o >> 7) & 7) << 4)


def tma_box(stage, dst, g_mat, c0, c1, box0, box1):
    """One box of box0 (inner) x box1 (outer) doubles of the stored matrix g_mat at (c0, c1)."""
    for r in range(box1):
        for c in range(box0):
            gi, go = c0 + c, c1 + r
            inside = go < g_mat.shape[0] and gi < g_mat.shape[1]
            stage[(dst + swizzle(r * box0 * 8 + c * 8)) // 8] = g_mat[go][gi] if inside else 0.0


def conflict_free(addresses):
    """8-byte loads: each half-warp's 16 addresses on 16 different bank pairs (or equal)."""
    for half in (addresses[:16], addresses[16:]):
        banks = {}
        for a in half:
            banks.setdefault((a // 8) % 16, set()).add(a)
        if max(len(v) for v in banks.values()) > 1:
            return False
    return True


def run(m, n, k, ta, tb, bm, bn, warps_m, mma_k, alpha, beta, rng, wgs=2):
    a, b, c0 = rng.uniform(-1, 1, (m, k)), rng.uniform(-1, 1, (k, n)), rng.uniform(-1, 1, (m, n))
    a_st, b_st = (a.T.copy() if ta else a), (b.T.copy() if tb else b)
    wg_rows, warps_n = bm // wgs, 4 // warps_m
    at_ = at_one if wgs > 2 else at  # frag_offsets' ONE: C::ONE is WGS > 2
    wm_, wn_ = wg_rows // warps_m, bn // warps_n
    mi, ni, a_frag, b_frag, js = wm_ // 16, wn_ // 8, mma_k // 2, mma_k // 4, mma_k // 4
    a_bytes = bm * 16 * 8
    out = c0.copy() if beta != 0 else np.full((m, n), np.nan)
    conflicts = 0
    for m0 in range(0, m, bm):
        for n0 in range(0, n, bn):
            acc = {}
            for k0 in range(0, k, 16):
                stage = np.full((a_bytes + bn * 16 * 8) // 8, np.nan)
                if ta:
                    for box in range(bm // 16):
                        tma_box(stage, box * 2048, a_st, m0 + 16 * box, k0, 16, 16)
                else:
                    tma_box(stage, 0, a_st, k0, m0, 16, bm)
                if tb:
                    tma_box(stage, a_bytes, b_st, k0, n0, 16, bn)
                else:
                    for box in range(bn // 16):
                        tma_box(stage, a_bytes + box * 2048, b_st, n0 + 16 * box, k0, 16, 16)
                for warp in range(4 * wgs):
                    wm = (warp // 4) * wg_rows + ((warp % 4) // warps_n) * wm_
                    wn = ((warp % 4) % warps_n) * wn_
                    for step in range(16 // mma_k):
                        af, bf, addr = {}, {}, {}
                        for lane in range(32):
                            g, t = lane // 4, lane % 4
                            ao, bo = frag_offsets(ta, wm + g, g, t), frag_offsets(not tb, wn + g, g, t)
                            for i in range(mi):
                                for e in range(a_frag):
                                    o = at_(ta, ao, 16 * i + 8 * (e % 2), step * js + e // 2)
                                    af[lane, i, e] = stage[o // 8]
                                    addr.setdefault(("a", i, e), []).append(o)
                            for j in range(ni):
                                for e in range(b_frag):
                                    o = a_bytes + at_(not tb, bo, 8 * j, step * js + e)
                                    bf[lane, j, e] = stage[o // 8]
                                    addr.setdefault(("b", j, e), []).append(o)
                        conflicts += sum(not conflict_free(v) for v in addr.values())
                        for i in range(mi):
                            for j in range(ni):
                                am, bmat = np.zeros((16, mma_k)), np.zeros((mma_k, 8))
                                for lane in range(32):
                                    g, t = lane // 4, lane % 4
                                    for e in range(a_frag):
                                        am[g + 8 * (e % 2), t + 4 * (e // 2)] = af[lane, i, e]
                                    for e in range(b_frag):
                                        bmat[t + 4 * e, g] = bf[lane, j, e]
                                d = am @ bmat
                                for lane in range(32):
                                    g, t = lane // 4, lane % 4
                                    for e in range(4):
                                        key = (warp, i, j, lane, e)
                                        acc[key] = acc.get(key, 0.0) + d[g + 8 * (e // 2), 2 * t + e % 2]
            for (warp, i, j, lane, e), v in acc.items():
                wm = (warp // 4) * wg_rows + ((warp % 4) // warps_n) * wm_
                wn = ((warp % 4) % warps_n) * wn_
                g, t = lane // 4, lane % 4
                row, col = m0 + wm + 16 * i + 8 * (e // 2) + g, n0 + wn + 8 * j + 2 * t + e % 2
                if row < m and col < n:
                    out[row, col] = alpha * v + (beta * out[row, col] if beta != 0 else 0.0)
    ref = alpha * (a @ b) + (beta * c0 if beta != 0 else 0.0)
    return (float(np.max(np.abs(out - ref))) if not np.isnan(out).any() else float("nan")), conflicts


def tile_origin(t, tiles_m, tiles_n, group):
    """tile_origin<C>: tile t of the walk -> (tile row, tile column, problem), grouped order."""
    tiles = tiles_m * tiles_n
    pid, per_group = t % tiles, group * tiles_n
    first_m = pid // per_group * group
    rows, in_group = min(tiles_m - first_m, group), pid % per_group
    return first_m + in_group % rows, in_group // rows, t // tiles


def walk_ok():
    """Every group size's walk visits each tile of every problem once (ragged last groups)."""
    for group in (8, 16):
        for tiles_m, tiles_n, batch in ((1, 1, 1), (7, 3, 2), (17, 5, 1), (64, 64, 1), (33, 40, 3)):
            seen = [tile_origin(t, tiles_m, tiles_n, group) for t in range(tiles_m * tiles_n * batch)]
            want = {(r, c, z) for r in range(tiles_m) for c in range(tiles_n) for z in range(batch)}
            if len(set(seen)) != len(seen) or set(seen) != want:
                print(f"walk group {group} {tiles_m}x{tiles_n}x{batch}: FAIL")
                return False
    print("walk groups 8, 16: every tile once: PASS")
    return True


def ring_producer(tiles, k_tiles, stages):
    """The producer thread's ring calls: ('wait', barrier, stage, parity) then ('fill', stage, slot)."""
    it = 0
    for _ in range(tiles):
        for _ in range(k_tiles):
            s = it % stages
            if it >= stages:
                yield "wait", "empty", s, ((it // stages) + 1) & 1
            yield "fill", s, it
            it += 1


def ring_consumer(tiles, k_tiles, stages, two_sets):
    """A consumer warp's ring calls: waits, ('load', stage, slot it expects), ('arrive', stage).
    two_sets follows consume_two_sets: a stage's second step loads before its first step's mma,
    the next stage's first step before this stage is freed, the last k tile peeled."""
    it = 0
    for _ in range(tiles):
        if k_tiles == 0:
            continue
        if not two_sets:
            for _ in range(k_tiles):
                s = it % stages
                yield "wait", "full", s, (it // stages) & 1
                yield "load", s, it
                yield "load", s, it
                yield "arrive", s
                it += 1
            continue
        s = it % stages
        yield "wait", "full", s, (it // stages) & 1
        yield "load", s, it
        for _ in range(k_tiles - 1):
            yield "load", s, it
            freed, s = s, (it + 1) % stages
            yield "wait", "full", s, ((it + 1) // stages) & 1
            yield "load", s, it + 1
            yield "arrive", freed
            it += 1
        yield "load", s, it
        yield "arrive", s
        it += 1


def ring_ok():
    """The ring's mbarrier protocol under random interleavings (8 consumer warps, TMA fills that
    land later): no deadlock, and every fragment load reads the k tile its slot expects (a stage
    is never refilled before all its loads). try_wait.parity P passes while the barrier's
    current phase's parity is not P, as on the GPU."""
    rng = np.random.default_rng(22)
    for stages in (6, 8):
        for k_tiles in (0, 1, 2, 5, stages, 2 * stages + 3):
            for tiles in (1, 3):
                for two_sets in (False, True):
                    for _ in range(20):
                        agents = [ring_producer(tiles, k_tiles, stages)] + [
                            ring_consumer(tiles, k_tiles, stages, two_sets) for _ in range(8)]
                        head = [next(a, None) for a in agents]
                        phases = {"full": [0] * stages, "empty": [0] * stages}
                        empty_arrivals, data, landing = [0] * stages, [None] * stages, []
                        while any(h is not None for h in head) or landing:
                            ready = [i for i, h in enumerate(head) if h is not None and
                                     (h[0] != "wait" or (phases[h[1]][h[2]] & 1) != h[3])]
                            if not ready and not landing:
                                print(f"ring {stages} stages, {k_tiles} k tiles x {tiles}, sets "
                                      f"{1 + two_sets}: deadlock at {head}")
                                return False
                            pick = int(rng.integers(len(ready) + len(landing)))
                            if pick >= len(ready):  # a fill lands: full's phase completes
                                s, slot = landing.pop(pick - len(ready))
                                data[s] = slot
                                phases["full"][s] += 1
                                continue
                            i = ready[pick]
                            h = head[i]
                            if h[0] == "fill":
                                data[h[1]] = None
                                landing.append((h[1], h[2]))
                            elif h[0] == "load" and data[h[1]] != h[2]:
                                print(f"ring {stages} stages, {k_tiles} k tiles x {tiles}, sets "
                                      f"{1 + two_sets}: slot {h[2]} read stage {h[1]} holding {data[h[1]]}")
                                return False
                            elif h[0] == "arrive":
                                empty_arrivals[h[1]] += 1
                                if empty_arrivals[h[1]] == 8:
                                    empty_arrivals[h[1]] = 0
                                    phases["empty"][h[1]] += 1
                            head[i] = next(agents[i], None)
    print("ring: one and two fragment sets, no deadlock, every load its k tile: PASS")
    return True


def main():
    rng = np.random.default_rng(22)
    configs = [(128, 128, 2, 8, 2), (128, 96, 2, 8, 2), (128, 64, 2, 8, 2), (64, 64, 2, 8, 2),
               (128, 64, 2, 16, 2), (128, 80, 4, 8, 2), (128, 128, 1, 8, 4)]
    shapes = [(34, 18, 38, -0.75, 1.5), (130, 100, 18, 1.0, 0.0)]
    failed = 0
    for bm, bn, warps_m, mma_k, wgs in configs:
        for ta in (False, True):
            for tb in (False, True):
                for m, n, k, alpha, beta in shapes:
                    err, conflicts = run(m, n, k, ta, tb, bm, bn, warps_m, mma_k, alpha, beta, rng, wgs)
                    ok = err <= 1e-12 and conflicts == 0
                    failed += not ok
                    print(f"{bm}x{bn} k{mma_k} {wgs}wg {'T' if ta else 'N'}{'T' if tb else 'N'} {m}x{n}x{k} "
                          f"max |err| {err:.1e}, conflicting loads {conflicts}: {'PASS' if ok else 'FAIL'}")
    walk, ring, one = walk_ok(), ring_ok(), one_offsets_ok()
    return 1 if failed or not walk or not ring or not one else 0


if __name__ == "__main__":
    sys.exit(main())
