"""The AMX path verified without AMX: kern_amx.c's own source compiled over the software tiles of
kernels/cpu/amx_emu.h (the ``amx_emulated`` path, docs/native.md), bit for bit against the int64
reference; and the emulation itself against a model of Intel's TDPBSSD written here.

The emulated path also runs every case parametrized over ``native.ISAS``
(tests/backends/test_native.py; tests/backends/test_native_ci4.py: ci4 input, both nibble
orders, 2.1 M spectra in one call; tests/backends/test_correlate.py: S up to 512, all -128 at
P = 136).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from tests.conftest import random_frames
from tests.helpers.native import correlate, runnable
from xengine_block import native_extension
from xengine_block.backends import BackendUnavailable
from xengine_block.backends import native as nat
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_frames

EMU = "amx_emulated"


def test_emulated_path_is_named_and_never_chosen(monkeypatch):
    """One list of paths; the emulation says it is one and ``auto`` never takes it, even when
    it is the only SIMD-built path left."""
    monkeypatch.delenv(nat.DISABLE_ENV, raising=False)
    assert EMU in nat.ISAS and EMU in nat.EMULATED_ISAS and EMU not in nat.AUTO_ISAS
    why = nat.isa_status()[EMU].reason
    assert "emulat" in why
    runnable(EMU)
    monkeypatch.setenv(nat.DISABLE_ENV, ",".join(nat.AUTO_ISAS))
    assert nat.isa_status()[EMU][0]
    with pytest.raises(BackendUnavailable, match="no SIMD path runnable"):
        nat.select_isa("auto")
    assert nat.select_isa(EMU) == (EMU, f"{EMU} forced: {why}", False)
    monkeypatch.setenv(nat.DISABLE_ENV, EMU)
    assert nat.isa_status()[EMU] == (False, f"disabled by {nat.DISABLE_ENV}={EMU}", False)


def test_extension_built_before_the_emulation_says_rebuild(monkeypatch):
    """An extension compiled from older sources (no amx_emulated) reports the path as not
    built, with what to do, rather than breaking every native path."""
    old = {i: (i == "scalar", "x") for i in ("scalar", "avx2", "avx512vnni", "amx")}
    monkeypatch.setattr(native_extension, "native", lambda: type("Old", (), {
        "isa_status": staticmethod(lambda: dict(old))}))
    status = nat.isa_status()
    assert status["scalar"] == (True, "x", False)
    assert not status[EMU][0] and "pip install -e ." in status[EMU][1]


#: S -> (packets, coarse groups per packet, K-steps per chunk, threads): partial last K-steps,
#: several chunks per channel with a shorter last one, chunks straddling packets.
CASES = {
    8: (3, 60, 2, 1),    # one 8-stream block, padded to a super block: 12 chunks, last 1/2 K-step
    16: (2, 15, 1, 3),   # one super block, 4 chunks straddling 15-group packets
    24: (3, 60, 0, 2),   # three blocks (odd): the default chunk, 3 chunks, last 6.5 K-steps
    40: (2, 15, 3, 2),   # five blocks (odd): 2 chunks of 3 K-steps + 1.75
    64: (2, 60, 5, 3),   # four super blocks, 10 super pairs: 3 chunks, last 5 of 15 K-steps
}


@pytest.mark.parametrize("nchan", [1, 3])
@pytest.mark.parametrize("nstream", sorted(CASES))
def test_random_frames_bit_exact(nstream, nchan):
    npacket, ncoarse, kt, nthreads = CASES[nstream]
    g = Geometry(nstream=nstream, nchan=nchan, nchan_pkt=nchan, ncoarse=ncoarse,
                 npacket=npacket)
    frames = random_frames(g, npacket, seed=nstream * 10 + nchan)  # the full int8 range
    out = correlate(EMU, g, frames, chunk_ksteps=kt, nthreads=nthreads)
    assert np.array_equal(out, reference_frames(frames, g))


def test_extremes_at_max_integration():
    """-128 against 127 and -1 in every (re, im) combination at P = max_npacket: products of
    +-16384 summed to the edge of int32, where reading a byte as unsigned (-128 -> 128,
    -1 -> 255) or a narrower sum shows at once. (All -128 alone would not catch the first:
    128 x 128 = (-128) x (-128).)"""
    g = Geometry(nstream=16, nchan=1, nchan_pkt=1)
    P = g.max_npacket
    v = np.array([-128, 127, -1, -128, 127, -128, -1, 127], np.int8)
    frames = np.empty((P, *g.frame_shape), np.int8)  # [P, S, C, coarse, re/im, fine]
    frames[:, :, :, :, 0, :] = np.tile(v, 2)[:, None, None, None]
    frames[:, :, :, :, 1, :] = np.roll(np.tile(v, 2), 3)[:, None, None, None]
    out = correlate(EMU, g, frames, nthreads=2)
    ref = reference_frames(frames, g)
    assert np.abs(ref).max() > 2**31 - 2**26  # close to the int32 limit
    assert np.array_equal(out, ref)


def test_peak_loop_source_runs_clean():
    """The AMX peak loop's source (its own tile configuration, zeroing and stores) runs on the
    emulated tiles without a fault, on several threads at once."""
    runnable(EMU)
    ops, what, per_cpu = native_extension.native().int8_peak(EMU, 2, 20)
    assert "emulated" in what and ops > 0 and per_cpu > 0


# ------------------------------------------------------------------ the emulation alone

def tilecfg(shapes: dict[int, tuple[int, int]], palette: int = 1) -> bytes:
    """LDTILECFG's 64-byte operand (Intel SDM: palette, start_row, colsb words at 16, rows at
    48) with tile t configured rows x colsb for each t: (rows, colsb) in shapes."""
    cfg = bytearray(64)
    cfg[0] = palette
    for t, (rows, colsb) in shapes.items():
        cfg[16 + 2 * t: 18 + 2 * t] = colsb.to_bytes(2, "little")
        cfg[48 + t] = rows
    return bytes(cfg)


def tdpbssd_model(c: np.ndarray, a: np.ndarray, b: np.ndarray, m: int, n: int,
                  k: int) -> np.ndarray:
    """Intel's TDPBSSD on m x n dwords: C[i][j] += sum_{k4 < k} sum_{q < 4}
    sext(A[i][4 k4 + q]) sext(B[k4][4 j + q]), modulo 2^32. Full 16 x 16 C, outside
    untouched."""
    out = c.copy()
    aa = a[:m, :4 * k].astype(np.int64).reshape(m, k, 4)
    bb = b[:k, :4 * n].astype(np.int64).reshape(k, n, 4)
    acc = c[:m, :n].astype(np.int64) + np.einsum("ikq,kjq->ij", aa, bb)
    out[:m, :n] = ((acc + 2**31) % 2**32 - 2**31).astype(np.int32)
    return out


@lru_cache(maxsize=1)
def hook_missing() -> str | None:
    """Why the emulation's test hook cannot run, or None. It is plain C: it runs wherever it
    was compiled, even where the amx_emulated path cannot (a CPU without AVX-512)."""
    try:
        ext = native_extension.native()
    except ImportError as exc:
        return str(exc)
    if not hasattr(ext, "_amx_emu_tdpbssd"):
        return "the extension predates the AMX emulation: rebuild it with `pip install -e .`"
    z = bytes(1024)
    try:
        ext._amx_emu_tdpbssd(tilecfg({0: (16, 64), 4: (16, 64), 6: (16, 64)}), 0, 4, 6,
                             bytearray(1024), z, z)
    except RuntimeError as exc:
        return str(exc)
    return None


def emu_tdpbssd(cfg: bytes, tiles: tuple[int, int, int], c: np.ndarray, a: np.ndarray,
                b: np.ndarray, **kw) -> np.ndarray:
    """One emulated TDPBSSD through the extension's test hook; C as stored back."""
    if hook_missing():
        pytest.skip(f"AMX emulation cannot run here: {hook_missing()}")
    c = np.ascontiguousarray(c, np.int32).copy()
    native_extension.native()._amx_emu_tdpbssd(cfg, *tiles, c, np.ascontiguousarray(a, np.int8),
                                      np.ascontiguousarray(b, np.int8), **kw)
    return c


