"""Copies at the box's memory speed: a bounded pool of threads, each copying a block of rows
with NumPy (np.copyto releases the GIL), so one large copy uses many cores' share of the memory
system instead of one core's (on a 16-core box about 7x faster than one np.copyto). What the
automatic scratch region (gemmd._autoshm) copies in and out goes through one of these.
"""

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MAX_THREADS = 16            # the default pool: min(CPUs of the process's affinity, this)
_MIN_PIECE = 512 << 10     # bytes: a smaller copy is not cut further (a thread's start-up)
_PAGE = 4096
_PROBE_BYTES = 16 << 20     # the copy timed once per process and thread count
_LEARN_BYTES = 8 << 20      # copies at least this large update the measured bandwidth...
_LEARN_WEIGHT = 0.25        # ...by this share of their own rate
_bandwidth = {}             # threads -> bytes/s measured in this process
_bandwidth_lock = threading.Lock()


def _cpus():
    """The CPUs this process may run on (its affinity: a container's or taskset's share)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_threads(threads=None):
    """The pool size: threads if given, else $GEMMD_COPY_THREADS, else min(CPUs this process
    may use, 16)."""
    if threads is None:
        env = os.environ.get("GEMMD_COPY_THREADS", "").strip()
        try:
            threads = int(env) if env else min(_cpus(), MAX_THREADS)
        except ValueError:
            threads = env
    if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 256:
        raise ValueError("copy_threads (GEMMD_COPY_THREADS) must be an int from 1 to 256, got "
                         "%r" % (threads,))
    return threads


def _row_blocks(shape, count):
    """Index tuples cutting an array of shape (2-D or 3-D) into about count blocks of rows: by
    the first axis while it has enough entries, else each batch entry's rows apart."""
    if len(shape) == 1 or shape[0] >= count or len(shape) == 2:
        rows = shape[0]
        count = max(1, min(count, rows))
        return [(slice(rows * i // count, rows * (i + 1) // count),) for i in range(count)]
    per = -(-count // shape[0])
    return [(entry,) + block for entry in range(shape[0])
            for block in _row_blocks(shape[1:], per)]


class Copier:
    """The copy threads of one client. The caller's own thread takes a share of each copy, so
    threads - 1 workers are started (at the first copy large enough to be cut)."""

    def __init__(self, threads=None):
        self.threads = default_threads(threads)
        self._pool = None
        self._lock = threading.Lock()

    def close(self):
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def _run(self, jobs):
        """Runs the callables, the first on this thread, the rest on the pool; raises the first
        failure once all are over."""
        if self.threads == 1:       # no pool: one after the other, here
            for job in jobs:
                job()
            return
        if len(jobs) > 1:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.threads - 1, "gemmd-copy")
                pool = self._pool
            futures = [pool.submit(job) for job in jobs[1:]]
        else:
            futures = []
        error = None
        try:
            jobs[0]()
        except BaseException as exc:   # the workers' copies finish before it is raised
            error = exc
        for future in futures:
            exc = future.exception()
            error = error or exc
        if error is not None:
            raise error

    def _pieces(self, pairs):
        """(dst, src) pairs cut into blocks of rows, about threads blocks over all of them."""
        total = sum(dst.nbytes for dst, _ in pairs)
        jobs = []
        for dst, src in pairs:
            if dst.nbytes == 0:
                continue
            share = max(1, min(self.threads * dst.nbytes // max(total, 1),
                               dst.nbytes // _MIN_PIECE))
            for index in _row_blocks(dst.shape, share if self.threads > 1 else 1):
                jobs.append((dst[index], src[index]))
        return jobs

    def copy(self, pairs):
        """np.copyto(dst, src) for every (dst, src) pair of equal shapes, over the threads. A
        large copy's rate updates the bandwidth this process measured (see bandwidth())."""
        jobs = self._pieces(pairs)
        if not jobs:
            return
        start = time.perf_counter()
        self._run([lambda d=d, s=s: np.copyto(d, s) for d, s in jobs])
        nbytes = sum(dst.nbytes for dst, _ in jobs)
        if nbytes >= _LEARN_BYTES:
            rate = nbytes / max(time.perf_counter() - start, 1e-9)
            with _bandwidth_lock:
                known = _bandwidth.get(self.threads)
                if known is not None:
                    _bandwidth[self.threads] = (1 - _LEARN_WEIGHT) * known + _LEARN_WEIGHT * rate

    def touch(self, buf):
        """Writes one byte a page of the uint8 array buf, over the threads: the pages are made
        now, once, and not by page faults inside every later copy."""
        count = max(1, min(self.threads, buf.nbytes // (4 * _MIN_PIECE)))
        pages = -(-buf.nbytes // _PAGE)
        bounds = [pages * i // count * _PAGE for i in range(count + 1)]

        def touch(lo, hi):
            buf[lo:hi:_PAGE] = 0
        self._run([lambda lo=lo, hi=hi: touch(lo, hi) for lo, hi in zip(bounds, bounds[1:])])

    def bandwidth(self):
        """Bytes a second this copier moves (read + written counted once): timed once per
        process and thread count on a 16 MiB copy whose pages are made beforehand, then moved
        toward the rate of each large copy made (a probe that fits a cache runs faster than
        the copies of gemms do, which also make the pages of new results)."""
        with _bandwidth_lock:
            known = _bandwidth.get(self.threads)
        if known is not None:
            return known
        src = np.ones(_PROBE_BYTES // 8)
        dst = np.zeros_like(src)
        best = None
        for _ in range(3):
            start = time.perf_counter()
            self.copy([(dst, src)])
            spent = time.perf_counter() - start
            best = spent if best is None else min(best, spent)
        measured = _PROBE_BYTES / max(best, 1e-9)
        with _bandwidth_lock:
            _bandwidth[self.threads] = measured
        return measured
