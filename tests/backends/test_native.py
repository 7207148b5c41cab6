"""Native-backend specifics on each dispatch path: chunking, threads, short packets, repeated
calls, fallback selection (docs/native.md). The foundation cases (zeros, ones, single
non-zero, random S = 34/64/256/512, all -128 at P = 136) run on every path in
tests/backends/test_correlate.py."""

from __future__ import annotations

import logging
import platform
from functools import lru_cache

import numpy as np
import pytest

from tests.conftest import random_frames
from tests.helpers.native import correlate, runnable
from xengine_block import native_extension
from xengine_block.backends import BackendUnavailable, choose_backend
from xengine_block.backends import native as nat
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_triangle


@lru_cache(maxsize=8)
def random_case(nstream: int, npacket: int) -> tuple[Geometry, np.ndarray, np.ndarray]:
    """(geometry, frames, reference) computed once and shared by every path."""
    g = Geometry(nstream=nstream, nchan=9, npacket=npacket)
    frames = random_frames(g, npacket, seed=nstream + npacket)
    return g, frames, reference_triangle(frames_to_natural(frames, g))


def test_extension_built():
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("the build is only required to produce SIMD paths on x86-64")
    ext = native_extension.native()  # ImportError here means `pip install -e .` did not build it
    assert set(ext.ISA_NAMES) == set(nat.ISAS)
    assert ext.isa_status()["scalar"][0]  # the build, whatever XENGINE_NATIVE_DISABLE says


@pytest.mark.parametrize("isa", nat.ISAS)
@pytest.mark.parametrize(("chunk_ksteps", "nthreads"), [(1, 1), (3, 3), (7, 2), (0, 5)])
def test_chunks_and_threads(isa, chunk_ksteps, nthreads):
    """Odd P (a partial last K-step), chunks straddling packets, threads sharing channels."""
    g, frames, ref = random_case(40, 3)
    out = correlate(isa, g, frames, chunk_ksteps=chunk_ksteps, nthreads=nthreads)
    assert np.array_equal(out, ref)


@pytest.mark.parametrize("isa", nat.ISAS)
def test_short_packets(isa):
    """15 coarse groups per packet: K-steps and 4-group vector copies straddle packets."""
    g = Geometry(nstream=24, nchan=4, nchan_pkt=4, ncoarse=15, npacket=5)
    frames = random_frames(g, 5, seed=5)
    ref = reference_triangle(frames_to_natural(frames, g))
    assert np.array_equal(correlate(isa, g, frames, chunk_ksteps=2), ref)


@pytest.mark.parametrize("isa", nat.ISAS)
@pytest.mark.parametrize(("ncoarse", "npacket", "chunk_ksteps"),
                         [(4, 5, 1), (12, 3, 2), (8, 3, 3), (60, 3, 2), (60, 2, 0)])
def test_packets_of_whole_vector_groups(isa, ncoarse, npacket, chunk_ksteps):
    """Packets of a multiple of 4 groups: the AVX-512 paths build and pack whole K-steps in
    one pass (xe_build_tiles_avx512), finishing partial K-steps the two-pass way. Cases: a
    packet change inside every K-step (4), chunks starting mid-packet (12, 60), partial last
    K-steps (4, 12, 8, 60 x 3), a partial last block (S = 20) and padding blocks."""
    g = Geometry(nstream=20, nchan=3, nchan_pkt=3, ncoarse=ncoarse, npacket=npacket,
                 tile_t=4 if ncoarse < 60 else 15)
    frames = random_frames(g, npacket, seed=ncoarse + npacket)
    ref = reference_triangle(frames_to_natural(frames, g))
    assert np.array_equal(correlate(isa, g, frames, chunk_ksteps=chunk_ksteps, nthreads=2),
                          ref)


@pytest.mark.parametrize("isa", nat.ISAS)
def test_calls_are_independent_and_fill_out(isa):
    runnable(isa)
    g, frames, ref = random_case(34, 2)
    backend = nat.NativeBackend(g, isa=isa)
    out = np.full(g.output_shape, 7, np.int32)
    assert backend.correlate(frames, out=out) is out and np.array_equal(out, ref)
    assert not backend.correlate(np.zeros_like(frames), out=out).any()
    strided = np.empty((*g.output_shape[:2], 4), np.int32)[..., ::2]
    backend.correlate(frames, out=strided)
    assert np.array_equal(strided, ref)


@pytest.mark.parametrize("refused,level", [(False, logging.INFO), (True, logging.WARNING)],
                         ids=["lacks", "refused"])
