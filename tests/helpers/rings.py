"""Ring test data: frames whose every byte depends on the frame index, their headers, and
how many pages of a buffer are resident."""

from __future__ import annotations

import ctypes
import mmap

import numpy as np

FRAME = 24  # bytes per frame in most tests: not a divisor of the ring sizes, so spans wrap


def header(name: str = "seq0", time_tag: int = 0, dtype: str = "u8",
           frame_shape: tuple[int, ...] = (FRAME,)) -> dict:
    nax = len(frame_shape) + 1
    return {"name": name, "time_tag": time_tag,
            "_tensor": {"dtype": dtype, "shape": [-1, *frame_shape],
                        "labels": ["time"] + [f"ax{i}" for i in range(1, nax)],
                        "scales": [[time_tag, 1.0]] + [None] * (nax - 1),
                        "units": ["s"] + [None] * (nax - 1)}}


def frames(first: int, n: int) -> np.ndarray:
    """Frames whose bytes all depend on the frame index (so any misplacement shows)."""
    idx = np.arange(first, first + n)[:, None] * 7 + np.arange(FRAME)[None, :]
    return (idx % 251).astype(np.uint8)


def resident_pages(buf: np.ndarray) -> tuple[int, int]:
    """(resident, total) pages of ``buf``'s whole pages, from mincore(2)."""
    page = mmap.PAGESIZE
    start = -(-buf.ctypes.data // page) * page
    end = (buf.ctypes.data + buf.nbytes) // page * page
    n = (end - start) // page
    vec = (ctypes.c_ubyte * n)()
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mincore(ctypes.c_void_p(start), ctypes.c_size_t(end - start), vec) == 0, \
        ctypes.get_errno()
    return sum(v & 1 for v in vec), n
