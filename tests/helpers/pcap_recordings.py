"""Pcap recordings of simulated F-engines for the reprocessing tests (with their JSON sidecar)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xengine_block.array import default_array
from xengine_block.capture.recording import write_metadata
from xengine_block.capture.spead import pcap_sender
from xengine_block.geometry import Geometry
from xengine_block.sim.fengine import FEngineSimulator, PointSource

SKY = {"sync_time": 1780272000.0, "fs_hz": 40e3, "freq0_hz": 150e6, "chan_bw_hz": 40e3}


def simulator(nant=4, npacket=4, seed=0):
    array = default_array(nant)
    g = Geometry(nstream=2 * nant, nchan=9, npacket=npacket)
    return FEngineSimulator(array, g, **SKY, sources=[PointSource.altaz(70, 30, 1.0)],
                            seed=seed)


def make_recording(path: Path, sim: FEngineSimulator, nframe: int) -> np.ndarray:
    frames = sim.frames(0, nframe)
    write_metadata(path, sim.array, sim.geometry, **SKY)
    with pcap_sender(sim.geometry, path) as s:
        s.send_frames(frames, 0)
    return frames
