"""Shared pieces of the sample-file tests (baseband's sample files): the one-antenna arrays
of their telescopes and their samples as our natural ``x`` layout."""

from __future__ import annotations

import numpy as np

from tests.helpers.recordings import write_array

#: Sites of the telescopes of the samples (not among pyuvdata's known telescopes).
SITES = {"Arecibo": (18.3442, -66.7527, 497.0), "Effelsberg": (50.5247, 6.8828, 369.0),
         "ARO": (45.9555, -78.0730, 260.0)}


def one_antenna_array(tmp_path, name, telescope):
    lat, lon, alt = SITES[telescope]
    path = tmp_path / f"{telescope}.toml"
    write_array(path, [name], telescope=telescope, lat=lat, lon=lon, alt=alt)
    return path


def as_x(z: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """baseband's (time, pol, chan) complex -> ``x[1, chan, time, pol, 2]`` int64."""
    ints = np.stack([np.rint(z.real * scale), np.rint(z.imag * scale)], -1)
    assert np.allclose(ints, np.stack([z.real, z.imag], -1) * scale, atol=1e-3)
    return ints.astype(np.int64).transpose(2, 0, 1, 3)[None]
