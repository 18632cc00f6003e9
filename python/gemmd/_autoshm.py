"""Shared memory without asking (Client(auto_shm=True), the default): a gemm() whose operands
are plain arrays, on a daemon that offers "shm", has them copied into one scratch region of the
connection and its result written there, then copied out, where that costs less than sending
the bytes over the socket. The daemon reads the region in place (on a GPU: straight from these
pages by DMA). One gemm at a time uses the scratch; another thread's gemm meanwhile, or one the
scratch cannot serve, goes over the socket as before.

ARCHITECTURE.md, "The automatic scratch region", states the design; in short:
- the region stays mapped between calls, its pages made once when it is made (touched by the
  copy threads before it is registered), grown geometrically up to max_bytes;
- the copies in and out run on the client's copy threads (gemmd._copier), in blocks of rows;
- the choice of the scratch over the socket is a cost model: the scratch costs its copies at
  the copy bandwidth measured in this process, plus a fixed cost a call; the socket costs the
  same bytes at SOCKET_BYTES_PER_S, or at half the copy bandwidth where that is less (it
  copies each byte twice);
- a large 2-D gemm whose B is small beside A and C is cut into row pieces of C, separate gemms
  on the one region: piece i's rows of A are copied in while the daemon computes piece i - 1,
  and piece i - 1's rows of C copied out while piece i computes. Each piece reads all of B
  again (on a GPU: B crosses the bus again), so it is done only where the model says the
  overlap saves more than that costs (never for square gemms on a GPU).
"""

import threading
import time

import numpy as np

from ._arrays import _holds, operand_dtype, result_dtype
from ._errors import Error, Timeout

_ALIGN = 256    # operands start on 256-byte boundaries, as the daemon's kernels like them
# The cost model (seconds, bytes/s). The socket's rate is what a Unix socket carried for
# operands and results of 64 MiB to 1 GiB (bench_e2e and gemmctl bench on an H200 box, 16
# cores: 192 MiB in some 36 ms over what shared arrays took); a copy by threads runs 5-45 GB/s.
SOCKET_BYTES_PER_S = 5.0e9
_SCRATCH_CALL_S = 30e-6     # handing the copies to the threads, the views, the region refs
_PIECE_CALL_S = 150e-6      # one more request and reply, one more job on the daemon
_GPU_B_BYTES_PER_S = 20e9   # B sent to the device again for each further piece (PCIe, low)
_MIN_PIECE_ROWS = 256
MAX_PIECES = 8


