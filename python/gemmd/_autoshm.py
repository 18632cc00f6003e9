"""Shared memory without asking (Client(auto_shm=True), the default): a gemm() whose operands
are plain arrays of at least shm_min_bytes, on a daemon that offers "shm", has them copied into
one scratch region of the connection and its result written there, then copied out. A copy in
this process runs at memory speed and the daemon reads the region in place (on a GPU: straight
from these pages by DMA), where the socket moves some 5 GB/s. One gemm at a time uses the
scratch; another thread's gemm meanwhile, or one the scratch cannot serve, goes as before.
"""

import threading

import numpy as np

from ._arrays import operand_dtype, result_dtype
from ._errors import Error

_ALIGN = 256    # operands start on 256-byte boundaries, as the daemon's kernels like them


def _aligned(nbytes):
    return -(-nbytes // _ALIGN) * _ALIGN


def _result_shape(a, b, trans_a, trans_b):
    m = a.shape[-1] if trans_a else a.shape[-2]
    n = b.shape[-2] if trans_b else b.shape[-1]
    return (m, n) if a.ndim == 2 else (a.shape[0], m, n)


class Scratch:
    """One client's scratch region and the lock of the gemm using it."""

    def __init__(self, client, min_bytes):
        self.client = client
        self.min_bytes = min_bytes
        self.array = None           # uint8, in a region of the current connection
        self.lock = threading.Lock()
        self.off = False            # the daemon offers no regions here: stop trying
        self.refused = None         # a size the daemon refused (shm quotas): none as large

    def _usable(self, arrays, out):
        if self.off:
            return False
        if any(type(x) is not np.ndarray or x.ndim not in (2, 3) for x in arrays):
            return False    # residents, buffers, vectors: as they are
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

    def _ensure(self, total):
        """A scratch of at least total bytes in a region of this connection, or False."""
        if self.array is not None and self.array.nbytes >= total and \
                self.client._in_region(self.array):
            return True
        if self.refused is not None and total >= self.refused:
            return False
        self.array = None   # too small, or its region went with a lost connection
        try:    # total is a multiple of _ALIGN: float32 words, seen as bytes
            self.array = self.client.shm_array(total // 4, np.float32).view(np.uint8)
        except Error as exc:
            if exc.code == "UNIMPLEMENTED":
                self.off = True
            else:           # over shm quotas: smaller gemms may still fit
                self.refused = total
            return False
        return True

    def stage(self, a, b, c, trans_a, trans_b, out, out_dtype=None, dtype=None):
        """(a, b, c, out) copied into the scratch with the lock held, or None (lock free). The
        result is of out_dtype (gemm's argument: None is what a's dtype returns); dtype names
        the fp8 format of uint8 operands (gemm's argument)."""
        arrays = [x for x in (a, b, c) if x is not None]
        if not self._usable(arrays, out) or a.dtype != b.dtype:
            return None
        try:
            wire = operand_dtype(a.dtype, dtype)
            result_np = result_dtype(out_dtype, wire, a.dtype.newbyteorder("<"))[1]
        except (TypeError, ValueError):
            return None     # let Problem's checks speak
        shape = _result_shape(a, b, trans_a, trans_b)
        nout = int(np.prod(shape, dtype=np.int64)) * result_np.itemsize
        if out is not None and (out.shape != shape or out.dtype != result_np):
            return None     # let the daemon's checks speak
        offsets, total = [], 0
        for nbytes in [x.nbytes for x in arrays] + [nout]:
            offsets.append(total)
            total += _aligned(nbytes)
        if not self.lock.acquire(blocking=False):
            return None
        if not self._ensure(total):
            self.lock.release()
            return None
        views = []
        for x, off in zip(arrays + [None], offsets):
            dtype, shape_x = (result_np, shape) if x is None else (x.dtype, x.shape)
            count = int(np.prod(shape_x, dtype=np.int64))
            view = np.frombuffer(self.array, dtype, count, off).reshape(shape_x)
            if x is not None:
                np.copyto(view, x)
            views.append(view)
        staged_c = views[2] if c is not None else None
        return views[0], views[1], staged_c, views[-1]

    def done(self, ok):
        """The staged gemm ended; after a failure (a timeout among them) the daemon may still
        write the result region later, so that scratch is never used again."""
        if not ok:
            self.array = None
        self.lock.release()