@pytest.mark.parametrize(("m", "n", "k"), [(16, 16, 16), (5, 3, 7), (16, 1, 16), (1, 16, 2)])
def test_tdpbssd_against_intel_definition(m, n, k):
    """Random tiles (every byte value, -128 included) and accumulators near the int32 limits
    (so the sums wrap), in the shapes the configuration gives: M = rows(dst), N = colsb(dst)/4,
    K = colsb(src1)/4 = rows(src2). Stored back: only M rows of 4N bytes."""
    rng = np.random.default_rng(m * 100 + n * 10 + k)
    cfg = tilecfg({1: (m, 4 * n), 3: (m, 4 * k), 6: (k, 4 * n)})
    for trial in range(4):
        a = rng.integers(-128, 128, size=(16, 64), dtype=np.int8)
        b = rng.integers(-128, 128, size=(16, 64), dtype=np.int8)
        if trial == 1:
            a[:], b[:] = -128, -128  # 4 x 16384 per dword group: wraps from INT32_MAX
        if trial == 2:
            a[:], b[::2], b[1::2] = -128, 127, -1
        c = rng.integers(-2**31, 2**31, size=(16, 16), dtype=np.int64).astype(np.int32)
        c[0, 0], c[-1, -1] = 2**31 - 1, -2**31
        out = emu_tdpbssd(cfg, (1, 3, 6), c, a, b)
        assert np.array_equal(out, tdpbssd_model(c, a, b, m, n, k)), trial


