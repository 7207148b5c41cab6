"""Shared by the native backend's tests: running one dispatch path (skipped, with the reason,
where this CPU or build lacks it), and the CPUID/XCR0 words of CPUs this machine is not, which
the extension's path decision is fed (bit positions from Intel's SDM vol. 2, CPUID, and vol. 1,
13.3 XCR0, written here independently of the C code)."""

from __future__ import annotations

import numpy as np
import pytest

from xengine_block import native_extension
from xengine_block.backends import native as nat
from xengine_block.geometry import Geometry


def runnable(isa: str) -> None:
    status = nat.isa_status()[isa]
    if not status.runnable:
        pytest.skip(f"native path {isa} cannot run here: {status.reason}")


def correlate(isa: str, g: Geometry, frames: np.ndarray, **kwargs) -> np.ndarray:
    runnable(isa)
    backend = nat.NativeBackend(g, isa=isa, **kwargs)
    try:
        out = backend.correlate(frames)
    finally:
        backend.close()
    assert out.dtype == np.int32 and out.shape == g.output_shape
    return out


# CPUID.1:ECX
OSXSAVE, AVX = 1 << 27, 1 << 28
# CPUID.(EAX=7,ECX=0):EBX / ECX / EDX
AVX2, AVX512F, AVX512DQ, AVX512BW, AVX512VL = 1 << 5, 1 << 16, 1 << 17, 1 << 30, 1 << 31
AVX512_VNNI = 1 << 11
AMX_BF16, AMX_TILE, AMX_INT8 = 1 << 22, 1 << 24, 1 << 25
# XCR0 state components
X87, SSE, YMM, OPMASK, ZMM_HI256, HI16_ZMM, PKRU = 1, 2, 4, 1 << 5, 1 << 6, 1 << 7, 1 << 9
XTILECFG, XTILEDATA = 1 << 17, 1 << 18

AVX512_EBX = AVX2 | AVX512F | AVX512DQ | AVX512BW | AVX512VL
AVX512_XCR0 = X87 | SSE | YMM | OPMASK | ZMM_HI256 | HI16_ZMM | PKRU

#: name -> (ecx1, ebx7, ecx7, edx7, xcr0)
MACHINES = {
    "sapphire_rapids": (OSXSAVE | AVX, AVX512_EBX, AVX512_VNNI, AMX_BF16 | AMX_TILE | AMX_INT8,
                        AVX512_XCR0 | XTILECFG | XTILEDATA),
    "zen4_zen5": (OSXSAVE | AVX, AVX512_EBX, AVX512_VNNI, 0, AVX512_XCR0),
    "avx2_only": (OSXSAVE | AVX, AVX2, 0, 0, X87 | SSE | YMM),
    # Linux before 5.16 on Sapphire Rapids: no tile state in XCR0
    "sapphire_rapids_old_kernel": (OSXSAVE | AVX, AVX512_EBX, AVX512_VNNI,
                                   AMX_BF16 | AMX_TILE | AMX_INT8, AVX512_XCR0),
    # a hypervisor that hides the AVX-512 state of an AVX-512 CPU
    "avx512_cpu_without_zmm_state": (OSXSAVE | AVX, AVX512_EBX, AVX512_VNNI,
                                     AMX_TILE | AMX_INT8, X87 | SSE | YMM),
    # no OSXSAVE: XCR0 cannot be read and no extended state is enabled
    "no_osxsave": (AVX, AVX512_EBX, AVX512_VNNI, AMX_TILE | AMX_INT8,
                   AVX512_XCR0 | XTILECFG | XTILEDATA),
}


def decide(machine: str, permit_error: str | None = None) -> dict[str, tuple[bool, str, bool]]:
    """The extension's decision for ``machine``: path -> (runnable, reason, refused)."""
    return native_extension.native()._decide_isas(*MACHINES[machine], amx_permit_error=permit_error)


def compiled(*isas: str) -> None:
    """Skip, saying which, where this build lacks a path (the compiler could not build it)."""
    status = native_extension.native().isa_status()
    missing = [i for i in isas if status[i][1].startswith("not compiled")]
    if missing:
        pytest.skip(f"this build lacks {missing}: {[status[i][1] for i in missing]}")
