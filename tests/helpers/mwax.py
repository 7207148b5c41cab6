"""MWAX subfile test data: the tiles and random voltage blocks of a small subfile."""

from __future__ import annotations

from pathlib import Path

import numpy as np

TILES = [11, 12, 51, 52]

NTIME = 3300  # the smallest block holding the delay table is 3228 samples


def mwax_blocks(seed, nblock=3):
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, (2 * len(TILES), NTIME, 2), dtype=np.int8)
            for _ in range(nblock)]


#: Real MWA metafits from mwalib's test files (tests/data/mwa/README.md): a 16-tile Phase II
#: observation with one tile flagged, and the one-tile MWAX VCS ones mwalib's own voltage
#: tests use (LBG4 oversampled, Tile011 critically sampled).
METAFITS_DIR = Path(__file__).resolve().parents[1] / "data" / "mwa"
METAFITS_16 = METAFITS_DIR / "1370752512_metafits_deripple_os.fits"
METAFITS_LBG4 = METAFITS_DIR / "1370755832_metafits.fits"
METAFITS_TILE011 = METAFITS_DIR / "1101503312.metafits"
