"""The NPU ring loop in native code (``native/npu_ring.cpp``), called through ctypes.

Why: pyxrt holds Python's GIL for the whole of ``bo.sync``, ``run.wait`` and ``kernel(...)``
(XRT ``src/python/pybind11/src/pyxrt.cpp``), so in Python an input sync never overlaps other
Python work. The native ring does the syncs, runs and waits on its own two threads over XRT's
C++ API (``xrt::bo``, ``xrt::run``); ctypes releases the GIL during each call into it.

- :func:`native_ring_availability` says whether it can be built here: it needs g++ and XRT's
  headers (``$XILINX_XRT/include`` or ``/opt/xilinx/xrt/include``) and links
  ``libxrt_coreutil``. Where they are absent nothing is built and nothing else changes.
- ``build_native_ring(fake=True)`` builds it over a fake device instead (no XRT): the tests use
  that to check the ring's logic (order, reuse, overlap of sync and run, the hang timeout, the
  GIL released while waiting).
- :class:`NativeRing` is the Python side: ``acquire`` a free entry, write its input views,
  ``submit`` its block pairs with an output array, ``wait`` for the job.

NOT VERIFIED on XRT: the XRT build was never compiled (no XRT where this was written) and the
``npu`` backend does not use this ring yet (``NpuBackend`` keeps the polled Python loop); wiring
it in is the next step once the XRT build is checked on a machine with an NPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
from pathlib import Path

import numpy as np

from .hostkernel import build_dir, compile_cached

SOURCE_DIR = Path(__file__).resolve().parent / "native"
SOURCES = (SOURCE_DIR / "npu_ring.cpp", SOURCE_DIR / "npu_ring.hpp")
CXXFLAGS = ("-std=c++17", "-O2", "-shared", "-fPIC", "-Wall", "-Wextra")
#: Job status codes of npu_ring_wait (npuring::Status).
OK, HUNG, FAILED, PENDING = 0, 1, 2, 3


class NativeRingUnavailable(RuntimeError):
    """The native ring cannot be built here; the message says what is missing."""


class NativeRingHung(TimeoutError):
    """A run did not complete within the timeout: the NPU looks hung; the ring refuses work."""


def xrt_root() -> Path | None:
    """XRT's install root (with ``include/xrt/xrt_bo.h``), or None."""
    for root in (os.environ.get("XILINX_XRT"), "/opt/xilinx/xrt"):
        if root and (Path(root) / "include" / "xrt" / "xrt_bo.h").is_file():
            return Path(root)
    return None


def native_ring_availability(fake: bool = False) -> tuple[bool, str]:
    """(buildable, reason) for the native ring over XRT (or over the fake device)."""
    if shutil.which("g++") is None:
        return False, "g++ is not installed"
    if fake:
        return True, "fake device (tests)"
    root = xrt_root()
    if root is None:
        return False, ("XRT headers not found ($XILINX_XRT/include or /opt/xilinx/xrt/include; "
                       "source /opt/xilinx/xrt/setup.sh)")
    return True, f"XRT at {root}"


def build_native_ring(fake: bool = False) -> Path:
    """Compile the ring (cached in the user's cache directory, :mod:`.cache`); over XRT
    unless ``fake``."""
    ok, why = native_ring_availability(fake)
    if not ok:
        raise NativeRingUnavailable(why)
    if fake:
        flags = ["-DNPU_RING_FAKE"]
        link = ["-lpthread"]
    else:
        root = xrt_root()
        flags = [f"-I{root / 'include'}"]
        link = [f"-L{root / 'lib'}", "-lxrt_coreutil", "-lpthread"]
    digest = hashlib.sha256(b" ".join([*(p.read_bytes() for p in SOURCES),
                                       " ".join([*CXXFLAGS, *flags, *link]).encode()]))
    name = f"npu_ring_{'fake' if fake else 'xrt'}_{digest.hexdigest()[:12]}.so"
    return compile_cached(build_dir() / name,
                          ["g++", *CXXFLAGS, *flags, str(SOURCES[0]), *link], "native ring")


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    vp, sz, ui, i, cp = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                         ctypes.c_char_p)
    lib.npu_ring_open.restype = vp
    lib.npu_ring_open.argtypes = [cp, cp, cp, ui, sz, sz, i, i, ui, cp, sz]
    lib.npu_ring_close.argtypes = [vp]
    lib.npu_ring_input.restype = ctypes.POINTER(ctypes.c_uint8)
    lib.npu_ring_input.argtypes = [vp, i, i]
    lib.npu_ring_acquire.restype = i
    lib.npu_ring_acquire.argtypes = [vp, ui]
    lib.npu_ring_submit.restype = ctypes.c_long
    lib.npu_ring_submit.argtypes = [vp, i, vp, i, vp]
    lib.npu_ring_wait.restype = i
    lib.npu_ring_wait.argtypes = [vp, ctypes.c_long, ui, cp, sz]
    lib.npu_ring_counter.restype = ctypes.c_long
    lib.npu_ring_counter.argtypes = [vp, cp]
    return lib


