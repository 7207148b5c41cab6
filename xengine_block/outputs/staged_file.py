"""A file for h5py's ``fileobj`` driver whose writes reach the disk only at ``commit``, in an
order that a kill or a failed write cannot tear (the UVH5 writer's crash guarantee,
docs/design.md, "UVH5 conventions").

Crash guarantee: a writer killed at any moment (SIGKILL, the OOM killer: the kernel keeps what
the process wrote) leaves a file that reads as it was after one commit or the next, never in
between. Power loss or a kernel crash is not covered (nothing is fsync'ed). Why it holds: a kill
lands between two system calls, and ``commit`` orders its calls so that the file between any
two of them reads as the old one or the new one:

1. the bytes past the committed end (new chunks, new B-tree nodes): nothing committed points
   there; then the file is grown to HDF5's end, so no end-of-allocation exceeds the file;
2. the superblock: its end-of-allocation grows, and a larger one is harmless;
3. the other in-place writes past the metadata written at creation, in HDF5's order: chunk-index
   B-tree nodes, which only gain entries for chunks past the committed extents (a split copies
   the old root to new space, then rewrites the root in one write), and chunks the previous dump
   filled in part (their committed rows are rewritten with the same bytes). A reader of the
   committed extents never looks there;
4. one write of all HDF5 changed in the metadata written at creation: the object headers of the
   resizable datasets (extents) and of Nblts/Ntimes, compact datasets whose values live in their
   object headers. This write publishes the dump (about 6 KB, whatever the array size). It
   spans two or three pages, and Linux stops a buffered write at a page boundary when a fatal
   signal arrives while it copies (a window of microseconds per dump, which the SIGKILL test
   once hit), so it is made a direct write (``O_DIRECT``) of the whole pages, whose I/O, once
   issued, completes before the killed process goes (ext4, XFS...); where there is no direct
   write to be had (tmpfs, whose O_DIRECT still copies through its page cache; macOS), it is
   buffered and that window stays open. It is also buffered in a writer made with
   ``kill_safe=False`` (reprocessing's ``.partial`` files, which a rerun removes): the direct
   write cost ~15 % of an append's CPU (the superblock's page, dirtied by step 2, is written
   back first, and the pages are dropped from the page cache);
5. the file is cut to HDF5's end if that is smaller.

``tests/outputs/test_uvh5.py`` records the calls of every commit and reads the file as it is
after each of them (dumps across chunks and B-tree node splits included), and after the
publishing write cut at each of its pages (which a reader refuses: why it is one direct
write). The file format is HDF5's earliest, whose superblock has no "open for write" mark.

Write failures (full disk, quota, EIO): HDF5 never sees them. ``commit`` writes new space first
(the only writes a full disk refuses); when a write fails the file is cut back to its old end and
any in-place bytes written are put back, so it is exactly the file of the previous commit, and
``commit`` raises ``OSError`` (errno) for the writer to report.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from pathlib import Path

import numpy as np

#: Offsets, sizes and buffer addresses of direct writes are multiples of this (a page: every
#: logical block size in use divides it).
_DIRECT_ALIGN = 4096
#: statfs magic numbers of filesystems that accept O_DIRECT but copy through their page cache
#: all the same, page by page (tmpfs since Linux 6.6): no direct write to be had there.
_CACHE_ONLY_FILESYSTEMS = {0x01021994: "tmpfs"}


def _filesystem_magic(path: Path) -> int | None:
    """statfs(2)'s f_type of the filesystem holding ``path`` (Linux; None elsewhere). Through
    the process's own symbols (libc's, already loaded): ``ctypes.util.find_library`` would
    cost a millisecond or more per file."""
    import ctypes

    try:
        statfs = ctypes.CDLL(None).statfs
        buf = ctypes.create_string_buffer(512)  # struct statfs: f_type first, a C long
        if statfs(os.fsencode(path), buf) != 0:
            return None
        return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
    except (OSError, AttributeError):
        return None


def _open_direct(path: Path) -> int | None:
    """``path`` opened for direct writes, or None where there are none to be had: no
    O_DIRECT on the platform (macOS), refused by the filesystem, or a filesystem that writes
    through its page cache anyway (:data:`_CACHE_ONLY_FILESYSTEMS`)."""
    if not hasattr(os, "O_DIRECT") or _filesystem_magic(path) in _CACHE_ONLY_FILESYSTEMS:
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_DIRECT)
    except OSError:
        return None


def _address(a: np.ndarray) -> int:
    """Where ``a``'s data starts (``a.ctypes.data`` makes a ctypes object first: slower)."""
    return a.__array_interface__["data"][0]