def test_path_choice_is_logged_at_info_unless_refused(monkeypatch, caplog, refused, level):
    """Falling back past a path the CPU lacks is the normal choice on most machines: logged
    at INFO with the reason; a path the CPU has but the system refuses is a WARNING (someone
    can act on it). The level follows the status's refused flag, whatever the reason says."""
    amx_why = "AMX stand-in reason"
    status = {isa: nat.IsaStatus(False, amx_why, refused) if isa == "amx" else nat.IsaStatus(
        isa != "avx512vnni", f"{isa} stand-in") for isa in nat.ISAS}
    monkeypatch.setattr(nat, "isa_status", lambda: status)
    with caplog.at_level(logging.DEBUG, logger="xengine_block.backends.native"):
        backend = nat.NativeBackend(Geometry(nstream=8, nchan=9, npacket=1))
    assert backend.isa == "avx2"
    records = [r for r in caplog.records if r.name == "xengine_block.backends.native"]
    assert [r.levelno for r in records] == [level]
    assert f"fell back past amx ({amx_why})" in records[0].getMessage()


def test_disabled_path_falls_back_and_logs_why(monkeypatch, caplog):
    """Disabling the best runnable SIMD path (AMX on Sapphire Rapids, VNNI on Zen 4/5, AVX2
    elsewhere) selects the next runnable one and says why; a forced disabled path is refused."""
    status = nat.isa_status()
    runnable_paths = [i for i in nat.AUTO_ISAS if status[i][0]]
    if len(runnable_paths) < 2:
        pytest.skip(f"needs two runnable SIMD paths to fall back between; this CPU runs "
                    f"{runnable_paths or 'none'} of {list(nat.AUTO_ISAS)}")
    best, expected = runnable_paths[:2]
    monkeypatch.setenv(nat.DISABLE_ENV, best)
    g = Geometry(nstream=8, nchan=9, npacket=1)
    with caplog.at_level(logging.INFO, logger="xengine_block.backends.native"):
        backend = nat.NativeBackend(g)
    assert backend.isa == expected
    assert "fell back past" in backend.isa_reason
    assert f"{best} (disabled by {nat.DISABLE_ENV}={best})" in backend.isa_reason
    assert f"{best} (disabled by {nat.DISABLE_ENV}={best})" in caplog.text
    with pytest.raises(BackendUnavailable,
                       match=f"native isa '{best}' cannot run here: disabled"):
        nat.NativeBackend(g, isa=best)


def test_disabling_a_path_the_cpu_lacks_keeps_the_cpu_reason(monkeypatch):
    """A path the CPU cannot run anyway reports the hardware reason, not the setting."""
    monkeypatch.delenv(nat.DISABLE_ENV, raising=False)  # what the hardware says
    status = nat.isa_status()
    lacking = [i for i in nat.ISAS if not status[i][0]]
    if not lacking:
        pytest.skip("this CPU runs every native path (nothing it lacks to disable)")
    monkeypatch.setenv(nat.DISABLE_ENV, ",".join(lacking))
    assert {i: nat.isa_status()[i] for i in lacking} == {i: status[i] for i in lacking}


def test_no_simd_path_means_cpu_backend(monkeypatch):
    monkeypatch.setenv(nat.DISABLE_ENV, ",".join(nat.AUTO_ISAS))
    ok, reason = nat.NativeBackend.availability()
    assert not ok and "no SIMD path runnable" in reason
    name, why = choose_backend("auto")
    assert name != "native" and "native: no SIMD path" in why


def test_bad_arguments():
    runnable("scalar")
    g = Geometry(nstream=8, nchan=9, npacket=1)
    with pytest.raises(ValueError, match="unknown isa"):
        nat.NativeBackend(g, isa="neon")
    ext = native_extension.native()
    frames = np.zeros((1, *g.frame_shape), np.int8)
    out = np.empty(g.output_shape, np.int32)
    with pytest.raises(ValueError, match="whole number"):
        ext.correlate(frames.reshape(-1)[:-1], out, 8, 9, 60, "scalar", 1)
    with pytest.raises(ValueError, match="out holds"):
        ext.correlate(frames, out.reshape(-1)[:6], 8, 9, 60, "scalar", 1)
    with pytest.raises(ValueError, match="overflow int32"):
        ext.correlate(np.zeros((137, *g.frame_shape), np.int8), out, 8, 9, 60, "scalar", 1)
    with pytest.raises(ValueError, match="unknown mode"):
        ext.correlate(frames, out, 8, 9, 60, "scalar", 1, 0, "x")
