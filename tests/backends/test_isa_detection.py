"""Path choice on CPUs this machine is not: the extension's decision (``xe_decide_isas`` in
kernels/cpu/dispatch.c) fed with the CPUID words and XCR0 of Sapphire Rapids, Zen 4/5, AVX2-only
CPUs and OS setups that withhold state, then the Python dispatch over its answer.

The real detection only ever sees the CPU it runs on; these cases exercise the branches that
guard the AMX path (CPU bits, XCR0 tile state, the kernel's arch_prctl permission) without an
AMX machine. Bit positions are Intel's (SDM vol. 2, CPUID; vol. 1, 13.3 XCR0), written here
independently of the C code.
"""

from __future__ import annotations

import logging

import pytest

from tests.helpers.native import (
    AMX_INT8,
    AMX_TILE,
    AVX,
    AVX2,
    AVX512_VNNI,
    AVX512_XCR0,
    AVX512BW,
    AVX512F,
    AVX512VL,
    HI16_ZMM,
    MACHINES,
    OPMASK,
    OSXSAVE,
    XTILECFG,
    XTILEDATA,
    ZMM_HI256,
    compiled,
    decide,
)
from xengine_block import native_extension
from xengine_block.backends import BackendUnavailable
from xengine_block.backends import native as nat
from xengine_block.geometry import Geometry


@pytest.fixture
def on(monkeypatch):
    """Make the Python dispatch see the decision for a given machine."""
    monkeypatch.delenv(nat.DISABLE_ENV, raising=False)
    ext = native_extension.native()

    def use(machine: str, permit_error: str | None = None) -> None:
        status = decide(machine, permit_error)
        monkeypatch.setattr(native_extension, "native", lambda: type("Facts", (), {
            "isa_status": staticmethod(lambda: dict(status)),
            "_decide_isas": ext._decide_isas}))
    return use


def test_sapphire_rapids_runs_amx(on):
    compiled("amx", "avx512vnni", "avx2")
    status = decide("sapphire_rapids")
    assert status["amx"] == (True, "AMX-INT8 tiles (CPUID, XCR0 and arch_prctl permission ok)",
                             False)
    assert status["avx512vnni"][0] and status["avx2"][0] and status["amx_emulated"][0]
    on("sapphire_rapids")
    isa, reason, past_refused = nat.select_isa()
    assert isa == "amx" and "fell back" not in reason and not past_refused


def test_amx_refused_by_the_kernel_falls_back_and_says_why(on):
    compiled("amx", "avx512vnni")
    status = decide("sapphire_rapids", "Operation not permitted")
    assert status["amx"][0] is False and status["amx"][2] is True  # the CPU has it: refused
    on("sapphire_rapids", "Operation not permitted")
    isa, reason, past_refused = nat.select_isa()
    assert isa == "avx512vnni" and past_refused
    assert ("fell back past amx (AMX not permitted by kernel: arch_prctl(ARCH_REQ_XCOMP_PERM, "
            "XTILEDATA) failed: Operation not permitted)") in reason
    with pytest.raises(BackendUnavailable, match="AMX not permitted by kernel"):
        nat.select_isa("amx")


def test_old_kernel_without_tile_state(on):
    compiled("amx", "avx512vnni")
    status = decide("sapphire_rapids_old_kernel")
    assert status["amx"] == (False, "AMX not enabled by the OS (XCR0 lacks XTILECFG/XTILEDATA)",
                             True)
    on("sapphire_rapids_old_kernel")
    assert nat.select_isa()[:3:2] == ("avx512vnni", True)


@pytest.mark.parametrize("tile_state", [XTILECFG, XTILEDATA])
def test_half_the_tile_state_is_not_enough(tile_state):
    compiled("amx")
    ecx1, ebx7, ecx7, edx7, _ = MACHINES["sapphire_rapids"]
    status = native_extension.native()._decide_isas(ecx1, ebx7, ecx7, edx7,
                                                    AVX512_XCR0 | tile_state)
    assert status["amx"] == (False, "AMX not enabled by the OS (XCR0 lacks XTILECFG/XTILEDATA)",
                             True)


def test_zen_runs_avx512_vnni(on):
    compiled("amx", "avx512vnni")
    status = decide("zen4_zen5")
    assert status["amx"] == (False, "CPU lacks AMX-TILE/AMX-INT8", False)
    assert status["avx512vnni"][0] and status["amx_emulated"][0]
    on("zen4_zen5")
    isa, reason, past_refused = nat.select_isa()
    assert isa == "avx512vnni" and "fell back past amx (CPU lacks AMX-TILE/AMX-INT8)" in reason
    assert not past_refused


