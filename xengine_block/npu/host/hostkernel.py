"""Build and call the AIE2P kernel source on the host (g++ + ``kernels/aie/aie_host_emu.h``).

Why: the kernel that runs on the NPU is the very source tested here; only the intrinsics come
from a small emulation header. Both sources ship inside the package (``kernels/aie/``, package
data of a wheel, :mod:`xengine_block.kernel_sources`), so an installed wheel builds the kernel
as a checkout does. The shared library is cached in the user's cache directory
(:mod:`xengine_block.user_cache`, ``kernel/``) keyed by the dimensions and a hash of both
sources, so it is compiled once per machine, never written into the installation.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import numpy as np

from ...geometry import BLOCK
from ...user_cache import cache_dir
from ..design.dataflow import KERNEL_FUNC_CI4, KERNEL_SOURCE

#: The kernel's sources: ``kernels/aie/`` (package data of a wheel).
KERNEL_DIR = KERNEL_SOURCE.parent
EMU_HEADER = KERNEL_DIR / "aie_host_emu.h"
CXXFLAGS = ("-std=c++20", "-O2", "-shared", "-fPIC", "-DXCORR_HOST_EMU")


def build_dir() -> Path:
    """Where host-compiled libraries (this kernel, the native ring) are cached."""
    return cache_dir("kernel")


class HostKernelUnavailable(RuntimeError):
    """g++ or the kernel sources are missing; the message says which."""


def host_kernel_availability() -> tuple[bool, str]:
    """(usable, reason) for building the host-emulated kernel here."""
    if shutil.which("g++") is None:
        return False, "g++ is not installed"
    for path in (KERNEL_SOURCE, EMU_HEADER):
        if not path.is_file():
            return False, (f"kernel source {path} not found (an installation without the "
                           "kernels/aie/ of the package or its checkout)")
    return True, f"g++ {shutil.which('g++')}"


def _library_path(n: int, m: int, t: int) -> Path:
    digest = hashlib.sha256()
    for path in (KERNEL_SOURCE, EMU_HEADER):
        digest.update(path.read_bytes())
    digest.update(" ".join(CXXFLAGS).encode())
    return build_dir() / f"xcorr_host_N{n}_M{m}_T{t}_{digest.hexdigest()[:12]}.so"


def build_host_kernel(n: int, m: int, t: int) -> Path:
    """Compile ``kernels/aie/xcorr.cc`` for the host with -DN/-DM/-DT; returns the cached .so."""
    usable, reason = host_kernel_availability()
    if not usable:
        raise HostKernelUnavailable(reason)
    return compile_cached(_library_path(n, m, t),
                          ["g++", *CXXFLAGS, f"-DN={n}", f"-DM={m}", f"-DT={t}",
                           f"-I{KERNEL_DIR}", str(KERNEL_SOURCE)])


def compile_cached(lib: Path, cmd: list[str], what: str = "kernel") -> Path:
    """Run the compile command ``cmd`` (``-o`` appended) unless ``lib`` exists; return it.

    Compiles into a temporary name and renames: parallel test runs never see half a library.
    """
    if lib.is_file():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=lib.parent)
    os.close(fd)
    full = [*cmd, "-o", tmp]
    proc = subprocess.run(full, capture_output=True, text=True)
    if proc.returncode:
        os.unlink(tmp)
        raise RuntimeError(f"{what} build failed: {' '.join(full)}\n{proc.stderr}")
    os.replace(tmp, lib)
    return lib


class HostKernel:
    """ctypes wrapper of the host-compiled kernel for one (N, M, T)."""

    def __init__(self, n: int, m: int, t: int) -> None:
        self.n, self.m, self.t = n, m, t
        self.lib = ctypes.CDLL(str(build_host_kernel(n, m, t)))
        vp = ctypes.c_void_p
        self.lib.xcorr_kernel.argtypes = [vp, vp, vp]
        for name in KERNEL_FUNC_CI4.values():
            getattr(self.lib, name).argtypes = [vp] * 5
        self.lib.xcorr_acc_zero.argtypes = [vp]
        dims = [ctypes.c_int() for _ in range(3)]
        self.lib.xcorr_host_dims(*(ctypes.byref(d) for d in dims))
        if tuple(d.value for d in dims) != (n, m, t):
            raise RuntimeError(f"library reports dims {[d.value for d in dims]}, "
                               f"expected {(n, m, t)}")

    @property
    def a_shape(self) -> tuple[int, ...]:
        return (self.n, self.t, 2, BLOCK, BLOCK)

    @property
    def b_shape(self) -> tuple[int, ...]:
        return (self.m, self.t, 2, BLOCK, BLOCK)

    @property
    def acc_shape(self) -> tuple[int, ...]:
        return (self.n, self.m, 2, BLOCK, BLOCK)

    @property
    def a_ci4_shape(self) -> tuple[int, ...]:
        """A as the ci4 entry points take it: ``[N][T][8][8]`` bytes, one per complex sample."""
        return (self.n, self.t, BLOCK, BLOCK)

    @property
    def b_ci4_shape(self) -> tuple[int, ...]:
        return (self.m, self.t, BLOCK, BLOCK)

    @staticmethod
    def _arg(x: np.ndarray, dtype: type, shape: tuple[int, ...], name: str) -> ctypes.c_void_p:
        if x.dtype != dtype or x.shape != shape or not x.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous {np.dtype(dtype)} {shape}, "
                             f"got {x.dtype} {x.shape}")
        return ctypes.c_void_p(x.ctypes.data)

    def accumulate(self, a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> None:
        """One kernel call: ``acc += A B^H`` in place."""
        if not acc.flags.writeable:
            raise ValueError("acc must be writeable")
        self.lib.xcorr_kernel(self._arg(a, np.int8, self.a_shape, "a"),
                              self._arg(b, np.int8, self.b_shape, "b"),
                              self._arg(acc, np.int32, self.acc_shape, "acc"))

    def accumulate_ci4(self, a: np.ndarray, b: np.ndarray, acc: np.ndarray, ua: np.ndarray,
                       ub: np.ndarray, nibble_order: str) -> None:
        """One ci4 kernel call: ``a``, ``b`` packed (``a_ci4_shape``, ``b_ci4_shape`` int8),
        unpacked by the kernel into ``ua``, ``ub`` (``a_shape``, ``b_shape``), then
        ``acc += A B^H``."""
        if nibble_order not in KERNEL_FUNC_CI4:
            raise ValueError(f"nibble_order must be one of {sorted(KERNEL_FUNC_CI4)}, "
                             f"got {nibble_order!r}")
        for name, x in (("acc", acc), ("ua", ua), ("ub", ub)):
            if not x.flags.writeable:
                raise ValueError(f"{name} must be writeable")
        getattr(self.lib, KERNEL_FUNC_CI4[nibble_order])(
            self._arg(a, np.int8, self.a_ci4_shape, "a"),
            self._arg(b, np.int8, self.b_ci4_shape, "b"),
            self._arg(acc, np.int32, self.acc_shape, "acc"),
            self._arg(ua, np.int8, self.a_shape, "ua"),
            self._arg(ub, np.int8, self.b_shape, "ub"))

    def zero(self, acc: np.ndarray) -> None:
        self.lib.xcorr_acc_zero(self._arg(acc, np.int32, self.acc_shape, "acc"))

    def events(self) -> tuple[int, int]:
        """(event0, event1) trace markers executed so far in this process."""
        e0, e1 = ctypes.c_ulonglong(), ctypes.c_ulonglong()
        self.lib.xcorr_host_events(ctypes.byref(e0), ctypes.byref(e1))
        return e0.value, e1.value


@cache
def host_kernel(n: int, m: int, t: int) -> HostKernel:
    """The (cached) host kernel for one set of dimensions."""
    return HostKernel(n, m, t)
