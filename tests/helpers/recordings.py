"""Shared pieces of the recording-reader tests: arrays for the files, and the expected
visibilities computed straight from the samples (complex128 sums of exact integers, no code of
the package's correlation path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xengine_block.array import ArrayDescription

POLS = {"xx": (0, 0), "yy": (1, 1), "xy": (0, 1), "yx": (1, 0)}


def write_array(path: Path, names: list[str], *, numbers: list[int] | None = None,
                telescope: str = "TEST", lat: float = -30.7, lon: float = 21.4,
                alt: float = 1050.0, seed: int = 1) -> ArrayDescription:
    """An array TOML with ``names`` at random positions within 300 m."""
    rng = np.random.default_rng(seed)
    enu = np.round(rng.uniform(-300, 300, (len(names), 3)) * [1, 1, 0.01], 3)
    arr = ArrayDescription(telescope, lat, lon, alt, names,
                           numbers if numbers is not None else list(range(len(names))), enu)
    arr.write_toml(path)
    return arr


def expected(x: np.ndarray, a1: int, a2: int, pol: str) -> np.ndarray:
    """``sum_t conj(x[a1, p1]) x[a2, p2]`` per channel: the UVH5 convention, from natural
    samples ``x[ant, chan, time, pol, 2]`` (any integer dtype)."""
    p1, p2 = POLS[pol]
    z = x[..., 0].astype(np.float64) + 1j * x[..., 1].astype(np.float64)
    return np.einsum("ct,ct->c", np.conj(z[a1, :, :, p1]), z[a2, :, :, p2])


def check_file(path: Path, x: np.ndarray, windows: list[tuple[int, int]],
               numbers: dict[str, int], names: list[str], *, freqs: np.ndarray | None = None,
               conj: bool = False) -> None:
    """The UVH5 file holds, for every antenna pair and pol and every window ``[t0, t1)`` of
    ``x``'s time axis, the expected visibility; antennas by name (``names``: the file antenna
    of each index of ``x``), numbers from ``numbers``."""
    import pyuvdata

    uv = pyuvdata.UVData.from_file(path)
    uv.check()
    assert uv.Ntimes == len(windows), (uv.Ntimes, len(windows))
    assert sorted(uv.telescope.antenna_names) == sorted(names)
    if freqs is not None:
        assert np.allclose(uv.freq_array, freqs, rtol=0, atol=1e-3), (uv.freq_array, freqs)
    for i, ni in enumerate(names):
        for j, nj in enumerate(names):
            if numbers[ni] > numbers[nj]:
                continue
            for pol in POLS:
                got = uv.get_data(numbers[ni], numbers[nj], pol)
                for k, (t0, t1) in enumerate(windows):
                    want = expected(x[:, :, t0:t1], i, j, pol)
                    if conj:
                        want = np.conj(want)
                    assert np.array_equal(got[k], want), (ni, nj, pol, k)
