"""Host memory the runtime hands to producers that fill it at line rate: fault it in before
data flows (:func:`populate`), keep it for the next pipeline of the process once its last view
is gone (:func:`host_buffer`), and view memory that something else allocated (a Bifrost ring,
an NPU buffer's user pointer) as a numpy array (:func:`bytes_at`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import threading
import weakref

import numpy as np

#: Linux madvise advice that faults a range in, writable, in one call (kernel 5.14+).
_MADV_POPULATE_WRITE = 23
#: Linux madvise advice: back the range with transparent huge pages (THP mode "madvise").
_MADV_HUGEPAGE = 14
_HUGE = 2 << 20
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def populate(buf: np.ndarray) -> None:
    """Fault every page of ``buf`` in now (contents unchanged where madvise works).

    A fresh buffer's pages are mapped on first touch; on a virtual machine each fault can cost more
    than the copy that causes it (tens of times a write to memory already mapped). Rings and capture
    chunks are filled at line rate from their first frame, so they take that cost when they are
    made, not while packets arrive.
    """
    if not buf.nbytes:
        return
    page = mmap.PAGESIZE
    start, end = buf.ctypes.data, buf.ctypes.data + buf.nbytes
    lo, hi = start - start % page, end - end % page  # whole pages, all mapped (lo's holds buf)
    # Huge pages where the kernel lends them on request: 512 times fewer faults (populating is
    # several times faster in 2 MiB pages than in 4 KiB ones) and fewer TLB misses for readers
    # striding through frames. Refused (another allocator's memory, THP off): 4 KiB pages.
    hlo, hhi = -(-start // _HUGE) * _HUGE, end - end % _HUGE
    if hhi > hlo:
        _libc.madvise(ctypes.c_void_p(hlo), ctypes.c_size_t(hhi - hlo), _MADV_HUGEPAGE)
    touch_from = 0  # byte of buf from which pages are touched one by one
    if hi > lo:
        if _libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), _MADV_POPULATE_WRITE):
            code = ctypes.get_errno()
            if code == errno.ENOMEM:  # the memory is not there: say so now, not mid-run
                raise MemoryError(f"cannot populate {buf.nbytes} bytes: {os.strerror(code)}")
        else:
            touch_from = hi - start
    flat = buf.reshape(-1).view(np.uint8)
    flat[touch_from::page] |= 0  # one byte of each page left (older kernels: every page)
    flat[-1:] |= 0


def bytes_at(address: int, nbyte: int) -> np.ndarray:
    """A writable uint8 view of ``nbyte`` bytes at ``address`` (memory someone else owns: keep
    the owner alive as long as the view)."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbyte).from_address(address))


class HostPool:
    """Populated anonymous mappings, given back to the pool when the last numpy view of one
    dies, for the next ring of the same size in this process.

    Faulting memory in is what a fresh pipeline pays before its first frame (for the rings of a
    small pcap reprocessing, as much as its correlation). A process that runs pipeline after
    pipeline (``xengine reprocess`` of many files, a Dask worker) pays it once per size. A mapping
    is reused only when nothing can see it any more (the finalizer of the ctypes array every view
    leads back to), so no reader of
    an old pipeline ever sees a new one's data; at most ``limit`` bytes wait in the pool.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free: dict[int, list[mmap.mmap]] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.reused = 0  # buffers handed out again (tests, monitoring)

    def take(self, nbyte: int) -> np.ndarray:
        """A 1-D uint8 array of at least ``nbyte`` bytes (a whole number of huge pages),
        every page faulted in; contents undefined."""
        size = -(-max(nbyte, 1) // _HUGE) * _HUGE
        with self._lock:
            maps = self._free.get(size)
            mm = maps.pop() if maps else None
            if mm is not None:
                self._bytes -= size
                self.reused += 1
        fresh = mm is None
        if fresh:  # private: a shared anonymous mapping is shmem (no huge pages, slower faults)
            mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        owner = (ctypes.c_uint8 * size).from_buffer(mm)
        weakref.finalize(owner, self._give_back, mm).atexit = False
        arr = np.ctypeslib.as_array(owner)
        if fresh:
            populate(arr)
        return arr

    def _give_back(self, mm: mmap.mmap) -> None:
        # Runs while the last view's owner is deallocated, its export of ``mm`` not yet
        # released: a mapping the pool has no room for is unmapped when ``mm`` is collected.
        with self._lock:
            if self._bytes + len(mm) <= self.limit:
                self._free.setdefault(len(mm), []).append(mm)
                self._bytes += len(mm)

    def release(self) -> None:
        """Unmap everything waiting in the pool."""
        with self._lock:
            maps = [m for ms in self._free.values() for m in ms]
            self._free.clear()
            self._bytes = 0
        for m in maps:
            m.close()


#: The process's pool for ring memory: up to an eighth of the machine's memory, at most 2 GiB.
HOST_POOL = HostPool(min(2 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 8))


def host_buffer(nbyte: int) -> np.ndarray:
    """Ring memory: faulted in, from :data:`HOST_POOL` when a buffer of the size is waiting."""
    return HOST_POOL.take(nbyte)
