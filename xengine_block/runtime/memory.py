"""Host memory the runtime hands to producers that fill it at line rate: fault it in before
data flows (:func:`populate`), and view memory that something else allocated (a Bifrost ring,
an NPU buffer's user pointer) as a numpy array (:func:`bytes_at`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os

import numpy as np

#: Linux madvise advice that faults a range in, writable, in one call (kernel 5.14+).
_MADV_POPULATE_WRITE = 23
#: Linux madvise advice: back the range with transparent huge pages (THP mode "madvise").
_MADV_HUGEPAGE = 14
_HUGE = 2 << 20
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def populate(buf: np.ndarray) -> None:
    """Fault every page of ``buf`` in now (contents unchanged where madvise works).

    A fresh buffer's pages are mapped on first touch; on a virtual machine each fault can cost
    more than the copy that causes it (measured on the development VM: ~2.5 s per GiB faulted
    in, 60x a write to memory already mapped). Rings and capture chunks are filled at line rate
    from their first frame, so they take that cost when they are made, not while packets arrive.
    """
    if not buf.nbytes:
        return
    page = mmap.PAGESIZE
    start, end = buf.ctypes.data, buf.ctypes.data + buf.nbytes
    lo, hi = start - start % page, end - end % page  # whole pages, all mapped (lo's holds buf)
    # Huge pages where the kernel lends them on request: 512 times fewer faults (populating
    # 512 MiB took 0.15-0.43 s in 4 KiB pages on the development VM, 0.05 s in 2 MiB ones) and
    # fewer TLB misses for readers striding through frames. Refused (another allocator's
    # memory, THP off): 4 KiB pages as before.
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
