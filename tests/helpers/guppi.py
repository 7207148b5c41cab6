"""GUPPI RAW test data: samples of a few ATA antennas, their blocks and header cards."""

from __future__ import annotations

import numpy as np

SYNC, TBIN, NTIME = 1_780_272_000, 4e-6, 48

PKT0 = 1000 * NTIME

FILE_NAMES = ["2bA", "1cA", "4jA"]  # ATA: the LO letter is not part of the antenna name

NAMES = ["2b", "1c", "4j"]


def samples(nblock: int, nant: int = 3, nchan: int = 5, bits: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    lo, hi = (-128, 128) if bits == 8 else (-8, 8)
    x = rng.integers(lo, hi, (nant, nchan, nblock * NTIME, 2, 2), dtype=np.int8)
    x[0, 0, :4] = lo  # the most negative value is legal and exact
    return x


def blocks(x: np.ndarray) -> list[np.ndarray]:
    return [x[:, :, i:i + NTIME] for i in range(0, x.shape[2], NTIME)]


def cards(**extra):
    return {"TELESCOP": "ATA", "OBSFREQ": 1400.0, "OBSBW": 1.25, "TBIN": TBIN,
            "SYNCTIME": SYNC, "SRC_NAME": "test", "ANTNMS00": ",".join(FILE_NAMES), **extra}
