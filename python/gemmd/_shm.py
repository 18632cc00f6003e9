"""Shared-memory regions of one connection (proto/PROTOCOL.md, "Shared memory").

A region is a memfd sealed against shrinking, mapped here and registered with the daemon
(its descriptor passed with SCM_RIGHTS on the Unix socket). Arrays the caller gets from
Client.shm_array live in one; a gemm operand or result whose bytes lie inside a registered
region is named by reference ({"region": id, "offset": N}) instead of being sent.
"""

import fcntl
import mmap
import os

import numpy as np


def new_memfd(size):
    """(descriptor, mapping) of a new memfd of size bytes, sealed with F_SEAL_SHRINK so that
    the daemon's mapping of it can never lose its pages."""
    fd = os.memfd_create("gemmd-shm", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        return fd, mmap.mmap(fd, size)
    except BaseException:
        os.close(fd)
        raise


def region_size(nbytes):
    """nbytes rounded up to whole pages (at least one)."""
    return max(1, -(-nbytes // mmap.PAGESIZE)) * mmap.PAGESIZE


def _address(view):
    return np.frombuffer(view, np.uint8).ctypes.data


class Region:
    """One registered region: its id on the connection and the mapping here."""

    def __init__(self, region_id, mapping, size):
        self.id = region_id
        self.map = mapping
        self.size = size
        self.start = _address(memoryview(mapping))

    def offset_of(self, view):
        """The offset of view's bytes inside this region, or None when they are not all in it."""
        if view.nbytes == 0:
            return None
        offset = _address(view) - self.start
        if 0 <= offset and offset + view.nbytes <= self.size:
            return offset
        return None


class Regions:
    """The regions registered on one connection."""

    def __init__(self):
        self._regions = []

    def __bool__(self):
        return bool(self._regions)

    def __len__(self):
        return len(self._regions)

    def add(self, region):
        self._regions.append(region)

    def remove(self, region):
        self._regions.remove(region)

    def all(self):
        return list(self._regions)

    def holding(self, view):
        """(region, offset) whose region holds all of view's bytes, or (None, None)."""
        for region in self._regions:
            offset = region.offset_of(view)
            if offset is not None:
                return region, offset
        return None, None

    def ref(self, view):
        """{"region": id, "offset": N} for a byte view inside a region, else None."""
        region, offset = self.holding(view)
        return None if region is None else {"region": region.id, "offset": offset}