def _aligned(nbytes):
    return -(-nbytes // _ALIGN) * _ALIGN


def _result_shape(a, b, trans_a, trans_b):
    m = a.shape[-1] if trans_a else a.shape[-2]
    n = b.shape[-2] if trans_b else b.shape[-1]
    return (m, n) if a.ndim == 2 else (a.shape[0], m, n)


def _inner_dims_match(a, b, trans_a, trans_b):
    k_a = a.shape[-2] if trans_a else a.shape[-1]
    k_b = b.shape[-1] if trans_b else b.shape[-2]
    return k_a == k_b


def _stage_swapped(x):
    """Whether x goes into the scratch with its last two axes swapped (then row-major: x is
    column-major, or its columns lie closer together than its rows), so that the copy reads
    x in its own order and the gemm flips the trans flag instead."""
    if x.flags.c_contiguous:
        return False
    if np.swapaxes(x, -1, -2).flags.c_contiguous:
        return True
    return x.strides[-2] != 0 and abs(x.strides[-2]) < abs(x.strides[-1])


class _Staged:
    """One array's place in the scratch: view (row-major, in the region), src (the caller's
    array in the same axis order), operand (what the gemm is given: view, or its swapaxes)."""

    def __init__(self, x, swapped):
        self.src = np.swapaxes(x, -1, -2) if swapped else x
        self.swapped = swapped
        self.dtype = x.dtype.newbyteorder("<") if x.dtype.byteorder == ">" else x.dtype
        self.nbytes = x.nbytes
        self.view = self.operand = None

    def place(self, buf, offset):
        count = int(np.prod(self.src.shape, dtype=np.int64))
        self.view = np.frombuffer(buf, self.dtype, count, offset).reshape(self.src.shape)
        self.operand = np.swapaxes(self.view, -1, -2) if self.swapped else self.view


class Scratch:
    """One client's scratch region, the lock of the gemm using it, and its cost model."""

    def __init__(self, client, copier, min_bytes, max_bytes, pieces=None):
        if pieces is not None and (not isinstance(pieces, int) or not 1 <= pieces <= 64):
            raise ValueError("scratch_pieces must be None or an int from 1 to 64, got %r" %
                             (pieces,))
        if not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError("scratch_max_bytes must be an int >= 0, got %r" % (max_bytes,))
        self.client = client
        self.copier = copier
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.pieces = pieces        # None: the model decides
        self.array = None           # uint8, in a region of the current connection
        self.retired = []           # scratches a timed-out gemm may still write: freed later
        self.regions_made = 0       # regions registered for the scratch (growth)
        self.served = 0             # gemms that went through it
        # seconds the whole (uncut) gemms of this scratch spent copying in, waiting for the
        # daemon and copying out (a benchmark's view of where a call's time goes)
        self.spent = {"copy_in": 0.0, "gemm": 0.0, "copy_out": 0.0}
        self.lock = threading.Lock()
        self.off = False            # the daemon offers no regions here: stop trying
        self.refused = None         # a size the daemon refused (shm quotas): none as large
        self._gpu = None
        self._late = False          # a gemm of this scratch timed out

    # ---- whether, and how
    def _usable(self, arrays, out):
        if self.off:
            return False
        if any(type(x) is not np.ndarray or x.ndim not in (2, 3) or 0 in x.shape
               for x in arrays):
            return False    # residents, buffers, vectors, empties: as they are
        if out is not None and type(out) is not np.ndarray:
            return False
        if sum(x.nbytes for x in arrays) < self.min_bytes:
            return False
        if any(self.client._in_region(x) for x in arrays):
            return False    # already shared
        try:                # asked once a connection (info); a failure shows in the gemm
            return "shm" in self.client.features
        except Error:
            return False

    def _on_gpu(self):
        if self._gpu is None:
            try:
                self._gpu = self.client.info().get("backend") != "cpu"
            except Error:
                return True
        return self._gpu

    def worth_it(self, nbytes):
        """Whether copying nbytes (in and out together) costs less than sending them. The
        socket copies every byte twice (into the kernel, out of it), so it is taken never to
        beat half the copy bandwidth measured here, whatever SOCKET_BYTES_PER_S says: on a
        busy box both slow down."""
        bandwidth = self.copier.bandwidth()
        socket_rate = min(SOCKET_BYTES_PER_S, bandwidth / 2)
        return nbytes / bandwidth + _SCRATCH_CALL_S < nbytes / socket_rate

    def piece_count(self, m, rows_bytes, b_bytes):
        """Row pieces for a gemm of m rows whose row-cut copies (A, C, the result) are
        rows_bytes and whose B is b_bytes: the count the model saves most with (1: no cut)."""
        if self.pieces is not None:
            return max(1, min(self.pieces, m))
        on_gpu = self._on_gpu()
        if on_gpu and 4 * b_bytes > rows_bytes:
            # each piece uploads B again and gives up the daemon's own overlap of copies and
            # kernels (gpu.shm_pieces): an H200 run cut square 1024^3-2048^3 gemms on a
            # bandwidth estimate still low from the process's start, and lost 2-7 ms a call
            return 1
        copy_s = rows_bytes / self.copier.bandwidth()
        b_rate = _GPU_B_BYTES_PER_S if on_gpu else self.copier.bandwidth()
        best, best_gain = 1, 0.0
        for count in range(2, MAX_PIECES + 1):
            if m // count < _MIN_PIECE_ROWS:
                break
            gain = copy_s * (1 - 1 / count) - (count - 1) * (b_bytes / b_rate + _PIECE_CALL_S)
            if gain > best_gain:
                best, best_gain = count, gain
        return best

    # ---- the region
    def _free(self, array):
        try:
            self.client.shm_free(array)
            return True
        except ValueError:
            return True     # its connection is gone, and the region with it
        except Error as exc:
            return exc.code != "INVALID_ARGUMENT"   # a late result still due: try later

    def tidy(self):
        """Unregisters the retired scratches the daemon is done with (the lock is held)."""
        self.retired = [old for old in self.retired if not self._free(old)]

    def _ensure(self, total):
        """A scratch of at least total bytes in a region of this connection, or False."""
        if self.retired:
            self.tidy()
        current = self.array
        if current is not None and current.nbytes >= total and self.client._in_region(current):
            return True
        if total > self.max_bytes or (self.refused is not None and total >= self.refused):
            return False
        grown = 0 if current is None else 2 * current.nbytes
        self.array = None
        if current is not None:
            self._free(current)     # before the next one: both would count against quotas
        for size in dict.fromkeys((min(max(total, grown), self.max_bytes), total)):
            try:
                mapping = self.client._register_region(size, self.copier.touch)
            except Error as exc:
                if exc.code == "UNIMPLEMENTED":
                    self.off = True
                    return False
                continue            # over shm quotas: a smaller one, smaller gemms may fit
            self.array = np.frombuffer(mapping, np.uint8)
            self.regions_made += 1
            return True
        self.refused = total
        return False

    # ---- the gemm
    def gemm(self, a, b, c, kw):
        """The gemm through the scratch (its result, or out), or None where the scratch does
        not serve it (the caller sends it over the socket). kw: gemm's keyword arguments, its
        timeout resolved; c is None unless beta is not 0."""
        out, trans_a, trans_b = kw["out"], kw["trans_a"], kw["trans_b"]
        arrays = [x for x in (a, b, c) if x is not None]
        if not self._usable(arrays, out) or a.dtype != b.dtype or \
                (a.ndim, b.ndim) not in ((2, 2), (3, 3), (3, 2)) or \
                not _inner_dims_match(a, b, trans_a, trans_b):
            return None     # let Problem's checks speak
        try:
            wire = operand_dtype(a.dtype, kw["dtype"])
            name, result_np = result_dtype(kw["out_dtype"], wire, a.dtype.newbyteorder("<"))
        except (TypeError, ValueError):
            return None     # let Problem's checks speak
        shape = _result_shape(a, b, trans_a, trans_b)
        if out is not None:
            # out may hold the result in any dtype the socket path takes for it (bf16: uint16
            # bit patterns even where ml_dtypes makes "bf16" mean ml_dtypes.bfloat16): the
            # scratch's result is then in out's dtype
            if out.shape != shape or out.dtype.byteorder == ">" or \
                    not _holds(out.dtype, name) or not out.flags.writeable:
                return None     # let the checks speak
            result_np = out.dtype
        count = int(np.prod(shape, dtype=np.int64))
        staged = [_Staged(x, _stage_swapped(x) if x is not c else False) for x in arrays]
        sizes = [x.nbytes for x in staged] + [count * result_np.itemsize]
        if not self.worth_it(sum(sizes)) or not self.lock.acquire(blocking=False):
            return None
        self._late = False
        try:
            offsets = [sum(_aligned(n) for n in sizes[:i]) for i in range(len(sizes) + 1)]
            if not self._ensure(offsets[-1]):
                return None
            for item, offset in zip(staged, offsets):
                item.place(self.array, offset)
            result = np.frombuffer(self.array, result_np, count, offsets[-2]).reshape(shape)
            self.served += 1
            return self._run(staged, result, kw)
        finally:
            if self._late:  # the daemon may still write this scratch: never use it again
                self.retired.append(self.array)
                self.array = None
            self.lock.release()

    def _run(self, staged, result, kw):
        sa, sb = staged[0], staged[1]
        sc = staged[2] if len(staged) > 2 else None
        count = 1
        # row pieces of C are row pieces of the staged a where it holds op(a) row-major
        if result.ndim == 2 and sb.view.ndim == 2 and sa.swapped == bool(kw["trans_a"]):
            rows_bytes = sa.nbytes + result.nbytes + (sc.nbytes if sc is not None else 0)
            count = self.piece_count(result.shape[0], rows_bytes, sb.nbytes)
        out = kw["out"]
        dest = out if out is not None else np.empty(result.shape, result.dtype)
        deadline = None if kw["timeout"] is None else time.monotonic() + kw["timeout"]
        if count == 1:
            start = time.perf_counter()
            self.copier.copy([(x.view, x.src) for x in staged])
            copied = time.perf_counter()
            future = self._submit(sa.operand, sb.operand, sc.operand if sc else None, result,
                                  kw, kw["trans_a"])
            self._wait(future, deadline)
            computed = time.perf_counter()
            self.copier.copy([(dest, result)])
            spent = self.spent
            spent["copy_in"] += copied - start
            spent["gemm"] += computed - copied
            spent["copy_out"] += time.perf_counter() - computed
            return dest
        return self._pipelined(sa, sb, sc, result, dest, count, kw, deadline)

    def _submit(self, a, b, c, result, kw, trans_a):
        return self.client.submit(a, b, c, **dict(kw, out=result, trans_a=trans_a))

    def _pipelined(self, sa, sb, sc, result, dest, count, kw, deadline):
        """The gemm as count gemms of row pieces of C on the one scratch, the copies
        overlapping the daemon's work. Every piece sent is waited for before a failure is
        raised (the first one), so the scratch is free again unless one timed out."""
        m = result.shape[0]
        bounds = [m * i // count for i in range(count + 1)]
        rows = list(zip(bounds, bounds[1:]))
        futures, error = [], None
        try:
            for i, (lo, hi) in enumerate(rows):
                pairs = [(sb.view, sb.src)] if i == 0 else []
                pairs.append((sa.view[lo:hi], sa.src[lo:hi]))
                if sc is not None:
                    pairs.append((sc.view[lo:hi], sc.src[lo:hi]))
                self.copier.copy(pairs)
                futures.append(self._submit(sa.view[lo:hi], sb.operand,
                                            sc.view[lo:hi] if sc is not None else None,
                                            result[lo:hi], kw, False))
        except BaseException as exc:    # a piece not sent: wait for those that were
            error = exc
        for (lo, hi), future in zip(rows, futures):
            try:
                self._wait(future, deadline)
                if error is None:
                    self.copier.copy([(dest[lo:hi], result[lo:hi])])
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error
        return dest

    def _wait(self, future, deadline):
        """future's outcome (raising its failure) within the deadline; a timeout gives the
        request up and marks the scratch as one the daemon may still write."""
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return self.client._finish(future, left)
        except Timeout:
            self._late = True
            raise
