"""MWAX subfile test data: the tiles and random voltage blocks of a small subfile."""

from __future__ import annotations

import numpy as np

TILES = [11, 12, 51, 52]

NTIME = 3300  # the smallest block holding the delay table is 3228 samples


def mwax_blocks(seed, nblock=3):
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, (2 * len(TILES), NTIME, 2), dtype=np.int8)
            for _ in range(nblock)]