def test_avx2_only_cpu(on):
    compiled("avx512vnni", "avx2")
    status = decide("avx2_only")
    assert status["avx512vnni"] == (False, "CPU lacks AVX-512 F/BW/VL", False)
    assert not status["amx"][0] and not status["amx_emulated"][0]
    assert not any(refused for _, _, refused in status.values())
    on("avx2_only")
    assert nat.select_isa()[:3:2] == ("avx2", False)


def test_zmm_state_withheld_disables_every_avx512_path(on):
    compiled("amx", "avx512vnni", "avx2")
    status = decide("avx512_cpu_without_zmm_state")
    assert status["avx512vnni"] == (False, "OS does not enable ZMM state", True)
    assert status["amx"] == (False, "AMX path also needs AVX-512 F/BW for its layout code, "
                             "and the OS does not enable ZMM state", True)
    assert status["amx_emulated"][::2] == (False, True) and "ZMM state" in status["amx_emulated"][1]
    on("avx512_cpu_without_zmm_state")
    assert nat.select_isa()[:3:2] == ("avx2", True)


def test_no_osxsave_leaves_only_portable_c(on):
    compiled("amx", "avx512vnni", "avx2")
    status = decide("no_osxsave")
    assert status["scalar"][0]
    assert status["avx2"] == (False, "OS does not enable YMM state", True)
    assert not any(ok for isa, (ok, *_) in status.items() if isa != "scalar")
    on("no_osxsave")
    with pytest.raises(BackendUnavailable, match="no SIMD path runnable"):
        nat.select_isa()


@pytest.mark.parametrize("machine, permit_error, level", [
    ("sapphire_rapids", None, logging.INFO),
    ("sapphire_rapids", "Operation not permitted", logging.WARNING),
    ("sapphire_rapids_old_kernel", None, logging.WARNING),
    ("avx512_cpu_without_zmm_state", None, logging.WARNING),
    ("zen4_zen5", None, logging.INFO),
    ("avx2_only", None, logging.INFO),
])
def test_the_choice_is_a_warning_only_past_a_refused_path(on, caplog, machine, permit_error,
                                                          level):
    """The backend's log level follows the extension's refused flag: a path the CPU lacks is
    the normal fallback (INFO), one the OS or the kernel withholds is a WARNING."""
    compiled("amx", "avx512vnni", "avx2")
    on(machine, permit_error)
    with caplog.at_level(logging.DEBUG, logger=nat.log.name):
        nat.NativeBackend(Geometry(nstream=8, nchan=9, npacket=1))
    assert [r.levelno for r in caplog.records if r.name == nat.log.name] == [level]


def test_the_hook_decides_as_the_detection_does_here():
    """Over this CPU's own CPUID words and XCR0 the hook says what isa_status() says (the AMX
    permission aside: the hook grants it), and the words agree with the kernel's own reading
    of them, /proc/cpuinfo's flags: the bit positions are right on this machine at least."""
    ext = native_extension.native()
    facts = ext._cpu_facts()
    if facts is None:
        pytest.skip("not an x86-64 CPU: no CPUID to read")
    ecx1, ebx7, ecx7, edx7, xcr0 = facts
    real = ext.isa_status()
    hook = ext._decide_isas(*facts)
    assert {k: v for k, v in hook.items() if k != "amx"} == \
        {k: v for k, v in real.items() if k != "amx"}
    if not real["amx"][0]:
        assert hook["amx"] == real["amx"] or "permission" in real["amx"][1]
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split(":")[1].split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags to compare the CPUID words with")
    assert "avx" not in flags or ecx1 & OSXSAVE  # Linux lists AVX only with XSAVE on
    for flag, word, bit in [("avx", ecx1, AVX), ("avx2", ebx7, AVX2),
                            ("avx512f", ebx7, AVX512F), ("avx512bw", ebx7, AVX512BW),
                            ("avx512vl", ebx7, AVX512VL), ("avx512_vnni", ecx7, AVX512_VNNI),
                            ("amx_tile", edx7, AMX_TILE), ("amx_int8", edx7, AMX_INT8)]:
        assert (flag in flags) == bool(word & bit), flag
    if "avx512f" in flags:  # Linux lists AVX-512 only where it enabled the state
        assert xcr0 & (OPMASK | ZMM_HI256 | HI16_ZMM) == OPMASK | ZMM_HI256 | HI16_ZMM
