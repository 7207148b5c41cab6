"""Exact CPU backends against the int64 reference, bit for bit
(docs/design.md, "Sign and conjugation").

Every exact CPU backend runs the same cases, the native one once per dispatch path (AMX, its
software-emulated twin, AVX-512 VNNI, AVX2, portable C); a variant this machine cannot run is
skipped with its reason.
"""

from functools import lru_cache

import numpy as np
import pytest

from tests.conftest import random_frames
from xengine_block.backends import BackendUnavailable, availability, backend_class
from xengine_block.backends.native import ISAS
from xengine_block.frames import frames_to_natural, natural_to_frames
from xengine_block.geometry import PUBLISHED, Geometry
from xengine_block.reference import reference_full, reference_triangle
from xengine_block.triangle import baseline_index, triangle_streams, unpack_triangle

CPU_BACKENDS = ["cpu", *(f"native:{isa}" for isa in ISAS)]


def make_backend(variant, g):
    """The backend of ``variant`` (``name`` or ``native:ISA``), or skip with the reason."""
    name, _, isa = variant.partition(":")
    ok, reason = availability(g)[name]
    if not ok:
        pytest.skip(f"backend {name} unavailable: {reason}")
    try:
        return backend_class(name)(g, **({"isa": isa} if isa else {}))
    except BackendUnavailable as exc:
        pytest.skip(f"{variant} cannot run here: {exc}")


@lru_cache(maxsize=8)
def _reference(key: bytes, shape: tuple, nstream: int, nchan: int, npacket: int) -> np.ndarray:
    g = Geometry(nstream=nstream, nchan=nchan, npacket=npacket)
    return reference_triangle(frames_to_natural(np.frombuffer(key, np.int8).reshape(shape), g))


def check(name, g, frames):
    backend = make_backend(name, g)
    try:
        out = backend.correlate(frames)
    finally:
        backend.close()
    # one reference per input, shared by every variant (the int64 reference is the slow part)
    ref = _reference(frames.tobytes(), frames.shape, g.nstream, g.nchan, g.npacket)
    assert out.dtype == np.int32 and out.shape == g.output_shape
    assert np.array_equal(out, ref)
    return out


def test_reference_against_complex_definition(rng):
    x = rng.integers(-128, 128, size=(6, 2, 50, 2), dtype=np.int8)
    z = x[..., 0].astype(np.complex128) + 1j * x[..., 1]
    re, im = reference_full(x)
    for c in range(2):
        for j in range(6):
            for k in range(6):
                v = np.sum(z[j, c] * np.conj(z[k, c]))
                assert (re[c, j, k], im[c, j, k]) == (v.real, v.imag)


def test_triangle_order():
    j, k = triangle_streams(5)
    assert list(zip(j.tolist(), k.tolist(), strict=True))[:6] == [
        (0, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 2)]
    assert baseline_index(3, 4) == 13


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_zeros(name):
    g = Geometry(nstream=64, nchan=9, npacket=2)
    out = check(name, g, np.zeros((2, *g.frame_shape), np.int8))
    assert not out.any()


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_ones(name):
    g = Geometry(nstream=64, nchan=9, npacket=3)
    x = np.zeros((g.nstream, g.nchan, 3 * g.nspectra_pkt, 2), np.int8)
    x[..., 0] = 1
    out = check(name, g, natural_to_frames(x, g))
    assert np.all(out[..., 0] == 3 * 480) and not out[..., 1].any()


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_single_nonzero_lands_in_its_baselines(name, rng):
    g = Geometry(nstream=64, nchan=9, npacket=2)
    s, c, n = int(rng.integers(64)), int(rng.integers(9)), int(rng.integers(960))
    x = np.zeros((g.nstream, g.nchan, 2 * g.nspectra_pkt, 2), np.int8)
    x[s, c, n] = (-128, 77)
    out = check(name, g, natural_to_frames(x, g))
    nz = np.argwhere(out.any(axis=-1))
    # only the autocorrelation of stream s in channel c: |x|^2 = 128^2 + 77^2, imaginary 0
    assert nz.tolist() == [[c, baseline_index(s, s)]]
    assert out[c, baseline_index(s, s)].tolist() == [128**2 + 77**2, 0]


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_two_nonzero_streams_conjugation(name):
    g = Geometry(nstream=64, nchan=9, npacket=1)
    x = np.zeros((g.nstream, g.nchan, g.nspectra_pkt, 2), np.int8)
    x[3, 4, 10] = (1, 2)   # x_j = 1 + 2i
    x[40, 4, 10] = (3, -1)  # x_k = 3 - i
    out = check(name, g, natural_to_frames(x, g))
    v = (1 + 2j) * np.conj(3 - 1j)  # K[j, k] = x_j conj(x_k), j < k
    assert out[4, baseline_index(3, 40)].tolist() == [v.real, v.imag]


@pytest.mark.parametrize("name", CPU_BACKENDS)
@pytest.mark.parametrize("nstream", [64, 256, 512, 34])
def test_random(name, nstream):
    g = Geometry(nstream=nstream, nchan=9, npacket=2)
    check(name, g, random_frames(g, 2, seed=nstream))


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_all_minus_128_at_max_integration(name):
    g = Geometry(nstream=16, nchan=9, npacket=PUBLISHED.max_npacket)
    frames = np.full((g.npacket, *g.frame_shape), -128, np.int8)
    out = check(name, g, frames)
    assert np.all(out[..., 0] == 136 * 480 * 2 * 128**2)  # 2^31 - 2^25... fits int32
    assert out[..., 0].max() <= 2**31 - 1 and not out[..., 1].any()


@pytest.mark.parametrize("name", CPU_BACKENDS)
def test_too_many_frames_rejected(name):
    g = Geometry(nstream=4, nchan=9, npacket=1)
    backend = make_backend(name, g)
    with pytest.raises(ValueError, match="overflow int32"):
        backend.correlate(np.zeros((137, *g.frame_shape), np.int8))
    backend.close()


def test_unpack_is_hermitian(rng):
    g = Geometry(nstream=8, nchan=9, npacket=1)
    frames = random_frames(g, 1)
    x = frames_to_natural(frames, g)
    tri = reference_triangle(x)
    re, im = reference_full(x)
    assert np.array_equal(unpack_triangle(tri, 8), re + 1j * im)