class StagedFile:
    """A file for h5py's ``fileobj`` driver that puts HDF5's writes on disk only at ``commit``.

    Between commits, writes and truncations are kept in memory (reads see them), so HDF5 never
    meets an I/O error. ``commit`` writes the bytes past the committed end first (new space: the
    only writes a full disk refuses), grows the file to HDF5's end, overwrites committed bytes in
    the crash-safe order of the module docstring (old bytes saved and restored if one fails), and
    then cuts the file to HDF5's end. A failure cuts the file back to its committed size and
    raises ``OSError`` with errno: the file is again exactly the last committed one.
    ``discard`` drops everything written afterwards (closing HDF5 after a failure).
    ``kill_safe`` False: the publishing write is buffered even where a direct one can be had
    (:meth:`_publish`), for files a rerun removes when a kill leaves them behind.
    """

    def __init__(self, path: str | os.PathLike, *, overwrite: bool,
                 kill_safe: bool = True) -> None:
        self.path = Path(path)
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL)
        self.fd = os.open(self.path, flags, 0o644)
        self.size = 0  # bytes on disk (committed)
        self.discard = False
        #: In-place writes in ``[1, atomic_below)`` reach the disk together, in one pwrite, last
        #: (:meth:`set_atomic_below`).
        self.atomic_below = 0
        #: The file's pages below ``atomic_below`` as this object wrote them (None before).
        self._image: bytearray | None = None
        self._page_buf: mmap.mmap | None = None  # page-aligned, for publishing writes
        self._lock = threading.Lock()  # close() (e.g. at exit) waits for a commit to finish
        self._end = 0  # HDF5's end of file
        self._pos = 0
        self._writes: list[tuple[int, bytes | memoryview]] = []  # staged, in order
        self._lent: tuple[int, int] | None = None  # (address, bytes) of a buffer lent
        #: The same file opened for direct I/O, for the publishing write (:meth:`_publish`);
        #: None where there is none to be had (:func:`_open_direct`: tmpfs, macOS) or wanted.
        self.direct_fd = _open_direct(self.path) if kill_safe else None

    # -- what the fileobj driver calls (seek, tell, read, write, truncate, flush)
    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._pos = offset + (self._end if whence == os.SEEK_END else
                              self._pos if whence == os.SEEK_CUR else 0)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        pos = self._pos
        n = max(self._end - pos, 0) if n < 0 else n
        buf = bytearray(n)  # past the end: zeros, as HDF5's sec2 driver reads
        if pos < self.size:
            got = os.pread(self.fd, min(n, self.size - pos), pos)
            buf[:len(got)] = got
        for off, data in self._writes:
            a, b = max(off, pos), min(off + len(data), pos + n)
            if a < b:
                buf[a - pos:b - pos] = data[a - off:b - off]
        self._pos += n
        return bytes(buf)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._lent is None or len(data) != self._lent[1] \
                or _address(np.frombuffer(data, np.uint8)) != self._lent[0]:
            data = bytes(data)  # HDF5's own buffer, which it reuses: a copy
        if not self.discard:
            self._writes.append((self._pos, data))
            self._end = max(self._end, self._pos + len(data))
        self._pos += len(data)
        return len(data)

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else size
        if not self.discard:
            if size < self._end:  # staged bytes past the new end are gone
                self._writes = [(o, d[:size - o]) for o, d in self._writes if o < size]
            self._end = size
        return size

    def flush(self) -> None:
        """HDF5's flush ends here; the bytes reach the disk at ``commit``."""

    # -- ours
    def lend(self, buf: np.ndarray | None) -> None:
        """Until ``lend(None)``, a write of exactly ``buf`` (HDF5 hands a direct chunk write's
        buffer to the driver as it is) is staged as a view of it, not copied (a tenth of a
        dump's writing at S = 256): the caller leaves ``buf`` unchanged and alive until the
        commit."""
        self._lent = None if buf is None else (_address(buf), buf.nbytes)

    def set_atomic_below(self, end: int) -> None:
        """Publish in-place writes below ``end`` (the metadata HDF5 wrote at creation) in one
        write, last (:meth:`_in_place`), and from now on keep an image of the pages holding
        them, as written through this object: the publishing write's merge and its pages
        come from it, not from the file, whose pages the previous publication's direct write
        dropped from the page cache (two reads from the device per dump)."""
        self.atomic_below = end
        n = -(-end // _DIRECT_ALIGN) * _DIRECT_ALIGN
        self._image = bytearray(n)
        got = os.pread(self.fd, n, 0)
        self._image[:len(got)] = got
        self._page_buf = mmap.mmap(-1, n) if n and self.direct_fd is not None else None

    def _committed(self, lo: int, hi: int) -> bytes:
        """The file's bytes ``[lo, hi)``: from the image where it holds them."""
        img = self._image
        if img is not None and hi <= len(img):
            return bytes(img[lo:hi])
        return os.pread(self.fd, hi - lo, lo)

    def _imaged(self, data: bytes | memoryview, offset: int) -> None:
        """Keep the image equal to the file after ``data`` was written at ``offset``."""
        img = self._image
        if img is not None and offset < len(img):
            end = min(len(img), offset + len(data))
            img[offset:end] = data[:end - offset]

    def commit(self) -> None:
        """Put the staged writes on disk; on failure restore the committed file and raise."""
        with self._lock:
            if not self.discard:
                self._commit()

    def _commit(self) -> None:
        old = self.size
        try:
            for off, data in self._writes:  # new space first (may fail: disk full, quota)
                if off + len(data) > old:
                    cut = max(old - off, 0)
                    self._pwrite(data[cut:], off + cut)
            if self._end > os.fstat(self.fd).st_size:  # all of it, before anything points there
                self._ftruncate(self._end)
            saved: list[tuple[int, bytes]] = []
            try:
                for off, data in self._in_place(old):
                    saved.append((off, self._committed(off, off + len(data))))
                    self._pwrite(data, off)
            except OSError:
                with contextlib.suppress(OSError):  # best effort: put the old bytes back
                    for off, data in reversed(saved):
                        self._pwrite(data, off)
                raise
            if os.fstat(self.fd).st_size != self._end:
                self._ftruncate(self._end)
        except OSError:
            with contextlib.suppress(OSError):  # the first error is the one to report
                self._ftruncate(old)
            raise
        self.size = self._end
        self._writes = []

    def _in_place(self, old: int) -> list[tuple[int, bytes]]:
        """The overwrites of the committed bytes ``[0, old)``, in the order that keeps every
        state between two of them a file that reads as the old one (module docstring): the
        superblock (offset 0; a larger end-of-allocation is harmless) first, then the other
        writes at or past ``atomic_below`` in HDF5's order, then one write of everything HDF5
        changed in ``[1, atomic_below)``, the object headers that publish the new dump."""
        first, middle, atomic = [], [], []
        for off, data in self._writes:
            if off < old:
                part = (off, data[:old - off])
                (first if off == 0 else atomic if off < self.atomic_below else middle).append(part)
        if atomic:
            lo = min(off for off, _ in atomic)
            hi = max(off + len(data) for off, data in atomic)
            buf = bytearray(self._committed(lo, hi))
            for off, data in atomic:  # in HDF5's order: a later write wins
                buf[off - lo:off - lo + len(data)] = data
            atomic = [(lo, bytes(buf))]
        return first + middle + atomic

    def _pwrite(self, data: bytes, offset: int) -> None:
        """Write ``data`` at ``offset``; into the metadata of creation (the write that publishes
        a dump, or puts its old bytes back) as one direct write where possible."""
        if not (0 < offset < self.atomic_below and self._publish(data, offset)):
            self._pwrite_buffered(data, offset)

    def _pwrite_buffered(self, data: bytes, offset: int) -> None:
        view, at = memoryview(data), offset
        while view:  # a write may be short (e.g. up to a file size limit)
            n = os.pwrite(self.fd, view, at)
            view, at = view[n:], at + n
        self._imaged(data, offset)

    def _publish(self, data: bytes, offset: int) -> bool:
        """The publishing write as one direct write of the whole pages it touches (their other
        bytes as they are), so that a kill cannot cut it: a buffered write stops at a page
        boundary when a fatal signal arrives while it copies, and this one spans two or three
        pages; a direct write's I/O, once issued, completes (the killed process waits for it,
        uninterruptibly). False where it cannot be done (no direct writes here, pages past the
        file's end, an alignment the device refuses): the caller writes buffered, as before.
        The kernel writes back and drops the page cache's copy of those pages around it, so
        buffered readers see the new bytes."""
        if self.direct_fd is None:
            return False
        lo, hi = offset - offset % _DIRECT_ALIGN, -(-(offset + len(data)) // _DIRECT_ALIGN) \
            * _DIRECT_ALIGN
        if hi > os.fstat(self.fd).st_size:
            return False
        # page-aligned, as direct I/O wants its buffer: the one kept for it where it is large
        # enough (every publication), else one for this write
        own = self._page_buf is None or len(self._page_buf) < hi - lo
        buf = mmap.mmap(-1, hi - lo) if own else self._page_buf
        try:
            view = memoryview(buf)[:hi - lo]
            view[:] = self._committed(lo, hi)
            view[offset - lo:offset - lo + len(data)] = data
            try:
                n = os.pwrite(self.direct_fd, view, lo)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                os.close(self.direct_fd)  # refused (alignment, filesystem): buffered from now
                self.direct_fd = None
                return False
            finally:
                view.release()
        finally:
            if own:
                buf.close()
        self._imaged(data[:max(lo + n - offset, 0)], offset)
        if n != hi - lo:  # short: the rest buffered (not expected of a direct write this size)
            self._pwrite_buffered(data[max(lo + n - offset, 0):], max(lo + n, offset))
        return True

    def _ftruncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        if self._image is not None and size < len(self._image):
            self._image[size:] = bytes(len(self._image) - size)

    def close(self) -> None:
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
            if self.direct_fd is not None:
                os.close(self.direct_fd)
                self.direct_fd = None
            if self._page_buf is not None:
                self._page_buf.close()
                self._page_buf = None
