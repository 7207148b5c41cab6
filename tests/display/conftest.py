"""A known run for the display's tests: fx.py's point source (the F-engine simulator's
``PointSource`` at altitude 60, azimuth 120 at the sync time) through the chain, written to
UVH5 and fed to a :class:`~xengine_block.display.live.DisplayBlock` in the same pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.chain import FramesSource
from xengine_block.array import ArrayDescription, default_array
from xengine_block.blocks import IntegrateBlock, UVH5WriterBlock, XEngineBlock
from xengine_block.display.live import DisplayBlock, LiveDumps
from xengine_block.geometry import Geometry
from xengine_block.runtime.pipeline import Pipeline
from xengine_block.sim.fengine import FEngineSimulator, PointSource, icrs_at_altaz

SYNC = 1780272000.0  # 2026-06-01T00:00:00Z: inside astropy's bundled IERS tables
ALT_AZ = (60.0, 120.0)
FS, FREQ0, BW = 48000.0, 150e6, 1e6  # 1 MHz channels: a phase slope across the band
NANT, NDUMP, NINTEG = 8, 4, 2


@dataclass
class KnownRun:
    array: ArrayDescription
    geometry: Geometry
    file: Path
    store: LiveDumps  # what the display block received, dump by dump

    def direction_enu(self) -> np.ndarray:
        """Unit vector to the source (east, north, up) at the sync time."""
        alt, az = np.deg2rad(ALT_AZ)
        return np.array([np.cos(alt) * np.sin(az), np.cos(alt) * np.cos(az), np.sin(alt)])


def point_source_run(directory: Path, guarantee: bool = True) -> KnownRun:
    array = default_array(NANT)
    g = Geometry(nstream=2 * NANT, nchan=9, npacket=2)
    src = icrs_at_altaz(array, SYNC, *ALT_AZ)
    sim = FEngineSimulator(array, g, sync_time=SYNC, fs_hz=FS, freq0_hz=FREQ0, chan_bw_hz=BW,
                           sources=[PointSource.from_skycoord(src, amplitude=1.0)],
                           noise_sigma=0.05, gain=16.0, seed=5)
    nframe = NDUMP * NINTEG * g.npacket  # an X-engine integration is P capture frames
    frames = sim.frames(0, nframe)
    mask = np.ones((nframe, g.nstream), np.uint8)
    mask[5, 5] = 0  # one input's packets lost in one frame: nsamples < 1 in dump 1
    frames[5, 5] = 0
    header = dict(chan0=0, nchan=g.nchan, nstream=g.nstream, geometry=g.to_dict(),
                  array=array.to_dict(), sync_time=SYNC, fs_hz=FS, freq0_hz=FREQ0,
                  chan_bw_hz=BW)
    store = LiveDumps(history=16)
    with Pipeline() as p:
        x = XEngineBlock(FramesSource(frames, mask, header, g.npacket), backend="cpu")
        integ = IntegrateBlock(x, ninteg=NINTEG)
        w = UVH5WriterBlock(integ, directory=directory)
        DisplayBlock(integ, store=store, guarantee=guarantee)
        p.run()
    (file,) = w.files
    return KnownRun(array, g, file, store)


@pytest.fixture(scope="package")
def known_run(tmp_path_factory) -> KnownRun:
    return point_source_run(tmp_path_factory.mktemp("display"))