def test_tdpbssd_reads_only_the_configured_shape():
    """Bytes past colsb and rows past rows in memory never enter the sum (the load reads only
    the configured shape and zero-fills the rest; the product reads only K groups): here A's
    bytes past K = 2 groups and B's rows past K are -128 / 127 and must be ignored."""
    cfg = tilecfg({0: (16, 64), 4: (16, 8), 7: (2, 64)})
    a = np.full((16, 64), -128, np.int8)
    a[:, :8] = 1
    b = np.full((16, 64), 127, np.int8)
    b[:2] = 2
    out = emu_tdpbssd(cfg, (0, 4, 7), np.ones((16, 16), np.int32), a, b)
    assert (out == 1 + 8 * 2).all()


@pytest.mark.parametrize(("shapes", "tiles", "load", "message"), [
    ({0: (16, 64), 4: (16, 64)}, (0, 4, 6), True, "tmm6 is not configured"),
    ({0: (16, 64), 6: (16, 64)}, (0, 5, 6), True, "tmm5 is not configured"),
    ({0: (16, 64), 4: (16, 64), 6: (16, 64)}, (0, 4, 6), False, "no tile configuration"),
    ({0: (16, 64), 4: (16, 64), 6: (16, 64)}, (0, 4, 8), True, "tmm8 does not exist"),
    ({0: (16, 64), 4: (16, 64)}, (0, 4, 4), True, "three different tiles"),
    ({0: (16, 64), 4: (8, 64), 6: (16, 64)}, (0, 4, 6), True, "shapes do not multiply"),
    ({0: (16, 64), 4: (16, 32), 6: (16, 64)}, (0, 4, 6), True, "shapes do not multiply"),
    ({0: (16, 64), 4: (16, 64), 6: (16, 62)}, (0, 4, 6), True, "shapes do not multiply"),
])
def test_misuse_is_caught(shapes, tiles, load, message):
    """Where the hardware would raise #UD, the emulation raises, and the next good call runs."""
    z = np.zeros((16, 64), np.int8)
    with pytest.raises(RuntimeError, match=message):
        emu_tdpbssd(tilecfg(shapes), tiles, np.zeros((16, 16), np.int32), z, z, load_config=load)
    good = tilecfg({0: (16, 64), 4: (16, 64), 6: (16, 64)})
    assert not emu_tdpbssd(good, (0, 4, 6), np.zeros((16, 16), np.int32), z, z).any()


@pytest.mark.parametrize(("cfg", "message"), [
    (tilecfg({0: (17, 64)}), "tile 0 of 17 rows"),
    (tilecfg({3: (16, 65)}), "tile 3 of 16 rows x 65 bytes"),
    (tilecfg({2: (0, 64)}), "tile 2 of 0 rows x 64"),
    (tilecfg({0: (16, 64)}, palette=2), "palette 2"),
    (tilecfg({0: (16, 64)})[:5] + b"\x01" + tilecfg({0: (16, 64)})[6:], "reserved byte 5"),
    (tilecfg({0: (16, 64), 8: (16, 64)}), "reserved byte 32"),
])
def test_bad_configuration_is_caught(cfg, message):
    """An invalid LDTILECFG operand is #GP on hardware: an error naming what is wrong here."""
    z = np.zeros((16, 64), np.int8)
    with pytest.raises(RuntimeError, match=f"ldtilecfg: {message}"):
        emu_tdpbssd(cfg, (0, 4, 6), np.zeros((16, 16), np.int32), z, z)