class NativeRing:
    """A ring of ``nring`` entries of ``nblock`` input BOs of ``in_bytes`` each.

    ``xclbin``/``insts``/``kernel``/``device``: the build and device (for the fake device,
    ``xclbin`` is its configuration ``"kernel_us=N,sync_us=N,hang=0|1"``).
    """

    def __init__(self, library: Path, *, xclbin: str, insts: str, kernel: str, device: int,
                 in_bytes: int, out_bytes: int, nblock: int, nring: int,
                 timeout_s: float) -> None:
        self._lib = _load(library)
        self.in_bytes, self.out_bytes, self.nblock = in_bytes, out_bytes, nblock
        err = ctypes.create_string_buffer(512)
        self._h = self._lib.npu_ring_open(xclbin.encode(), insts.encode(), kernel.encode(),
                                          device, in_bytes, out_bytes, nblock, nring,
                                          int(timeout_s * 1000), err, len(err))
        if not self._h:
            raise RuntimeError(f"native NPU ring: {err.value.decode()}")
        self._outs: dict[int, np.ndarray] = {}  # kept alive while the ring writes them

    def inputs(self, entry: int) -> list[np.ndarray]:
        """The mapped input buffers of ``entry`` (uint8, ``in_bytes`` each)."""
        return [np.ctypeslib.as_array(self._lib.npu_ring_input(self._h, entry, b),
                                      shape=(self.in_bytes,)) for b in range(self.nblock)]

    def acquire(self, timeout_s: float) -> int:
        """A free entry; TimeoutError if none in time, NativeRingHung once a run hung."""
        entry = self._lib.npu_ring_acquire(self._h, int(timeout_s * 1000))
        if entry == -2:
            raise NativeRingHung("native NPU ring: a run hung; no further work accepted")
        if entry < 0:
            raise TimeoutError(f"no free NPU ring entry within {timeout_s} s")
        return entry

    def submit(self, entry: int, pairs: list[tuple[int, int]], out: np.ndarray) -> int:
        """Run the block pairs of ``entry``; pair k's output goes to ``out[k]``. A job id."""
        flat = np.ascontiguousarray(np.asarray(pairs, dtype=np.int32).reshape(-1))
        if (out.dtype != np.uint8 or out.nbytes != len(pairs) * self.out_bytes
                or not out.flags.c_contiguous):
            raise ValueError(f"out must be C-contiguous uint8 of {len(pairs)} x "
                             f"{self.out_bytes} bytes")
        job = self._lib.npu_ring_submit(self._h, entry, flat.ctypes.data, len(pairs),
                                        out.ctypes.data)
        if job == -2:
            raise NativeRingHung("native NPU ring: a run hung; no further work accepted")
        self._outs[job] = out
        return job

    def wait(self, job: int, timeout_s: float) -> None:
        """Wait for ``job`` (the GIL is free meanwhile); raise what it ended with."""
        err = ctypes.create_string_buffer(512)
        status = self._lib.npu_ring_wait(self._h, job, int(timeout_s * 1000), err, len(err))
        if status == PENDING:
            raise TimeoutError(f"NPU job {job} not finished after {timeout_s} s")
        self._outs.pop(job, None)
        if status == HUNG:
            raise NativeRingHung(err.value.decode())
        if status != OK:
            raise RuntimeError(err.value.decode())

    def counter(self, name: str) -> int:
        """Fake-device counters (``runs``, ``syncs``, ``syncs_during_run``); -1 over XRT."""
        return int(self._lib.npu_ring_counter(self._h, name.encode()))

    def close(self) -> None:
        """Stop the ring's threads (after the work queued) and free its buffers."""
        if self._h:
            self._lib.npu_ring_close(self._h)
            self._h = None


__all__ = ["NativeRing", "NativeRingHung", "NativeRingUnavailable", "build_native_ring",
           "native_ring_availability", "xrt_root"]
